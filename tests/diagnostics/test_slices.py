"""Likelihood slices, their Gaussian fit, plateaus (the ReLU flat region) and their plots."""

from __future__ import annotations

import dataclasses
import math
import time
from collections import OrderedDict

import numpy as np
import pyro.distributions as dist
import pytest
import torch
from matplotlib.figure import Figure
from torch import nn
from torch.func import functional_call

from pyro_bnn.bnn import BNN
from pyro_bnn.diagnostics.plateaus import PLATEAU_NUM_POINTS, Plateau, find_plateau, plateau_fractions
from pyro_bnn.diagnostics.slices import (
    LikelihoodSlice,
    SliceOptions,
    fit_gaussian,
    gaussian_tv_distance,
    likelihood_slice,
    likelihood_slices,
    point_values,
)
from pyro_bnn.guides import parse_guide
from pyro_bnn.likelihoods import Categorical, Gaussian
from pyro_bnn.models import build_model
from pyro_bnn.nn import LeakyReLU
from pyro_bnn.plots.slices import plot_likelihood_slice, plot_plateau_fractions
from pyro_bnn.priors import NormalPrior

NOISE_SCALE = 0.5
SMALL_WEIGHT = 0.08  # hidden unit 0's weight in the output: small, so its loss keeps the likelihood above the floor
X_MIN, X_MAX = 0.5, 2.0


