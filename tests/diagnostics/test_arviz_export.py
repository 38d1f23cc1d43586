"""The ArviZ adapter: draws in the (chain, draw, ...) layout from every kind of source, the export's groups, names
and shapes, ArviZ's own diagnostics running on it, and the normality scores. The export's tests run once per ArviZ
generation (the ``arviz_backend`` fixture of conftest.py): ArviZ 0.x and the refactored arviz-base / arviz-stats."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch
from pyro.infer.autoguide import AutoNormal
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.diagnostics import arviz_compat
from pyro_bnn.diagnostics.arviz_export import (
    LOG_LIKELIHOOD_VAR,
    OBS_DIM,
    arviz_major_version,
    convergence_summary,
    draw_samples,
    normality_scores,
    posterior_dataset,
    to_inference_data,
)
from pyro_bnn.guides import NodeNoiseMixture, init_to_network, parse_guide
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.node_noise import NodeNoisePrior, add_node_noise
from pyro_bnn.predict import PointEstimate, Samples, predict
from pyro_bnn.priors import NormalPrior

N = 24


def _data(n=N, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g)
    return x, (x[:, 0] * x[:, 1] > 0).long()


def _bnn(n=N) -> BNN:
    torch.manual_seed(0)
    net = build_model("tanh-small", input_shape=(2,), num_classes=2)
    return BNN(net, NormalPrior(0.0, 1.0), Categorical(n))


def _shapes(bnn: BNN) -> dict[str, tuple[int, ...]]:
    return {site.name: tuple(site.shape) for site in bnn.sites}


def _flat_guide(bnn):
    guide = parse_guide("flat:rel=1").build(bnn)
    guide(*_data())
    return guide


# ------------------------------------------------------------------------------------------- draw_samples
def test_draws_from_a_flat_guide_use_its_draw_and_the_chain_layout():
    bnn = _bnn()
    guide = _flat_guide(bnn)
    samples = draw_samples(bnn, guide, 500, chains=3)
    assert list(samples) == bnn.site_names
    for name, shape in _shapes(bnn).items():
        assert samples[name].shape == (3, 500, *shape)
    loc, scale = guide.loc_scale()["fc2.weight"]
    pooled = samples["fc2.weight"].reshape(-1, 5, 5)
    torch.testing.assert_close(
        pooled.mean(0), loc.detach(), atol=4 * float(scale.detach().max()) / math.sqrt(1500), rtol=0
    )
    torch.testing.assert_close(pooled.std(0), scale.detach(), atol=0, rtol=0.12)


def test_draws_from_a_guide_without_draw_are_traced_under_a_sample_plate():
    bnn = _bnn()
    guide = AutoNormal(bnn, init_loc_fn=init_to_network(bnn), init_scale=0.2)
    samples = draw_samples(bnn, guide, 400, chains=2, guide_args=_data())  # the guide has not run yet
    for name, shape in _shapes(bnn).items():
        assert samples[name].shape == (2, 400, *shape)
    pooled = samples["out.bias"].reshape(-1, 2)
    torch.testing.assert_close(pooled.mean(0), bnn.initial_values()["out.bias"], atol=0.06, rtol=0)
    assert pooled.std(0).tolist() == pytest.approx([0.2, 0.2], rel=0.15)
    only = draw_samples(bnn, guide, 5, sites=["fc1.bias"])
    assert list(only) == ["fc1.bias"] and only["fc1.bias"].shape == (1, 5, 5)


def test_draws_from_dicts_with_and_without_a_chain_dimension():
    bnn = _bnn()
    shapes = _shapes(bnn)
    flat = {name: torch.randn(12, *shape) for name, shape in shapes.items()}
    split = draw_samples(bnn, flat, 4, chains=3)
    assert split["fc1.weight"].shape == (3, 4, 5, 2)
    torch.testing.assert_close(split["fc1.weight"][1], flat["fc1.weight"][4:8])
    assert draw_samples(bnn, Samples(flat))["out.bias"].shape == (1, 12, 2)  # default: all draws, one chain
    chained = {name: torch.randn(2, 7, *shape) for name, shape in shapes.items()}
    kept = draw_samples(bnn, chained, 5)
    assert kept["fc2.weight"].shape == (2, 5, 5, 5)
    torch.testing.assert_close(kept["fc2.weight"], chained["fc2.weight"][:, :5])
    point = draw_samples(bnn, PointEstimate(bnn.initial_values()), 6, chains=2)
    assert point["out.weight"].shape == (2, 6, 2, 5)
    torch.testing.assert_close(point["out.weight"][1, 3], bnn.initial_values()["out.weight"])


def test_bad_draw_requests_fail_with_a_clear_message():
    bnn = _bnn()
    flat = {name: torch.randn(5, *shape) for name, shape in _shapes(bnn).items()}
    with pytest.raises(ValueError, match="fewer than chains x num_samples"):
        draw_samples(bnn, flat, 3, chains=2)
    with pytest.raises(ValueError, match="hold 2 chains"):
        draw_samples(bnn, {n: v.unsqueeze(0).expand(2, *v.shape) for n, v in flat.items()}, chains=3)
    with pytest.raises(ValueError, match="expected"):
        draw_samples(bnn, {**flat, "fc1.weight": torch.randn(5, 3, 3)})
    with pytest.raises(ValueError, match="needs num_samples"):
        draw_samples(bnn, _flat_guide(bnn))
    with pytest.raises(ValueError, match="no values for site"):
        draw_samples(bnn, flat, sites=["nope"])


def test_mixture_guide_chains_each_hold_every_component():
    torch.manual_seed(0)
    net = add_node_noise(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)))
    bnn = BNN(net, NodeNoisePrior(0.1), Categorical(10))
    guide = NodeNoiseMixture(bnn, 2)
    guide(torch.randn(2, 3), torch.zeros(2, dtype=torch.long))
    with torch.no_grad():
        guide.locs[0].fill_(-2.0)
        guide.locs[1].fill_(4.0)
        guide.scale_raw.fill_(-30.0)  # sd ~ 1e-13: each draw is its component's mean
    samples = draw_samples(bnn, guide, 4, chains=2)
    site = bnn.site_names[0]
    assert samples[site].shape == (2, 4, *bnn.sites[0].shape)
    torch.testing.assert_close(samples[site][:, :, 0], torch.tensor([[-2.0, 4.0] * 2] * 2))


# ------------------------------------------------------------------------------------------ the export
def test_export_has_the_groups_names_and_dims_arviz_expects(arviz_backend):
    bnn = _bnn()
    x, y = _data()
    samples = draw_samples(bnn, _flat_guide(bnn), 50, chains=2)
    data = to_inference_data(bnn, samples, (x, y))
    container = "InferenceData" if arviz_backend == arviz_compat.LEGACY else "DataTree"
    assert type(data).__name__ == container
    assert arviz_major_version() == (0 if arviz_backend == arviz_compat.LEGACY else 1)
    assert set(arviz_compat.group_names(data)) == {"posterior", "log_likelihood"}
    posterior = posterior_dataset(data)
    assert list(posterior.data_vars) == bnn.site_names
    for name, shape in _shapes(bnn).items():
        variable = posterior[name]
        assert variable.dims == ("chain", "draw", *[f"{name}_dim_{i}" for i in range(len(shape))])
        assert variable.shape == (2, 50, *shape)
        np.testing.assert_array_equal(variable.values, samples[name].numpy())
    log_lik = arviz_compat.group(data, "log_likelihood")[LOG_LIKELIHOOD_VAR]
    assert log_lik.dims == ("chain", "draw", OBS_DIM) and log_lik.shape == (2, 50, N)
    flat = {name: value.reshape(100, *value.shape[2:]) for name, value in samples.items()}
    expected = predict(bnn, flat, (x, y)).log_likelihood.reshape(2, 50, N)
    np.testing.assert_allclose(log_lik.values, expected.numpy(), rtol=1e-6)


def _native_summary_and_loo(backend, data):
    """The generation's own summary and PSIS-LOO, called as a user of that ArviZ would call them."""
    if backend == arviz_compat.LEGACY:
        import arviz as az

        assert math.isfinite(az.waic(data).elpd_waic)
        loo = az.loo(data)
        return az.summary(data), float(loo.elpd_loo)
    import arviz_stats as azs

    return azs.summary(data), float(azs.loo(data).elpd)


