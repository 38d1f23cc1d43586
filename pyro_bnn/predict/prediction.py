"""The prediction object that metrics, diagnostics, plots and exports all consume."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pyro_bnn.evaluation import regression_metrics, summarize


@dataclass
class Prediction:
    """Posterior predictive samples for N inputs.

    Classification fills ``probs``; regression fills ``means`` and ``noise_scale`` (the likelihood decides, through
    :meth:`~pyro_bnn.likelihoods.Likelihood.prediction_fields`).

    Attributes:
        probs: Class probabilities per posterior sample, ``(S, N, C)``.
        means: Predicted means per posterior sample, ``(S, N, D)``.
        noise_scale: Observation noise standard deviation of a Gaussian likelihood (scalar tensor).
        targets: The inputs' labels ``(N,)`` or regression targets ``(N, D)`` when they were given.
        log_likelihood: ``log p(y_n | sample s)`` of the targets, unscaled, ``(S, N)``, when targets were given
            (the input of WAIC / PSIS-LOO).
    """

    probs: torch.Tensor | None = None
    means: torch.Tensor | None = None
    noise_scale: torch.Tensor | None = None
    targets: torch.Tensor | None = None
    log_likelihood: torch.Tensor | None = None

    @property
    def num_samples(self) -> int:
        """S, the number of posterior samples."""
        return (self.probs if self.probs is not None else self.means).shape[0]

    @property
    def is_classification(self) -> bool:
        return self.probs is not None

    def mean_probs(self) -> torch.Tensor:
        """Posterior predictive class probabilities ``(N, C)``: the mean over samples."""
        self._require_classification()
        return self.probs.mean(0)

    def predictive_mean(self) -> torch.Tensor:
        """Regression predictive mean ``(N, D)``."""
        self._require_regression()
        return self.means.mean(0)

    def predictive_std(self) -> torch.Tensor:
        """Regression predictive standard deviation ``(N, D)``: spread of the sampled means plus the noise."""
        self._require_regression()
        variance = self.means.var(0, unbiased=False) + self.noise_scale**2
        return variance.sqrt()

    def metrics(self, n_bins: int = 15) -> dict[str, float]:
        """Scores against :attr:`targets`.

        Classification: ``accuracy, nll, brier, ece, mce`` (see :func:`pyro_bnn.evaluation.summarize`).
        Regression: ``rmse`` of the predictive mean, ``nll`` of the mixture predictive
        ``(1/S) sum_s Normal(y; mean_s, noise_scale^2)`` and the ``coverage`` of mean ± 2 sd (see
        :func:`pyro_bnn.evaluation.regression_metrics`).
        """
        if self.targets is None:
            raise ValueError("this prediction has no targets to score against; pass (x, y) or a loader of pairs")
        if self.is_classification:
            return summarize(self.probs, self.targets, n_bins=n_bins)
        return regression_metrics(self.means, self.noise_scale, self.targets)

    def _require_classification(self) -> None:
        if self.probs is None:
            raise ValueError("this is a regression prediction; it has no class probabilities")

    def _require_regression(self) -> None:
        if self.means is None:
            raise ValueError("this is a classification prediction; use probs / mean_probs()")
