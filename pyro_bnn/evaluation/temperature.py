"""Post-hoc temperature scaling of a classifier's predictive (Guo et al., 2017), for any ``probs``.

One scalar ``T > 0`` is fitted on held-out data by minimising the NLL of the tempered predictive, and then applied
unchanged to the test predictive. The logits are recovered from the probabilities as ``log p``: softmax is invariant
to adding a constant to a row, so ``softmax(log p / T)`` is exactly temperature scaling of whatever logits produced
``p``. A probability of exactly 0 is clamped at the smallest positive normal float of the probabilities' dtype
before the log (as :func:`~pyro_bnn.evaluation.nll` does), so its logit is a large finite number (-87.3 in float32)
rather than ``-inf``, and the tempered NLL and its gradient with respect to ``T`` stay finite.

Two ways to temper a predictive with posterior samples ``p_s`` (:class:`TemperatureMode`): ``mean`` tempers the
Bayesian model average, ``softmax(log(mean_s p_s) / T)``; ``samples`` tempers each sample,
``mean_s softmax(log p_s / T)``. For a deterministic network (one sample, or identical samples) they coincide.
"""

from __future__ import annotations

import math
import numbers
from enum import Enum

import torch

from pyro_bnn.evaluation._validation import check_labels, check_probs
from pyro_bnn.evaluation.classification import nll

TEMPERATURE_RANGE = (1e-3, 1e3)
"""The temperatures the fit may return, ``(lowest, highest)``.

An optimum outside lies at the limit of a one-hot (``T -> 0``) or uniform (``T -> inf``) predictive, where the NLL
is flat to many digits; bounding ``T`` keeps the tempered logits finite and the stored value a plain number.
"""

_MAX_ITERATIONS = 100


class TemperatureMode(str, Enum):
    """What a temperature is applied to, for a predictive of S posterior samples."""

    MEAN = "mean"
    """Temper the posterior predictive: one set of logits per input, ``log(mean_s p_s)``, so the result is
    ``softmax(log(mean_s p_s) / T)``, a single ``(N, C)`` predictive ("pool, then calibrate"). It calibrates exactly
    the predictive that the metrics score, its NLL is convex in ``1 / T`` (so the fit has one optimum), and it is
    the mode to report: the temperature acts on the output of any parameter source alike (VI, ensembles, dropout,
    a deterministic net), which keeps baselines comparable."""

    SAMPLES = "samples"
    """Temper each sample's logits, then average: ``mean_s softmax(log p_s / T)`` ("calibrate, then pool"). It keeps
    S distinct samples, so epistemic summaries such as the mutual information stay meaningful, but it can only
    sharpen or flatten every member alike and cannot undo the extra softening that averaging adds."""


def _check_mode(mode: TemperatureMode | str) -> TemperatureMode:
    try:
        return TemperatureMode(mode)
    except ValueError:
        names = ", ".join(repr(member.value) for member in TemperatureMode)
        raise ValueError(f"mode must be one of {names}; got {mode!r}") from None


def _check_temperature(temperature: float | torch.Tensor) -> float:
    if (
        isinstance(temperature, torch.Tensor)
        and temperature.dim() == 0
        and not (temperature.dtype == torch.bool or temperature.dtype.is_complex)
    ):
        temperature = temperature.item()  # a 0-d real tensor (e.g. a fitted log T, exponentiated) is its number
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise ValueError(
            f"temperature must be a positive finite number (a Python number or a 0-d real tensor); got {temperature!r}"
        )
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a positive finite number; got {temperature}")
    return float(temperature)


def _logits(probs: torch.Tensor, mode: TemperatureMode) -> torch.Tensor:
    """Float64 logits ``(S', N, C)`` of validated probabilities ``(S, N, C)``: ``S' = 1`` for mode mean."""
    tiny = torch.finfo(probs.dtype).tiny
    if mode is TemperatureMode.MEAN:
        probs = probs.double().mean(dim=0, keepdim=True)
    return probs.clamp_min(tiny).log().double()