def test_summary_and_loo_run_on_the_export(arviz_backend):
    bnn = _bnn()
    x, y = _data()
    samples = draw_samples(bnn, _flat_guide(bnn), 100, chains=2)
    data = to_inference_data(bnn, samples, (x, y))
    native_summary, native_elpd = _native_summary_and_loo(arviz_backend, data)
    summary = arviz_compat.summary(data)
    assert list(summary.index) == list(native_summary.index)
    assert list(summary.columns) == list(arviz_compat.SUMMARY_COLUMNS)
    assert len(summary) == bnn.num_random_parameters()
    assert "fc1.weight[0, 1]" in summary.index
    assert summary["r_hat"].max() < 1.1  # independent draws from one guide
    loo = arviz_compat.loo(data)
    assert loo.elpd == pytest.approx(native_elpd, rel=1e-12)
    assert math.isfinite(loo.elpd) and math.isfinite(loo.se) and loo.p > 0
    assert (loo.n_samples, loo.n_data_points, loo.pareto_k.shape) == (200, N, (N,))
    log_lik = arviz_compat.group(data, "log_likelihood")[LOG_LIKELIHOOD_VAR].values
    lppd = float(np.sum(np.log(np.mean(np.exp(log_lik.reshape(200, N)), axis=0))))
    assert loo.elpd <= lppd + 1e-6  # leaving a point out can only cost predictive density here
    assert loo.p == pytest.approx(lppd - loo.elpd, rel=1e-9)  # p_loo = lppd - elpd_loo (float64 log-likelihoods)


