"""Regression sets that ship offline: a 1-D heteroscedastic synthetic set with a known noise function, and
scikit-learn's diabetes set (442 patients, 10 features), standardised.

The heteroscedastic set: ``x ~ Uniform(-4, 4)``, ``y = x sin(x) + eps`` with ``eps ~ N(0, sd(x)^2)`` and
``sd(x) = 0.1 + 0.2 |x|`` (:func:`heteroscedastic_noise_sd`), so the noise grows from 0.1 at 0 to 0.9 at the
edges. Its test part is the grid ``[-4, 4]`` with spacing 0.01 (801 points) carrying *noisy* targets drawn the same
way, so coverage and CRPS on it measure calibration, and :func:`heteroscedastic_noise_sd` on the grid is the truth
a model's predicted noise is compared with.

Diabetes: a seeded 20 % test part; inputs and targets standardised with the training part's mean and sd (each
seed's own: 152.4 and 76.34 for the raw disease-progression score at seed 0), so RMSE and CRPS are in units of the
training targets' sd. :func:`diabetes_target_scale` gives that mean and sd, to map predictions back to the raw
score (``y * sd + mean``); ``DIABETES_TARGET_SD``, 77.09, is the sd over all 442 patients, near each seed's.
"""

from __future__ import annotations

import torch

from pyro_bnn.checks import positive_int
from pyro_bnn.data.partition import split_indices
from pyro_bnn.data.seeding import STREAM_SYNTHETIC, STREAM_TEST_HOLDOUT, check_seed, seeded_generator
from pyro_bnn.data.synthetic import RegressionData, _grid

HETEROSCEDASTIC_RANGE = (-4.0, 4.0)
"""The input range of the heteroscedastic set (training draws and the test grid)."""

HETEROSCEDASTIC_TEST_STEP = 0.01
"""Spacing of the heteroscedastic set's test grid (801 points on ``[-4, 4]``)."""

DEFAULT_HETEROSCEDASTIC_SAMPLES = 400
"""Training points of the heteroscedastic set by default."""

DIABETES_TEST_FRACTION = 0.2
"""Share of the 442 diabetes patients in the test part (88)."""

DIABETES_TARGET_SD = 77.09
"""Standard deviation (n - 1 divisor) of the raw diabetes target over all 442 patients: a rough reading of standardised
errors in the raw score, whose exact scale is each split's training sd (:func:`diabetes_target_scale`)."""


def heteroscedastic_mean(x: torch.Tensor) -> torch.Tensor:
    """The heteroscedastic set's regression function ``x sin(x)``, elementwise."""
    return x * torch.sin(x)


def heteroscedastic_noise_sd(x: torch.Tensor) -> torch.Tensor:
    """The heteroscedastic set's true noise standard deviation ``0.1 + 0.2 |x|``, elementwise."""
    return 0.1 + 0.2 * x.abs()


def heteroscedastic_regression(*, n_samples: int = DEFAULT_HETEROSCEDASTIC_SAMPLES, seed: int = 0) -> RegressionData:
    """The 1-D heteroscedastic set (see the module docstring).

    Args:
        n_samples: Training points drawn uniformly on ``[-4, 4]`` (positive int).
        seed: Non-negative integer seed of the inputs and the noise (training and test).

    Returns:
        ``x_train, y_train (n_samples, 1)``; ``x_test, y_test (801, 1)``: the grid and noisy targets on it; all
        float32.
    """
    n_samples = positive_int(n_samples, "n_samples")
    generator = seeded_generator(check_seed(seed), STREAM_SYNTHETIC)
    low, high = HETEROSCEDASTIC_RANGE
    x_train = low + (high - low) * torch.rand(n_samples, generator=generator, dtype=torch.float64)
    x_test = _grid(low, high, HETEROSCEDASTIC_TEST_STEP, include_stop=True)

    def targets(x: torch.Tensor) -> torch.Tensor:
        eps = torch.randn(x.shape, generator=generator, dtype=torch.float64)
        return heteroscedastic_mean(x) + heteroscedastic_noise_sd(x) * eps

    y_train, y_test = targets(x_train), targets(x_test)

    def column(values: torch.Tensor) -> torch.Tensor:
        return values.to(torch.float32).unsqueeze(1)

    return RegressionData(column(x_train), column(y_train), column(x_test), column(y_test))


def _diabetes_split(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The raw diabetes inputs ``(442, 10)`` and targets ``(442, 1)`` (float64) and the seed's training and test
    indices."""
    from sklearn.datasets import load_diabetes  # ships with scikit-learn: no download

    generator = seeded_generator(check_seed(seed), STREAM_TEST_HOLDOUT)
    data = load_diabetes()
    x = torch.as_tensor(data.data, dtype=torch.float64)
    y = torch.as_tensor(data.target, dtype=torch.float64).unsqueeze(1)
    train, test = split_indices(len(y), round(DIABETES_TEST_FRACTION * len(y)), generator)
    return x, y, train, test


def diabetes_regression(*, seed: int = 0) -> RegressionData:
    """scikit-learn's diabetes set, split and standardised (see the module docstring).

    Args:
        seed: Non-negative integer seed of the test holdout.

    Returns:
        ``x (N, 10)`` and ``y (N, 1)`` float32: 354 training and 88 test patients, each column standardised with
        the training part's mean and sd (n - 1 divisor); the targets' are :func:`diabetes_target_scale`.
    """
    x, y, train, test = _diabetes_split(seed)

    def standardise(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, sd = values[train].mean(0), values[train].std(0)
        return ((values[train] - mean) / sd).float(), ((values[test] - mean) / sd).float()

    x_train, x_test = standardise(x)
    y_train, y_test = standardise(y)
    return RegressionData(x_train, y_train, x_test, y_test)


def diabetes_target_scale(*, seed: int = 0) -> tuple[float, float]:
    """The mean and sd (n - 1 divisor) of the raw training targets that :func:`diabetes_regression` standardised its
    targets with, for the same seed: ``y * sd + mean`` is a standardised target or prediction in the raw
    disease-progression score, and ``sd`` times a standardised RMSE or CRPS is the raw one.

    Args:
        seed: Non-negative integer seed of the test holdout, as given to :func:`diabetes_regression`.

    Returns:
        ``(mean, sd)`` as floats: (152.4, 76.34) at seed 0.
    """
    _, y, train, _ = _diabetes_split(seed)
    return float(y[train].mean()), float(y[train].std())
