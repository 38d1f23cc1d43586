"""The guide registry: one :class:`GuideFamily` per ``--guide`` name, holding its grammar, its builder and its
declared :class:`~pyro_bnn.guides.capabilities.Capability` flags.

Everything outside :mod:`pyro_bnn.guides` that needs to know what a guide can do asks the registry (through
:attr:`GuideSpec.capabilities <pyro_bnn.guides.GuideSpec.capabilities>`) or finds a protocol on the built guide; none
of it names a guide family or class. Adding a guide is one file with its ``AutoGuide`` and one call::

    register_guide(GuideFamily(
        Form("my-guide", (Arg("init scale", Positive(), 0.1),), doc="My guide: ..."),
        build=lambda spec, bnn: MyGuide(bnn, init_scale=spec.options["init scale"]),
        capabilities={Capability.RANDOM, Capability.NORMAL_SCALES},
    ))

after which ``--guide my-guide:0.05`` parses, trains, predicts, evaluates and exports like a built-in guide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyro.infer.autoguide import AutoGuide

from pyro_bnn.checks import REGISTRY_NAME
from pyro_bnn.guides.capabilities import BatchedLayout, Capability, capability_set
from pyro_bnn.spec import Form, ParsedSpec

if TYPE_CHECKING:
    from pyro_bnn.bnn import BNN
    from pyro_bnn.guides.spec import GuideSpec


@dataclass(frozen=True)
class GuideFamily:
    """One guide family of the registry.

    Attributes:
        form: Its name and ``--guide`` grammar (positional arguments, ``key=value`` options, cross-argument check,
            example, one-line doc); ``pyro-bnn list`` and every error message read it.
        build: ``build(spec, bnn) -> AutoGuide``: the guide for a :class:`~pyro_bnn.BNN` already on its device.
        capabilities: What the family offers (:class:`~pyro_bnn.guides.capabilities.Capability`); a guide it
            builds must implement the protocol of each flag that has one (a test checks every family).
        parse: ``parse(parsed) -> GuideSpec`` from the grammar's parsed values; default
            ``GuideSpec(name, options=parsed values)`` (read them as ``spec.options["init scale"]``).
        format: ``format(spec) -> str``, the inverse of parsing (``str(spec)``, written to run configs); default:
            the name and every option that differs from its default.
        samples_multiple: ``samples_multiple(spec) -> int``: prediction draws must be a multiple of it (a
            K-component mixture takes the same number from every component); default 1.
        check: ``check(spec, num_weights) -> None``: refuses a network the family cannot take, given only its
            number of random weights D, with a one-line ValueError (a full covariance refuses a D too large for
            D x D); run validation calls it before any data is loaded (:meth:`check_network`). Default: any D.
        batched_layout: Where its guides keep the locations and raw scales that batched runs stack
            (:class:`~pyro_bnn.guides.capabilities.BatchedLayout`, data that :mod:`pyro_bnn.batched` interprets), or
            None: its runs train alone. Setting it declares :attr:`~Capability.BATCHED`, and the guides the family
            builds must carry the same layout (:class:`~pyro_bnn.guides.capabilities.BatchedPosterior`).
    """

    form: Form
    build: Callable[[GuideSpec, BNN], AutoGuide]
    capabilities: frozenset[Capability] = field(default_factory=frozenset)
    parse: Callable[[ParsedSpec], GuideSpec] | None = None
    format: Callable[[GuideSpec], str] | None = None
    samples_multiple: Callable[[GuideSpec], int] | None = None
    check: Callable[[GuideSpec, int], None] | None = None
    batched_layout: BatchedLayout | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.form, Form):
            raise TypeError(f"a GuideFamily's form is a pyro_bnn.spec.Form, got {self.form!r}")
        for name in (self.name, *self.form.aliases):
            if not isinstance(name, str) or not REGISTRY_NAME.fullmatch(name):
                raise ValueError(
                    f"a guide name is lower-case letters, digits, '.', '_' and '-' (not first; no ':', ',', '=' or "
                    f"space: --guide NAME:ARGS could not spell it), got {name!r}"
                )
        for attribute in ("build", "parse", "format", "samples_multiple", "check"):
            value = getattr(self, attribute)
            if not callable(value) and (value is not None or attribute == "build"):
                expected = "a callable" if attribute == "build" else "a callable or None"
                raise TypeError(f"guide {self.name!r}: {attribute} is {expected}, got {value!r}")
        if self.batched_layout is not None and not isinstance(self.batched_layout, BatchedLayout):
            raise TypeError(
                f"guide {self.name!r}: batched_layout is a BatchedLayout or None, got {self.batched_layout!r}"
            )
        if isinstance(self.capabilities, (str, Capability)) or not isinstance(self.capabilities, Iterable):
            raise TypeError(
                f"guide {self.name!r}: capabilities is a collection of Capability, got {self.capabilities!r}"
            )
        capabilities = capability_set(self.capabilities, f"guide {self.name!r}: no capability")
        if self.batched_layout is not None:
            capabilities |= {Capability.BATCHED}
        elif Capability.BATCHED in capabilities:
            raise TypeError(f"guide {self.name!r}: the batched capability is declared by a batched_layout")
        object.__setattr__(self, "capabilities", capabilities)
        if Capability.LOCAL_REPARAMETERIZATION in self.capabilities and Capability.FLAT_NORMAL not in self.capabilities:
            raise TypeError(f"guide {self.name!r}: local-reparameterization needs the flat-normal capability")

    @property
    def name(self) -> str:
        """The ``--guide`` name."""
        return self.form.name

    def offers(self, *capabilities: Capability) -> bool:
        """Whether the family declares every one of ``capabilities``."""
        return set(capabilities) <= self.capabilities

    def check_network(self, spec: GuideSpec, num_weights: int) -> None:
        """Refuses, before the guide or any data exists, a network of ``num_weights`` random weights that this
        family cannot take with options ``spec`` (the family's :attr:`check`; nothing without one).

        Raises:
            ValueError: One line naming D and the limit.
        """
        if self.check is not None:
            self.check(spec, num_weights)


_FAMILIES: dict[str, GuideFamily] = {}


def register_guide(family: GuideFamily, *, replace: bool = False) -> GuideFamily:
    """Adds a guide family to the registry (``--guide NAME``, :func:`~pyro_bnn.guides.parse_guide`).

    Args:
        family: The family.
        replace: Allow replacing a family already registered under the same name.

    Returns:
        ``family``, unchanged.

    Raises:
        ValueError: The name (or an alias) is taken and ``replace`` is false.
    """
    if not isinstance(family, GuideFamily):
        raise TypeError(f"register_guide takes a GuideFamily, got {type(family).__name__}")
    names = {family.name, *family.form.aliases}
    for other in _FAMILIES.values():
        clash = names & {other.name, *other.form.aliases}
        if clash and other.name != family.name:
            raise ValueError(f"guide name(s) {sorted(clash)} already belong to the guide {other.name!r}")
    if family.name in _FAMILIES and _FAMILIES[family.name] is not family and not replace:
        raise ValueError(f"guide {family.name!r} is already registered; pass replace=True to override it")
    _FAMILIES[family.name] = family
    return family


def unregister_guide(name: str) -> None:
    """Removes the family called ``name`` (tests that register a toy family clean up with it)."""
    _FAMILIES.pop(str(getattr(name, "value", name)), None)


def restore_guides(families: Iterable[GuideFamily]) -> None:
    """Makes the registry hold exactly ``families``, in their order (what :func:`guide_families` returned before):
    undoes every registration, replacement and removal made since."""
    families = tuple(families)
    if not all(isinstance(family, GuideFamily) for family in families):
        raise TypeError("restore_guides takes the GuideFamily objects guide_families() returned")
    _FAMILIES.clear()
    _FAMILIES.update((family.name, family) for family in families)


def guide_family(name: object) -> GuideFamily:
    """The registered family called ``name`` (a :class:`~pyro_bnn.guides.GuideKind` or a string).

    Raises:
        ValueError: No family has that name (the message lists the registered ones).
    """
    key = str(getattr(name, "value", name)).strip().lower()
    family = _FAMILIES.get(key)
    if family is None:
        raise ValueError(f"unknown guide {name!r}; registered: {', '.join(_FAMILIES)}")
    return family


def guide_families() -> tuple[GuideFamily, ...]:
    """Every registered family, in registration order (the built-ins first)."""
    return tuple(_FAMILIES.values())


def families_with(*capabilities: Capability) -> list[str]:
    """Names of the families that declare every one of ``capabilities`` (for messages and listings)."""
    return [family.name for family in _FAMILIES.values() if family.offers(*capabilities)]


def describe_capabilities(capabilities: Iterable[Capability]) -> str:
    """``"draws, flat-normal"``: the flags as a stable, readable list."""
    order = list(Capability)
    return ", ".join(c.value for c in sorted(capabilities, key=order.index)) or "none"