@pytest.fixture(autouse=True)
def one_thread():
    """These tests run many small tensor operations: on a 2-core machine shared with other jobs, two OpenMP threads
    spend most of their time waiting on each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def kinked_net(activation: nn.Module) -> nn.Sequential:
    """``out = 0.08 act(w x + 1) + act(x)`` with ``w = fc1.weight[0, 0] = 1``.

    For inputs ``x >= 0.5`` hidden unit 0 is off for every example once ``w x + 1 <= 0`` for all x, i.e. for
    ``w <= -1 / X_MIN = -2``: with ReLU the likelihood along ``w`` is exactly flat there.
    """
    net = nn.Sequential(OrderedDict(fc1=nn.Linear(1, 2), act=activation, out=nn.Linear(2, 1)))
    with torch.no_grad():
        net.fc1.weight.copy_(torch.tensor([[1.0], [1.0]]))
        net.fc1.bias.copy_(torch.tensor([1.0, 0.0]))
        net.out.weight.copy_(torch.tensor([[SMALL_WEIGHT, 1.0]]))
        net.out.bias.zero_()
    return net


def kinked_data(net: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.linspace(X_MIN, X_MAX, 40).unsqueeze(1)
    with torch.no_grad():
        y = net(x) + 0.1 * torch.randn(40, 1, generator=generator)
    return x, y


def own_values(net: nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in net.named_parameters()}


def loop_log_likelihood(net, likelihood, x, y, values, name, index, points) -> torch.Tensor:
    """The summed log-likelihood at each value, one plain network call per value (the reference)."""
    totals = []
    with torch.no_grad():
        for w in points:
            tensor = values[name].clone()
            tensor[index] = float(w)
            output = functional_call(net, {**values, name: tensor}, (x,))
            totals.append(float(likelihood.log_likelihood(output, y).double().sum()))
    return torch.tensor(totals, dtype=torch.float64)


# --- the ReLU plateau -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("incremental", [True, False], ids=["incremental", "vmap"])
def test_relu_slice_is_exactly_flat_beyond_the_analytic_threshold(incremental):
    net = kinked_net(nn.ReLU())
    x, y = kinked_data(net)
    likelihood = Gaussian(len(x), scale=NOISE_SCALE)
    slice_ = likelihood_slice(
        net, likelihood, x, y, own_values(net), "fc1.weight", (0, 0),
        options=SliceOptions(max_half_width=4.0, incremental=incremental),
    )  # fmt: skip
    threshold = -1.0 / X_MIN
    assert slice_.capped == (True, False)  # the likelihood never falls on the flat side
    assert slice_.half_widths[0] == 4.0
    plateau = find_plateau(slice_)
    assert plateau is not None
    assert plateau.start_index == 0 and plateau.open_lower and not plateau.open_upper
    assert abs(plateau.end - threshold) <= slice_.spacing
    assert plateau.level >= 0.01
    # Exactly flat beyond the threshold, not flat before it.
    beyond = slice_.grid <= threshold
    assert torch.unique(slice_.log_likelihood[beyond]).numel() == 1
    assert torch.unique(slice_.log_likelihood[~beyond]).numel() == int((~beyond).sum())


def test_the_same_net_with_leaky_relu_has_no_plateau():
    net = kinked_net(LeakyReLU(-0.5))
    x, y = kinked_data(net)
    slice_ = likelihood_slice(
        net, Gaussian(len(x), scale=NOISE_SCALE), x, y, own_values(net), "fc1.weight", (0, 0),
        options=SliceOptions(max_half_width=4.0),
    )  # fmt: skip
    assert find_plateau(slice_) is None
    assert find_plateau(slice_, min_fraction=0.01) is None


def test_plateau_fractions_flag_the_relu_weight_only():
    relu, leaky = kinked_net(nn.ReLU()), kinked_net(LeakyReLU(-0.5))
    x, y = kinked_data(relu)
    likelihood = Gaussian(len(x), scale=NOISE_SCALE)
    options = dict(per_layer=5, slice_options=SliceOptions(max_half_width=4.0, num_points=41))
    relu_result = plateau_fractions(relu, likelihood, x, y, own_values(relu), **options)
    leaky_result = plateau_fractions(leaky, likelihood, x, y, own_values(leaky), **options)
    assert list(relu_result) == ["fc1.weight", "out.weight"]  # weights with >= 2 dimensions, biases left out
    summary = relu_result["fc1.weight"]
    assert summary.num_sampled == 2 and sorted(summary.indices) == [(0, 0), (1, 0)]
    # Unit 1 carries the signal: switching it off drops the likelihood below the floor, so only unit 0 is flagged.
    flagged = {index for index, p in zip(summary.indices, summary.plateaus, strict=True) if p is not None}
    assert flagged == {(0, 0)}
    assert summary.fraction == 0.5 and summary.num_open == 1
    assert len(summary.slices[0].grid) == 41
    assert leaky_result["fc1.weight"].fraction == 0.0
    # Seeded: the same call samples the same entries.
    again = plateau_fractions(relu, likelihood, x, y, own_values(relu), layers=["out.weight"], **options)
    assert again["out.weight"].indices == relu_result["out.weight"].indices


# --- the Gaussian fit ------------------------------------------------------------------------------------------


def linear_gaussian_problem():
    """``y = w x + noise`` with known noise: the log-likelihood is exactly quadratic in ``w``."""
    generator = torch.Generator().manual_seed(1)
    n, w_true = 200, 0.7
    x = torch.rand(n, 1, generator=generator) + 0.5
    y = w_true * x + NOISE_SCALE * torch.randn(n, 1, generator=generator)
    net = nn.Sequential(OrderedDict(fc=nn.Linear(1, 1, bias=False)))
    sxx, sxy = float((x.double() ** 2).sum()), float((x.double() * y.double()).sum())
    return net, x, y, sxx, sxy


@pytest.mark.parametrize("prior", [None, "distribution", "function"])
def test_gaussian_fit_recovers_the_analytic_posterior_slice(prior):
    net, x, y, sxx, sxy = linear_gaussian_problem()
    prior_scale = 0.05
    precision = sxx / NOISE_SCALE**2 + (0.0 if prior is None else 1 / prior_scale**2)
    mean, sd = (sxy / NOISE_SCALE**2) / precision, precision**-0.5
    w0 = mean + 0.37 * sd  # off the mode: an asymmetric window with the peak between grid points
    log_prior = {
        None: None,
        "distribution": dist.Normal(0.0, prior_scale),
        "function": lambda w: -0.5 * (w / prior_scale) ** 2,
    }[prior]
    slice_ = likelihood_slice(
        net, Gaussian(len(x), scale=NOISE_SCALE), x, y, {"fc.weight": torch.tensor([[w0]])}, "fc.weight", (0, 0),
        options=SliceOptions(prior=log_prior, start=0.01),
    )  # fmt: skip
    assert slice_.capped == (False, False)
    assert slice_.half_widths[0] != slice_.half_widths[1]
    assert abs(slice_.gaussian_mean - mean) < 0.01 * slice_.spacing
    assert abs(slice_.gaussian_sd - sd) < 0.01 * slice_.spacing
    assert slice_.tv_distance < 0.01
    assert (slice_.log_prior is None) == (prior is None)


def test_fit_gaussian_on_exact_curves_and_the_tv_distance():
    grid = torch.linspace(-1.0, 2.0, 25, dtype=torch.float64)
    ll = -0.5 * ((grid - 0.4321) / 0.37) ** 2 + 12.0
    mean, sd = fit_gaussian(grid, ll)
    assert mean == pytest.approx(0.4321, abs=1e-6) and sd == pytest.approx(0.37, abs=1e-6)
    assert gaussian_tv_distance(grid, ll, mean, sd) < 1e-6
    # A box is not Gaussian: a clearly positive distance; a Gaussian far off the grid: distance 1.
    box = torch.where(grid.abs() < 0.5, 0.0, -50.0)
    assert gaussian_tv_distance(grid, box, *fit_gaussian(grid, box)) > 0.05
    assert gaussian_tv_distance(grid, ll, 100.0, 0.01) == 1.0
    with pytest.raises(ValueError, match="finite"):
        fit_gaussian(grid, torch.full_like(grid, math.nan))


# --- the window search -----------------------------------------------------------------------------------------


def test_window_grows_until_the_threshold_on_each_side():
    net, x, y, sxx, sxy = linear_gaussian_problem()
    likelihood = Gaussian(len(x), scale=NOISE_SCALE)
    values = {"fc.weight": torch.tensor([[0.72]])}
    start, growth, threshold = 0.003, 1.2, 0.01
    slice_ = likelihood_slice(
        net, likelihood, x, y, values, "fc.weight", (0, 0),
        options=SliceOptions(start=start, growth=growth, threshold=threshold),
    )  # fmt: skip
    w0 = slice_.w0
    for side, sign in ((0, -1), (1, 1)):
        steps, half = slice_.steps[side], slice_.half_widths[side]
        assert steps > 1 and not slice_.capped[side]
        assert half == pytest.approx(start * growth ** (steps - 1), rel=1e-12)
        edge, previous = loop_log_likelihood(
            net, likelihood, x, y, values, "fc.weight", (0, 0), [w0 + sign * half, w0 + sign * half / growth]
        )
        assert math.exp(edge - slice_.log_likelihood_w0) < threshold
        assert math.exp(previous - slice_.log_likelihood_w0) >= threshold
    assert slice_.grid[0] == pytest.approx(w0 - slice_.half_widths[0], abs=1e-6)
    assert slice_.grid[-1] == pytest.approx(w0 + slice_.half_widths[1], abs=1e-6)
    assert len(slice_.grid) == 25


def test_the_caps_stop_the_window():
    net, x, y, _, _ = linear_gaussian_problem()
    likelihood = Gaussian(len(x), scale=NOISE_SCALE)
    values = {"fc.weight": torch.tensor([[0.72]])}
    capped = SliceOptions(start=1e-4, max_steps=3)
    by_steps = likelihood_slice(net, likelihood, x, y, values, "fc.weight", (0, 0), options=capped)
    assert by_steps.capped == (True, True) and by_steps.steps == (3, 3)
    assert by_steps.half_widths == pytest.approx((1e-4 * 1.1**2,) * 2)
    narrow = SliceOptions(start=1e-4, max_half_width=2e-4, num_points=5)
    by_width = likelihood_slice(net, likelihood, x, y, values, "fc.weight", (0, 0), options=narrow)
    assert by_width.capped == (True, True) and by_width.half_widths == (2e-4, 2e-4)
    assert by_width.evaluations == 1 + 2 * by_width.steps[0] + 5


def flat_likelihood(output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-row log-likelihood 0 whatever the output: the slice is the log prior alone."""
    return output.sum(-1) * 0.0


