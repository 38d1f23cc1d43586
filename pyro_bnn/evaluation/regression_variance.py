"""The regression predictive's variance split into its aleatoric (noise) and epistemic (weights) parts.

Given S posterior samples of the network's outputs, each a mean ``mu_s`` and a noise variance ``v_s`` per point and
output, the predictive mixture ``(1/S) sum_s p(y | mu_s, v_s)`` has, by the law of total variance,

* aleatoric variance ``E_s[v_s]``: the noise the model expects even with the weights known (the mean over samples
  of the predicted noise variance);
* epistemic variance ``Var_s[mu_s]``: the spread of the sampled means (population variance, dividing by S), which
  more data would shrink;
* total variance = aleatoric + epistemic, the mixture's variance.

The noise variance is ``scale^2`` for Gaussian noise and ``scale^2 df / (df - 2)`` for Student-t noise with
``df > 2`` degrees of freedom (infinite for ``df <= 2``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pyro_bnn.evaluation.regression import _check_df, _check_means, _check_noise_scale, _noise_variance


@dataclass(frozen=True, eq=False)
class RegressionVarianceSplit:
    """Predictive variance per point and output, and its two parts (float64, each ``(N, D)``).

    Attributes:
        aleatoric: Mean over samples of the noise variance, ``E_s[v_s]``.
        epistemic: Variance over samples of the means, ``Var_s[mu_s]`` (dividing by S).
    """

    aleatoric: torch.Tensor
    epistemic: torch.Tensor

    @property
    def total(self) -> torch.Tensor:
        """The predictive variance, ``aleatoric + epistemic`` (``(N, D)``)."""
        return self.aleatoric + self.epistemic

    @property
    def aleatoric_sd(self) -> torch.Tensor:
        """``sqrt(aleatoric)``, ``(N, D)``: the noise standard deviation the model predicts on average."""
        return self.aleatoric.sqrt()

    @property
    def total_sd(self) -> torch.Tensor:
        """``sqrt(total)``, ``(N, D)``: the predictive standard deviation."""
        return self.total.sqrt()


def regression_variance_split(
    means: torch.Tensor, noise_scale: torch.Tensor | float, *, df: torch.Tensor | float | None = None
) -> RegressionVarianceSplit:
    """Splits the regression predictive variance into aleatoric and epistemic parts (see the module docstring).

    Args:
        means: ``(S, N, D)`` sampled means.
        noise_scale: The noise standard deviation: a scalar (one for every sample and point) or ``(S, N, D)``
            (a heteroscedastic likelihood's per-sample predictions).
        df: Student-t degrees of freedom of the noise, or None for Gaussian noise.

    Returns:
        The :class:`RegressionVarianceSplit`, float64 on ``means``' device.

    Raises:
        ValueError: ``means`` not a finite floating ``(S, N, D)`` tensor, ``noise_scale`` not finite and > 0 (or of
            another shape), ``df`` not a finite number > 0.
    """
    means = _check_means(means)
    scale = _check_noise_scale(noise_scale, means.device, means.shape)
    noise = _noise_variance(scale, _check_df(df)).expand_as(means)
    return RegressionVarianceSplit(aleatoric=noise.mean(0), epistemic=means.var(0, unbiased=False))
