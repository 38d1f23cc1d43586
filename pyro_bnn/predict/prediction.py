"""The prediction object that metrics, diagnostics, plots and exports all consume."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pyro_bnn.evaluation import (
    RegressionVarianceSplit,
    TemperatureMode,
    accuracy,
    apply_temperature,
    regression_calibration,
    regression_metrics,
    regression_variance_split,
    summarize,
)


@dataclass(frozen=True)
class AccuracyBreakdown:
    """Test accuracies of one prediction, three ways (:meth:`Prediction.accuracies`).

    Every prediction is the argmax of class probabilities; on a tie the lowest class index wins, as in
    :func:`pyro_bnn.evaluation.accuracy`.

    Attributes:
        per_sample: Accuracy of each posterior sample's own network, length S, in sample order.
        ensemble: Accuracy of the argmax of the sample-mean probabilities (the Bayesian model average),
            ``pyro_bnn.evaluation.accuracy(probs, targets)``.
        posterior_mean: Accuracy of the source's point network (``Prediction.point``), or None when the prediction
            has none.
    """

    per_sample: tuple[float, ...]
    ensemble: float
    posterior_mean: float | None = None

    @property
    def sample_min(self) -> float:
        """The worst single sample's accuracy."""
        return min(self.per_sample)

    @property
    def sample_mean(self) -> float:
        """The mean of the single samples' accuracies (not the ensemble's accuracy)."""
        return sum(self.per_sample) / len(self.per_sample)

    @property
    def sample_max(self) -> float:
        """The best single sample's accuracy."""
        return max(self.per_sample)


