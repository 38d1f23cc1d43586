"""The batched step replayed from a CUDA graph trains exactly as the eager batched step does, with the stacked and the
rows Adam update, and a diverging run still fails alone (CUDA only: skipped without a GPU)."""

from __future__ import annotations

import pyro
import pytest
import torch

from pyro_bnn import BNN
from pyro_bnn.batched import adam as adam_module
from pyro_bnn.batched import fit as fit_module
from pyro_bnn.batched import fit_batched
from pyro_bnn.batched.graph import GraphedBatchedStep
from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import parse_guide
from pyro_bnn.infer import NonFiniteLossError, ObjectiveOptions, Trainer
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.priors import parse_prior

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
CUDA = torch.device("cuda")
N = 170
"""Five batches of 32 and a last one of 10 an epoch: the graph replays from the third step of the first epoch, and
the short batch runs eagerly."""


def _trainer(
    seed: int,
    *,
    lr: float = 0.05,
    prior: str = "normal:0,1",
    nan_at: int | None = None,
    guide: str = "flat:0.05",
    objective: ObjectiveOptions | str = "auto",
):
    gen = torch.Generator().manual_seed(100 + seed)
    x = torch.randn(N, 2, generator=gen)
    y = (x.sum(1) > 0).long()
    if nan_at is not None:
        x[nan_at] = float("nan")  # unshuffled: the loss turns NaN at step nan_at // 32 + 1 of the first epoch
    pyro.set_rng_seed(seed)
    dropout = parse_guide(guide).dropout  # MC dropout's network has dropout layers
    net = build_model("mlp:8,8", input_shape=(2,), num_classes=2, activation="tanh", dropout=dropout)
    bnn = BNN(net, parse_prior(prior), Categorical(N))
    trainer = Trainer(
        bnn, guide, optim=pyro.optim.Adam({"lr": lr}), objective=objective, seed=seed, device=CUDA, progress=False
    )
    loader = BatchLoader(x, y, batch_size=32, shuffle=nan_at is None, seed=seed, device=CUDA)
    return trainer, loader


@pytest.fixture
def graphs(monkeypatch):
    """The GraphedBatchedStep of each fit, to count its captures and replays."""
    made = []

    class Recorded(GraphedBatchedStep):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(fit_module, "GraphedBatchedStep", Recorded)
    return made


def _fit(specs, epochs: int, cuda_graph: bool):
    built = [_trainer(**spec) for spec in specs]
    outcomes = fit_batched([t for t, _ in built], [loader for _, loader in built], epochs, progress=False,
                           cuda_graph=cuda_graph)  # fmt: skip
    return [t for t, _ in built], outcomes


@pytest.mark.parametrize("update", ["stacked", "rows"])
def test_graphed_batched_runs_train_as_eager_ones(update, graphs, monkeypatch):
    if update == "rows":  # torch's fused Adam over rows, as for stacks above the size limit
        monkeypatch.setattr(adam_module, "STACKED_MAX_ELEMENTS", 0)
    specs = [{"seed": 0}, {"seed": 1, "lr": 0.02}, {"seed": 2, "prior": "laplace:0,1"}]
    eager, _ = _fit(specs, 3, cuda_graph=False)
    assert not graphs
    graphed, outcomes = _fit(specs, 3, cuda_graph=True)
    (graph,) = graphs
    assert graph.eager.optimizer.stacked is (update == "stacked")
    assert graph.captures == 1 and graph.replays == 3 * 5 - 2  # the short batches and the two warm-up steps eager
    for a, b, outcome in zip(eager, graphed, outcomes, strict=True):
        assert not outcome.failed
        # The same kernels on the same values: equal to float32 rounding (cuBLAS may pick other algorithms).
        torch.testing.assert_close(a.guide.loc, b.guide.loc, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(a.guide.log_scale, b.guide.log_scale, rtol=1e-5, atol=1e-6)
        assert [h["loss"] for h in a.history] == pytest.approx([h["loss"] for h in b.history], rel=1e-5)


@pytest.mark.parametrize(
    "common",
    [
        {"guide": "bbb", "objective": ObjectiveOptions("trace", num_particles=2)},  # noise (R, 2, D)
        {"guide": "map"},  # noise (R, 0), no scales
        {"guide": "mc-dropout:0.2"},  # noise (R, B M): the masks, made inside the graph
    ],
    ids=["blundell", "map", "mc-dropout"],
)
def test_graphed_bayes_by_backprop_and_point_estimates_train_as_eager_ones(common, graphs):
    """Blundell et al.'s Bayes by Backprop (two particles a step, scale-mixture priors), MAP and MC dropout runs
    replay from a graph as they train eagerly."""
    priors = ["mixture:0.5,1,0.05", "normal:0,1", "mixture:0.25,1,0.1"]
    specs = [{"seed": s, "prior": p, **common} for s, p in enumerate(priors)]
    eager, _ = _fit(specs, 2, cuda_graph=False)
    graphed, outcomes = _fit(specs, 2, cuda_graph=True)
    assert graphs[0].replays == 2 * 5 - 2
    for a, b, outcome in zip(eager, graphed, outcomes, strict=True):
        assert not outcome.failed
        ours, theirs = dict(a.guide.named_parameters()), dict(b.guide.named_parameters())
        assert ours.keys() == theirs.keys() and ours
        for name, value in ours.items():
            torch.testing.assert_close(value, theirs[name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("update", ["stacked", "rows"])
def test_a_diverging_run_fails_alone_in_a_graphed_batch(update, graphs, monkeypatch):
    if update == "rows":
        monkeypatch.setattr(adam_module, "STACKED_MAX_ELEMENTS", 0)
    specs = [{"seed": 0}, {"seed": 1}, {"seed": 2}]
    sane, sane_outcomes = _fit(specs, 3, cuda_graph=True)
    # Run 1's fourth batch holds a NaN input: its loss turns NaN inside a replayed step (steps 1-2 warm up eagerly).
    broken, outcomes = _fit([specs[0], {"seed": 1, "nan_at": 3 * 32 + 5}, specs[2]], 3, cuda_graph=True)
    assert outcomes[1].failed and isinstance(outcomes[1].error, NonFiniteLossError)
    message = str(outcomes[1].error)
    assert "epoch 1" in message
    if update == "rows":  # the update was applied in the replay, and the graph is captured again without the run
        assert "after the optimiser step" in message and graphs[1].captures == 2
    else:  # the stacked update masks it inside the graph, which takes the active runs as an input
        assert "before the optimiser step" in message and graphs[1].captures == 1
    for r in (0, 2):
        assert not outcomes[r].failed
        assert torch.equal(sane[r].guide.loc, broken[r].guide.loc)
        assert [h["loss"] for h in sane_outcomes[r].history] == [h["loss"] for h in outcomes[r].history]