def test_loo_of_a_wide_posterior_is_finite_and_equals_the_float64_computation(arviz_backend):
    # Per-example log-likelihoods spanning ~370 nats: PSIS exponentiates log-weights down to float64's ~-708, and a
    # float32 export underflowed below ~-103, so the Pareto fit gave elpd = NaN (float64: -2925.94).
    from pyro_bnn.likelihoods import Gaussian

    torch.manual_seed(0)
    n = 20
    x = torch.randn(n, 1)
    y = 2 * x + 0.1 * torch.randn(n, 1)
    bnn = BNN(nn.Linear(1, 1), NormalPrior(0.0, 1.0), Gaussian(n, scale=0.1))
    samples = {"weight": 2 + 0.4 * torch.randn(1, 400, 1, 1), "bias": 0.4 * torch.randn(1, 400, 1)}
    data = to_inference_data(bnn, samples, (x, y))
    log_lik = arviz_compat.group(data, "log_likelihood")[LOG_LIKELIHOOD_VAR].values
    # The oracle: log N(y | w x + b, 0.1) computed in float64 from the draws, exported by hand.
    w, b = samples["weight"].double().reshape(400, 1, 1), samples["bias"].double().reshape(400, 1)
    mean = (x.double() @ w.transpose(-1, -2)).squeeze(-1) + b  # (400, n)
    exact = torch.distributions.Normal(mean, 0.1).log_prob(y.double().reshape(1, n)).reshape(1, 400, n)
    np.testing.assert_allclose(log_lik, exact.numpy(), rtol=1e-5, atol=1e-4)  # the network runs in float32
    by_hand = arviz_compat.from_dicts(
        {k: v.double().numpy() for k, v in samples.items()},
        log_likelihood={LOG_LIKELIHOOD_VAR: exact.numpy()},
        dims={LOG_LIKELIHOOD_VAR: [OBS_DIM]},
    )
    loo, oracle = arviz_compat.loo(data), arviz_compat.loo(by_hand)
    assert math.isfinite(loo.elpd) and math.isfinite(oracle.elpd)
    assert loo.elpd == pytest.approx(oracle.elpd, rel=1e-5)
    assert loo.elpd == pytest.approx(-2925.94, abs=0.01)
    assert log_lik.dtype == np.float64 and posterior_dataset(data)["weight"].values.dtype == np.float64


def test_thinned_sites_and_site_selection(arviz_backend):
    bnn = _bnn()
    samples = draw_samples(bnn, _flat_guide(bnn), 10)
    data = to_inference_data(bnn, samples, sites=["fc2.weight", "out.bias"], max_scalars_per_site=4)
    posterior = posterior_dataset(data)
    assert list(posterior.data_vars) == ["fc2.weight", "out.bias"]
    assert set(arviz_compat.group_names(data)) == {"posterior"}
    thinned = posterior["fc2.weight"]
    assert thinned.dims == ("chain", "draw", "fc2.weight_flat")
    assert thinned["fc2.weight_flat"].values.tolist() == [0, 8, 16, 24]
    np.testing.assert_array_equal(thinned.values, samples["fc2.weight"].reshape(1, 10, 25)[:, :, [0, 8, 16, 24]])
    assert posterior["out.bias"].dims == ("chain", "draw", "out.bias_dim_0")  # 2 scalars: kept whole
    with pytest.raises(ValueError, match="no values for site"):
        to_inference_data(bnn, samples, sites=["fc9.weight"])
    with pytest.raises(ValueError, match=r"\(chain, draw, \*shape\)"):
        to_inference_data(bnn, {"fc1.bias": torch.randn(5)}, sites=["fc1.bias"])


def test_convergence_summary_of_independent_chains_is_clean(arviz_backend):
    g = torch.Generator().manual_seed(1)
    values = torch.randn(4, 500, 3, generator=g)
    summary = convergence_summary(to_inference_data(_bnn(), {"theta": values}))
    assert summary["num_scalars"] == 3
    assert summary["rhat_max"] < 1.01
    assert summary["ess_bulk_min"] > 1200
    assert summary["ess_tail_min"] > 1000
    shifted = values + torch.arange(4.0).view(4, 1, 1)  # chains in different places
    assert convergence_summary(to_inference_data(_bnn(), {"theta": shifted}))["rhat_max"] > 1.5


