"""Per-group learning-rate schedules: the decay multiplier by hand, its grammar, and one LambdaLR driving the model's
and the guide's groups of a ParamGroups optimiser, alone and inside the Trainer."""

import math
import warnings

import pytest
import torch
from pyro.infer.autoguide import AutoNormal
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import init_to_network
from pyro_bnn.infer import LRSchedule, ParamGroups, Trainer, group_scheduler, lr_multiplier
from pyro_bnn.infer.auto_objective import UnusedOptionWarning
from pyro_bnn.infer.lr_schedules import LR_SCHEDULE_FAMILY, linear_decay
from pyro_bnn.infer.optim import build_optimizer
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.priors import NormalPrior
from pyro_bnn.priors.selection import weights_only

# T = 100, ratio 0.01, decay from step 50 to step 90: m(t) = 1 - 0.99 (t - 50) / 40 in between.
HAND = {0: 1.0, 49: 1.0, 50: 1.0, 70: 1 - 0.99 * 0.5, 90: 0.01, 100: 0.01}


@pytest.mark.parametrize("step,expected", HAND.items())
def test_decay_multiplier_by_hand(step, expected):
    assert lr_multiplier("decay:0.01", 100)(step) == pytest.approx(expected, rel=1e-12)
    assert lr_multiplier("decay:0.01,0.5,0.9", 100)(step) == pytest.approx(expected, rel=1e-12)
    assert linear_decay(0.01, 100)(step) == pytest.approx(expected, rel=1e-12)
    assert HAND[70] == pytest.approx(0.505, rel=1e-12)


def test_other_decay_windows_and_constant():
    m = lr_multiplier("DECAY:0.5, 0, 1", 10)  # names ignore case, spaces around arguments are ignored
    assert [m(t) for t in (0, 2, 5, 10, 20)] == pytest.approx([1.0, 0.9, 0.75, 0.5, 0.5])
    late = lr_multiplier("decay:0.1,0.8,1", 10)
    assert [late(t) for t in (8, 9, 10)] == pytest.approx([1.0, 0.55, 0.1])
    assert {lr_multiplier("constant", 7)(t) for t in range(20)} == {1.0}
    assert {lr_multiplier(LRSchedule.CONSTANT, 7)(t) for t in range(20)} == {1.0}
    assert lr_multiplier("decay:1", 10)(10) == 1.0  # ratio 1 is the constant schedule


def test_every_member_has_a_form_and_the_example_round_trips():
    assert LR_SCHEDULE_FAMILY.names() == [member.value for member in LRSchedule]
    parsed = LR_SCHEDULE_FAMILY.parse(LR_SCHEDULE_FAMILY.form("decay").example)
    assert (parsed.kind, parsed["ratio"], parsed["start"], parsed["end"]) == (LRSchedule.DECAY, 0.01, 0.5, 0.9)
    assert LR_SCHEDULE_FAMILY.usages() == "constant, decay:RATIO[,START,END]"


@pytest.mark.parametrize(
    "spec,message",
    [
        ("decay", "learning-rate schedule 'decay' takes 1 or 3 numeric argument(s), got 0"),
        ("decay:0", "learning-rate schedule 'decay:0': ratio must be a number in (0, 1], got '0'"),
        ("decay:1.5", "learning-rate schedule 'decay:1.5': ratio must be a number in (0, 1], got '1.5'"),
        ("decay:0.01,0.5", "learning-rate schedule 'decay:0.01,0.5' takes 1 or 3 numeric argument(s), got 2"),
        ("decay:0.01,0.9,0.5", "learning-rate schedule 'decay:0.01,0.9,0.5': START must be < END"),
        ("decay:0.01,0.5,1.2", "learning-rate schedule 'decay:0.01,0.5,1.2': end must be a number in [0, 1]"),
        ("decay:x", "learning-rate schedule 'decay:x': ratio must be a number in (0, 1], got 'x'"),
        ("cosine", "unknown learning-rate schedule 'cosine'; expected one of constant, decay:RATIO[,START,END]"),
        ("constant:1", "learning-rate schedule 'constant' takes no arguments after ':', got 'constant:1'"),
        ("", "a learning-rate schedule must be a non-empty string like 'decay:0.01', got ''"),
    ],
)
def test_bad_specs_fail_in_one_line_naming_the_string(spec, message):
    with pytest.raises(ValueError) as info:
        lr_multiplier(spec, 100)
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("total", [0, -1, 2.5, True, None])
def test_total_steps_must_be_a_positive_int(total):
    with pytest.raises(ValueError, match=f"total_steps must be an int >= 1, got {total!r}"):
        lr_multiplier("decay:0.01", total)


