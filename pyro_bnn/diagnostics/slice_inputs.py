"""What a likelihood slice reads, checked: the likelihood as a per-row log-likelihood function
(:func:`row_log_likelihood`), the data's rows (:func:`check_rows`) and the names of the tensors it is given
(:func:`refuse_unknown_tensors`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

import torch


def row_log_likelihood(likelihood: object) -> Callable:
    """``likelihood`` as ``f(output, y) -> per-row log-likelihoods``: a pyro_bnn Likelihood's ``log_likelihood``
    (rows whose output holds NaN or +inf scored NaN: :func:`_non_finite_rows_score_nan`), or a function taken as
    it is; one line for anything else."""
    method = getattr(likelihood, "log_likelihood", None)
    if callable(method):
        return _non_finite_rows_score_nan(method)
    if callable(likelihood):
        return likelihood
    raise ValueError(
        "likelihood must be a pyro_bnn Likelihood or a function (output, y) -> per-row log-likelihoods, "
        f"got {type(likelihood).__name__}"
    )


def check_rows(x: object, y: object) -> None:
    """One line unless ``x`` and ``y`` are tensors with the same number (> 0) of rows, one per example."""
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) or x.dim() < 1 or y.dim() < 1:
        raise ValueError("x and y must be tensors with one row per example")
    if len(x) != len(y) or len(x) == 0:
        raise ValueError(f"x and y must have the same number of rows (> 0), got {len(x)} and {len(y)}")


def refuse_unknown_tensors(names: Iterable[str], own: Mapping[str, torch.Tensor], caller: str) -> None:
    """One line, prefixed by ``caller``, for the first of ``names`` that is no parameter or buffer in ``own``."""
    for name in names:
        if name not in own:
            raise ValueError(f"{caller}: {name!r} is not a parameter or buffer of the network")


def _non_finite_rows_score_nan(log_likelihood: Callable) -> Callable:
    """``log_likelihood(output, y)`` with every row whose output holds NaN or +inf scored NaN, that row's output
    replaced by zeros first: a likelihood that validates its distribution's arguments (``Categorical(logits=...)``)
    would otherwise raise a many-line error where the slice expects a non-finite value. A -inf (a class's logit
    far below the others) is scored as the likelihood scores it. Works under ``torch.vmap``."""

    def score(output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        bad = (output.isnan() | output.isposinf()).any(-1)
        scored = log_likelihood(torch.where(bad[..., None], torch.zeros_like(output), output), y)
        return torch.where(bad, torch.full_like(scored, math.nan), scored)

    return score


__all__ = ["check_rows", "refuse_unknown_tensors", "row_log_likelihood"]
