"""OptimizerBridge: the runs' learning rates and weight decays read per stacked tensor, and the per-parameter groups
that one tensor cannot honour refused."""

from __future__ import annotations

import math

import pyro
import pytest
import torch

from pyro_bnn import BNN
from pyro_bnn.batched import fit_batched
from pyro_bnn.data import BatchLoader
from pyro_bnn.infer import RuntimeOptions, Trainer
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.priors import nothing, parse_prior

N = 120


def _trainer(seed: int, guide: str, args, **kw) -> tuple[Trainer, BatchLoader]:
    """A run whose ``pyro.optim.Adam`` takes ``args`` (a dict, or a callable of the parameter name: one torch
    parameter group per site)."""
    gen = torch.Generator().manual_seed(100 + seed)
    x = torch.randn(N, 2, generator=gen)
    y = (x.sum(1) > 0).long()
    train = BatchLoader(x, y, batch_size=40, shuffle=True, seed=seed)
    pyro.set_rng_seed(seed)
    net = build_model("mlp:8", input_shape=(2,), num_classes=2, activation="tanh")
    bnn = BNN(net, parse_prior("normal:0,1", select=nothing if guide == "mle" else None), Categorical(N))
    runtime = RuntimeOptions(seed=seed, progress=False)
    return Trainer(bnn, guide, optim=pyro.optim.Adam(args), runtime=runtime, **kw), train


def _per_site(lr_out: float, decay_out: float = 0.0):
    """Adam options by parameter name: the output layer's own lr and weight decay, 0.001 and none elsewhere."""

    def args(name: str) -> dict:
        out = "out" in name
        return {"lr": lr_out if out else 0.001, "weight_decay": decay_out if out else 0.0}

    return args


@pytest.mark.parametrize(
    "guide, args, message",
    [
        (
            "map",
            _per_site(0.1),
            "groups 0 and 2 hold parameters the batch stacks into one tensor, with lr 0.001 and 0.1",
        ),
        ("bbb", _per_site(0.1), "with lr 0.001 and 0.1"),
        (
            "map",
            _per_site(0.001, 0.5),
            "groups 0 and 2 hold parameters the batch stacks into one tensor, with weight_decay 0.0 and 0.5",
        ),
    ],
    ids=["map-lr", "bbb-lr", "map-weight-decay"],
)
def test_per_site_options_stacked_into_one_tensor_are_refused(guide, args, message):
    """Per-site learning rates or weight decays (each site its own torch group) cannot go into one stacked tensor
    that takes one rate per run: the batch is refused in one line before any step, where it trained every site at
    the first site's rate (in the review's reproducer MAP's epoch losses were 129.97, 129.03, 128.15 batched against
    115.18, 82.25, 70.82 alone)."""
    (a, train_a), (b, train_b) = _trainer(0, guide, args), _trainer(1, guide, args)
    with pytest.raises(ValueError) as error:
        fit_batched([a, b], [train_a, train_b], 3, progress=False)
    text = str(error.value)
    assert text.startswith("run 0's Adam groups ") and message in text, text
    assert text.endswith(
        "a batch takes one " + ("lr" if "lr" in message else "weight_decay") + " per run and stacked "
        "tensor; train the run alone"
    )
    assert "\n" not in text and a.history == [] and a.global_step == 0


@pytest.mark.parametrize("guide, args", [("map", _per_site(0.001)), ("mle", _per_site(0.1))], ids=["map", "mle"])
def test_groups_the_batch_can_honour_still_batch_exactly(guide, args):
    """A callable that gives every site the same options (one group each) batches; so do per-site rates where each
    parameter is a stacked tensor of its own (maximum likelihood trains the network's own parameters, one tensor
    each). Either way a run trains as it does alone: the same epoch losses and final values to 1e-5."""
    alone, train = _trainer(0, guide, args)
    history = alone.fit(train, 3)
    (b, train_b), (c, train_c) = _trainer(0, guide, args), _trainer(1, guide, args)
    outcomes = fit_batched([b, c], [train_b, train_c], 3, progress=False)
    assert len(b.optimizer.param_groups) == 4  # one group per site
    assert not outcomes[0].failed and outcomes[0].history[-1]["batched_runs"] == 2
    for ours, theirs in zip(outcomes[0].history, history, strict=True):
        assert math.isclose(ours["loss"], theirs["loss"], rel_tol=1e-5), (ours["loss"], theirs["loss"])
    ours = {**dict(b.guide.named_parameters()), **dict(b.bnn.named_parameters())}
    theirs = {**dict(alone.guide.named_parameters()), **dict(alone.bnn.named_parameters())}
    assert ours.keys() == theirs.keys() and len(ours) == 4
    for name, value in ours.items():
        torch.testing.assert_close(value, theirs[name], rtol=1e-5, atol=1e-6, msg=name)


def test_a_schedule_that_moves_the_groups_of_one_tensor_apart_stops_the_batch():
    """Groups alike at the start but scheduled apart (LambdaLR with one multiplier per group) are refused when they
    part, at the second step's rates, rather than trained at the first group's."""

    def schedule(optimizer):
        multipliers = [lambda step: 1.0] + [lambda step: 0.5**step] * (len(optimizer.param_groups) - 1)
        return torch.optim.lr_scheduler.LambdaLR(optimizer, multipliers)

    kw = {"lr_scheduler": schedule, "lr_scheduler_interval": "step"}
    (a, train_a), (b, train_b) = _trainer(0, "map", _per_site(0.001), **kw), _trainer(1, "map", _per_site(0.001), **kw)
    with pytest.raises(ValueError, match=r"^run 0's Adam groups 0 and 1 hold .* with lr 0.001 and 0.0005: "):
        fit_batched([a, b], [train_a, train_b], 1, progress=False)
    assert a.global_step == 1  # one step at the rates they shared