def test_linear_decay_checks_its_arguments():
    with pytest.raises(ValueError, match=r"ratio must be a number in \(0, 1\], got 0"):
        linear_decay(0, 10)
    with pytest.raises(ValueError, match="0 <= start < end <= 1, got start=0.5, end=0.5"):
        linear_decay(0.1, 10, start=0.5, end=0.5)


def _named_params():
    torch.manual_seed(0)
    return [
        ("model.net.0.bias", nn.Parameter(torch.randn(4))),
        ("guide.loc", nn.Parameter(torch.randn(5))),
    ]


def test_a_real_sgd_ends_at_ratio_times_base_for_the_model_and_base_for_the_guide():
    named = _named_params()
    groups = ParamGroups(model={"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4}, guide={"lr": 2.0})
    optimizer, _ = build_optimizer(groups, named)
    scheduler = group_scheduler(optimizer, {"model": "decay:0.01", "guide": "constant"}, 100)
    seen = {}
    for step in range(1, 101):
        optimizer.zero_grad()
        sum(p.square().sum() for _, p in named).backward()
        optimizer.step()
        scheduler.step()
        seen[step] = [group["lr"] for group in optimizer.param_groups]
    assert seen[49] == pytest.approx([0.1, 2.0]) and seen[70] == pytest.approx([0.1 * 0.505, 2.0])
    model, guide = optimizer.param_groups
    assert (model["name"], guide["name"]) == ("model", "guide")
    assert model["lr"] == pytest.approx(0.01 * 0.1, rel=1e-12) and guide["lr"] == pytest.approx(2.0, rel=1e-12)
    assert model["initial_lr"] == 0.1 and guide["initial_lr"] == 2.0
    # The multipliers are closures: a checkpoint holds the step count and base lrs, not the schedule.
    assert scheduler.state_dict()["lr_lambdas"] == [None, None]


def test_a_group_without_a_schedule_or_a_name_keeps_its_lr():
    named = _named_params()
    optimizer, _ = build_optimizer(ParamGroups(model={"lr": 0.1}, guide={"lr": 2.0}), named)
    scheduler = group_scheduler(optimizer, {"guide": "decay:0.5"}, 4)
    for _ in range(4):
        optimizer.step()
        scheduler.step()
    assert [group["lr"] for group in optimizer.param_groups] == pytest.approx([0.1, 1.0])
    plain = torch.optim.SGD([p for _, p in named], lr=0.3)
    scheduler = group_scheduler(plain, {}, 4)
    plain.step()
    scheduler.step()
    assert plain.param_groups[0]["lr"] == 0.3


def test_unknown_group_names_are_refused_but_a_group_left_out_is_not():
    named = _named_params()
    optimizer, _ = build_optimizer(ParamGroups(model={"lr": 0.1}, guide={"lr": 2.0}), named)
    with pytest.raises(
        ValueError, match=r"no parameter group named 'gude' \(the optimiser's groups: 'model', 'guide'\)"
    ):
        group_scheduler(optimizer, {"gude": "constant"}, 10)
    with pytest.raises(ValueError, match="unknown learning-rate schedule 'cosine'"):
        group_scheduler(optimizer, {"model": "cosine"}, 10)
    with pytest.raises(ValueError, match="total_steps must be an int >= 1, got 0"):
        group_scheduler(optimizer, {}, 0)
    # A fully Bayesian model has no deterministic parameters: ParamGroups leaves the model's group out.
    guide_only, _ = build_optimizer(ParamGroups(model={"lr": 0.1}, guide={"lr": 2.0}), named[1:])
    scheduler = group_scheduler(guide_only, {"model": "decay:0.01", "guide": "constant"}, 10)
    assert len(scheduler.lr_lambdas) == 1
    # An optimiser whose groups have no names does not have a 'model' group to leave out.
    plain = torch.optim.SGD([p for _, p in named], lr=0.3)
    with pytest.raises(ValueError, match=r"no parameter group named 'model' \(the optimiser's groups have no 'name'\)"):
        group_scheduler(plain, {"model": "decay:0.01"}, 10)


def _blobs(n=90, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 3
    centres = torch.tensor([[0.0, 2.0], [2.0, -1.0], [-2.0, -1.0]])
    return centres[y] + 0.8 * torch.randn(n, 2, generator=g), y


def test_the_trainer_runs_two_groups_with_their_own_schedules():
    """Random weights only: the biases stay deterministic, trained by the model's group with weight decay and the
    decay schedule, while the guide's group keeps its lr. 4 epochs of 3 steps: T = 12, decay from step 6 to 10.8."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 3))
    bnn = BNN(net, NormalPrior(0.0, 1.0, select=weights_only), Categorical(90))
    biases = [p.detach().clone() for p in bnn.parameters()]
    x, y = _blobs()
    loader = BatchLoader(x, y, 30, shuffle=True, seed=1)
    epochs = 4
    total = epochs * len(loader)
    trainer = Trainer(
        bnn,
        lambda m: AutoNormal(m, init_loc_fn=init_to_network(m), init_scale=0.05),
        optim=ParamGroups(
            model={"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4},
            guide={"lr": 0.01, "momentum": 0.9},
        ),
        lr_scheduler=lambda opt: group_scheduler(opt, {"model": "decay:0.01", "guide": "constant"}, total),
        lr_scheduler_interval="step",
        seed=0,
        progress=False,
    )
    history = trainer.fit(loader, epochs)
    model, guide = trainer.optimizer.param_groups
    assert (model["name"], guide["name"]) == ("model", "guide")
    assert {id(p) for p in model["params"]} == {id(p) for p in bnn.parameters()}
    assert {id(p) for p in guide["params"]} == {id(p) for p in trainer.guide.parameters()}
    assert len(model["params"]) == 2 and model["weight_decay"] == 5e-4 and guide["weight_decay"] == 0
    assert model["lr"] == pytest.approx(0.05 * 0.01, rel=1e-12) and guide["lr"] == pytest.approx(0.01, rel=1e-12)
    # The history's lr is the first group's (the model's) as each epoch's last step used it: after 2, 5, 8 and 11
    # scheduler steps (T = 12: a = 6, b = 10.8).
    expected = [1.0, 1.0, 1 - 0.99 * (8 - 6) / (10.8 - 6), 0.01]
    assert [record["lr"] for record in history] == pytest.approx([0.05 * m for m in expected], rel=1e-9)
    assert all(math.isfinite(record["loss"]) for record in history)
    assert all(not torch.equal(before, after) for before, after in zip(biases, bnn.parameters(), strict=True))


@pytest.mark.parametrize(
    "schedules, option_names, message",
    [
        (
            {"model": "decay:0.1", "guide": "constant"},
            None,
            "schedules['model'] 'decay:0.1' is unused: the optimiser has no 'model' parameter group (the model has no "
            "trainable parameters of its own: every weight is random); schedules['guide'] schedules the guide's "
            "parameters, all there are",
        ),
        (
            {"model": "decay:0.01,0.2,0.4"},
            {"model": "--lr-schedule", "guide": "--lr-variational-schedule"},
            "--lr-schedule 'decay:0.01,0.2,0.4' is unused: the optimiser has no 'model' parameter group (the model "
            "has no trainable parameters of its own: every weight is random); --lr-variational-schedule schedules "
            "the guide's parameters, all there are",
        ),
    ],
    ids=["python", "named-options"],
)
def test_a_schedule_for_a_group_the_optimiser_left_out_warns_once(schedules, option_names, message):
    """ParamGroups leaves an empty group out (the model's, when every weight is random): its decay was accepted and
    did nothing, without a word."""
    guide_only = [(name, p) for name, p in _named_params() if name.startswith("guide.")]
    optimizer, _ = build_optimizer(ParamGroups(model={"lr": 0.1}, guide={"lr": 2.0}), guide_only)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scheduler = group_scheduler(optimizer, schedules, 10, option_names=option_names)
    assert [(w.category, str(w.message)) for w in caught] == [(UnusedOptionWarning, message)]
    for _ in range(10):
        optimizer.step()
        scheduler.step()
    assert optimizer.param_groups[0]["lr"] == 2.0  # nothing else was scheduled


def test_no_warning_for_a_constant_schedule_of_a_missing_group_or_one_of_every_group():
    named = _named_params()
    guide_only = [(name, p) for name, p in named if name.startswith("guide.")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        optimizer, _ = build_optimizer(ParamGroups(model={"lr": 0.1}, guide={"lr": 2.0}), guide_only)
        group_scheduler(optimizer, {"model": "constant", "guide": "decay:0.5"}, 10)
        group_scheduler(optimizer, {"model": LRSchedule.CONSTANT}, 10)
        optimizer, _ = build_optimizer(ParamGroups(model={"lr": 0.1}, guide={"lr": 2.0}), named)
        group_scheduler(optimizer, {"model": "decay:0.5", "guide": "decay:0.5"}, 10)
