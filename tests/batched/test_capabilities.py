"""Batching as a capability: the guide registry says which families batch and where their parameters go (a
BatchedLayout), the objective registry which objectives batch and in what form (BatchedForm); pyro_bnn.batched reads
both, so a family registered elsewhere with a layout trains in a batch with no library file touched."""

from __future__ import annotations

import pyro
import pytest
import torch
from pyro.infer.autoguide import AutoNormal

from pyro_bnn import BNN
from pyro_bnn.batched import RunStack, fit_batched, guide_layout
from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import (
    BatchedLayout,
    BatchedPosterior,
    Capability,
    GuideFamily,
    ScaleMap,
    families_with,
    guide_families,
    init_to_network,
    parse_guide,
    register_guide,
    unregister_guide,
)
from pyro_bnn.infer import AutoELBO, FastMeanFieldELBO, MeanFieldELBO, MixtureMeanKL, TraceELBO, Trainer
from pyro_bnn.infer.objective_registry import BatchedForm, batched_form, batched_objectives, objective_entries
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.priors import nothing, parse_prior
from pyro_bnn.spec import Arg, Form, Positive

N = 40


def _bnn(seed: int = 0, select=None, dropout: float = 0.0) -> BNN:
    pyro.set_rng_seed(seed)
    net = build_model("mlp:4", input_shape=(2,), num_classes=2, activation="tanh", dropout=dropout)
    return BNN(net, parse_prior("normal:0,1", select=select), Categorical(N))


def _run_once(guide, bnn=None):
    with torch.no_grad(), pyro.poutine.block():
        guide(torch.randn(5, 2), torch.zeros(5, dtype=torch.long))
    return guide


def test_the_registries_declare_which_families_and_objectives_batch():
    assert families_with(Capability.BATCHED) == ["flat", "bbb", "map", "mle", "mc-dropout", "mixture"]
    assert set(batched_objectives()) == {"auto", "trace", "meanfield", "fast", "fast-single", "mixture"}
    for family in guide_families():
        assert (family.batched_layout is not None) == family.offers(Capability.BATCHED), family.name
        if family.batched_layout is not None:
            spec = parse_guide(family.form.example or family.name)
            bnn = _bnn(select=nothing if family.offers(Capability.DETERMINISTIC) else None, dropout=spec.dropout)
            guide = _run_once(spec.build(bnn))
            assert isinstance(guide, BatchedPosterior) and guide.batched_layout is family.batched_layout
            assert guide_layout(guide, bnn).scale_map is family.batched_layout.scale_map
    with pytest.raises(TypeError, match="declared by a batched_layout"):
        GuideFamily(Form("x"), build=lambda spec, bnn: None, capabilities={Capability.BATCHED})
    with pytest.raises(ValueError, match="both per site or both flat"):
        BatchedLayout(ScaleMap.EXP, "locs.{site}", "log_scale")
    with pytest.raises(ValueError, match="a point estimate has no scale"):
        BatchedLayout(ScaleMap.POINT, "{site}", "rhos.{site}")
    with pytest.raises(ValueError, match=r"raw_scale None: a Normal guide \(softplus scales\) needs one"):
        BatchedLayout(ScaleMap.SOFTPLUS, "locs.{site}")


