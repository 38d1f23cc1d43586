"""One layer for option strings such as ``leaky:-0.5``, ``normal:0,1``, ``autonormal:0.1,loc=median``.

Every option that names a choice (``--prior``, ``--guide``, ``--activation``, ``--kl-anneal``, ``--model``,
``--corruption`` and the plain enum options) is a :class:`Family` of :class:`Form` s declared next to its enum;
parsing, validation, usage strings, error messages, the CLI's help and ``pyro-bnn list`` all come from that one
declaration. See :mod:`pyro_bnn.spec.grammar` for the grammar and :mod:`pyro_bnn.spec.values` for argument types.

:mod:`pyro_bnn.spec.catalogue` (imported on its own, since it imports every family's module) says which family each
command-line option uses.
"""

from pyro_bnn.spec.docs import member_doc, summary
from pyro_bnn.spec.grammar import Arg, CustomArguments, Family, Form, ParsedSpec, SpecError
from pyro_bnn.spec.values import (
    FLOAT32_MAX,
    FLOAT32_TINY,
    ArgumentError,
    Choice,
    Integer,
    Interval,
    Positive,
    Real,
    ValueType,
    enum_member,
    format_number,
)

__all__ = [
    "FLOAT32_MAX",
    "FLOAT32_TINY",
    "Arg",
    "ArgumentError",
    "Choice",
    "CustomArguments",
    "Family",
    "Form",
    "Integer",
    "Interval",
    "ParsedSpec",
    "Positive",
    "Real",
    "SpecError",
    "ValueType",
    "enum_member",
    "format_number",
    "member_doc",
    "summary",
]
