"""The default objective (``--elbo auto``): the fused path for the flat guide where it applies, Trace_ELBO elsewhere;
and the fast objective's named forms."""

import re
import warnings

import pytest
import torch
from pyro.infer.autoguide import AutoNormal
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import FlatMeanField, NodeNoiseMixture, init_to_network, parse_guide
from pyro_bnn.infer import AutoELBO, ElboKind, FastMeanFieldELBO, MixtureMeanKL, TraceELBO, Trainer, make_objective
from pyro_bnn.infer.auto_objective import UnusedOptionWarning
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.node_noise import NodeNoisePrior, add_node_noise
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


def _mixture_pair(num_particles: int):
    torch.manual_seed(0)
    net = add_node_noise(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)))
    bnn = BNN(net, NodeNoisePrior(0.1), Categorical(8))
    guide = NodeNoiseMixture(bnn, 2)
    guide(X, Y)
    return AutoELBO(num_particles=num_particles), bnn, guide


def test_a_mixture_guide_says_that_num_particles_is_unused():
    # The mixture-mean KL draws one sample per row; num_particles=3 was dropped without a word. A warning, not a
    # refusal: the committed posterior-families grid planned its moons node-noise runs with 8 particles.
    objective, bnn, guide = _mixture_pair(3)
    message = (
        "num_particles=3 is unused: elbo 'auto' trains a mixture-of-Normals guide with the mixture-mean KL, which "
        "draws its own samples (one per row of samples_per_example copies); pass num_particles=1"
    )
    with pytest.warns(UnusedOptionWarning, match=f"^{re.escape(message)}$"):
        objective.validate(bnn, guide, X, Y)
    assert isinstance(objective.chosen, MixtureMeanKL)
    objective, bnn, guide = _mixture_pair(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        objective.validate(bnn, guide, X, Y)


@pytest.mark.parametrize(
    "guide, prior, reason",
    [
        ("mixture:4", "normal:1,0.1", None),
        ("mixture:4", "laplace:1,0.1", None),
        ("mixture:4", "hierarchical:normal,fixed,1", None),  # a fixed scale adds no site
        (
            "mixture:2",
            "cauchy:1,0.1",
            "trains guide 'mixture:2,loc_std=0.5' with the mixture-mean KL, which has no closed form against prior "
            "'cauchy:1,0.1' (CauchyPrior); use a Normal prior such as 'normal:1,0.1', or --elbo trace (Trace_ELBO "
            "estimates the mixture's KL by sampling)",
        ),
        # The flat guide falls back to Trace_ELBO where the fused path refuses: nothing to refuse.
        ("flat:0.01", "hierarchical:normal,halfcauchy,1", None),
        ("autonormal:0.01", "cauchy:1,0.1", None),
    ],
)
def test_auto_refuses_from_the_guide_and_prior_what_its_choice_cannot_train(guide, prior, reason):
    assert AutoELBO().choice_refusal(parse_guide(guide), prior) == reason


def test_fast_refuses_a_hierarchical_prior_from_its_spec():
    assert make_objective("fast").choice_refusal(parse_guide("flat:0.01"), "hierarchical:normal,fixed,1") is None
    assert make_objective("fast-local").choice_refusal(
        parse_guide("flat:0.01"), "hierarchical:normal,halfnormal,1"
    ) == (
        "cannot train a hierarchical prior ('hierarchical:normal,halfnormal,1' adds a scale site per layer); use "
        "--elbo trace, or auto, which takes trace for it"
    )
