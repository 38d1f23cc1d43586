"""The default objective (``--elbo auto``): the fused path for the flat guide where it applies, Trace_ELBO elsewhere;
and the fast objective's named forms."""

import pytest
import torch
from pyro.infer.autoguide import AutoNormal
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import FlatMeanField, init_to_network
from pyro_bnn.infer import AutoELBO, ElboKind, FastMeanFieldELBO, TraceELBO, Trainer, make_objective
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.priors import HierarchicalPrior, NormalPrior
from pyro_bnn.runs.config import RunConfig

X = torch.randn(8, 3)
Y = torch.arange(8) % 2


def _choose(prior, guide_class):
    torch.manual_seed(0)
    bnn = BNN(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)), prior, Categorical(8))
    guide = guide_class(bnn)
    guide(X, Y)
    objective = AutoELBO()
    objective.validate(bnn, guide, X, Y)
    return objective, bnn, guide


def test_flat_guide_on_a_plain_bnn_takes_the_fused_antithetic_path():
    objective, bnn, guide = _choose(NormalPrior(), FlatMeanField)
    assert isinstance(objective.chosen, FastMeanFieldELBO) and objective.chosen.antithetic
    assert "FastMeanFieldELBO" in repr(objective)
    terms = objective(bnn, guide, X, Y, 1.0)
    assert torch.isfinite(terms.loss) and objective.analytic_kl


@pytest.mark.parametrize(
    "prior,guide_class,reason",
    [
        (NormalPrior(), lambda bnn: AutoNormal(bnn, init_loc_fn=init_to_network(bnn)), "not a flat Normal guide"),
        (HierarchicalPrior(), FlatMeanField, "hierarchical prior"),
    ],
    ids=["autonormal", "flat-hierarchical"],
)
def test_other_pairs_take_trace_elbo_and_say_why(prior, guide_class, reason):
    objective, bnn, guide = _choose(prior, guide_class)
    assert isinstance(objective.chosen, TraceELBO) and reason in objective.reason
    assert torch.isfinite(objective(bnn, guide, X, Y, 1.0).loss)


def test_the_trainer_defaults_to_auto():
    bnn = BNN(nn.Linear(3, 2), NormalPrior(), Categorical(8))
    trainer = Trainer(bnn, FlatMeanField, progress=False)
    assert isinstance(trainer.objective, AutoELBO)
    trainer.fit(BatchLoader(X, Y, 4), 1)
    assert isinstance(trainer.objective.chosen, FastMeanFieldELBO)


@pytest.mark.parametrize(
    "kind,expected",
    [
        ("fast", {"antithetic": True, "local_reparameterization": False, "flipout": False}),
        ("fast-single", {"antithetic": False, "local_reparameterization": False, "flipout": False}),
        ("fast-local", {"antithetic": False, "local_reparameterization": True, "flipout": False}),
        ("fast-flipout", {"antithetic": False, "local_reparameterization": False, "flipout": True}),
    ],
)
def test_named_fast_forms(kind, expected):
    objective = make_objective(kind)
    assert ElboKind(kind).is_fast
    assert {name: getattr(objective, name) for name in expected} == expected


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"elbo": "fast-local", "guide": "autonormal:0.1"}, "needs the flat guide"),
        ({"elbo": "fast-flipout", "num_particles": 2}, "num_particles must be 1, got 2"),
    ],
)
def test_run_config_refuses_what_the_fast_forms_cannot_do(changes, message):
    with pytest.raises(ValueError, match=message):
        RunConfig(**changes).validate()


def test_the_default_run_config_trains_the_flat_guide_with_auto():
    config = RunConfig().validate()
    assert config.guide.startswith("flat:") and config.elbo == "auto"
