"""Bad inputs to the diagnostics get one line naming the value, and summaries that could not tell do not read as
converged: undefined r-hats, run_nuts's arguments, non-finite slices, unknown slice values, guides of another kind,
empty draws and containers of the wrong kind."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.diagnostics import arviz_compat
from pyro_bnn.diagnostics.alignment import predictive_distance, wasserstein_1d
from pyro_bnn.diagnostics.arviz_export import (
    convergence_summary,
    draw_samples,
    draws_to_inference_data,
    posterior_dataset,
    to_inference_data,
)
from pyro_bnn.diagnostics.nuts import run_nuts
from pyro_bnn.diagnostics.pruning import prune, pruning_table
from pyro_bnn.diagnostics.slices import SliceOptions, likelihood_slice
from pyro_bnn.diagnostics.weight_stats import weight_statistics
from pyro_bnn.guides import FlatMeanField, init_to_network, posterior_loc_scale
from pyro_bnn.likelihoods import Categorical, Gaussian
from pyro_bnn.priors import NormalPrior, parse_prior

N = 10


def _data(n=N, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g)
    return x, (x[:, 0] > 0).long()


def _bnn(n=N) -> BNN:
    torch.manual_seed(0)
    return BNN(nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 2)), NormalPrior(0.0, 1.0), Categorical(n))


def _draws(bnn, chains, draws, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {site.name: torch.randn(chains, draws, *site.shape, generator=g) for site in bnn.sites}


def _one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message, message
    return message


def _summary(data, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ArviZ warns about too few draws
        return convergence_summary(data, *args)


# ------------------------------------------------------------------------------------ convergence_summary
def test_an_undefined_rhat_does_not_read_as_converged(arviz_backend):
    bnn = _bnn()
    summary = _summary(to_inference_data(bnn, _draws(bnn, 2, 3)))  # 3 draws per chain: no r-hat
    assert summary["num_rhat_nan"] == summary["num_scalars"] == 17
    assert math.isnan(summary["frac_rhat_gt_1.01"]) and math.isnan(summary["frac_rhat_gt_1.1"])
    assert math.isnan(summary["rhat_max"])
    point = {site.name: torch.zeros(site.shape) for site in bnn.sites}  # a repeated point estimate
    summary = _summary(to_inference_data(bnn, draw_samples(bnn, point, 5, chains=2)))
    assert summary["num_rhat_nan"] == 17 and math.isnan(summary["frac_rhat_gt_1.01"])


def test_rhat_fractions_are_over_the_defined_rhats(arviz_backend):
    draws = torch.randn(2, 50, 4, generator=torch.Generator().manual_seed(1))
    draws[:, :, 0] = 1.0  # never moves: r-hat NaN
    draws[1, :, 1] += 100.0  # chains far apart: r-hat well above 1.1
    data = draws_to_inference_data({"theta": draws})
    rhat = np.asarray(arviz_compat.rhat(data)["theta"].values)
    assert np.isnan(rhat[0]) and rhat[1] > 1.1 and (rhat[2:] < 1.1).all()
    summary = _summary(data)
    assert summary["num_scalars"] == 4 and summary["num_rhat_nan"] == 1
    assert summary["frac_rhat_gt_1.1"] == pytest.approx(1 / 3)
    assert summary["rhat_max"] == pytest.approx(float(np.nanmax(rhat)))


def test_convergence_summary_refuses_unknown_variables_and_other_containers():
    bnn = _bnn()
    data = to_inference_data(bnn, _draws(bnn, 2, 10))
    with pytest.raises(ValueError, match=r"no variable 'zz'; it has \['0.weight'") as err:
        _summary(data, ["zz"])
    _one_line(err)
    with pytest.raises(ValueError, match="takes an ArviZ InferenceData or xarray DataTree .* got dict") as err:
        _summary(_draws(bnn, 2, 10))
    _one_line(err)


# ----------------------------------------------------------------------------------------- empty draws
def test_no_draw_is_refused():
    bnn = _bnn()
    draws = _draws(bnn, 2, 10)
    with pytest.raises(ValueError, match=r"2 chain\(s\) of 0 draw\(s\); the export needs at least 1"):
        to_inference_data(bnn, {name: value[:, :0] for name, value in draws.items()})
    with pytest.raises(ValueError, match=r"0 chain\(s\) of 10 draw\(s\)"):
        draws_to_inference_data({"a": torch.zeros(0, 10)})
    with pytest.raises(ValueError, match="'0.weight' holds 0 draws; draw_samples needs at least 1"):
        draw_samples(bnn, {site.name: torch.zeros(0, *site.shape) for site in bnn.sites})
    with pytest.raises(ValueError, match="'0.weight' holds 3 draws, fewer than chains = 4"):
        draw_samples(bnn, {site.name: torch.zeros(3, *site.shape) for site in bnn.sites}, chains=4)
    with pytest.raises(ValueError, match=r"2 chain\(s\) of 0 draw\(s\); draw_samples needs"):
        draw_samples(bnn, {name: value[:, :0] for name, value in draws.items()})
    with pytest.raises(ValueError, match="at least 1 draw each, got 0 and 3"):
        wasserstein_1d(torch.rand(0, 4), torch.rand(3, 4))
    with pytest.raises(ValueError, match="at least 1 sample each, got 3 and 0"):
        predictive_distance(torch.rand(3, 4, 2), torch.rand(0, 4, 2))


@pytest.mark.parametrize("class_index", [2, -1, 1.0, True])
def test_an_out_of_range_class_index_of_w1_is_one_line(class_index):
    # 2 raised a raw IndexError; -1 silently compared the last class
    probs = torch.rand(3, 4, 2)
    pattern = rf"^class_index must be an int in \[0, 1\] \(the probs have 2 classes\), got {class_index!r}$"
    with pytest.raises(ValueError, match=pattern) as err:
        predictive_distance(probs, probs, kind="w1", class_index=class_index)
    _one_line(err)
    assert predictive_distance(probs, probs, kind="w1", class_index=np.int64(0)).abs().max() == 0


def test_draws_to_inference_data_takes_numpy_arrays_and_refuses_other_values():
    values = np.arange(10.0).reshape(1, 5, 2)
    data = draws_to_inference_data({"a": values})
    np.testing.assert_array_equal(posterior_dataset(data)["a"].values, values)
    with pytest.raises(ValueError, match=r"samples\['a'\] must be a torch.Tensor or a NumPy array, got list"):
        draws_to_inference_data({"a": [[1.0, 2.0]]})


def test_numpy_draws_export_with_data_in_the_network_s_dtype():
    # float64 arrays reached the float32 network: "expected scalar type Float but found Double"
    bnn = _bnn()
    x, y = _data()
    draws = {name: np.zeros((1, 3, *site.shape)) for name, site in zip(bnn.site_names, bnn.sites, strict=True)}
    data = to_inference_data(bnn, draws, (x, y))
    assert "log_likelihood" in arviz_compat.group_names(data)


# -------------------------------------------------------------------------------------------- run_nuts
def test_run_nuts_checks_its_arguments_before_sampling():
    bnn = _bnn()
    x, y = _data()
    run = dict(num_chains=2, num_samples=2, warmup=2)
    with pytest.raises(ValueError, match=r"init_values names 'zz', which is not a site of the model; its sites are"):
        run_nuts(bnn, x, y, init_values={"zz": torch.zeros(3)}, **run)
    with pytest.raises(
        ValueError, match=r"init_values\['0.weight'\] has shape \(3, 3\); the site's is \(3, 2\)"
    ) as err:
        run_nuts(bnn, x, y, init_values={"0.weight": torch.zeros(3, 3)}, **run)
    assert "(2, 3, 2) (one per chain)" in _one_line(err)
    with pytest.raises(ValueError, match=r"init_values\['0.weight'\] has shape \(4, 3, 2\)"):
        run_nuts(bnn, x, y, init_values={"0.weight": torch.zeros(4, 3, 2)}, **run)
    with pytest.raises(ValueError, match="target_accept_prob must be a number in \\(0, 1\\), got 1.5"):
        run_nuts(bnn, x, y, target_accept_prob=1.5, **run)
    with pytest.raises(ValueError, match="max_tree_depth must be an int >= 1, got 0"):
        run_nuts(bnn, x, y, max_tree_depth=0, **run)
    torch.manual_seed(0)
    hierarchical = BNN(nn.Linear(2, 1), parse_prior("hierarchical:normal,halfnormal,1"), Gaussian(N, scale=0.5))
    hyper = hierarchical.hyper_site_names[0]
    with pytest.raises(ValueError, match=rf"init_values\['{hyper}'\] has shape \(5,\)"):
        run_nuts(hierarchical, x, y[:, None].float(), init_values={hyper: torch.ones(5)}, **run)


def test_run_nuts_splits_per_chain_hyperparameter_starts_and_takes_latent_starts():
    # a (num_chains,) start of a scalar hyperparameter went whole to every chain: draws of shape (2, 2, 2)
    import pyro.distributions as dist

    from pyro_bnn.local_latents import LocalLatent

    x, y = _data()
    torch.manual_seed(0)
    hierarchical = BNN(nn.Linear(2, 1), parse_prior("hierarchical:normal,halfnormal,1"), Gaussian(N, scale=0.5))
    hyper = hierarchical.hyper_site_names[0]
    run = dict(num_chains=2, num_samples=2, warmup=0, max_tree_depth=1)
    draws = run_nuts(hierarchical, x, y[:, None].float(), init_values={hyper: torch.tensor([0.7, 2.0])}, **run)
    assert draws[hyper].shape == (2, 2)

    class Scale(LocalLatent):
        def prior(self, batch_size):
            return dist.Normal(torch.ones(batch_size, 2), 0.1).to_event(1)

        def apply(self, inputs, value):
            return inputs * value

    # a per-example latent's start, whose shape follows the data: refused as "not a site of the model"
    latent = BNN(nn.Sequential(nn.Linear(2, 3)), NormalPrior(), Categorical(N), local_latents=[Scale("z", "0", (2,))])
    draws = run_nuts(latent, x, y % 3, init_values={"z": torch.ones(N, 2)}, potential="model", **run)
    assert draws["z"].shape == (2, 2, N, 2)


# --------------------------------------------------------------------------------------- likelihood slices
def _net_values():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 2))
    return net, {name: value.detach().clone() for name, value in net.named_parameters()}


@pytest.mark.parametrize("incremental", [True, False])
@pytest.mark.parametrize("fault", ["inf weight", "nan bias"])
def test_a_non_finite_output_of_a_library_likelihood_is_one_line(incremental, fault):
    net, values = _net_values()
    if fault == "inf weight":
        values["0.weight"][0, 0] = math.inf
    else:
        values["0.bias"][:] = math.nan
    x, y = _data()
    with pytest.raises(ValueError, match=r"the log-likelihood at 2.weight\[0, 1\] = .* is nan, not finite") as err:
        likelihood_slice(
            net, Categorical(N), x, y, values, "2.weight", (0, 1), options=SliceOptions(incremental=incremental)
        )
    _one_line(err)


def test_a_likelihood_that_refuses_the_output_is_one_line():
    class Refusing(Categorical):
        def log_likelihood(self, output, y):
            raise ValueError("Expected parameter logits\nto satisfy the constraint\nbut found invalid values")

    net, values = _net_values()
    x, y = _data()
    with pytest.raises(ValueError, match=r"output at 0.weight\[1, 0\] = -0.58\d*: Expected parameter logits$") as err:
        likelihood_slice(net, Refusing(N), x, y, values, "0.weight", (1, 0), options=SliceOptions(incremental=False))
    _one_line(err)


@pytest.mark.parametrize("incremental", [True, False])
def test_a_logit_overflowing_to_minus_inf_is_scored_as_the_likelihood_scores_it(incremental):
    # class 0's logit w * 1e38 falls to -inf as w falls: class 1 then has probability 1, a finite log-likelihood
    # (0); scoring every non-finite row NaN stopped the window there and failed the slice
    net = nn.Sequential(nn.Linear(1, 2))
    with torch.no_grad():
        net[0].weight.zero_()
        net[0].bias.zero_()
    x, y = torch.full((3, 1), 1e38), torch.ones(3, dtype=torch.long)
    values = dict(net.named_parameters())
    options = SliceOptions(incremental=incremental)
    slice_ = likelihood_slice(net, Categorical(3), x, y, values, "0.weight", (0, 0), options=options)
    assert slice_.capped == (True, False) and slice_.half_widths == (5.0, 0.1)
    assert slice_.log_likelihood[0].item() == 0.0


def _nan_above(limit, below=-math.inf):
    """``-(out - y)^2`` per row, NaN where the output is above ``limit`` or below ``below``."""

    def log_likelihood(output, y):
        out = output[:, 0]
        return torch.where((out > limit) | (out < below), torch.full_like(out, math.nan), -((out - y) ** 2))

    return log_likelihood


def _unit_net():
    net = nn.Sequential(nn.Linear(1, 1))
    with torch.no_grad():
        net[0].weight.fill_(1.0)
        net[0].bias.zero_()
    return net, {k: v.detach().clone() for k, v in net.named_parameters()}


@pytest.mark.parametrize("incremental", [True, False])
def test_a_side_that_meets_a_nan_ends_at_its_last_finite_edge(incremental):
    # ll(w) = -3 (w - 1)^2, NaN above w = 1.5: the upper edges 1 + 0.1 * 1.1^k reach NaN at k = 17 (1.505), so the
    # side ends at k = 16 (1.4595); the NaN edge was put in the grid and fit_gaussian failed naming no weight
    net, values = _unit_net()
    options = SliceOptions(incremental=incremental)
    x, y = torch.ones(3, 1), torch.ones(3)
    slice_ = likelihood_slice(net, _nan_above(1.5), x, y, values, "0.weight", (0, 0), options=options)
    assert slice_.nonfinite == (False, True) and slice_.capped == (False, False)
    assert slice_.steps[1] == 18 and slice_.half_widths[1] == pytest.approx(0.1 * 1.1**16, rel=1e-12)
    assert slice_.grid[-1].item() == pytest.approx(1 + 0.1 * 1.1**16, rel=1e-6)
    assert torch.isfinite(slice_.log_likelihood).all()
    oracle = -3 * (slice_.grid - 1) ** 2
    torch.testing.assert_close(slice_.log_likelihood, oracle, rtol=1e-5, atol=1e-5)
    assert slice_.gaussian_mean == pytest.approx(1.0, abs=1e-4)
    assert slice_.gaussian_sd == pytest.approx(1 / math.sqrt(6), rel=1e-3)  # exp(-3 (w - 1)^2)


@pytest.mark.parametrize("incremental", [True, False])
def test_a_logit_overflowing_to_plus_inf_ends_the_side_at_its_last_finite_edge(incremental):
    # class 0's logit w * 1e38 overflows float32 (3.4e38) above w = 3.4: Categorical scores those rows NaN
    net = nn.Sequential(nn.Linear(1, 2))
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1.0], [0.0]]))
        net[0].bias.zero_()
    x, y = torch.full((2, 1), 1e38), torch.zeros(2, dtype=torch.long)
    values = {k: v.detach().clone() for k, v in net.named_parameters()}
    options = SliceOptions(incremental=incremental)
    slice_ = likelihood_slice(net, Categorical(2), x, y, values, "0.weight", (0, 0), options=options)
    assert slice_.nonfinite == (False, True) and torch.isfinite(slice_.log_likelihood).all()
    assert slice_.grid[-1].item() * 1e38 < torch.finfo(torch.float32).max
    assert slice_.grid[-1].item() * 1.1 * 1e38 > torch.finfo(torch.float32).max  # the next edge overflowed


def test_nan_at_the_first_edge_of_both_sides_is_one_line():
    net, values = _unit_net()
    x, y = torch.ones(3, 1), torch.ones(3)
    pattern = r"0.weight\[0, 0\] is nan at 0.9\d* and nan at 1.1\d*, the first edges on both sides of w0 = 1.0"
    with pytest.raises(ValueError, match=pattern) as err:
        likelihood_slice(net, _nan_above(1.05, below=0.95), x, y, values, "0.weight", (0, 0))
    _one_line(err)


def test_nan_inside_the_window_is_one_line_naming_the_entry_and_value():
    # NaN in a band the window's edges step over (1.3138, then 1.3452) but a grid value (1.3277) lands in
    net, values = _unit_net()
    x, y = torch.ones(3, 1), torch.ones(3)
    clean = likelihood_slice(net, _nan_above(math.inf), x, y, values, "0.weight", (0, 0))
    inside = clean.grid[(clean.grid > 1.32) & (clean.grid < 1.335)]
    assert len(inside) == 1
    g = inside.item()

    def band(output, y):
        out = output[:, 0]
        nan = (out > g - 1e-4) & (out < g + 1e-4)
        return torch.where(nan, torch.full_like(out, math.nan), -((out - y) ** 2))

    with pytest.raises(ValueError, match=rf"0.weight\[0, 0\] is nan at {g!r}, inside the window") as err:
        likelihood_slice(net, band, x, y, values, "0.weight", (0, 0))
    _one_line(err)


def test_likelihood_slice_refuses_unknown_values_as_point_values_does():
    net, values = _net_values()
    x, y = _data()
    typo = {**values, "0.weigth": values["0.weight"] + 1.0}
    with pytest.raises(ValueError, match="values: '0.weigth' is not a parameter or buffer of the network"):
        likelihood_slice(net, Categorical(N), x, y, typo, "0.weight", (0, 0))
    with pytest.raises(ValueError, match=r"values\['0.bias'\] must be a torch.Tensor, got list"):
        likelihood_slice(net, Categorical(N), x, y, {"0.bias": [0.0, 0.0, 0.0]}, "0.weight", (0, 0))


# ------------------------------------------------------------------------------- guides of another kind
@pytest.mark.parametrize("guide", [None, {"0.weight": 1}])
def test_a_guide_of_another_kind_is_a_value_error(guide):
    bnn = _bnn()
    kind = type(guide).__name__
    with pytest.raises(ValueError, match=f"does not know the guide type {kind}"):
        posterior_loc_scale(guide)
    with pytest.raises(ValueError, match=f"prune needs a mean-field Normal guide .* guide type {kind}"):
        prune(guide, bnn, 0.5)
    with pytest.raises(ValueError, match=f"weight_statistics needs a mean-field Normal guide .* guide type {kind}"):
        weight_statistics(guide, bnn)


@pytest.mark.parametrize("what", ["mu", "sigma"])
def test_a_non_finite_mu_or_sigma_is_one_line_naming_the_site(what):
    # (scale > 0).all() called a NaN sigma "sigma = 0 (a point-estimate guide?)"; a NaN mu passed: its SNR was NaN,
    # sorted last so never pruned, and weight_statistics reported median_snr = nan
    bnn = _bnn()
    guide = FlatMeanField(bnn, init_loc_fn=init_to_network(bnn), init_scale=0.1)
    guide(*_data())
    assert bnn.site_names[0] == "0.weight"  # entries 0..5 of the flat vectors
    with torch.no_grad():
        if what == "mu":
            guide.loc[1] = math.nan
        else:
            guide.log_scale[2:4] = torch.tensor([math.nan, math.inf])
    count = "1 of 6" if what == "mu" else "2 of 6"
    for call, caller in [
        (lambda: prune(guide, bnn, 0.5), "prune"),
        (lambda: prune(guide, bnn, 0.5, by="magnitude"), "prune"),
        (lambda: weight_statistics(guide, bnn), "weight_statistics"),
    ]:
        pattern = rf"^{caller}: site '0.weight' has non-finite {what} \({count} entries\); expected finite values$"
        with pytest.raises(ValueError, match=pattern) as err:
            call()
        _one_line(err)


def test_pruning_table_names_a_bad_seed():
    bnn = _bnn()
    guide = FlatMeanField(bnn, init_loc_fn=init_to_network(bnn), init_scale=0.1)
    x, y = _data()
    guide(x, y)
    with pytest.raises(ValueError, match="seed must be an int >= 0, got 'a'"):
        pruning_table(bnn, guide, (x, y), fractions=[0.5], num_samples=2, seed="a")
