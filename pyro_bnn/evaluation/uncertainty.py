"""Split of predictive uncertainty into its aleatoric and epistemic parts by entropy.

For posterior samples ``p_s`` with mean ``pbar``: ``H[pbar] = E_s H[p_s] + I``, where the mutual information
``I`` between the label and the weights measures how much the samples disagree (Depeweg et al., 2018).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pyro_bnn.evaluation._validation import check_predictive


@dataclass(frozen=True, eq=False)
class UncertaintySplit:
    """Per-data-point entropies of a predictive, in nats.

    ``eq=False`` because field-wise ``==`` on tensors is elementwise and would make ``split == other`` raise.

    Attributes:
        total: ``(N,)`` entropy of the sample-mean probabilities, ``H[pbar]``.
        aleatoric: ``(N,)`` expected entropy of a single sample, ``E_s H[p_s]``.
        epistemic: ``(N,)`` mutual information ``total - aleatoric``, >= 0.
    """

    total: torch.Tensor
    aleatoric: torch.Tensor
    epistemic: torch.Tensor


def _entropy(probs: torch.Tensor) -> torch.Tensor:
    """Entropy over the last dimension with ``0 log 0 = 0``; ``probs: (..., C)`` -> ``(...)``."""
    # xlogy(0, 0) is defined as 0, where probs * probs.log() would give 0 * -inf = NaN.
    return -torch.special.xlogy(probs, probs).sum(dim=-1)


def entropy_decomposition(probs: torch.Tensor) -> UncertaintySplit:
    """Total, aleatoric and epistemic entropy of each data point.

    Args:
        probs: ``(num_samples, N, C)`` posterior samples of class probabilities, or their mean ``(N, C)``; the
            latter carries no disagreement between samples, so its epistemic part is 0 and
            ``aleatoric == total``.

    Returns:
        The split, each part ``(N,)`` in nats on ``probs``' device (float32 for half-precision input).
        ``epistemic`` is clamped below at 0: by Jensen's inequality it is never negative, and when all samples
        agree the subtraction can still leave round-off of a few ulps below 0.

    Raises:
        ValueError: ``probs`` fails validation (see ``pyro_bnn.evaluation``).
    """
    checked = check_predictive(probs)
    total = _entropy(checked.mean)
    aleatoric = _entropy(checked.samples).mean(dim=0)
    epistemic = (total - aleatoric).clamp_min(0.0)
    return UncertaintySplit(total=total, aleatoric=aleatoric, epistemic=epistemic)
