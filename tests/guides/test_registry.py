"""The guide registry: declared capabilities match what the built guides implement, and a guide family defined in
this file alone goes through the CLI grammar and the Python API (train, predict, evaluate, ArviZ) like a built-in
one, with no library file touched."""

import json
import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer.autoguide import AutoGuide
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pyro_bnn import BNN
from pyro_bnn.cli import main
from pyro_bnn.guides import (
    Capability,
    DrawsPosterior,
    FlatNormalPosterior,
    GuideFamily,
    NormalMixturePosterior,
    guide_families,
    parse_guide,
    register_guide,
    unregister_guide,
)
from pyro_bnn.guides.capabilities import PROTOCOLS
from pyro_bnn.infer import AutoELBO, TraceELBO, Trainer
from pyro_bnn.infer.objective_registry import check_objective
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.node_noise import NodeNoisePrior, add_node_noise
from pyro_bnn.predict import predict
from pyro_bnn.priors import HierarchicalPrior, NormalPrior, nothing
from pyro_bnn.spec import Arg, Form, Positive

# ------------------------------------------------------------------------------------------- a toy guide family


class SharedScaleNormal(AutoGuide):
    """Normal(loc, sigma) per weight with ONE learned sigma per site: a guide family pyro_bnn does not ship."""

    def __init__(self, model, init_scale=0.1):
        super().__init__(model)
        self.init_scale = init_scale

    def _setup_prototype(self, *args, **kwargs):
        super()._setup_prototype(*args, **kwargs)
        self.names = [name for name, _ in self.prototype_trace.iter_stochastic_nodes()]
        values = [self.prototype_trace.nodes[name]["value"].detach() for name in self.names]
        self.locs = nn.ParameterList([nn.Parameter(v.clone()) for v in values])
        self.log_scales = nn.ParameterList([nn.Parameter(v.new_tensor(math.log(self.init_scale))) for v in values])

    def forward(self, *args, **kwargs):
        if self.prototype_trace is None:
            self._setup_prototype(*args, **kwargs)
        return {
            name: pyro.sample(name, dist.Normal(loc, log_scale.exp()).expand(loc.shape).to_event(loc.dim()))
            for name, loc, log_scale in zip(self.names, self.locs, self.log_scales, strict=True)
        }

    def loc_scale(self):
        """Read by posterior_loc_scale (weight statistics, pruning, mean sigma)."""
        return {
            name: (loc, log_scale.exp().expand(loc.shape))
            for name, loc, log_scale in zip(self.names, self.locs, self.log_scales, strict=True)
        }

    @torch.no_grad()
    def draw(self, num_samples, *, start=0):
        """The DrawsPosterior protocol: {site: (S, 1, *shape)}."""
        return {
            name: loc + log_scale.exp() * torch.randn(num_samples, 1, *loc.shape)
            for name, loc, log_scale in zip(self.names, self.locs, self.log_scales, strict=True)
        }

    @torch.no_grad()
    def median(self, *args, **kwargs):
        return {name: loc.detach().clone() for name, loc in zip(self.names, self.locs, strict=True)}


TOY = GuideFamily(
    Form("toy-shared", (Arg("init scale", Positive(), 0.1),), example="toy-shared:0.05", doc="A test-only guide."),
    build=lambda spec, bnn: SharedScaleNormal(bnn, init_scale=spec.options["init scale"]),
    capabilities={Capability.RANDOM, Capability.NORMAL_SCALES, Capability.DRAWS},
)


@pytest.fixture
def toy_family():
    register_guide(TOY)
    yield TOY
    unregister_guide(TOY.name)


# -------------------------------------------------------------------------------- declared vs implemented