def test_a_bounded_prior_distribution_is_minus_inf_outside_its_support():
    # Uniform(-0.25, 0.55) raised torch's two-line support ValueError once an edge left the support; outside it the
    # log prior is -inf, so each side stops at its first edge outside. From w0 = 0 with start 0.1 and growth 2 the
    # left edges are -0.1, -0.2 (inside), -0.4 (outside: stop, 3 steps), the right ones 0.1, 0.2, 0.4, 0.8 (4 steps);
    # the 13-point grid over [-0.4, 0.8] (spacing 0.1) is inside at -0.2 .. 0.5, where log p = -log(0.8).
    net, x, y, _, _ = linear_gaussian_problem()
    options = SliceOptions(prior=dist.Uniform(-0.25, 0.55), start=0.1, growth=2.0, num_points=13)
    slice_ = likelihood_slice(
        net, flat_likelihood, x, y, {"fc.weight": torch.tensor([[0.0]])}, "fc.weight", (0, 0), options=options
    )
    assert slice_.steps == (3, 4) and slice_.half_widths == pytest.approx((0.4, 0.8))
    assert slice_.nonfinite == (False, False) and slice_.capped == (False, False)
    inside = (slice_.grid > -0.25) & (slice_.grid < 0.55)
    assert inside.tolist() == [False, False] + [True] * 8 + [False] * 3
    assert slice_.log_prior[inside].tolist() == pytest.approx([-math.log(0.8)] * 8, rel=1e-6)
    assert torch.isneginf(slice_.log_prior[~inside]).all()
    assert torch.equal(slice_.log_likelihood, slice_.log_prior)  # the likelihood adds 0


