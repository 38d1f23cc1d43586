"""Empty of users: :func:`enum_member` lives in the checks leaf, :mod:`pyro_bnn.checks` (re-exported by
:mod:`pyro_bnn.spec.values`), and nothing imports it from here any more. The module stays only because
``.importlinter``'s ``evaluation-pure`` contract names it (tests/test_layers.py wants that list to match the
package's top-level modules); delete it together with that line."""

from pyro_bnn.checks import enum_member

__all__ = ["enum_member"]
