"""SG-MCMC against the closed-form posterior of Bayesian linear regression (the ``conjugate`` fixture)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyro_bnn.data import BatchLoader
from pyro_bnn.diagnostics import arviz_compat
from pyro_bnn.sgmcmc import sample_sgmcmc


def _draws(result) -> torch.Tensor:
    """(chain, draw, 3) float64 draws of (weight_1, weight_2, bias)."""
    samples = result.samples
    return torch.cat([samples["weight"].flatten(2), samples["bias"].flatten(2)], -1).double()


def _ess_of_mean(values: torch.Tensor) -> np.ndarray:
    """ArviZ's ESS of the mean of each of the last axis's scalars, from ``(chain, draw, k)`` values."""
    data = arviz_compat.from_dicts({"v": values.numpy()})
    return np.asarray(arviz_compat.ess(data, method="mean")["v"].values)


# {method: (options, bias)}. Step sizes are in units of 1 / the posterior precision lambda = 41, chosen small enough
# that the step-size bias of the variance is a few per cent. `bias` is that bias for these settings, worked out from
# the exact recursion of the mean and variance of each rule on this Gaussian target with full-batch gradients: SGLD
# at eps lambda = 0.16 has stationary variance var / (1 - eps lambda / 4), +4.2 %; SGHMC at eps lambda = 0.05,
# alpha = 0.3, +1.5 % (discrete Lyapunov equation of (theta, v)); cSGLD (peak 0.3, exploration 0.2, 100 draws per
# cycle), averaged over a cycle's kept draws, +0.5 %; cSGHMC (peak 0.1), +3 %. The draws' variance is compared with
# var * (1 + bias); the minibatch gradient noise (B = 20 of N = 40) adds less than the standard error.
CASES = {
    "sgld": ({"step_size": 0.16, "burn_in": 200}, 0.042),
    "sghmc": ({"step_size": 0.05, "friction": 0.3, "burn_in": 200}, 0.015),
    "csgld": ({"step_size": 0.3, "exploration": 0.2, "num_cycles": 12, "burn_in": 1}, 0.005),
    "csghmc": (
        {"step_size": 0.1, "friction": 0.3, "exploration": 0.2, "num_cycles": 12, "burn_in": 1},
        0.03,
    ),
}


@pytest.mark.parametrize("method", list(CASES))
def test_draws_match_the_closed_form_posterior(method, conjugate):
    bnn, x, y, mean, var = conjugate.bnn, conjugate.x, conjugate.y, conjugate.mean, conjugate.var
    options, bias = CASES[method]
    options = {**options, "step_size": options["step_size"] / conjugate.precision}
    loader = BatchLoader(x, y, batch_size=20, shuffle=True, seed=1)
    result = sample_sgmcmc(bnn, loader, method=method, num_draws=1200, num_chains=16, seed=0, progress=False, **options)
    draws = _draws(result)
    assert draws.shape == (16, 1200, 3)
    # Monte Carlo standard errors from ArviZ's ESS (autocorrelation and chains accounted for): of the mean,
    # sd / sqrt(ESS); of the variance, var * sqrt(2 / ESS of the squared deviations) (Gaussian fourth moment).
    # Four standard errors: a seeded run of a correct sampler stays inside; a sampler with the noise or the drift
    # off by a factor 2, or without the N/B scale, is off by ~2x in variance, far outside.
    ess_mean = _ess_of_mean(draws)
    ess_square = _ess_of_mean((draws - mean).square())
    se_mean = (var / torch.as_tensor(ess_mean)).sqrt()
    se_var = var * (2 / torch.as_tensor(ess_square)).sqrt()
    pooled = draws.reshape(-1, 3)
    assert (ess_mean > 100).all(), ess_mean
    assert ((pooled.mean(0) - mean).abs() <= 4 * se_mean).all(), (pooled.mean(0) - mean) / se_mean
    assert ((pooled.var(0) - var * (1 + bias)).abs() <= 4 * se_var).all(), pooled.var(0) / var
    # Several chains from over-dispersed prior draws agree.
    assert result.convergence()["rhat_max"] < 1.05
