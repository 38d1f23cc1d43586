"""Tempered posteriors ``p(D | w)^(1/T) p(w)`` against the closed form: on Bayesian linear regression with an
isotropic posterior (the ``conjugate`` fixture: precision ``1 + N / sigma^2`` per coefficient) the tempered
posterior is Gaussian with precision ``1 + N / (T sigma^2)`` and the same mean shrunk accordingly, so mean-field VI
must find it exactly and SGLD must sample it."""

from __future__ import annotations

import pyro
import pytest
import torch

from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import parse_guide
from pyro_bnn.infer import ObjectiveOptions, RuntimeOptions, Trainer, linear_warmup
from pyro_bnn.sgmcmc import LogJoint, sample_sgmcmc


def _tempered(conjugate, temperature):
    """The tempered posterior's mean ``(3,)`` and variance of each coefficient."""
    precision = 1.0 + (conjugate.precision - 1.0) / temperature
    features = torch.cat([conjugate.x, torch.ones(len(conjugate.x), 1)], 1).double()
    mean = features.T @ conjugate.y.double().squeeze(-1) / temperature / precision  # sigma = 1
    return mean, 1.0 / precision


def test_the_trainer_multiplies_every_kl_weight_by_the_temperature(conjugate):
    schedule = linear_warmup(2)
    trainer = Trainer(
        conjugate.bnn,
        parse_guide("flat:0.1").build,
        optim=pyro.optim.Adam({"lr": 0.01}),
        objective=ObjectiveOptions(kl_schedule=schedule, temperature=0.3),
    )
    assert trainer.temperature == 0.3
    for progress in (0.0, 0.5, 1.0, 5.0):
        assert trainer.kl_schedule(progress) == pytest.approx(0.3 * schedule(progress))


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("inf"), True])
def test_a_bad_temperature_is_one_line(temperature):
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        ObjectiveOptions(temperature=temperature)


def test_mean_field_vi_finds_the_tempered_posterior(conjugate):
    temperature = 0.25
    pyro.set_rng_seed(0)
    trainer = Trainer(
        conjugate.bnn,
        parse_guide("flat:0.1").build,
        optim=pyro.optim.Adam({"lr": 0.005}),
        objective=ObjectiveOptions(temperature=temperature),
        runtime=RuntimeOptions(seed=0, progress=False),
    )
    trainer.fit(BatchLoader(conjugate.x, conjugate.y, batch_size=40, shuffle=False), epochs=3000)
    mean, variance = _tempered(conjugate, temperature)
    loc, scale = trainer.guide.flat_loc_scale()
    # the guide's order: weight (1, 2) then bias (1,)
    torch.testing.assert_close(loc.double(), mean, atol=0.02, rtol=0)
    # T = 0.25 halves the sd (0.079 against 0.156 at T = 1); measured within 4 %, and 10 % tells the two apart
    torch.testing.assert_close(scale.double(), torch.full((3,), variance**0.5, dtype=torch.float64), rtol=0.1, atol=0)


def test_sgld_samples_the_tempered_posterior(conjugate):
    temperature = 0.25
    mean, variance = _tempered(conjugate, temperature)
    precision = 1.0 / variance
    step = 0.2 / precision
    loader = BatchLoader(conjugate.x, conjugate.y, batch_size=40, shuffle=False)  # full batch: no gradient noise
    result = sample_sgmcmc(
        conjugate.bnn, loader, step_size=step, num_draws=1000, burn_in=200, thin=5, num_chains=4, progress=False,
        temperature=temperature, seed=0,
    )  # fmt: skip
    flat = LogJoint(conjugate.bnn).flatten({k: v.reshape(-1, *v.shape[2:]) for k, v in result.samples.items()})
    # SGLD's own bias on a Gaussian of precision p at step eps: variance 1 / (p (1 - eps p / 4)), here +5 %
    expected = 1.0 / (precision * (1 - step * precision / 4))
    torch.testing.assert_close(flat.double().mean(0), mean, atol=0.01, rtol=0)
    torch.testing.assert_close(flat.double().var(0), torch.full((3,), expected, dtype=torch.float64), rtol=0.15, atol=0)


def test_the_log_joint_divides_the_likelihood_by_the_temperature(conjugate):
    cold, plain = LogJoint(conjugate.bnn, temperature=0.5), LogJoint(conjugate.bnn)
    flat = torch.tensor([0.3, -0.2, 0.1])
    x, y = conjugate.x[:10], conjugate.y[:10]
    expected = plain.log_prior(flat) + 2 * plain.scale(10) * plain.log_likelihood(flat, x, y)
    torch.testing.assert_close(cold(flat, x, y), expected)
