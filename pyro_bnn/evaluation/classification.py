"""Scores of a classifier's posterior predictive: accuracy, negative log-likelihood and Brier score.

Each public metric validates its input, then calls a private ``_..._of`` function on the validated
``CheckedPredictive``; ``summarize`` calls those directly so the input is validated once.
"""

from __future__ import annotations

import math

import torch

from pyro_bnn.evaluation._validation import CheckedPredictive, check_predictive


def _confidence_and_prediction(mean_probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Confidence and predicted class of posterior-mean probabilities.

    Accuracy and calibration both use this, so they always agree on what was predicted. On a tie the lowest
    class index wins (``torch.max`` returns the first maximum).

    Args:
        mean_probs: ``(N, C)`` posterior-mean class probabilities.

    Returns:
        ``confidence``: ``(N,)`` the largest probability of each row, and ``prediction``: ``(N,)`` int64,
        its class.
    """
    confidence, prediction = mean_probs.max(dim=-1)
    return confidence, prediction


def _accuracy_of(checked: CheckedPredictive) -> float:
    _, prediction = _confidence_and_prediction(checked.mean)
    return (prediction == checked.labels).double().mean().item()


def _nll_of(checked: CheckedPredictive) -> float:
    samples, labels = checked.samples, checked.labels
    num_samples, num_points, _ = samples.shape
    index = labels.view(1, num_points, 1).expand(num_samples, num_points, 1)
    label_probs = samples.gather(dim=-1, index=index).squeeze(-1)
    # A posterior sample may give the true label probability exactly 0. Clamping at the dtype's smallest
    # positive normal float turns log(0) into a large finite number (-87.3 for float32) instead of -inf, so
    # one confident wrong sample is penalised inside the mixture rather than making the whole score infinite.
    log_label_probs = label_probs.clamp_min(torch.finfo(samples.dtype).tiny).log().double()
    log_mixture = torch.logsumexp(log_label_probs, dim=0) - math.log(num_samples)
    return (-log_mixture).mean().item()


def _brier_score_of(checked: CheckedPredictive) -> float:
    one_hot = torch.nn.functional.one_hot(checked.labels, num_classes=checked.mean.shape[-1])
    squared_error = (checked.mean.double() - one_hot.double()).square().sum(dim=-1)
    return squared_error.mean().item()


def accuracy(probs: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of data points whose posterior-mean prediction is the label.

    The prediction is the argmax of the sample-mean probabilities (not a majority vote over samples); on a tie
    the lowest class index wins.

    Args:
        probs: ``(num_samples, N, C)`` posterior samples of class probabilities, or their mean ``(N, C)``.
        labels: ``(N,)`` integer class labels.

    Returns:
        Accuracy in ``[0, 1]``.

    Raises:
        ValueError: the inputs fail validation (see ``pyro_bnn.evaluation``).
    """
    return _accuracy_of(check_predictive(probs, labels))


def nll(probs: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean negative log-likelihood of the labels under the posterior predictive mixture.

    For samples ``p_s`` the score of data point n is ``-log((1/S) sum_s p_s(y_n))``, computed as a
    log-mean-exp over samples so that it stays accurate when every ``p_s(y_n)`` is tiny. For ``(N, C)`` input
    it is ``-log p(y_n)``. Probabilities are clamped below at the smallest positive normal float of their
    dtype before the log, so a label with probability exactly 0 in every sample scores ``-log(tiny)`` (about
    87.3 nats in float32, 708 in float64) rather than infinity; a 0 in only some samples changes the mixture,
    not its finiteness.

    Args:
        probs: ``(num_samples, N, C)`` posterior samples of class probabilities, or their mean ``(N, C)``.
        labels: ``(N,)`` integer class labels.

    Returns:
        Mean NLL over the N data points, in nats (lower is better).

    Raises:
        ValueError: the inputs fail validation (see ``pyro_bnn.evaluation``).
    """
    return _nll_of(check_predictive(probs, labels))


def brier_score(probs: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean over data points of the squared distance between the predictive and the one-hot label.

    Per data point ``sum_c (pbar_nc - onehot_nc)^2`` with ``pbar`` the sample-mean probabilities; it lies in
    ``[0, 2]`` (lower is better).

    Args:
        probs: ``(num_samples, N, C)`` posterior samples of class probabilities, or their mean ``(N, C)``.
        labels: ``(N,)`` integer class labels.

    Returns:
        The Brier score.

    Raises:
        ValueError: the inputs fail validation (see ``pyro_bnn.evaluation``).
    """
    return _brier_score_of(check_predictive(probs, labels))
