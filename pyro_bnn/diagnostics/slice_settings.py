"""The options of a likelihood slice (:class:`SliceOptions`): the window search, the grid and the evaluation, one
value for :func:`~pyro_bnn.diagnostics.slices.likelihood_slice`, :func:`~pyro_bnn.diagnostics.slices.likelihood_slices`
and :func:`~pyro_bnn.diagnostics.plateaus.plateau_fractions` alike; :func:`slice_options` applies the deprecated loose
keyword options over one."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from pyro_bnn.checks import Settings, positive_int
from pyro_bnn.diagnostics.slice_window import LogPrior, SearchOptions

DEFAULT_MAX_HALF_WIDTH = 5.0
"""Largest half-width the window search reaches on one side (50x the paper's starting 0.1; 43 steps of x1.1)."""

DEFAULT_MAX_STEPS = 100
"""Most window-search evaluations on one side."""


@dataclass(frozen=True, kw_only=True)
class SliceOptions(Settings):
    """The options of a likelihood slice: the window search, the grid and the evaluation, as
    :func:`~pyro_bnn.diagnostics.slices.likelihood_slice` describes them. One value serves
    :func:`~pyro_bnn.diagnostics.slices.likelihood_slice`, :func:`~pyro_bnn.diagnostics.slices.likelihood_slices`
    and :func:`~pyro_bnn.diagnostics.plateaus.plateau_fractions` alike.

    Checked when made: a bad value raises a one-line ``ValueError`` naming it (``prior`` is checked when a slice
    uses it). Numbers are stored as ``float``, counts as ``int``.

    Attributes:
        prior: Adds a log prior density of the scalar: a scalar ``torch.distributions.Distribution`` (``-inf``
            outside its support, so a bounded prior ends the window search's side there) or a function mapping
            values ``(G,)`` to log densities ``(G,)``; None: the likelihood alone.
        start: First half-width of the window on each side, > 0.
        growth: Factor by which a side's half-width grows per step, > 1.
        threshold: A side stops at its first edge where ``exp(ll - ll(w0)) < threshold``; in (0, 1).
        num_points: Grid points, >= 3 (the paper: 25).
        max_half_width: Cap on each side's half-width, >= ``start``.
        max_steps: Cap on each side's number of window-search evaluations, >= 1.
        batch_points: Grid values per vectorised call, >= 1.
        batch_size: Rows of data per call, >= 1 (memory grows with ``batch_points * batch_size``).
        incremental: Reuse what does not change; False always runs the whole network under vmap.
    """

    prior: LogPrior | None = None
    start: float = 0.1
    growth: float = 1.1
    threshold: float = 0.01
    num_points: int = 25
    max_half_width: float = DEFAULT_MAX_HALF_WIDTH
    max_steps: int = DEFAULT_MAX_STEPS
    batch_points: int = 25
    batch_size: int = 2048
    incremental: bool = True

    def check(self) -> None:
        search = self.search
        for name in ("start", "growth", "threshold", "num_points", "max_half_width", "max_steps"):
            self._set(name, getattr(search, name))
        self._set("batch_points", positive_int(self.batch_points, "batch_points"))
        self._set("batch_size", positive_int(self.batch_size, "batch_size"))

    @property
    def search(self) -> SearchOptions:
        """The window-search options, checked."""
        return SearchOptions.checked(
            self.start, self.growth, self.threshold, self.num_points, self.max_half_width, self.max_steps
        )


_OPTION_NAMES = tuple(field.name for field in fields(SliceOptions))


def slice_options(
    options: SliceOptions | None,
    keywords: Mapping[str, object],
    caller: str,
    *,
    default: SliceOptions | None = None,
    parameter: str = "options",
) -> SliceOptions:
    """``options`` (or ``default``, or ``SliceOptions()``) with the deprecated loose keyword options of ``caller``
    applied over it; those raise a ``DeprecationWarning``, an unknown one a ``TypeError`` as Python would.
    ``parameter`` is what ``caller`` calls its :class:`SliceOptions` argument, for the messages."""
    unknown = [key for key in keywords if key not in _OPTION_NAMES]
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
    if options is not None and not isinstance(options, SliceOptions):
        raise TypeError(f"{parameter} must be a SliceOptions, got {type(options).__name__}")
    base = options if options is not None else default if default is not None else SliceOptions()
    if not keywords:
        return base
    loose = ", ".join(f"{key}=..." for key in keywords)
    warnings.warn(
        f"{caller}({loose}) is deprecated: pass {parameter}=SliceOptions({loose}) instead",
        DeprecationWarning,
        stacklevel=3,
    )
    return replace(base, **keywords)
