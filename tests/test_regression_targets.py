"""A regression target ``(B,)`` against network outputs ``(B, 1)`` would broadcast to ``(B, B)`` and score every
output against every target (the fit then matches the mean of y): every training path refuses it in one line, as
the Trainer and predict do."""

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pyro_bnn import BNN
from pyro_bnn.compose import BayesianModule
from pyro_bnn.guides import parse_guide
from pyro_bnn.likelihoods import Gaussian
from pyro_bnn.priors import NormalPrior
from pyro_bnn.sgmcmc import sample_sgmcmc
from pyro_bnn.swag import SwagOptions, fit_swag

N = 40
MESSAGE = r"^targets of shape \(10,\) do not match network outputs of shape \(10, 1\)"


def _data():
    torch.manual_seed(0)
    x = torch.randn(N, 1)
    return x, 2.0 * x.squeeze(-1) + 0.1 * torch.randn(N)


def _bnn():
    return BNN(nn.Linear(1, 1), NormalPrior(0.0, 1.0), Gaussian(N, scale=0.1))


@pytest.mark.parametrize("fit", ["swag", "sgld"])
def test_swag_and_sgmcmc_refuse_one_dimensional_regression_targets(fit):
    x, y = _data()
    loader = DataLoader(TensorDataset(x, y), batch_size=10)
    with pytest.raises(ValueError, match=MESSAGE):
        if fit == "swag":
            fit_swag(_bnn(), loader, SwagOptions(lr=0.001, epochs=1, pretrain_epochs=1, rank=0), progress=False)
        else:
            sample_sgmcmc(_bnn(), loader, step_size=1e-5, num_draws=2, burn_in=2, num_chains=2, progress=False)


def test_a_bayesian_module_data_term_refuses_them_and_scores_b_by_1_targets_as_by_hand():
    x, y = _data()
    module = BayesianModule(_bnn(), parse_guide("flat:0.1").build, x[:4], y[:4, None])
    output = module(x[:10])
    with pytest.raises(ValueError, match=MESSAGE):
        module.data_term(output, y[:10])
    expected = -torch.distributions.Normal(output.squeeze(-1), 0.1).log_prob(y[:10]).sum() * (N / 10)
    torch.testing.assert_close(module.data_term(output, y[:10, None]), expected)