def _built(family: GuideFamily) -> AutoGuide:
    """The family's default guide on a small BNN it accepts, run once."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    spec = parse_guide(family.form.example or family.name)
    if spec.dropout:  # mc-dropout:P needs dropout layers of its P
        net.insert(2, nn.Dropout(spec.dropout))
    if family.offers(Capability.NODE_NOISE_ONLY):
        add_node_noise(net)
        bnn = BNN(net, NodeNoisePrior(0.1), Categorical(10))
    else:
        bnn = BNN(net, NormalPrior(0.0, 1.0, select=None if spec.random_weights else nothing), Categorical(10))
    guide = spec.build(bnn)
    x, y = torch.randn(5, 3), torch.zeros(5, dtype=torch.long)
    with torch.no_grad(), pyro.poutine.block():
        guide(x, y)
    return guide


@pytest.mark.parametrize("family", guide_families(), ids=lambda f: f.name)
def test_every_family_declares_jacobian_delta_exactly_when_its_guide_samples_a_constrained_site_so(family):
    if family.offers(Capability.NODE_NOISE_ONLY) or family.offers(Capability.DETERMINISTIC):
        pytest.skip("takes no hierarchical prior (no constrained site to sample)")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    spec = parse_guide(family.form.example or family.name)
    if spec.dropout:
        net.insert(2, nn.Dropout(spec.dropout))
    guide = spec.build(BNN(net, HierarchicalPrior("normal", "halfcauchy", (1.0,)), Categorical(10)))
    x, y = torch.randn(5, 3), torch.zeros(5, dtype=torch.long)
    with torch.no_grad():
        trace = pyro.poutine.trace(guide).get_trace(x, y)
    jacobians = [
        name
        for name, site in trace.nodes.items()
        if site["type"] == "sample" and bool((getattr(site["fn"], "log_density", torch.zeros(())) != 0).any())
    ]
    assert bool(jacobians) == family.offers(Capability.JACOBIAN_DELTA), (family.name, jacobians)


@pytest.mark.parametrize("family", guide_families(), ids=lambda f: f.name)
def test_every_family_implements_the_protocols_it_declares_and_no_other(family):
    guide = _built(family)
    for capability, protocol in PROTOCOLS.items():
        assert isinstance(guide, protocol) == family.offers(capability), (family.name, capability)


def test_the_built_in_families_declare_what_the_fast_and_mixture_paths_need():
    assert parse_guide("flat:rel=1").offers(Capability.FLAT_NORMAL, Capability.LOCAL_REPARAMETERIZATION)
    assert parse_guide("mixture:2").offers(Capability.NORMAL_MIXTURE, Capability.NODE_NOISE_ONLY)
    assert not parse_guide("autonormal:0.1").offers(Capability.DRAWS)
    assert not parse_guide("mle").random_weights and parse_guide("mixture:3").samples_multiple == 3


def test_a_family_name_is_registered_once():
    with pytest.raises(ValueError, match="already registered"):
        register_guide(GuideFamily(Form("flat"), build=lambda spec, bnn: None))
    with pytest.raises(TypeError, match="local-reparameterization needs the flat-normal"):
        GuideFamily(Form("x"), build=lambda s, b: None, capabilities={Capability.LOCAL_REPARAMETERIZATION})


def test_objectives_are_checked_against_declared_capabilities():
    check_objective("fast", parse_guide("flat:rel=1"))
    check_objective("trace", parse_guide("mixture:4"))
    with pytest.raises(ValueError, match="elbo 'fast' needs the flat guide .*objectives that train it: trace"):
        check_objective("fast", parse_guide("bbb"))
    with pytest.raises(ValueError, match="elbo 'meanfield' does not score a guide with normal-mixture"):
        check_objective("meanfield", parse_guide("mixture:4"))


# --------------------------------------------------------------------------------- the toy family end to end


def test_a_registered_family_parses_and_prints_through_the_grammar(toy_family, capsys):
    spec = parse_guide("toy-shared:0.05")
    assert spec.options == {"init scale": 0.05} and str(spec) == "toy-shared:0.05"
    assert str(parse_guide("toy-shared")) == "toy-shared" and spec.offers(Capability.NORMAL_SCALES)
    with pytest.raises(ValueError, match="toy-shared"):
        parse_guide("toy-shared:-1")
    assert main(["list"]) == 0
    assert "toy-shared[:INIT_SCALE]" in capsys.readouterr().out


def test_a_registered_family_trains_predicts_and_exports_from_python(toy_family):
    from pyro_bnn.diagnostics import draw_samples, to_inference_data

    torch.manual_seed(0)
    x = torch.randn(64, 2)
    y = (x[:, 0] > 0).long()
    bnn = BNN(nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 2)), NormalPrior(0, 1), Categorical(64))
    loader = DataLoader(TensorDataset(x, y), batch_size=32)
    trainer = Trainer(bnn, parse_guide("toy-shared:0.05").build, optim=pyro.optim.Adam({"lr": 0.05}), progress=False)
    history = trainer.fit(loader, epochs=30)
    assert isinstance(trainer.objective, AutoELBO) and isinstance(trainer.objective.chosen, TraceELBO)
    assert history[-1]["loss"] < history[0]["loss"]
    assert isinstance(trainer.guide, DrawsPosterior) and not isinstance(trainer.guide, FlatNormalPosterior)
    prediction = predict(bnn, trainer.guide, (x, y), num_samples=16)
    assert prediction.probs.shape == (16, 64, 2) and prediction.metrics()["accuracy"] > 0.8
    samples = draw_samples(bnn, trainer.guide, num_samples=10, chains=2)
    assert samples["0.weight"].shape == (2, 10, 8, 2)
    assert not isinstance(trainer.guide, NormalMixturePosterior)
    idata = to_inference_data(bnn, samples, (x, y))
    assert tuple(idata.log_likelihood["obs"].shape) == (2, 10, 64)


def test_a_registered_family_runs_through_the_cli(toy_family, tmp_path, capsys):
    out = tmp_path / "run"
    train = ["train", "--dataset", "moons", "--model", "tanh-small", "--activation", "tanh", "--guide"]
    options = ["--epochs", "2", "--batch-size", "64", "--num-samples", "4", "--num-val-samples", "2", "--quiet"]
    assert main([*train, "toy-shared:0.05", *options, "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    assert config["guide"] == "toy-shared:0.05" and math.isfinite(metrics["nll"])
    assert metrics["mean_posterior_sigma"] > 0 and (out / "weight_stats.json").is_file()
    assert main(["evaluate", str(out)]) == 0
    assert main(["diagnose", str(out), "--shape", "--pruning", "--num-samples", "8", "--quiet"]) == 0
    report = json.loads((out / "diagnostics.json").read_text())
    assert report["shape"]["loo"]["train_points"] > 0 and report["pruning"]["rows"]
    capsys.readouterr()
    assert main([*train, "toy-shared", "--elbo", "fast", "--out", str(tmp_path / "refused")]) == 2
    assert "elbo 'fast' needs the flat guide" in capsys.readouterr().err
