"""The warning for a guide whose weights all start equal (Pyro's AutoNormal default, init_to_feasible)."""

import warnings
from functools import partial

import pyro
import pytest
import torch
from pyro.distributions.transforms import affine_autoregressive, iterated
from pyro.infer.autoguide import AutoDiagonalNormal, AutoLowRankMultivariateNormal, AutoNormal, AutoNormalizingFlow
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.guides import Capability, guide_families, parse_guide
from pyro_bnn.guides.init import SymmetricStartWarning, symmetric_start_sites, warn_symmetric_start
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.node_noise import NodeNoisePrior, add_node_noise
from pyro_bnn.priors import NormalPrior, nothing


def _bnn(node_noise=False, select=None, dropout=0.0):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    if dropout:
        net.insert(2, nn.Dropout(dropout))
    if node_noise:
        add_node_noise(net)
        return BNN(net, NodeNoisePrior(0.1), Categorical(10))
    return BNN(net, NormalPrior(0.0, 1.0, select=select), Categorical(10))


def _run(guide):
    x, y = torch.randn(5, 3), torch.zeros(5, dtype=torch.long)
    with torch.no_grad(), pyro.poutine.block():
        guide(x, y)
    return guide


def _warnings(guide, bnn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_symmetric_start(guide, bnn)
    return [w for w in caught if issubclass(w.category, SymmetricStartWarning)]


@pytest.mark.parametrize(
    "make",
    [AutoNormal, lambda bnn: AutoNormalizingFlow(bnn, partial(iterated, 1, affine_autoregressive))],
    ids=["AutoNormal", "AutoNormalizingFlow"],
)
def test_pyro_defaults_that_start_every_weight_at_zero_warn_once_naming_the_site_and_the_fix(make):
    bnn = _bnn()
    guide = _run(make(bnn))
    assert symmetric_start_sites(guide, bnn) == ["0.weight", "2.weight"]  # weights only: no bias site
    caught = _warnings(guide, bnn)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "'0.weight' (and 1 more weight sites)" in message and "init_to_network" in message
    assert "\n" not in message


@pytest.mark.parametrize("make", [AutoDiagonalNormal, AutoLowRankMultivariateNormal])
def test_pyro_guides_that_start_at_the_prior_median_do_not_warn(make):
    bnn = _bnn()
    assert _warnings(_run(make(bnn)), bnn) == []


@pytest.mark.parametrize("family", guide_families(), ids=lambda f: f.name)
def test_no_library_guide_warns(family):
    spec = parse_guide(family.form.example or family.name)
    if family.offers(Capability.NODE_NOISE_ONLY):  # node noise starts at 1 on purpose; noise sites are not checked
        bnn = _bnn(node_noise=True)
    else:
        bnn = _bnn(select=None if spec.random_weights else nothing, dropout=spec.dropout)
    assert _warnings(_run(spec.build(bnn)), bnn) == []


def test_a_layer_of_one_unit_and_bias_sites_are_not_checked():
    torch.manual_seed(0)
    bnn = BNN(nn.Linear(3, 1), NormalPrior(), Categorical(10))
    assert symmetric_start_sites(_run(AutoNormal(bnn)), bnn) == []