def test_a_w0_outside_the_prior_support_is_refused_as_not_finite():
    # HalfNormal(1) at w0 = -0.5 raised torch's two-line support ValueError instead of the documented one line
    net, x, y, _, _ = linear_gaussian_problem()
    values = {"fc.weight": torch.tensor([[-0.5]])}
    options = SliceOptions(prior=dist.HalfNormal(1.0))
    with pytest.raises(ValueError) as error:
        likelihood_slice(net, flat_likelihood, x, y, values, "fc.weight", (0, 0), options=options)
    assert str(error.value) == "the log-likelihood at fc.weight[0, 0] = -0.5 is -inf, not finite"
    # inside the support (w0 = 0.05) the left side stops at its first edge below 0, w0 - 0.1
    values = {"fc.weight": torch.tensor([[0.05]])}
    slice_ = likelihood_slice(net, flat_likelihood, x, y, values, "fc.weight", (0, 0), options=options)
    assert slice_.steps[0] == 1 and slice_.half_widths[0] == pytest.approx(0.1)
    assert torch.isneginf(slice_.log_prior[0]) and slice_.log_prior[1:].isfinite().all()


def test_a_prior_distribution_that_names_no_support_is_taken_by_its_log_prob():
    class NoSupport(torch.distributions.Distribution):
        def __init__(self):
            super().__init__(torch.Size(), torch.Size(), validate_args=False)

        def log_prob(self, value):
            return -0.5 * value**2

    net, x, y, _, _ = linear_gaussian_problem()
    values = {"fc.weight": torch.tensor([[0.3]])}
    slice_ = likelihood_slice(
        net, flat_likelihood, x, y, values, "fc.weight", (0, 0), options=SliceOptions(prior=NoSupport())
    )
    assert torch.allclose(slice_.log_prior, -0.5 * slice_.grid**2)


# --- vectorised evaluation against a plain loop ------------------------------------------------------------------


