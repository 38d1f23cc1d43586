"""The Trainer takes the CLI's guide grammar from Python (issue 28): spec strings, parsed specs, the MAP warm start
a spec asks for, and a warning for a guide whose weights all start equal."""

import warnings

import pyro
import pytest
import torch
from pyro.infer.autoguide import AutoNormal
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pyro_bnn import BNN
from pyro_bnn.guides import FlatMeanField, parse_guide
from pyro_bnn.guides.init import SymmetricStartWarning
from pyro_bnn.infer import Trainer, map_warm_start
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.priors import NormalPrior

N = 64


def _setup(seed=0):
    torch.manual_seed(seed)
    x = torch.randn(N, 3)
    y = (x[:, 0] > 0).long()
    bnn = BNN(nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2)), NormalPrior(), Categorical(N))
    return bnn, DataLoader(TensorDataset(x, y), batch_size=32)


def _fit(guide, epochs=1, seed=0):
    bnn, loader = _setup()
    trainer = Trainer(bnn, guide, optim=pyro.optim.Adam({"lr": 0.01}), seed=seed, progress=False)
    trainer.fit(loader, epochs)
    return trainer


@pytest.mark.parametrize("guide", ["flat:rel=1", parse_guide("flat:rel=1"), parse_guide("flat:rel=1").build])
def test_a_spec_string_a_parsed_spec_and_a_builder_train_the_same_guide(guide):
    trainer = _fit(guide)
    reference = _fit(parse_guide("flat:rel=1").build)
    assert isinstance(trainer.guide, FlatMeanField)
    torch.testing.assert_close(trainer.guide.loc, reference.guide.loc, rtol=0, atol=0)


def test_a_bad_spec_is_the_clis_one_line_error():
    bnn, _ = _setup()
    with pytest.raises(
        ValueError, match=r"unknown guide 'autonormel' \(in 'autonormel:0.01'\); expected one of autonormal"
    ):
        Trainer(bnn, "autonormel:0.01")


def test_a_loc_map_spec_runs_the_map_warm_start_as_the_cli_does():
    from_python = _fit("autonormal:0.01,loc=map,map_epochs=2")
    bnn, loader = _setup()
    map_warm_start(bnn, loader, 2, optim=pyro.optim.Adam({"lr": 0.01}), seed=0, progress=False)
    by_hand = Trainer(
        bnn, parse_guide("autonormal:0.01").build, optim=pyro.optim.Adam({"lr": 0.01}), seed=0, progress=False
    )
    by_hand.fit(loader, 1)
    for (name, ours), (_, theirs) in zip(
        from_python.guide.named_parameters(), by_hand.guide.named_parameters(), strict=True
    ):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0, msg=name)
    untouched = _fit("autonormal:0.01")  # without loc=map there is no warm start: the network's own start
    start = untouched.bnn.initial_values()["0.weight"]
    assert not torch.equal(start, from_python.bnn.initial_values()["0.weight"])


def test_pyros_autonormal_default_warns_once_when_the_trainer_builds_it():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(AutoNormal)
        _fit("autonormal:0.01")
    symmetric = [w for w in caught if issubclass(w.category, SymmetricStartWarning)]
    assert len(symmetric) == 1 and "'0.weight' (and 1 more weight sites)" in str(symmetric[0].message)