def test_convergence_summary_is_the_same_number_in_both_generations(both_arviz_backends, monkeypatch):
    g = torch.Generator().manual_seed(3)
    values = torch.randn(3, 200, 4, generator=g).cumsum(1) * 0.2 + torch.randn(3, 200, 4, generator=g)  # autocorrelated
    summaries = {}
    for name in arviz_compat.BACKENDS:
        monkeypatch.setenv(arviz_compat.ENV_VAR, name)
        summaries[name] = convergence_summary(to_inference_data(_bnn(), {"theta": values}))
    assert summaries[arviz_compat.LEGACY] == pytest.approx(summaries[arviz_compat.REFACTORED], rel=1e-9)
    assert summaries[arviz_compat.LEGACY]["ess_bulk_min"] < 300  # the chains do mix slowly: a non-trivial check


# ------------------------------------------------------------------------------------------ normality
def test_normality_scores_match_scipy_and_are_near_zero_for_normal_draws():
    g = torch.Generator().manual_seed(2)
    draws = 0.3 + 2.0 * torch.randn(2, 2000, 3, generator=g, dtype=torch.float64)
    scores = normality_scores({"w": draws})["w"]
    assert scores["num_draws"] == 4000
    pooled = draws.reshape(-1, 3).numpy()
    np.testing.assert_allclose(scores["skewness"].numpy(), scipy.stats.skew(pooled, axis=0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(scores["excess_kurtosis"].numpy(), scipy.stats.kurtosis(pooled, axis=0), rtol=1e-9)
    for column in range(3):
        value = pooled[:, column]
        ks = scipy.stats.kstest(value, "norm", args=(value.mean(), value.std())).statistic
        assert float(scores["ks_distance"][column]) == pytest.approx(ks, rel=1e-9)
    assert scores["skewness"].abs().max() < 0.1
    assert scores["excess_kurtosis"].abs().max() < 0.2
    assert scores["ks_distance"].max() < 0.02


def test_a_bimodal_mixture_posterior_is_flagged():
    torch.manual_seed(0)
    net = add_node_noise(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)))
    bnn = BNN(net, NodeNoisePrior(0.1), Categorical(10))
    guide = NodeNoiseMixture(bnn, 2)
    guide(torch.randn(2, 3), torch.zeros(2, dtype=torch.long))
    with torch.no_grad():
        guide.locs[0].fill_(0.0)
        guide.locs[1].fill_(2.0)
        guide.scale_raw.fill_(math.log(math.expm1(0.1)))  # sd 0.1: modes 20 sd apart
    samples = draw_samples(bnn, guide, 1000, chains=2)
    for site, scores in normality_scores(samples).items():
        assert (scores["excess_kurtosis"] < -1.8).all(), site  # two equal spikes: -2; a Normal: 0
        assert (scores["skewness"].abs() < 0.2).all()
        assert (scores["ks_distance"] > 0.1).all()
    with pytest.raises(ValueError, match="sample_dims"):
        normality_scores(samples, sample_dims=3)


def test_draws_of_any_model_export_with_their_own_names_and_observed_data():
    from pyro_bnn.diagnostics.arviz_export import draws_to_inference_data, posterior_dataset

    samples = {"sigma": torch.rand(2, 5), "net.weight": torch.randn(2, 5, 3, 4)}
    idata = draws_to_inference_data(samples, observed={"y": torch.arange(6.0)})
    posterior = posterior_dataset(idata)
    assert posterior["net.weight"].dims == ("chain", "draw", "net.weight_dim_0", "net.weight_dim_1")
    np.testing.assert_allclose(posterior["sigma"].values, samples["sigma"].numpy())
    assert "observed_data" in arviz_compat.group_names(idata)
    with pytest.raises(ValueError, match="nothing to export"):
        draws_to_inference_data({})
    with pytest.raises(ValueError, match="same \\(chain, draw\\)"):
        draws_to_inference_data({"a": torch.zeros(2, 5), "b": torch.zeros(3, 5)})


def test_draws_without_a_chain_dimension_are_refused_not_read_as_chains():
    bnn = _bnn()
    samples = draw_samples(bnn, _flat_guide(bnn), 20, chains=1)
    flat = {name: value[0] for name, value in samples.items()}  # (S, *shape): what LaplacePosterior.sample gives
    name = bnn.site_names[0]
    with pytest.raises(ValueError, match=rf"^samples must be \(chain, draw, \*site_shape\): '{name}' is \(20, "):
        to_inference_data(bnn, flat)
    assert to_inference_data(bnn, {k: v.unsqueeze(0) for k, v in flat.items()}) is not None


def test_normality_scores_take_the_draws_dict_in_one_line_errors():
    with pytest.raises(ValueError, match=r"^samples must be a dict \{site: tensor\} .* got list"):
        normality_scores([torch.randn(2, 10)])
    with pytest.raises(ValueError, match="^site 'w' must be a torch.Tensor, got ndarray"):
        normality_scores({"w": np.zeros((2, 10))})
