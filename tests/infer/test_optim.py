"""The optimiser argument: the default and pyro.optim's Adam run torch's fused kernel, with the same updates;
ParamGroups gives the model's and the guide's parameters a group each."""

import re

import pyro.optim
import pytest
import torch

from pyro_bnn.infer import ParamGroups
from pyro_bnn.infer.optim import build_optimizer, clip_gradients


def _params(seed=0):
    torch.manual_seed(seed)
    return [("w", torch.nn.Parameter(torch.randn(50, 20))), ("b", torch.nn.Parameter(torch.randn(20)))]


@pytest.mark.parametrize(
    "optim,fused",
    [
        (None, True),
        (pyro.optim.Adam({"lr": 0.01}), True),
        (pyro.optim.AdamW({"lr": 0.01}), True),
        (pyro.optim.Adam({"lr": 0.01, "foreach": False}), None),  # the caller chose an implementation
        (pyro.optim.SGD({"lr": 0.01}), None),
        (lambda params: torch.optim.Adam(params, lr=0.01), None),  # a factory builds exactly what it says
    ],
)
def test_which_optimisers_are_fused(optim, fused):
    optimizer, _ = build_optimizer(optim, _params())
    assert optimizer.param_groups[0].get("fused") == fused


def test_fused_updates_equal_the_default_implementation():
    results = []
    for optim in (pyro.optim.Adam({"lr": 0.05}), lambda params: torch.optim.Adam(params, lr=0.05)):
        named = _params()
        optimizer, _ = build_optimizer(optim, named)
        for step in range(5):
            optimizer.zero_grad()
            loss = sum((p.sin() * (step + 1)).square().sum() for _, p in named)
            loss.backward()
            optimizer.step()
        results.append(torch.cat([p.detach().flatten() for _, p in named]))
    initial = torch.cat([p.detach().flatten() for _, p in _params()])
    assert (results[0] - initial).abs().min() > 1e-3  # every value moved
    assert torch.allclose(results[0], results[1], rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------- ParamGroups (two groups)
NODE_NOISE = {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4}


def _model_and_guide_params():
    torch.manual_seed(0)
    return [
        ("model.net.0.weight", torch.nn.Parameter(torch.randn(4, 3))),
        ("guide.loc", torch.nn.Parameter(torch.randn(5))),
        ("model.net.0.bias", torch.nn.Parameter(torch.randn(4))),
        ("guide.scale", torch.nn.Parameter(torch.randn(5))),
    ]


def test_param_groups_split_model_and_guide_with_their_options():
    named = _model_and_guide_params()
    optimizer, clip = build_optimizer(ParamGroups(model=NODE_NOISE, guide={"lr": 2.0}), named)
    assert type(optimizer) is torch.optim.SGD and clip == {}
    model, guide = optimizer.param_groups
    assert model["name"] == "model" and guide["name"] == "guide"
    assert [id(p) for p in model["params"]] == [id(named[0][1]), id(named[2][1])]
    assert [id(p) for p in guide["params"]] == [id(named[1][1]), id(named[3][1])]
    assert (model["lr"], model["momentum"], model["nesterov"], model["weight_decay"]) == (0.1, 0.9, True, 5e-4)
    assert (guide["lr"], guide["momentum"], guide["nesterov"], guide["weight_decay"]) == (2.0, 0, False, 0)


def test_param_groups_step_follows_each_groups_options():
    """One SGD step by hand: p - lr * (g + wd * p), momentum buffers starting at the gradient."""
    named = _model_and_guide_params()
    before = [p.detach().clone() for _, p in named]
    groups = ParamGroups(model={"lr": 0.1, "weight_decay": 0.5}, guide={"lr": 2.0})
    optimizer, _ = build_optimizer(groups, named)
    sum(p.square().sum() / 2 for _, p in named).backward()  # gradient = p
    optimizer.step()
    for (name, p), p0 in zip(named, before, strict=True):
        expected = p0 - 0.1 * (p0 + 0.5 * p0) if name.startswith("model.") else p0 - 2.0 * p0
        assert torch.allclose(p.detach(), expected)


def test_param_groups_leave_an_empty_group_out_and_keep_the_order():
    guide_only = [(n, p) for n, p in _model_and_guide_params() if n.startswith("guide.")]
    optimizer, _ = build_optimizer(ParamGroups(model=NODE_NOISE, guide={"lr": 2.0}), guide_only)
    assert [g["name"] for g in optimizer.param_groups] == ["guide"]
    guide_first = sorted(_model_and_guide_params(), key=lambda item: not item[0].startswith("guide."))
    optimizer, _ = build_optimizer(ParamGroups(model=NODE_NOISE, guide={"lr": 2.0}), guide_first)
    assert [g["name"] for g in optimizer.param_groups] == ["model", "guide"]


@pytest.mark.parametrize(
    "constructor,options,fused",
    [
        (torch.optim.Adam, {}, True),
        (torch.optim.AdamW, {}, True),
        (torch.optim.Adam, {"foreach": False}, None),  # one group chose an implementation
        (torch.optim.SGD, {}, None),
    ],
)
def test_param_groups_use_the_fused_kernel_where_it_applies(constructor, options, fused):
    groups = ParamGroups(constructor=constructor, model={"lr": 0.01}, guide={"lr": 0.1, **options})
    optimizer, _ = build_optimizer(groups, _model_and_guide_params())
    assert {g.get("fused") for g in optimizer.param_groups} == {fused}


@pytest.mark.parametrize(
    "group,options,message",
    [
        ("model", {"lr": -0.1}, "ParamGroups.model: lr must be a finite number > 0, got -0.1"),
        ("guide", {"lr": float("inf")}, "ParamGroups.guide: lr must be a finite number > 0, got inf"),
        ("guide", {"lr": True}, "ParamGroups.guide: lr must be a finite number > 0, got True"),
        ("guide", {}, "ParamGroups.guide needs an 'lr'"),
        ("model", {"lr": 0.1, "weight_decay": -5e-4}, "weight_decay must be a finite number >= 0, got -0.0005"),
        ("model", {"lr": 0.1, "momentum": float("nan")}, "momentum must be a finite number >= 0, got nan"),
        ("model", {"lr": 0.1, "wieght_decay": 5e-4}, "ParamGroups.model: SGD takes no option 'wieght_decay'"),
        ("guide", {"lr": 1.0, "name": "g"}, "ParamGroups.guide: 'name' is set by build_optimizer"),
        ("model", {"lr": 0.1, "nesterov": True}, "ParamGroups.model: nesterov needs momentum > 0 and dampening 0"),
    ],
)
def test_param_groups_refuse_bad_options_in_one_line(group, options, message):
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        ParamGroups(**{"model": {"lr": 0.1}, "guide": {"lr": 1.0}, group: options})
    assert "\n" not in str(info.value)


def test_param_groups_refuse_what_is_not_an_optimiser_or_a_dict():
    with pytest.raises(TypeError, match="ParamGroups.guide must be a dict of SGD options"):
        ParamGroups(model={"lr": 0.1}, guide=[("lr", 1.0)])
    with pytest.raises(TypeError, match="ParamGroups.constructor must be a torch.optim.Optimizer class"):
        ParamGroups(constructor=pyro.optim.SGD, model={"lr": 0.1}, guide={"lr": 1.0})


def test_param_groups_copy_their_options_and_refuse_unprefixed_names():
    options = {"lr": 0.1}
    groups = ParamGroups(model=options, guide={"lr": 1.0})
    options["lr"] = -1.0  # too late to change the groups
    assert groups.model == {"lr": 0.1}
    with pytest.raises(ValueError, match="parameter 'w' is neither 'model.<name>' nor 'guide.<name>'"):
        build_optimizer(groups, _params())


@pytest.mark.parametrize("constructor", [torch.optim.SGD, torch.optim.Adam])
def test_param_groups_clip_both_groups_together_as_a_pyro_optim_does(constructor):
    """clip_norm bounds the norm of the gradient of all parameters together: with plain SGD at lr 1 the first step
    moves them by exactly clip_norm (the gradient p has a norm far above it); Adam's step equals pyro's clipped
    Adam's."""
    results = []
    for optim in (
        ParamGroups(constructor=constructor, model={"lr": 1.0}, guide={"lr": 1.0}, clip_norm=0.01),
        pyro.optim.PyroOptim(constructor, {"lr": 1.0}, {"clip_norm": 0.01}),
    ):
        named = _model_and_guide_params()
        before = torch.cat([p.detach().flatten() for _, p in named])
        optimizer, clip = build_optimizer(optim, named)
        assert clip == {"clip_norm": 0.01}
        sum(p.square().sum() / 2 for _, p in named).backward()  # gradient = p, norm about 5
        clip_gradients([p for _, p in named], **clip)  # as the trainer's step applies them
        optimizer.step()
        results.append(torch.cat([p.detach().flatten() for _, p in named]) - before)
    if constructor is torch.optim.SGD:
        assert results[0].norm().item() == pytest.approx(0.01, rel=1e-5)
    assert torch.allclose(results[0], results[1], atol=1e-7)


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), True, "1"])
def test_param_groups_refuse_a_clip_norm_that_is_no_finite_positive_number(value):
    with pytest.raises(ValueError, match=r"^ParamGroups: clip_norm must be a finite number > 0, got "):
        ParamGroups(model={"lr": 0.1}, guide={"lr": 0.1}, clip_norm=value)
