"""The ``conjugate`` fixture: Bayesian linear regression with a closed-form posterior, written as a BNN."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.likelihoods import Gaussian
from pyro_bnn.priors import NormalPrior

N, SIGMA = 40, 1.0


@dataclass
class Conjugate:
    """y ~ N(x w + b, sigma^2) with (w, b) ~ N(0, I), and the exact posterior of (w_1, w_2, b).

    Attributes:
        bnn: The model, ``nn.Linear(2, 1)`` with a ``NormalPrior(0, 1)`` and a ``Gaussian(N, sigma)`` likelihood.
        x: Inputs ``(N, 2)``; y: targets ``(N, 1)``.
        mean: Posterior mean ``(3,)``; var: posterior variances ``(3,)`` (float64).
        precision: The posterior precision of every coefficient, ``1 + N / sigma^2``.
    """

    bnn: BNN
    x: torch.Tensor
    y: torch.Tensor
    mean: torch.Tensor
    var: torch.Tensor
    precision: float


@pytest.fixture
def conjugate() -> Conjugate:
    """The design has orthogonal columns of squared norm N, each orthogonal to the intercept's column of ones, so
    the posterior is N(mean, I / (1 + N / sigma^2)): isotropic, which makes one step size equally good for every
    coordinate."""
    g = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.cat([torch.ones(N, 1), torch.randn(N, 2, generator=g)], 1))
    x = q[:, 1:] * N**0.5
    y = (x @ torch.tensor([1.0, -2.0]) + 0.3 + SIGMA * torch.randn(N, generator=g)).unsqueeze(-1)
    features = torch.cat([x, torch.ones(N, 1)], 1).double()
    cov = torch.linalg.inv(torch.eye(3, dtype=torch.float64) + features.T @ features / SIGMA**2)
    mean = cov @ features.T @ y.double().squeeze(-1) / SIGMA**2
    precision = 1.0 + N / SIGMA**2
    torch.testing.assert_close(cov, torch.eye(3, dtype=torch.float64) / precision)
    torch.manual_seed(0)
    bnn = BNN(nn.Linear(2, 1), NormalPrior(0.0, 1.0), Gaussian(N, scale=SIGMA))
    return Conjugate(bnn, x, y, mean, cov.diagonal(), precision)