class NotSequential(nn.Module):
    """The generic path: no layer structure to exploit."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden, self.head = nn.Linear(3, 8), nn.Linear(8, 4)

    def forward(self, x):
        return self.head(torch.relu(self.hidden(x)))


@pytest.mark.parametrize(
    "model, names",
    [
        ("mlp:40,40,40 relu", ["fc1.weight", "fc1.bias", "fc2.weight", "fc3.weight", "out.bias"]),
        ("mlp:40,40,40 leaky:-0.5", ["fc1.weight", "out.weight"]),
        ("conv", ["conv1.weight", "out.weight"]),
        ("not-sequential", ["hidden.weight", "head.bias"]),
    ],
)
@pytest.mark.parametrize("incremental", [True, False], ids=["incremental", "vmap"])
def test_vectorised_evaluation_equals_a_plain_loop(model, names, incremental):
    torch.manual_seed(0)
    if model == "conv":
        net, x = build_model("conv", input_shape=(1, 8, 8), num_classes=4), torch.rand(12, 1, 8, 8)
    elif model == "not-sequential":
        net, x = NotSequential(), torch.randn(70, 3)
    else:
        spec, activation = model.split()
        net, x = build_model(spec, input_shape=(3,), num_classes=4, activation=activation), torch.randn(70, 3)
    y = torch.randint(0, 4, (len(x),))
    likelihood, values = Categorical(len(x)), own_values(net)
    for name in names:
        index = tuple(min(1, size - 1) for size in values[name].shape)
        # Small batches, so that grid values and rows are split over several calls.
        slice_ = likelihood_slice(
            net, likelihood, x, y, values, name, index, options=SliceOptions(
                num_points=9, start=0.3, max_half_width=0.6, batch_points=4, batch_size=32, incremental=incremental
            ),
        )  # fmt: skip
        reference = loop_log_likelihood(net, likelihood, x, y, values, name, index, slice_.grid)
        torch.testing.assert_close(slice_.log_likelihood, reference, rtol=1e-5, atol=1e-4)
        assert slice_.log_likelihood_w0 == pytest.approx(
            float(loop_log_likelihood(net, likelihood, x, y, values, name, index, [slice_.w0])[0]), rel=1e-5
        )


def test_network_modes_are_restored():
    net = build_model("mlp:8", input_shape=(3,), num_classes=2, dropout=0.5)
    net.train()
    net.drop1.eval()
    x, y = torch.randn(20, 3), torch.randint(0, 2, (20,))
    likelihood_slice(
        net, Categorical(20), x, y, own_values(net), "fc1.weight", (0, 0), options=SliceOptions(num_points=5)
    )
    assert net.training and not net.drop1.training


# --- errors ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(name="fc9.weight"), "unknown parameter name 'fc9.weight'"),
        (dict(index=(2, 0)), r"index \(2, 0\) is out of range for 'fc1.weight' of shape \(2, 1\)"),
        (dict(index=(0,)), r"index \(0,\) has 1 entries but 'fc1.weight' has shape \(2, 1\)"),
        (dict(num_points=2), "num_points must be an int >= 3, got 2"),
        (dict(growth=1.0), "growth must be a finite number > 1, got 1.0"),
        (dict(start=0.0), "start must be a finite number > 0, got 0.0"),
        (dict(threshold=1.5), r"threshold must be a number in \(0, 1\), got 1.5"),
        (dict(max_steps=0), "max_steps must be an int >= 1, got 0"),
        (dict(prior=dist.Normal(torch.zeros(2), 1.0)), r"prior must be a scalar distribution"),
    ],
)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the loose keyword options, still taken
def test_bad_arguments_fail_with_one_line_naming_the_value(change, message):
    net = kinked_net(nn.ReLU())
    x, y = kinked_data(net)
    arguments = dict(name="fc1.weight", index=(0, 0))
    arguments.update(change)
    name, index = arguments.pop("name"), arguments.pop("index")
    with pytest.raises(ValueError, match=message) as error:
        likelihood_slice(net, Gaussian(40, scale=NOISE_SCALE), x, y, own_values(net), name, index, **arguments)
    assert "\n" not in str(error.value)


def test_bad_data_and_values_fail_with_one_line_before_any_evaluation():
    net = build_model("mlp:8", input_shape=(3,), num_classes=2)
    x, y = torch.randn(20, 3), torch.randint(0, 2, (20,))
    values = own_values(net)
    cases = [
        (torch.randn(20, 5), y, values, r"the network cannot run on x of shape \(20, 5\)"),
        (x, y, {**values, "fc1.weight": torch.zeros(2, 2)}, r"values\['fc1.weight'\] has shape \(2, 2\); the net"),
        (x, torch.full((20,), 7), values, r"labels must lie in \[0, 2\)"),  # the likelihood's own one line
    ]
    for xs, ys, vals, message in cases:
        with pytest.raises(ValueError, match=message) as error:
            likelihood_slice(net, Categorical(20), xs, ys, vals, "fc1.weight", (0, 0))
        assert "\n" not in str(error.value)


def test_find_plateau_rejects_bad_options():
    slice_ = synthetic_slice(torch.zeros(11))
    with pytest.raises(ValueError, match="find_plateau takes a LikelihoodSlice"):
        find_plateau([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="min_fraction must be a number in"):
        find_plateau(slice_, min_fraction=0.0)
    with pytest.raises(ValueError, match="flatness must be a finite number > 0, got -1"):
        find_plateau(slice_, flatness=-1)


# --- the plateau rule on made-up slices --------------------------------------------------------------------------


def synthetic_slice(ll: torch.Tensor, capped=(False, False)) -> LikelihoodSlice:
    grid = torch.linspace(0.0, 1.0, len(ll), dtype=torch.float64)
    return LikelihoodSlice(
        name="w", index=(0,), w0=0.5, grid=grid, log_likelihood=ll.to(torch.float64), log_likelihood_w0=0.0,
        log_prior=None, half_widths=(0.5, 0.5), steps=(1, 1), capped=capped, gaussian_mean=0.5, gaussian_sd=0.2,
        tv_distance=0.0, evaluations=len(ll) + 3,
    )  # fmt: skip


def test_a_run_of_exactly_the_least_width_counts_on_any_float32_grid():
    # likelihood_slice rounds its grid to float32: a run of exactly ceil(0.05 * 100) = 5 steps fell a hair short of
    # 0.05 of the window on about half of the windows (544 of 1000) and was rejected
    rng = np.random.default_rng(0)
    for _ in range(300):
        lo, hi = -rng.uniform(0.1, 5.0), rng.uniform(0.1, 5.0)
        grid = torch.linspace(lo, hi, 101, dtype=torch.float64).float().double()
        for steps, found in ((5, True), (4, False)):
            ll = -50.0 * (grid - grid[40]) ** 2
            ll[40 : 41 + steps] = ll[40]
            slice_ = dataclasses.replace(synthetic_slice(ll), grid=grid)
            assert (find_plateau(slice_) is not None) is found, (lo, hi, steps)


def test_plateau_fractions_refuses_one_name_as_a_string(monkeypatch):
    with pytest.raises(ValueError, match=r"^layers must be a list of tensor names, got the string '0.weight'; pass"):
        plateau_fractions(nn.Linear(2, 2), None, torch.zeros(1, 2), torch.zeros(1), {}, layers="0.weight")


def test_plateau_rule_width_floor_and_flatness():
    grid = torch.linspace(0.0, 1.0, 101, dtype=torch.float64)
    falling = -50.0 * (grid - 0.3).clamp(min=0) ** 2
    plateau = find_plateau(synthetic_slice(falling, capped=(True, False)))
    assert isinstance(plateau, Plateau)
    assert (plateau.start_index, plateau.end_index) == (0, 30)
    assert plateau.fraction == pytest.approx(0.3) and plateau.open_lower and not plateau.open_upper
    assert plateau.level == 1.0
    # Width: a flat run of exactly 5 steps (0.05 of the window) counts, 4 steps do not.
    assert find_plateau(synthetic_slice(-50.0 * (grid - 0.05).clamp(min=0) ** 2)).end_index == 5
    assert find_plateau(synthetic_slice(-50.0 * (grid - 0.04).clamp(min=0) ** 2)) is None
    # Floor: the same flat run 5 nats below the maximum (p = 0.0067 < 0.01) does not count.
    low = torch.where(grid <= 0.3, -5.0, -5.0 + 40 * (grid - 0.3) - 60 * (grid - 0.3) ** 2)
    assert low.max() > 0 and find_plateau(synthetic_slice(low)) is None
    assert find_plateau(synthetic_slice(low), floor=0.001) is not None
    # Flatness: relative changes of 1e-7 per step are flat, 1e-5 are not.
    for step, expected in ((1e-7, True), (1e-5, False)):
        ramp = -step * torch.arange(101, dtype=torch.float64)
        assert (find_plateau(synthetic_slice(ramp)) is not None) is expected
    # A slice flat everywhere is one plateau over the whole window; NaN is never flat.
    assert find_plateau(synthetic_slice(torch.zeros(101))).fraction == 1.0
    with_nan = torch.zeros(101, dtype=torch.float64)
    with_nan[50] = math.nan
    assert find_plateau(synthetic_slice(with_nan)).fraction == pytest.approx(0.49)


# --- point values ------------------------------------------------------------------------------------------------


def test_point_values_from_the_network_a_dict_and_a_guide():
    net = kinked_net(nn.ReLU())
    x, y = kinked_data(net)
    bnn = BNN(net, NormalPrior(0.0, 1.0), Gaussian(len(x), scale=NOISE_SCALE))
    values = point_values(bnn)
    assert set(values) == {"fc1.weight", "fc1.bias", "out.weight", "out.bias"}
    torch.testing.assert_close(values["fc1.weight"], bnn.net.fc1.weight)
    replaced = point_values(bnn, {"out.bias": torch.tensor([0.25])})
    assert float(replaced["out.bias"]) == 0.25 and torch.equal(replaced["fc1.weight"], values["fc1.weight"])
    with pytest.raises(ValueError, match="'fc9.weight' is not a parameter or buffer"):
        point_values(bnn, {"fc9.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"value for 'out.bias' has shape \(2,\), expected \(1,\)"):
        point_values(bnn, {"out.bias": torch.zeros(2)})

    guide = parse_guide("flat:rel=1").build(bnn)
    guide(x, y)
    median = guide.median()
    from_guide = point_values(bnn, guide)
    for name in bnn.site_names:
        torch.testing.assert_close(from_guide[name], median[name])
        assert not from_guide[name].requires_grad
    slice_ = likelihood_slice(
        bnn.net, bnn.likelihood, x, y, from_guide, "out.weight", (0, 1), options=SliceOptions(num_points=5)
    )
    assert slice_.w0 == pytest.approx(float(median["out.weight"][0, 1]))


# --- plots -------------------------------------------------------------------------------------------------------


def test_plots_draw_the_slice_the_fit_the_plateau_and_the_fractions():
    relu = kinked_net(nn.ReLU())
    x, y = kinked_data(relu)
    likelihood = Gaussian(len(x), scale=NOISE_SCALE)
    wide = SliceOptions(max_half_width=4.0)
    slice_ = likelihood_slice(relu, likelihood, x, y, own_values(relu), "fc1.weight", (0, 0), options=wide)
    figure = plot_likelihood_slice(slice_)
    assert isinstance(figure, Figure)
    ax = figure.axes[0]
    assert "fc1.weight[0, 0]" in ax.get_title() and "TV = " in ax.get_title()
    assert len(ax.patches) == 1  # the shaded plateau
    assert any(line.get_linestyle() == "--" for line in ax.get_lines())
    assert len(plot_likelihood_slice(slice_, plateau=False).axes[0].patches) == 0

    summaries = plateau_fractions(
        relu, likelihood, x, y, own_values(relu), per_layer=2, slice_options=SliceOptions(num_points=25)
    )
    assert isinstance(plot_plateau_fractions(summaries), Figure)
    grouped = plot_plateau_fractions({"ReLU": summaries, "again": summaries}, title="plateaus")
    assert len(grouped.axes[0].patches) == 4
    with pytest.raises(ValueError, match="at least one"):
        plot_plateau_fractions({})


# --- timing ------------------------------------------------------------------------------------------------------


def test_timing_of_a_3fc_slice_over_6000_images():
    """Prints the time of one default 25-point slice (window search included) of a hidden 3FC weight."""
    torch.manual_seed(0)
    net = build_model("3fc", input_shape=(1, 28, 28), num_classes=10)
    x, y = torch.rand(6000, 1, 28, 28), torch.randint(0, 10, (6000,))
    values = own_values(net)
    began = time.perf_counter()
    slice_ = likelihood_slice(net, Categorical(6000), x, y, values, "fc2.weight", (17, 401))
    seconds = time.perf_counter() - began
    print(
        f"\n3fc fc2.weight[17, 401], 6000 random images, {torch.get_num_threads()} thread(s): {seconds:.2f} s for a "
        f"{len(slice_.grid)}-point slice ({slice_.evaluations} network evaluations with the window search, "
        f"steps {slice_.steps})"
    )
    assert len(slice_.grid) == 25
    assert seconds < 10.0  # a sanity bound; about 1-3 s here


# --- SliceOptions: one options object for likelihood_slice, likelihood_slices and plateau_fractions -------------


def test_slice_options_are_checked_when_made_and_normalised():
    options = SliceOptions(start=1, num_points=5, batch_size=64)
    assert isinstance(options.start, float) and options.num_points == 5 and options.batch_size == 64
    for change, message in [
        (dict(num_points=2), "num_points must be an int >= 3, got 2"),
        (dict(growth=1.0), "growth must be a finite number > 1, got 1.0"),
        (dict(threshold=1.5), r"threshold must be a number in \(0, 1\), got 1.5"),
        (dict(max_half_width=0.01), r"max_half_width must be a finite number >= start \(0.1\), got 0.01"),
        (dict(batch_points=0), "batch_points must be an int >= 1, got 0"),
        (dict(batch_size=True), "batch_size must be an int >= 1, got True"),
    ]:
        with pytest.raises(ValueError, match=message):
            SliceOptions(**change)
    with pytest.raises(TypeError):
        SliceOptions(0.1)  # keyword-only


def test_loose_keyword_options_still_work_with_a_deprecation_warning():
    net, x, y, _, _ = linear_gaussian_problem()
    likelihood = Gaussian(len(x), scale=NOISE_SCALE)
    values = {"fc.weight": torch.tensor([[0.72]])}
    new = likelihood_slice(net, likelihood, x, y, values, "fc.weight", (0, 0), options=SliceOptions(num_points=7))
    with pytest.warns(DeprecationWarning, match=r"likelihood_slice\(num_points=...\) is deprecated"):
        old = likelihood_slice(net, likelihood, x, y, values, "fc.weight", (0, 0), num_points=7)
    assert torch.equal(new.grid, old.grid) and torch.equal(new.log_likelihood, old.log_likelihood)
    with pytest.warns(DeprecationWarning, match="likelihood_slices"):
        (both,) = likelihood_slices(
            net, likelihood, x, y, values, "fc.weight", [(0, 0)], options=SliceOptions(num_points=9), num_points=7
        )
    assert len(both.grid) == 7  # a loose keyword goes over the options object
    with pytest.raises(TypeError, match="likelihood_slice\\(\\) got an unexpected keyword argument 'num_point'"):
        likelihood_slice(net, likelihood, x, y, values, "fc.weight", (0, 0), num_point=7)
    with pytest.raises(TypeError, match="options must be a SliceOptions, got dict"):
        likelihood_slice(net, likelihood, x, y, values, "fc.weight", (0, 0), options={"num_points": 7})


def test_plateau_fractions_take_slice_options():
    relu = kinked_net(nn.ReLU())
    x, y = kinked_data(relu)
    likelihood = Gaussian(len(x), scale=NOISE_SCALE)
    options = SliceOptions(max_half_width=4.0, num_points=11)
    result = plateau_fractions(relu, likelihood, x, y, own_values(relu), per_layer=1, slice_options=options)
    assert all(len(s.grid) == 11 for summary in result.values() for s in summary.slices)
    default = plateau_fractions(relu, likelihood, x, y, own_values(relu), per_layer=1, layers=["fc1.weight"])
    assert len(default["fc1.weight"].slices[0].grid) == PLATEAU_NUM_POINTS
    with pytest.warns(DeprecationWarning, match=r"pass slice_options=SliceOptions\(num_points=...\) instead"):
        loose = plateau_fractions(relu, likelihood, x, y, own_values(relu), per_layer=1, num_points=11)
    assert [len(s.grid) for s in loose["fc1.weight"].slices] == [11]