@dataclass
class Prediction:
    """Posterior predictive samples for N inputs.

    Classification fills ``probs``; regression fills ``means`` and ``noise_scale``, and a Student-t likelihood also
    ``noise_df`` (the likelihood decides, through :meth:`~pyro_bnn.likelihoods.Likelihood.prediction_fields`).

    Attributes:
        probs: Class probabilities per posterior sample, ``(S, N, C)``.
        means: Predicted means per posterior sample, ``(S, N, D)``.
        noise_scale: Observation noise standard deviation: a scalar tensor for a likelihood with one noise scale,
            ``(S, N, D)`` for one whose network predicts it (:class:`~pyro_bnn.likelihoods.HeteroscedasticGaussian`);
            a Student-t likelihood's scale parameter.
        noise_df: Degrees of freedom of a Student-t likelihood (scalar tensor); None for Gaussian noise.
        targets: The inputs' labels ``(N,)`` or regression targets ``(N, D)`` when they were given.
        log_likelihood: ``log p(y_n | sample s)`` of the targets, unscaled, ``(S, N)``, when targets were given
            (the input of WAIC / PSIS-LOO).
        point: The prediction of the source's point network (the posterior mean or median weights, see
            :meth:`~pyro_bnn.predict.ParameterSource.point`) on the same inputs, a one-sample ``Prediction``
            (``probs (1, N, C)`` or ``means (1, N, D)``, same targets), when
            :func:`~pyro_bnn.predict.predict` was asked for it (``point=True``) and the source has one; else None.
    """

    probs: torch.Tensor | None = None
    means: torch.Tensor | None = None
    noise_scale: torch.Tensor | None = None
    noise_df: torch.Tensor | None = None
    targets: torch.Tensor | None = None
    log_likelihood: torch.Tensor | None = None
    point: Prediction | None = None

    @property
    def num_samples(self) -> int:
        """S, the number of posterior samples."""
        return (self.probs if self.probs is not None else self.means).shape[0]

    @property
    def is_classification(self) -> bool:
        """Whether this is a classifier's prediction (it has ``probs``)."""
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
        return self.variance_split().total_sd.to(self.means.dtype)

    def variance_split(self) -> RegressionVarianceSplit:
        """The regression predictive variance split into aleatoric and epistemic parts, each ``(N, D)`` float64.

        Aleatoric: the mean over samples of the noise variance (``noise_scale^2``, times ``df / (df - 2)`` for
        Student-t noise); epistemic: the variance over samples of the means; see
        :func:`pyro_bnn.evaluation.regression_variance_split`.
        """
        self._require_regression()
        return regression_variance_split(self.means, self.noise_scale, df=self.noise_df)

    def metrics(self, n_bins: int = 15) -> dict[str, float]:
        """Scores against :attr:`targets`.

        Classification: ``accuracy, nll, brier, ece, mce`` (see :func:`pyro_bnn.evaluation.summarize`).
        Regression: ``rmse`` of the predictive mean, ``nll`` of the mixture predictive
        ``(1/S) sum_s Normal(y; mean_s, noise_scale_s^2)`` (Student-t components with :attr:`noise_df`) and the
        ``coverage`` of mean ± 2 sd (see :func:`pyro_bnn.evaluation.regression_metrics`), NaN for Student-t noise
        with ``noise_df <= 2``, whose sd is infinite.
        """
        if self.targets is None:
            raise ValueError("this prediction has no targets to score against; pass (x, y) or a loader of pairs")
        if self.is_classification:
            return summarize(self.probs, self.targets, n_bins=n_bins)
        return regression_metrics(self.means, self.noise_scale, self.targets, df=self.noise_df)

    def calibration(self, levels: tuple[float, ...] = (0.5, 0.9, 0.95)) -> dict[str, float]:
        """Regression calibration against :attr:`targets`: central-interval coverage and width at each level, the
        quantile calibration error, CRPS and sharpness (:func:`pyro_bnn.evaluation.regression_calibration`).

        Raises:
            ValueError: for a classification prediction, one without targets, or Student-t noise (the
                calibration metrics take a Gaussian mixture).
        """
        self._require_regression()
        if self.targets is None:
            raise ValueError("this prediction has no targets to score against; pass (x, y) or a loader of pairs")
        if self.noise_df is not None:
            raise ValueError("regression calibration takes Gaussian noise; this prediction has Student-t noise")
        return regression_calibration(self.means, self.noise_scale, self.targets, levels=levels)

    def accuracies(self) -> AccuracyBreakdown:
        """Accuracy of every single sample, of the ensemble and of the point network, from one prediction.

        With ``probs (S, N, C)``: sample s predicts ``argmax_c probs[s, n, c]``, the ensemble
        ``argmax_c mean_s probs[s, n, c]`` and the point network ``argmax_c point.probs[0, n, c]``. Identical
        samples give an ensemble accuracy equal to each sample's.

        Returns:
            The :class:`AccuracyBreakdown`; ``posterior_mean`` is None when :attr:`point` is.

        Raises:
            ValueError: for a regression prediction, or one without targets.
        """
        if not self.is_classification:
            raise ValueError("accuracies need a classification prediction; this one is a regression (use metrics())")
        if self.targets is None:
            raise ValueError("this prediction has no targets to score against; pass (x, y) or a loader of pairs")
        ensemble = accuracy(self.probs, self.targets)  # validates probs and targets once
        labels = self.targets.to(device=self.probs.device, dtype=torch.int64)
        # max, not argmax, as pyro_bnn.evaluation does: on a tie both return the first (lowest) class index.
        correct = self.probs.max(dim=-1).indices == labels
        per_sample = tuple(correct.double().mean(dim=-1).tolist())
        point = None if self.point is None else accuracy(self.point.probs, self.targets)
        return AccuracyBreakdown(per_sample=per_sample, ensemble=ensemble, posterior_mean=point)

    def tempered(self, temperature: float | torch.Tensor, *, mode: TemperatureMode | str = "mean") -> Prediction:
        """This prediction with its class probabilities tempered by ``temperature`` (post-hoc temperature scaling).

        The probabilities are :func:`pyro_bnn.evaluation.apply_temperature` of :attr:`probs`: mode ``"mean"`` tempers
        the sample-mean probabilities and leaves one sample, ``probs (1, N, C)``; mode ``"samples"`` tempers each
        sample, ``probs (S, N, C)``. ``targets`` are kept, ``log_likelihood`` is recomputed from the tempered
        probabilities (``(1, N)`` or ``(S, N)``, each probability clamped at the dtype's smallest positive normal
        float before the log) and :attr:`point` is tempered the same way. ``temperature == 1`` leaves the
        probabilities as they are, in either mode. Fit the temperature with
        :func:`pyro_bnn.evaluation.fit_temperature` on a validation prediction.

        Args:
            temperature: ``T > 0``, a Python number or a 0-d real tensor.
            mode: ``"mean"`` or ``"samples"`` (:class:`pyro_bnn.evaluation.TemperatureMode`).

        Returns:
            A new ``Prediction``; this one is not changed.

        Raises:
            ValueError: for a regression prediction, a temperature that is not a positive finite number, or an
                unknown mode.
        """
        if not self.is_classification:
            raise ValueError("temperature scaling needs class probabilities; this is a regression prediction")
        probs = apply_temperature(self.probs, temperature, mode=mode)
        log_likelihood = self.log_likelihood
        if self.targets is not None and probs is not self.probs:
            labels = self.targets.to(device=probs.device, dtype=torch.int64)
            index = labels.view(1, -1, 1).expand(probs.shape[0], -1, 1)
            label_probs = probs.gather(dim=-1, index=index).squeeze(-1)
            log_likelihood = label_probs.clamp_min(torch.finfo(probs.dtype).tiny).log()
        point = None if self.point is None else self.point.tempered(temperature, mode=mode)
        return Prediction(probs=probs, targets=self.targets, log_likelihood=log_likelihood, point=point)

    def _require_classification(self) -> None:
        if self.probs is None:
            raise ValueError("this is a regression prediction; it has no class probabilities")

    def _require_regression(self) -> None:
        if self.means is None:
            raise ValueError("this is a classification prediction; use probs / mean_probs()")
