"""Out-of-distribution (OOD) detection: uncertainty scores per input and how well they separate two data sets.

The convention throughout: a *score* is larger for an input that looks more out-of-distribution, and the OOD inputs
are the positive class. Three scores come from a classifier's predictive (:func:`ood_scores`): the total predictive
entropy, the mutual information between label and weights (its epistemic part) and one minus the largest mean
class probability. :func:`ood_detection` rates any pair of score vectors, in-distribution against OOD, with
scikit-learn's metrics:

* ``auroc``: area under the ROC curve, OOD positive. Ties between an in-distribution and an OOD score count one
  half (the trapezoidal ROC area is the Mann-Whitney statistic with tie-aware ranks); identical scores give 0.5.
* ``aupr_out``: average precision with OOD positive (``average_precision_score``: tied scores form one threshold,
  no interpolation between points); ``aupr_in`` the same with the in-distribution inputs positive and the scores
  negated, so that a low score is what marks them.
* ``fpr_at_95_tpr``: the false-positive rate at the largest threshold that still detects at least 95 % of the OOD
  inputs, without interpolation. With ``n_out`` OOD inputs the threshold is the ``ceil(0.95 * n_out)``-th largest
  OOD score, and an input counts as detected when its score is at or above it, so in-distribution inputs *tied*
  with the threshold count as false positives (the pessimistic reading). It is the first point of scikit-learn's
  ``roc_curve(..., drop_intermediate=False)`` whose true-positive rate reaches 0.95.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

import numpy as np
import torch

from pyro_bnn.evaluation.uncertainty import entropy_decomposition

TPR_LEVEL = 0.95
"""Share of OOD inputs that the threshold of ``fpr_at_95_tpr`` must detect."""

DETECTION_KEYS = ("auroc", "aupr_in", "aupr_out", "fpr_at_95_tpr")
"""The keys of :func:`ood_detection`'s result, in order."""


class OodScore(str, Enum):
    """The uncertainty scores of :func:`ood_scores`; each is larger for an input that looks more OOD."""

    ENTROPY = "entropy"
    """Total predictive entropy ``H[pbar]`` of the posterior-mean probabilities, in nats, in ``[0, log C]``."""

    MUTUAL_INFORMATION = "mutual_information"
    """Mutual information ``H[pbar] - E_s H[p_s]`` between label and weights (the epistemic part), in nats;
    0 for an ``(N, C)`` input, which has no samples to disagree."""

    MAX_PROBABILITY = "max_probability"
    """``1 - max_c pbar_c``: one minus the largest posterior-mean class probability (the confidence), in
    ``[0, 1 - 1/C]``. Negated and shifted so that, like the other scores, larger means more OOD; its AUROC
    is that of the maximum-softmax-probability baseline (Hendrycks and Gimpel, 2017)."""


def ood_scores(probs: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-input OOD scores of a classifier's predictive.

    Args:
        probs: ``(num_samples, N, C)`` posterior samples of class probabilities, or their mean ``(N, C)``.

    Returns:
        One ``(N,)`` tensor per :class:`OodScore`, keyed by its value (``"entropy"``, ``"mutual_information"``,
        ``"max_probability"``), on ``probs``' device (float32 for half-precision input). Every score is larger
        for a more uncertain input; ``"max_probability"`` holds ``1 - max_c pbar_c``, not the confidence itself.

    Raises:
        ValueError: ``probs`` fails validation (see ``pyro_bnn.evaluation``).
    """
    split = entropy_decomposition(probs)  # validates probs (check_probs), so it is validated once
    probs = probs.to(split.total.dtype)
    mean = probs if probs.dim() == 2 else probs.mean(dim=0)
    return {
        OodScore.ENTROPY.value: split.total,
        OodScore.MUTUAL_INFORMATION.value: split.epistemic,
        OodScore.MAX_PROBABILITY.value: 1.0 - mean.max(dim=-1).values,
    }


def _check_scores(scores: torch.Tensor | np.ndarray | Sequence[float], name: str) -> np.ndarray:
    """Validates one side's scores; returns them as a float64 NumPy vector."""
    if not isinstance(scores, torch.Tensor):
        try:
            scores = torch.as_tensor(np.asarray(scores))
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"{name} must be a tensor of real scores; got {type(scores).__name__}") from None
    if scores.dtype == torch.bool or scores.dtype.is_complex:
        raise ValueError(f"{name} must hold real scores; got dtype {scores.dtype}")
    if scores.dim() != 1:
        raise ValueError(f"{name} must have rank 1 (N,); got shape {tuple(scores.shape)} (rank {scores.dim()})")
    if scores.numel() == 0:
        raise ValueError(f"{name} must hold at least one score; got shape {tuple(scores.shape)}")
    values = scores.detach().cpu().double().numpy()
    not_finite = ~np.isfinite(values)
    if not_finite.any():
        index = int(np.flatnonzero(not_finite)[0])
        raise ValueError(f"{name} must be finite; found {values[index]} at index {index}")
    return values