def test_each_objective_states_its_batched_form_or_refuses_in_one_line():
    assert batched_form(FastMeanFieldELBO()) == BatchedForm(antithetic=True, closed_form_kl=True)
    assert batched_form(FastMeanFieldELBO(antithetic=False, closed_form_kl=False)) == BatchedForm(False, False)
    assert batched_form(TraceELBO()) == BatchedForm(antithetic=False, closed_form_kl=False)
    assert batched_form(MeanFieldELBO()) == BatchedForm(antithetic=False, closed_form_kl=True)
    # Several particles: independent draws, never the antithetic pair.
    assert batched_form(TraceELBO(num_particles=2)) == BatchedForm(antithetic=False, closed_form_kl=False, particles=2)
    assert batched_form(FastMeanFieldELBO(num_particles=3)) == BatchedForm(False, True, particles=3)
    with pytest.raises(ValueError, match="BatchedForm: the antithetic pair is one particle, got particles=2"):
        BatchedForm(antithetic=True, particles=2)
    with pytest.raises(ValueError, match="BatchedForm: particles must be an int >= 1, got 0"):
        BatchedForm(antithetic=False, particles=0)
    with pytest.raises(ValueError, match="batched runs draw whole weights, without local noise options"):
        batched_form(FastMeanFieldELBO(local_reparameterization=True))
    with pytest.raises(ValueError, match="batched runs compute the fast ELBO or Trace_ELBO, not"):
        batched_form(AutoELBO())  # not chosen yet
    # The implicit-BNN objective: S copies of every example, a draw per row, the closed-form mixture-mean KL.
    assert batched_form(MixtureMeanKL(samples_per_example=3)) == BatchedForm(False, True, copies=3)
    with pytest.raises(ValueError, match=r"the mixture-mean objective \(copies > 0\) draws per row, one particle"):
        BatchedForm(antithetic=False, particles=2, copies=2)
    auto = AutoELBO()
    auto.chosen = auto.trace
    assert batched_form(auto) == BatchedForm(antithetic=False, closed_form_kl=False)  # the form of its choice
    for entry in objective_entries():
        objective = entry.build(num_particles=1)
        if entry.name == "auto":
            objective.chosen = objective.fast
        if entry.batched:
            assert isinstance(batched_form(objective), BatchedForm), entry.name
        else:
            with pytest.raises(ValueError, match="batched runs (compute|draw whole weights)"):
                batched_form(objective)


class StackedAutoNormal(AutoNormal):
    """Pyro's AutoNormal (per site ``locs.<site>`` and ``scales.<site>``, sigma = softplus of the unconstrained
    scale), declared batchable here and nowhere in the library."""

    batched_layout = BatchedLayout(ScaleMap.SOFTPLUS, "locs.{site}_unconstrained", "scales.{site}_unconstrained")


TOY = GuideFamily(
    Form("toy-stacked", (Arg("init scale", Positive(), 0.1),), example="toy-stacked:0.05", doc="A test-only guide."),
    build=lambda spec, bnn: StackedAutoNormal(
        bnn, init_loc_fn=init_to_network(bnn), init_scale=spec.options["init scale"]
    ),
    capabilities={Capability.RANDOM, Capability.NORMAL_SCALES},
    batched_layout=StackedAutoNormal.batched_layout,
)


@pytest.fixture
def toy_family():
    register_guide(TOY)
    yield TOY
    unregister_guide(TOY.name)


def test_a_family_registered_with_a_batched_layout_trains_in_a_batch(toy_family):
    assert parse_guide("toy-stacked:0.05").offers(Capability.BATCHED)

    def trainer(seed):
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(N, 2, generator=gen)
        loader = BatchLoader(x, (x.sum(1) > 0).long(), batch_size=20, shuffle=True, seed=seed)
        optim = pyro.optim.Adam({"lr": 0.05})
        return Trainer(
            _bnn(seed), "toy-stacked:0.05", optim=optim, objective="trace", seed=seed, progress=False
        ), loader

    built = [trainer(seed) for seed in (0, 1)]
    outcomes = fit_batched([t for t, _ in built], [loader for _, loader in built], 2, progress=False)
    assert not any(o.failed for o in outcomes) and [len(o.history) for o in outcomes] == [2, 2]
    for seed, (batched, _) in enumerate(built):
        assert isinstance(batched.guide, StackedAutoNormal)
        fresh, loader = trainer(seed)
        fresh.fit(loader, 0)  # the guide a run with this seed starts from
        start, end = (guide_layout(t.guide, t.bnn).read() for t in (fresh, batched))
        assert all(torch.isfinite(v).all() and not torch.equal(a, v) for a, v in zip(start, end, strict=True))


def test_a_guide_without_a_batched_layout_gets_the_same_refusal():
    bnn = _bnn()
    with pytest.raises(ValueError, match=r"point-estimate \('map', 'mle', 'mc-dropout'\) or NodeNoiseMixture .* got A"):
        RunStack([bnn], [_run_once(AutoNormal(bnn))])
