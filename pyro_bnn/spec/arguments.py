"""The pieces of the option-string grammar below a form (:mod:`pyro_bnn.spec.grammar`): the arguments a
:class:`~pyro_bnn.spec.grammar.Form` is declared with (:class:`Arg`, or :class:`CustomArguments` read by a
function), what parsing a string returns (:class:`ParsedSpec`), and its one error (:class:`SpecError`). Every name
here is importable from :mod:`pyro_bnn.spec.grammar` too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from pyro_bnn.spec.values import ValueType

if TYPE_CHECKING:
    from pyro_bnn.spec.grammar import Form


class SpecError(ValueError):
    """An option string that cannot be parsed; the message is one line naming the spec and what was expected."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.splitlines()))


_REQUIRED: Any = object()


@dataclass(frozen=True)
class Arg:
    """One argument of a form.

    Attributes:
        name: What messages call it (``"scale"``, ``"init scale"``); also its key in :attr:`ParsedSpec.values`,
            and for a ``key=value`` option the key.
        type: Reads and checks its text.
        default: Its value when it is not given; positional arguments without one are required.
        metavar: Placeholder in usage strings; default from the type (``SCALE``, ``network|median|map``).
    """

    name: str
    type: ValueType
    default: Any = _REQUIRED
    metavar: str | None = None

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    @property
    def placeholder(self) -> str:
        return self.metavar or self.type.metavar(self.name)


@dataclass(frozen=True)
class CustomArguments:
    """Arguments read by a function instead of declared :class:`Arg` s (a registered model's own parser).

    Attributes:
        usage: What follows the colon, e.g. ``"W1,W2,..."``.
        parse: Stripped argument strings (never an empty list) -> values; raises ``ValueError`` saying what is
            wrong with which argument.
    """

    usage: str
    parse: Callable[[list[str]], Mapping[str, object]]


@dataclass(frozen=True)
class ParsedSpec:
    """A parsed option string.

    Attributes:
        spec: The string as given.
        form: The form it matched.
        values: Every argument's value by :attr:`Arg.name`, defaults filled in (for a custom form, what its
            parser returned).
        given: The names of the arguments the spec gave (the others hold their defaults).
    """

    spec: str
    form: Form
    values: Mapping[str, object] = field(default_factory=dict)
    given: frozenset[str] = frozenset()

    @property
    def kind(self) -> Enum | str:
        """The enum member (or registered name) the spec names."""
        return self.form.kind

    @property
    def name(self) -> str:
        return self.form.name

    def __getitem__(self, key: str) -> Any:
        return self.values[key]
