"""The objective registry: every ``--elbo`` name registered once, with the keyword arguments it takes and the guide
capabilities it needs.

An objective's module registers it where it is defined::

    @register_objective("my-elbo", options=("num_particles",), requires={Capability.FLAT_NORMAL},
                        doc="My estimator of the negative ELBO ...")
    class MyELBO: ...

:func:`make_objective` builds one by name from whatever options the caller has (it passes each objective only the
options it declares), and :meth:`ObjectiveEntry.refusal` says, from a guide family's declared capabilities alone,
whether the objective can train it: run validation asks that before any data is loaded. Which objective ``auto``
picks for a built guide is decided in one place, :class:`~pyro_bnn.infer.AutoELBO`.

Batched runs (:mod:`pyro_bnn.batched`) compute an objective for R runs at once in one of a few forms
(:class:`BatchedForm`). An entry says whether its objective has one (``batched=True``, for the run grids to group
runs before anything is built), and an objective instance says which, from its own options, through a
``batched_form()`` method; :func:`batched_form` asks it (an :class:`~pyro_bnn.infer.AutoELBO` answers for the
objective it chose).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from pyro_bnn.checks import REGISTRY_NAME, positive_int
from pyro_bnn.guides.capabilities import Capability, capability_set
from pyro_bnn.guides.registry import families_with

if TYPE_CHECKING:
    from pyro_bnn.guides.spec import GuideSpec


class ObjectiveTaken(ValueError):
    """:func:`register_objective` without ``replace`` for a name another factory holds (``name``: that name), so
    that a caller with its own rule (a plugin never replaces) can say so instead of advising ``replace=True``."""

    def __init__(self, message: str, name: str) -> None:
        super().__init__(message)
        self.name = name


@dataclass(frozen=True)
class BatchedForm:
    """Which single-run objective a batch of runs computes (:class:`~pyro_bnn.batched.BatchedStep`): the antithetic
    pair or independent draws (``particles`` of them, the loss their mean), the analytic KL (for Normal priors) or
    ``log q - log p`` of the drawn weights; or, with ``copies`` S > 0, the implicit-BNN objective of a mixture guide
    (:class:`~pyro_bnn.infer.MixtureMeanKL`: every example repeated S times, each row its own component and draw, the
    closed-form mixture-mean KL)."""

    antithetic: bool = True
    closed_form_kl: bool = True
    particles: int = 1
    copies: int = 0

    def __post_init__(self) -> None:
        positive_int(self.particles, "BatchedForm: particles")
        if self.antithetic and self.particles != 1:
            raise ValueError(f"BatchedForm: the antithetic pair is one particle, got particles={self.particles}")
        if not isinstance(self.copies, int) or isinstance(self.copies, bool) or self.copies < 0:
            raise ValueError(f"BatchedForm: copies must be an int >= 0, got {self.copies!r}")
        if self.copies and (self.antithetic or self.particles != 1 or not self.closed_form_kl):
            raise ValueError("BatchedForm: the mixture-mean objective (copies > 0) draws per row, one particle")

    @property
    def mixture(self) -> bool:
        """Whether it is the mixture-mean objective of a node-noise mixture guide."""
        return self.copies > 0


def batched_form(objective: Any) -> BatchedForm:
    """The :class:`BatchedForm` that computes what ``objective`` computes for one run (after the trainer's set-up,
    which makes an ``AutoELBO`` choose): the objective's own ``batched_form()``.

    Raises:
        ValueError: An objective batched runs do not compute (local noise, a mixture guide's, ...), or an
            ``AutoELBO`` that has not chosen yet.
    """
    method = getattr(objective, "batched_form", None)
    form = method() if callable(method) else None
    if form is None:
        raise ValueError(f"batched runs compute the fast ELBO or Trace_ELBO, not {objective!r}")
    return form


@dataclass(frozen=True)
class ObjectiveEntry:
    """One registered objective.

    Attributes:
        name: Its ``--elbo`` name.
        factory: Builds it from the options in :attr:`options` (keyword arguments).
        options: The keyword arguments the factory takes, e.g. ``("num_particles", "vectorize_particles")``.
        requires: Guide capabilities it needs (all of them).
        excludes: Guide capabilities it cannot score (any of them).
        doc: One paragraph for ``pyro-bnn list`` and the docs.
        batched: Whether batched runs compute it (its instances' ``batched_form()`` says how; :func:`batched_form`).
    """

    name: str
    factory: Callable[..., Any]
    options: tuple[str, ...] = ()
    requires: frozenset[Capability] = field(default_factory=frozenset)
    excludes: frozenset[Capability] = field(default_factory=frozenset)
    doc: str = ""
    batched: bool = False

    def refusal(self, capabilities: Iterable[Capability]) -> str | None:
        """Why this objective cannot train a guide with ``capabilities`` (a clause), or None if it can."""
        capabilities = set(capabilities)
        missing = [c for c in Capability if c in self.requires - capabilities]
        if missing:
            names = " or ".join(families_with(*self.requires)) or "a registered"
            return f"needs the {names} guide ({', '.join(c.value for c in missing)})"
        clash = [c.value for c in Capability if c in self.excludes & capabilities]
        if clash:
            return f"does not score a guide with {' or '.join(clash)}"
        return None

    def build(self, **options: Any) -> Any:
        """The objective, from the subset of ``options`` it takes.

        Raises:
            ValueError: ``num_particles`` other than 1 for an objective that does not take it (it would be ignored).
        """
        particles = options.get("num_particles", 1)
        if "num_particles" not in self.options and particles != 1:
            raise ValueError(f"elbo {self.name!r} takes no num_particles (got {particles}); it draws its own samples")
        return self.factory(**{key: value for key, value in options.items() if key in self.options})


_ENTRIES: dict[str, ObjectiveEntry] = {}


def _key(name: object) -> str:
    return str(name.value if isinstance(name, Enum) else name).strip().lower()


def _capabilities(values: Iterable[Capability], what: str, name: str) -> frozenset[Capability]:
    if isinstance(values, (str, Enum)) or not isinstance(values, Iterable):
        raise TypeError(f"elbo {name!r}: {what} takes a collection of Capability, got {values!r}")
    return capability_set(values, f"elbo {name!r}: {what} names no capability")


def _options(values: Iterable[str], name: str) -> tuple[str, ...]:
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise TypeError(f"elbo {name!r}: options takes a collection of keyword names, got {values!r}")
    options = tuple(values)
    for option in options:
        if not isinstance(option, str) or not option.isidentifier():
            raise ValueError(f"elbo {name!r}: an option is a keyword argument's name, got {option!r}")
    if len(set(options)) != len(options):
        raise ValueError(f"elbo {name!r}: options {options!r} repeat a name")
    return options


def _check_factory(factory: object, name: str, options: tuple[str, ...]) -> None:
    """Refuses a factory :meth:`ObjectiveEntry.build` cannot call: not callable, a declared option it does not take
    as a keyword, or an argument without a default that is no declared option (it is never passed)."""
    if not callable(factory):
        raise TypeError(f"elbo {name!r}: register_objective decorates a class or factory, got {factory!r}")
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without a signature: nothing more to check
        return
    parameters = signature.parameters
    keywords = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    by_keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    refused = [o for o in options if not (o in parameters and parameters[o].kind in by_keyword) and not keywords]
    if refused:
        raise TypeError(
            f"elbo {name!r}: its factory {getattr(factory, '__qualname__', factory)!r} takes no keyword "
            f"{', '.join(refused)} (declared in options); its signature is {signature}"
        )
    required = [
        p.name
        for p in parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        and p.name not in options
    ]
    if required:
        raise TypeError(
            f"elbo {name!r}: its factory needs {', '.join(required)}, which no declared option passes "
            f"(options={options!r}); give it a default or declare it"
        )


def register_objective(
    name: str,
    *,
    options: Iterable[str] = (),
    requires: Iterable[Capability] = (),
    excludes: Iterable[Capability] = (),
    doc: str = "",
    batched: bool = False,
    replace: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering an objective class or factory under ``name`` (``--elbo NAME``, :func:`make_objective`).

    Everything is checked when it registers, not when it is first used.

    Args:
        name: The name (case ignored: letters, digits, ``.``, ``_`` and ``-``, not first; no ``:`` or space).
        options: The keyword arguments the factory takes (the factory must take each as a keyword, and every
            argument it has without a default must be one of them).
        requires: Guide capabilities it needs (:class:`~pyro_bnn.guides.capabilities.Capability` or their values).
        excludes: Guide capabilities it cannot score.
        doc: Its description.
        batched: Batched runs compute it: its instances have a ``batched_form()`` method returning the
            :class:`BatchedForm` (None, or a ValueError, for options that have none).
        replace: Allow replacing another factory registered under ``name``.

    Raises:
        ValueError: ``name`` is taken by another factory and ``replace`` is false, or is not a valid name; an
            unknown capability; an option that is no keyword name.
        TypeError: The factory is not callable or cannot take its options; an argument of the wrong type.
    """
    if not isinstance(name, (str, Enum)):
        raise TypeError(f"an objective name is a string, got {name!r}")
    key = _key(name)
    if not REGISTRY_NAME.fullmatch(key):
        raise ValueError(
            f"an objective name is letters, digits, '.', '_' and '-' (not first; no ':' or space), got {name!r}"
        )
    checked_options = _options(options, key)
    checked_requires = _capabilities(requires, "requires", key)
    checked_excludes = _capabilities(excludes, "excludes", key)
    if not isinstance(doc, str):
        raise TypeError(f"elbo {key!r}: doc is a string, got {doc!r}")
    if not isinstance(batched, bool):
        raise TypeError(f"elbo {key!r}: batched is True or False, got {batched!r}")

    def decorator(factory: Callable[..., Any]) -> Callable[..., Any]:
        _check_factory(factory, key, checked_options)
        existing = _ENTRIES.get(key)
        if existing is not None and existing.factory is not factory and not replace:
            raise ObjectiveTaken(f"elbo {key!r} is already registered to {existing.factory!r}; pass replace=True", key)
        _ENTRIES[key] = ObjectiveEntry(
            key, factory, checked_options, checked_requires, checked_excludes, " ".join(doc.split()), batched
        )
        return factory

    return decorator


def unregister_objective(name: str) -> None:
    """Removes the objective called ``name`` (tests that register one clean up with it)."""
    _ENTRIES.pop(_key(name), None)


def restore_objectives(entries: Iterable[ObjectiveEntry]) -> None:
    """Makes the registry hold exactly ``entries``, in their order (what :func:`objective_entries` returned before):
    undoes every registration, replacement and removal made since, every field and the order included."""
    entries = tuple(entries)
    if not all(isinstance(entry, ObjectiveEntry) for entry in entries):
        raise TypeError("restore_objectives takes the ObjectiveEntry objects objective_entries() returned")
    _ENTRIES.clear()
    _ENTRIES.update((entry.name, entry) for entry in entries)


def objective_entry(name: object) -> ObjectiveEntry:
    """The registered objective called ``name`` (an :class:`~pyro_bnn.infer.ElboKind` or a string).

    Raises:
        ValueError: One line naming ``name`` and the registered names.
    """
    entry = _ENTRIES.get(_key(name)) if isinstance(name, (str, Enum)) else None
    if entry is None:
        raise ValueError(f"unknown ELBO {name!r}; expected one of {', '.join(_ENTRIES)}")
    return entry


def objective_entries() -> tuple[ObjectiveEntry, ...]:
    """Every registered objective, in registration order."""
    return tuple(_ENTRIES.values())


def batched_objectives() -> tuple[str, ...]:
    """The names of the objectives batched runs compute, in registration order."""
    return tuple(entry.name for entry in _ENTRIES.values() if entry.batched)


def make_objective(name: object, num_particles: int = 1, vectorize_particles: bool = False, **options: Any) -> Any:
    """The registered objective ``name`` built from the options it takes (others are not passed to it).

    Args:
        name: An ``--elbo`` name (:class:`~pyro_bnn.infer.ElboKind` for the built-in ones).
        num_particles: Weight draws per step, for objectives that take it.
        vectorize_particles: Draw the particles in one vectorised pass, for objectives that take it.
        **options: Further options (``samples_per_example`` of the mixture objective, ...).

    Raises:
        ValueError: An unknown name, or an option value the objective refuses.
    """
    entry = objective_entry(name)
    return entry.build(num_particles=num_particles, vectorize_particles=vectorize_particles, **options)


def check_objective(name: object, guide: GuideSpec) -> None:
    """Refuses, from the guide's declared capabilities alone, an objective that cannot train it.

    Args:
        name: The ``--elbo`` name.
        guide: The parsed ``--guide`` (:func:`~pyro_bnn.guides.parse_guide`).

    Raises:
        ValueError: One line: an unknown objective, or why it cannot train this guide and which objectives can.
    """
    entry = objective_entry(name)
    reason = entry.refusal(guide.capabilities)
    if reason is not None:
        usable = [other.name for other in _ENTRIES.values() if other.refusal(guide.capabilities) is None]
        raise ValueError(
            f"elbo {entry.name!r} {reason}, got guide {str(guide)!r}; objectives that train it: {', '.join(usable)}"
        )
