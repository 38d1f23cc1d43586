"""A heteroscedastic BNN recovers an increasing noise function that a homoscedastic one cannot (tiny, fixed seed)."""

import pyro
import pytest
import torch
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader, heteroscedastic_noise_sd, heteroscedastic_regression
from pyro_bnn.guides import parse_guide
from pyro_bnn.infer import RuntimeOptions, Trainer
from pyro_bnn.likelihoods import Gaussian, HeteroscedasticGaussian
from pyro_bnn.predict import predict
from pyro_bnn.priors import NormalPrior


def _fit_noise_sd(likelihood, outputs, x, y, grid, guide="flat:0.01", steps=2000):
    """The predicted aleatoric sd on ``grid`` after a short full-batch fit on standardised targets."""
    torch.manual_seed(0)
    x_sd, y_mean, y_sd = x.std(), y.mean(), y.std()
    net = nn.Sequential(nn.Linear(1, 10), nn.Tanh(), nn.Linear(10, 10), nn.Tanh(), nn.Linear(10, outputs))
    bnn = BNN(net, NormalPrior(0.0, 1.0), likelihood)
    trainer = Trainer(
        bnn,
        parse_guide(guide).build,
        optim=pyro.optim.Adam({"lr": 0.01}),
        runtime=RuntimeOptions(seed=0, progress=False, device="cpu"),
    )
    trainer.fit(BatchLoader(x / x_sd, (y - y_mean) / y_sd, batch_size=len(x), shuffle=False), epochs=steps)
    prediction = predict(bnn, trainer.guide, grid / x_sd, num_samples=50)
    return prediction.variance_split().aleatoric_sd.squeeze(1) * float(y_sd)


def test_heteroscedastic_likelihood_recovers_the_noise_function():
    data = heteroscedastic_regression(n_samples=300, seed=0)
    grid = torch.linspace(-3.5, 3.5, 71).unsqueeze(1)
    truth = heteroscedastic_noise_sd(grid.double()).squeeze(1)
    hetero = _fit_noise_sd(HeteroscedasticGaussian(300), 2, data.x_train, data.y_train, grid)
    homo = _fit_noise_sd(Gaussian(300, scale=0.5, learn_scale=True), 1, data.x_train, data.y_train, grid)
    hetero_error = float((hetero - truth).abs().mean())
    homo_error = float((homo - truth).abs().mean())
    # a constant sd is off by about 0.2 on average (the truth runs from 0.1 to 0.8 on this grid)
    assert homo_error > 0.15
    assert hetero_error < 0.6 * homo_error
    # the predicted noise grows away from 0, as the truth does
    edges, centre = grid.abs().squeeze(1) > 2.5, grid.abs().squeeze(1) < 0.5
    assert float(hetero[edges].mean()) > 2.5 * float(hetero[centre].mean())
    assert float(hetero[edges].mean()) == pytest.approx(float(truth[edges].mean()), rel=0.35)
