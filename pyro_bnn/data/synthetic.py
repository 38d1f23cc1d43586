"""Synthetic data: scikit-learn's two moons and circles (2-D classification), the 1-D cubic regression set.

Each generator draws from a stream seeded by the user's seed alone (``pyro_bnn.data.seeding``), never from a
global RNG.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
import torch

from pyro_bnn.checks import non_negative_float, positive_float, positive_int
from pyro_bnn.data.seeding import STREAM_SYNTHETIC, check_seed, derived_seed, seeded_generator

DEFAULT_N_SAMPLES = 1000
DEFAULT_NOISE = 0.2
DEFAULT_CIRCLES_FACTOR = 0.5


def _as_tensors(x: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.from_numpy(x).to(torch.float32), torch.from_numpy(y).to(torch.int64)


def two_moons(
    *, n_samples: int = DEFAULT_N_SAMPLES, noise: float = DEFAULT_NOISE, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two interleaving half circles (``sklearn.datasets.make_moons``), in random order.

    With ``noise=0`` class 0 lies on the upper unit half circle centred at ``(0, 0)`` and class 1 on the lower
    one centred at ``(1, 0.5)``.

    Args:
        n_samples: Total number of points (positive int); class 0 gets ``n_samples // 2``.
        noise: Standard deviation of the Gaussian noise added to each coordinate (finite, >= 0).
        seed: Non-negative integer seed.

    Returns:
        ``(x, y)``: ``(n_samples, 2)`` float32 points and ``(n_samples,)`` int64 labels in ``{0, 1}``.

    Raises:
        ValueError: If an argument is out of range.
    """
    from sklearn.datasets import make_moons

    x, y = make_moons(
        n_samples=positive_int(n_samples, "n_samples"),
        noise=non_negative_float(noise, "noise"),
        random_state=derived_seed(seed, STREAM_SYNTHETIC, bits=32),
    )
    return _as_tensors(x, y)


def two_circles(
    *,
    n_samples: int = DEFAULT_N_SAMPLES,
    noise: float = DEFAULT_NOISE,
    factor: float = DEFAULT_CIRCLES_FACTOR,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two concentric circles (``sklearn.datasets.make_circles``), in random order.

    With ``noise=0`` class 0 lies on the unit circle and class 1 on the circle of radius ``factor``.

    Args:
        n_samples: Total number of points (positive int); the outer circle gets ``n_samples // 2``.
        noise: Standard deviation of the Gaussian noise added to each coordinate (finite, >= 0).
        factor: Inner radius relative to the outer one, in ``[0, 1)``.
        seed: Non-negative integer seed.

    Returns:
        ``(x, y)``: ``(n_samples, 2)`` float32 points and ``(n_samples,)`` int64 labels in ``{0, 1}``.

    Raises:
        ValueError: If an argument is out of range.
    """
    from sklearn.datasets import make_circles

    if isinstance(factor, bool) or not isinstance(factor, numbers.Real) or not 0.0 <= float(factor) < 1.0:
        raise ValueError(f"factor must be a float in [0, 1) (inner radius / outer radius), got {factor!r}")
    x, y = make_circles(
        n_samples=positive_int(n_samples, "n_samples"),
        noise=non_negative_float(noise, "noise"),
        factor=float(factor),
        random_state=derived_seed(seed, STREAM_SYNTHETIC, bits=32),
    )
    return _as_tensors(x, y)


@dataclass(frozen=True, eq=False)
class RegressionData:
    """A regression set: training inputs and targets, and a separate test part.

    What the test part holds depends on the set: the 1-D toy problems have an evaluation grid, with noiseless
    targets on it (:func:`cubic_regression`) or noisy ones drawn like the training targets
    (:func:`~pyro_bnn.data.regression_sets.heteroscedastic_regression`); diabetes
    (:func:`~pyro_bnn.data.regression_sets.diabetes_regression`) has held-out patients with 10 standardised
    features.

    Attributes:
        x_train: ``(N, F)`` float32 training inputs (F = 1 for the 1-D sets, 10 for diabetes).
        y_train: ``(N, 1)`` float32 noisy training targets.
        x_test: ``(M, F)`` float32 test inputs (an evaluation grid for the 1-D sets).
        y_test: ``(M, 1)`` float32 test targets: noiseless for :func:`cubic_regression`, noisy for the others.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def _grid(start: float, stop: float, step: float, *, include_stop: bool) -> torch.Tensor:
    """``start + step * k`` for k = 0, 1, ... up to ``stop``, counted in integers (no float-arange drift)."""
    # The tolerance absorbs float error in (stop - start) / step, e.g. 2 / 0.01 = 200.00000000000003.
    ratio = (stop - start) / step
    count = math.floor(ratio + 1e-9) + 1 if include_stop else math.ceil(ratio - 1e-9)
    return start + step * torch.arange(count, dtype=torch.float64)


def cubic_regression(
    *,
    step: float = 0.01,
    noise_scale: float = 2.0,
    test_range: tuple[float, float] = (-4.0, 4.0),
    test_step: float = 0.01,
    seed: int = 0,
) -> RegressionData:
    """The implicit-BNN paper's 1-D toy problem: a cubic observed on two intervals with a gap between them.

    Training inputs are the grid ``[-3, -1) ∪ [1, 3)`` with spacing ``step``, targets
    ``y = x**3 + noise_scale * eps`` with ``eps ~ N(0, 1)``; there is no data in ``[-1, 1)``, where a good
    posterior grows uncertain. The test grid spans ``test_range`` inclusively with spacing ``test_step`` and
    carries the noiseless ``x**3``; the default ``(-4, 4)`` covers the gap and extrapolation on both sides.

    Args:
        step: Spacing of the training inputs (positive).
        noise_scale: Standard deviation of the target noise (finite, >= 0).
        test_range: ``(low, high)`` of the test grid, ``low < high``.
        test_step: Spacing of the test grid (positive).
        seed: Non-negative integer seed of the noise.

    Returns:
        The data: 400 training and 801 test points with the defaults.

    Raises:
        ValueError: If an argument is out of range.
    """
    positive_float(step, "step")
    positive_float(test_step, "test_step")
    noise_scale = non_negative_float(noise_scale, "noise_scale")
    try:
        low, high = (float(v) for v in test_range)
    except (TypeError, ValueError):
        raise ValueError(f"test_range must be a pair (low, high) of numbers, got {test_range!r}") from None
    if not low < high:
        raise ValueError(f"test_range must be (low, high) with low < high, got {test_range!r}")
    check_seed(seed)

    x_train = torch.cat([_grid(-3.0, -1.0, step, include_stop=False), _grid(1.0, 3.0, step, include_stop=False)])
    eps = torch.randn(x_train.shape, generator=seeded_generator(seed, STREAM_SYNTHETIC), dtype=torch.float64)
    y_train = x_train**3 + noise_scale * eps
    x_test = _grid(low, high, test_step, include_stop=True)
    y_test = x_test**3

    def column(values: torch.Tensor) -> torch.Tensor:
        return values.to(torch.float32).unsqueeze(1)

    return RegressionData(column(x_train), column(y_train), column(x_test), column(y_test))