def ood_detection(
    in_scores: torch.Tensor | np.ndarray | Sequence[float],
    out_scores: torch.Tensor | np.ndarray | Sequence[float],
) -> dict[str, float]:
    """How well one score separates OOD inputs from in-distribution ones (see the module docstring).

    Args:
        in_scores: ``(N_in,)`` scores of the in-distribution inputs (a tensor on any device, an array or a list).
        out_scores: ``(N_out,)`` scores of the OOD inputs; larger should mean more OOD.

    Returns:
        ``{"auroc", "aupr_in", "aupr_out", "fpr_at_95_tpr"}`` as floats in ``[0, 1]``. A perfect score gives
        1, 1, 1 and 0; identical scores everywhere give an AUROC of 0.5, ``aupr_out = N_out / (N_in + N_out)``
        and an FPR of 1.

    Raises:
        ValueError: either side is not a non-empty rank-1 tensor of finite real numbers (naming the side, the
            shape or the offending value and its index).
    """
    from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve  # slow to import; used here only

    inside = _check_scores(in_scores, "in_scores")
    outside = _check_scores(out_scores, "out_scores")
    scores = np.concatenate([inside, outside])
    is_out = np.concatenate([np.zeros(len(inside), dtype=np.int64), np.ones(len(outside), dtype=np.int64)])
    fpr, tpr, _ = roc_curve(is_out, scores, drop_intermediate=False)
    # roc_curve's thresholds decrease and count a score at or above the threshold as positive; the first point
    # that reaches the level is the largest threshold detecting 95 % of the OOD inputs (tpr[-1] is 1).
    first = int(np.argmax(tpr >= TPR_LEVEL))
    return {
        "auroc": float(roc_auc_score(is_out, scores)),
        "aupr_in": float(average_precision_score(1 - is_out, -scores)),
        "aupr_out": float(average_precision_score(is_out, scores)),
        "fpr_at_95_tpr": float(fpr[first]),
    }


def ood_metrics(in_probs: torch.Tensor, out_probs: torch.Tensor) -> dict[str, dict[str, float]]:
    """OOD detection by every :class:`OodScore`: an in-distribution predictive against an OOD one.

    Args:
        in_probs: ``(num_samples, N_in, C)`` or ``(N_in, C)`` class probabilities of the in-distribution inputs
            (typically the test set the model was trained for).
        out_probs: ``(num_samples', N_out, C)`` or ``(N_out, C)`` class probabilities of the OOD inputs, from
            the same model (the same C); the number of samples may differ.

    Returns:
        Per score name (``"entropy"``, ``"mutual_information"``, ``"max_probability"``): the
        :func:`ood_detection` dict plus ``"mean_in"`` and ``"mean_out"``, the score's mean on each side.

    Raises:
        ValueError: either predictive fails validation (the message starts with ``in_probs:`` or
            ``out_probs:``), or the two have different numbers of classes.
    """
    sides = {}
    for name, probs in (("in_probs", in_probs), ("out_probs", out_probs)):
        try:
            sides[name] = ood_scores(probs)
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None
    num_classes = (in_probs.shape[-1], out_probs.shape[-1])
    if num_classes[0] != num_classes[1]:
        raise ValueError(
            f"in_probs and out_probs must have the same number of classes C; got shapes {tuple(in_probs.shape)} "
            f"and {tuple(out_probs.shape)}"
        )
    metrics = {}
    for score in OodScore:
        inside, outside = sides["in_probs"][score.value], sides["out_probs"][score.value]
        metrics[score.value] = {
            **ood_detection(inside, outside),
            "mean_in": float(inside.double().mean()),
            "mean_out": float(outside.double().mean()),
        }
    return metrics