def _tempered_nll(logits: torch.Tensor, labels: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """NLL (scalar) of ``mean_s softmax(logits_s / T)`` at the labels: the mixture NLL of :func:`nll`.

    Args:
        logits: ``(S, N, C)`` float64 logits.
        labels: ``(N,)`` int64 labels.
        temperature: scalar float64 ``T``.
    """
    log_probs = torch.log_softmax(logits / temperature, dim=-1)
    index = labels.view(1, -1, 1).expand(log_probs.shape[0], -1, 1)
    label_log_probs = log_probs.gather(dim=-1, index=index).squeeze(-1)
    log_mixture = torch.logsumexp(label_log_probs, dim=0) - math.log(log_probs.shape[0])
    return -log_mixture.mean()


def apply_temperature(
    probs: torch.Tensor, temperature: float | torch.Tensor, *, mode: TemperatureMode | str = TemperatureMode.MEAN
) -> torch.Tensor:
    """The tempered predictive, shaped so that every metric and :class:`~pyro_bnn.predict.Prediction` take it as
    they take ``probs``.

    Computed in float64 and returned in the dtype of ``probs`` (float32 for half-precision input, at every
    temperature). ``temperature == 1`` returns ``probs`` itself in either mode (for half-precision input, the
    float32 copy the metrics compute on): the predictive is then unchanged, so keeping ``T = 1`` changes no score,
    not even by rounding (this is what makes :func:`fit_temperature`'s guarantee exact).

    Args:
        probs: ``(S, N, C)`` posterior samples of class probabilities, or ``(N, C)``.
        temperature: ``T > 0``, a Python number (as :func:`fit_temperature` returns) or a 0-d real tensor;
            ``T > 1`` flattens the predictive, ``T < 1`` sharpens it.
        mode: ``"mean"`` or ``"samples"`` (:class:`TemperatureMode`).

    Returns:
        For ``(S, N, C)`` input: mode ``"mean"`` gives ``(1, N, C)``, ``softmax(log(mean_s p_s) / T)`` as a single
        sample; mode ``"samples"`` gives ``(S, N, C)``, ``softmax(log p_s / T)`` per sample (their mean is the
        tempered predictive). For ``(N, C)`` input both give ``(N, C)``, ``softmax(log p / T)``.

    Raises:
        ValueError: ``probs`` fails validation (see ``pyro_bnn.evaluation``), ``temperature`` is not a positive
            finite number, or ``mode`` is unknown.
    """
    mode = _check_mode(mode)
    temperature = _check_temperature(temperature)
    checked = check_probs(probs)
    if temperature == 1.0:
        return checked  # probs itself, or its float32 copy for half-precision input
    samples = checked if checked.dim() == 3 else checked.unsqueeze(0)
    tempered = torch.softmax(_logits(samples, mode) / temperature, dim=-1).to(checked.dtype)
    return tempered if probs.dim() == 3 else tempered.squeeze(0)


def fit_temperature(
    probs: torch.Tensor, labels: torch.Tensor, *, mode: TemperatureMode | str = TemperatureMode.MEAN
) -> float:
    """The temperature ``T > 0`` that minimises the NLL of the tempered predictive on ``(probs, labels)``.

    ``log T`` is optimised from ``T = 1`` by L-BFGS (``torch.optim.LBFGS``, strong-Wolfe line search) in float64,
    on the mixture NLL of ``apply_temperature(probs, T, mode=mode)``, with ``T`` kept in
    :data:`TEMPERATURE_RANGE`. Fit it on held-out data (a validation split), never on the data it is scored on.

    Guarantee: the fit never raises the NLL on the data it was fitted on. If the optimum found has a higher
    :func:`~pyro_bnn.evaluation.nll` than the untempered predictive (an optimiser failure, a non-convex
    ``"samples"`` objective, or float rounding when the optimum is ``T = 1``), 1.0 is returned; and
    ``apply_temperature(probs, 1.0)`` is ``probs`` itself. So
    ``nll(apply_temperature(probs, T, mode=mode), labels) <= nll(probs, labels)`` holds exactly for the ``T``
    returned.

    Args:
        probs: ``(S, N, C)`` posterior samples of class probabilities, or ``(N, C)`` (a deterministic network).
        labels: ``(N,)`` integer class labels.
        mode: ``"mean"`` (temper the sample-mean probabilities; the one to report) or ``"samples"`` (temper each
            sample, then average); see :class:`TemperatureMode`.

    Returns:
        The fitted temperature, a Python float in :data:`TEMPERATURE_RANGE`.

    Raises:
        ValueError: ``probs`` is not a valid ``(S, N, C)`` / ``(N, C)`` probability tensor (non-finite, negative,
            rows not summing to 1), ``labels`` is not ``(N,)`` integers in ``[0, C)``, or ``mode`` is unknown; one
            line naming the value.
    """
    mode = _check_mode(mode)
    checked = check_probs(probs)
    samples = checked if checked.dim() == 3 else checked.unsqueeze(0)
    labels = check_labels(labels, num_points=samples.shape[1], num_classes=samples.shape[2], device=samples.device)
    logits = _logits(samples, mode)
    low, high = (math.log(bound) for bound in TEMPERATURE_RANGE)
    log_temperature = torch.zeros((), dtype=torch.float64, device=samples.device, requires_grad=True)
    optimizer = torch.optim.LBFGS(
        [log_temperature], lr=1.0, max_iter=_MAX_ITERATIONS, line_search_fn="strong_wolfe", tolerance_grad=1e-9
    )

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        # Clamped, so that a line search probing far out sees a flat objective instead of overflowing exp().
        loss = _tempered_nll(logits, labels, log_temperature.clamp(low, high).exp())
        loss.backward()
        return loss

    optimizer.step(closure)
    found = log_temperature.item()
    if not math.isfinite(found):
        return 1.0
    # Clamped twice: log T into the range before exp() (no overflow), T after it (exp(log 1000) is 999.99...).
    fitted = min(max(math.exp(min(max(found, low), high)), TEMPERATURE_RANGE[0]), TEMPERATURE_RANGE[1])
    # The check on the score that is reported, of the probabilities as apply_temperature returns them.
    if nll(apply_temperature(probs, fitted, mode=mode), labels) > nll(probs, labels):
        return 1.0
    return fitted
