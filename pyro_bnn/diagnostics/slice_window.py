"""The window search's options and the optional log prior of :func:`pyro_bnn.diagnostics.slices.likelihood_slice`.

* :class:`SearchOptions` checks and holds the window-search options (``start``, ``growth``, ``threshold``,
  ``num_points``, ``max_half_width``, ``max_steps``).
* :func:`log_prior_function` turns a ``prior`` argument (a scalar ``Distribution`` or a function) into a function
  of the values; :func:`prior_values` applies it and checks the result's shape.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.distributions import Distribution, constraints

from pyro_bnn.checks import int_at_least

LogPrior = Callable[[torch.Tensor], torch.Tensor] | Distribution


@dataclass(frozen=True)
class SearchOptions:
    start: float
    growth: float
    threshold: float
    num_points: int
    max_half_width: float
    max_steps: int

    @classmethod
    def checked(cls, start, growth, threshold, num_points, max_half_width, max_steps) -> SearchOptions:
        start = _number(start, "start", lambda v: v > 0, "a finite number > 0")
        growth = _number(growth, "growth", lambda v: v > 1, "a finite number > 1")
        threshold = _number(threshold, "threshold", lambda v: 0 < v < 1, "a number in (0, 1)")
        num_points = int_at_least(num_points, "num_points", 3)
        max_half_width = _number(
            max_half_width, "max_half_width", lambda v: v >= start, f"a finite number >= start ({start!r})"
        )
        max_steps = int_at_least(max_steps, "max_steps", 1)
        return cls(start, growth, threshold, num_points, max_half_width, max_steps)


def _number(value, name: str, ok: Callable[[float], bool], expected: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not ok(value):
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return float(value)


def log_prior_function(prior: LogPrior | None) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The log prior density as a function of values ``(G,) -> (G,)``; None for no prior. A scalar
    ``Distribution`` gives ``-inf`` outside its support (a bounded prior such as ``Uniform(-1, 1)`` or
    ``HalfNormal``), so a window side stops at its first edge there, and a ``w0`` outside it is refused as a
    log-likelihood that is not finite; a function is taken as it is."""
    if prior is None:
        return None
    if isinstance(prior, Distribution):
        if prior.batch_shape != torch.Size() or prior.event_shape != torch.Size():
            raise ValueError(
                "prior must be a scalar distribution (batch and event shape ()), got batch_shape "
                f"{tuple(prior.batch_shape)} and event_shape {tuple(prior.event_shape)}"
            )
        try:
            support = prior.support
        except NotImplementedError:  # a user's distribution that names no support: its own log_prob decides
            return prior.log_prob
        if constraints.is_dependent(support):  # its check raises; as above
            return prior.log_prob
        return lambda w: _log_prob_or_minus_inf(prior, support, w)
    if callable(prior):
        return prior
    raise ValueError(f"prior must be a torch Distribution or a function of the value, got {type(prior).__name__}")


def _log_prob_or_minus_inf(prior: Distribution, support: constraints.Constraint, w: torch.Tensor) -> torch.Tensor:
    """``prior.log_prob(w)`` for values ``(G,)`` inside the support, ``-inf`` (the density's log) outside it:
    log_prob with argument validation on (torch's default) raises a multi-line support error for any value outside,
    so only the values inside reach it."""
    inside = torch.as_tensor(support.check(w), dtype=torch.bool, device=w.device)
    values = torch.full(w.shape, -math.inf, dtype=torch.float64, device=w.device)
    if bool(inside.any()):
        values[inside] = torch.as_tensor(prior.log_prob(w[inside])).to(torch.float64).to(w.device)
    return values


def prior_values(log_prior: Callable[[torch.Tensor], torch.Tensor], w: torch.Tensor) -> torch.Tensor:
    values = torch.as_tensor(log_prior(w)).to(torch.float64)
    if values.shape != w.shape:
        raise ValueError(
            f"prior must map a tensor of values {tuple(w.shape)} elementwise to log densities of the same shape, "
            f"got shape {tuple(values.shape)}"
        )
    return values.to(w.device)


__all__ = ["LogPrior", "SearchOptions", "log_prior_function", "prior_values"]
