"""NUTS and VI against the exact posterior of Bayesian linear regression, the flat potential against Pyro's, the
hidden-unit alignment on constructed permutations and sign flips, the assignment solver, and the predictive
distances on hand-computed cases."""

from __future__ import annotations

import itertools
import math

import pyro
import pytest
import scipy.optimize
import scipy.stats
import torch
from matplotlib.figure import Figure
from pyro.infer.mcmc.util import initialize_model
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.diagnostics.nuts import (
    FLAT_SITE,
    BNNPotential,
    HiddenLayer,
    align_hidden_units,
    hidden_layers,
    linear_assignment,
    predictive_distance,
    run_nuts,
    wasserstein_1d,
)
from pyro_bnn.guides import parse_guide
from pyro_bnn.infer import Trainer
from pyro_bnn.likelihoods import Categorical, Gaussian
from pyro_bnn.models import build_model
from pyro_bnn.plots.posterior_shape import plot_marginals, plot_vi_vs_nuts
from pyro_bnn.priors import LaplacePrior, NormalPrior

SIGMA = 0.5


def _regression(n=40, d=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.tensor([1.0, -2.0])[:d]
    y = (x @ w + 0.3 + SIGMA * torch.randn(n, generator=g)).unsqueeze(-1)
    return x, y


def _linear_bnn(n=40, d=2, prior=None) -> BNN:
    torch.manual_seed(0)
    return BNN(nn.Linear(d, 1), prior or NormalPrior(0.0, 1.0), Gaussian(n, scale=SIGMA))


def _exact_posterior(x, y):
    """Mean and covariance of (w, b) under N(0, I) and y ~ N(x w + b, SIGMA^2): the conjugate closed form."""
    features = torch.cat([x, torch.ones(len(x), 1)], 1).double()
    precision = torch.eye(features.shape[1], dtype=torch.float64) + features.T @ features / SIGMA**2
    cov = torch.linalg.inv(precision)
    return cov @ features.T @ y.double().squeeze(-1) / SIGMA**2, cov, precision


def _flat(samples):
    return torch.cat([samples["weight"].flatten(2), samples["bias"].flatten(2)], -1).reshape(-1, 3).double()


# ------------------------------------------------------------------------------------ linear regression
def test_nuts_recovers_the_exact_linear_regression_posterior():
    x, y = _regression()
    mean, cov, _ = _exact_posterior(x, y)
    samples = run_nuts(_linear_bnn(), x, y, num_chains=2, num_samples=200, warmup=100, seed=0, num_threads=1)
    assert samples.potential == "flat"
    assert samples["weight"].shape == (2, 200, 1, 2) and samples["bias"].shape == (2, 200, 1)
    assert sum(stats.divergences for stats in samples.stats) == 0
    assert all(0.6 < stats.mean_accept_prob <= 1.0 for stats in samples.stats)  # adaptation targets 0.8
    draws = _flat(samples)
    sd = cov.diagonal().sqrt()
    # Monte Carlo error of 400 draws is ~ sd / 20; a wrong posterior (say the prior, or sd off by 30 %) fails.
    torch.testing.assert_close(draws.mean(0), mean, atol=float(0.25 * sd.max()), rtol=0)
    torch.testing.assert_close(draws.std(0), sd, atol=0, rtol=0.2)
    correlation = torch.corrcoef(draws.T)
    exact = cov / torch.outer(sd, sd)
    torch.testing.assert_close(correlation, exact, atol=0.15, rtol=0)


def test_vi_recovers_the_mean_and_the_mean_field_variances():
    x, y = _regression()
    mean, _, precision = _exact_posterior(x, y)
    bnn = _linear_bnn()
    trainer = Trainer(
        bnn,
        parse_guide("flat:rel=1").build,
        optim=pyro.optim.Adam({"lr": 0.05}),
        num_particles=16,
        seed=0,
        progress=False,
    )
    loader = BatchLoader(x, y, batch_size=len(x), shuffle=False)
    trainer.fit(loader, 300)
    loc, scale = trainer.guide.flat_loc_scale()
    # The optimal mean-field Gaussian has the exact mean and variances 1 / diag(precision) (not diag(cov)).
    torch.testing.assert_close(loc.detach().double(), mean, atol=0.03, rtol=0)
    torch.testing.assert_close(scale.detach().double(), precision.diagonal().rsqrt(), atol=0, rtol=0.15)


def test_the_flat_potential_is_pyros_potential_of_the_model():
    x, y = _regression()
    for prior in (NormalPrior(0.3, 2.0), LaplacePrior(0.0, 1.5)):
        bnn = _linear_bnn(prior=prior)
        _, potential, _, _ = initialize_model(bnn, model_args=(x, y))
        flat = BNNPotential(bnn, x, y)
        assert (flat.normal is not None) == isinstance(prior, NormalPrior)
        for seed in range(3):
            g = torch.Generator().manual_seed(seed)
            values = {"weight": torch.randn(1, 2, generator=g), "bias": torch.randn(1, generator=g)}
            expected = potential(values)
            torch.testing.assert_close(flat({FLAT_SITE: flat.flatten(values)}), expected, rtol=1e-5, atol=1e-4)


def test_chains_start_from_their_own_prior_draws_and_repeat_under_a_seed():
    x, y = _regression(n=10)
    bnn = _linear_bnn(n=10)
    first = run_nuts(bnn, x, y, num_chains=2, num_samples=5, warmup=5, seed=3)
    again = run_nuts(bnn, x, y, num_chains=2, num_samples=5, warmup=5, seed=3)
    torch.testing.assert_close(first["weight"], again["weight"])
    assert not torch.equal(first["weight"][0], first["weight"][1])
    assert [stats.seed for stats in first.stats] == [3000, 3001]
    # With no warm-up and tiny steps the chain stays where it was put: init_values (one per chain) are used.
    starts = {"weight": torch.tensor([[[5.0, 5.0]], [[-5.0, -5.0]]]), "bias": torch.zeros(1)}
    stuck = run_nuts(bnn, x, y, num_chains=2, num_samples=1, warmup=0, init_values=starts, max_tree_depth=1)
    assert stuck["weight"][0, 0].mean() > 2 and stuck["weight"][1, 0].mean() < -2


def test_model_potential_runs_for_hierarchical_priors_and_bad_inputs_fail():
    from pyro_bnn.priors import parse_prior

    x, y = _regression(n=10)
    torch.manual_seed(0)
    bnn = BNN(nn.Linear(2, 1), parse_prior("hierarchical:normal,halfnormal,1"), Gaussian(10, scale=SIGMA))
    samples = run_nuts(bnn, x, y, num_chains=1, num_samples=4, warmup=4)
    assert samples.potential == "model"
    assert set(samples) == {*bnn.hyper_site_names, *bnn.site_names}
    assert all(value.shape[:2] == (1, 4) for value in samples.values())
    assert (samples[bnn.hyper_site_names[0]] > 0).all()  # constrained space
    with pytest.raises(ValueError, match="full-batch likelihood"):
        run_nuts(_linear_bnn(n=40), x, y)
    with pytest.raises(ValueError, match="flat potential needs"):
        run_nuts(bnn, x, y, potential="flat")


# ------------------------------------------------------------------------------------------- alignment
def _mlp_samples(chains=2, draws=30, seed=0):
    """Samples of a 2-4-3-2 tanh net: every chain is one set of weights plus small noise."""
    g = torch.Generator().manual_seed(seed)
    shapes = {
        "fc1.weight": (4, 2),
        "fc1.bias": (4,),
        "fc2.weight": (3, 4),
        "fc2.bias": (3,),
        "out.weight": (2, 3),
        "out.bias": (2,),
    }
    centre = {name: 2 * torch.randn(shape, generator=g) for name, shape in shapes.items()}
    samples = {
        name: centre[name] + 0.05 * torch.randn(chains, draws, *shape, generator=g) for name, shape in shapes.items()
    }
    return centre, samples


LAYERS = [
    HiddenLayer("fc1.weight", "fc2.weight", "fc1.bias", odd=True),
    HiddenLayer("fc2.weight", "out.weight", "fc2.bias", odd=True),
]


def _relabel(samples, chain, perm1, sign1, perm2, sign2):
    """Chain ``chain`` with layer 1's units permuted (new i = old perm[i]) and sign-flipped, then layer 2's."""
    out = {name: value.clone() for name, value in samples.items()}
    p1, s1, p2, s2 = (torch.tensor(v) for v in (perm1, sign1, perm2, sign2))
    c = out
    c["fc1.weight"][chain] = c["fc1.weight"][chain][:, p1] * s1[:, None].float()
    c["fc1.bias"][chain] = c["fc1.bias"][chain][:, p1] * s1.float()
    c["fc2.weight"][chain] = c["fc2.weight"][chain][:, :, p1] * s1.float()
    c["fc2.weight"][chain] = c["fc2.weight"][chain][:, p2] * s2[:, None].float()
    c["fc2.bias"][chain] = c["fc2.bias"][chain][:, p2] * s2.float()
    c["out.weight"][chain] = c["out.weight"][chain][:, :, p2] * s2.float()
    return out


def _outputs(samples, chain):
    x = torch.linspace(-2, 2, 14).reshape(7, 2)
    h = torch.tanh(x @ samples["fc1.weight"][chain].transpose(-1, -2) + samples["fc1.bias"][chain].unsqueeze(-2))
    h = torch.tanh(h @ samples["fc2.weight"][chain].transpose(-1, -2) + samples["fc2.bias"][chain].unsqueeze(-2))
    return h @ samples["out.weight"][chain].transpose(-1, -2) + samples["out.bias"][chain].unsqueeze(-2)


def test_alignment_undoes_a_known_permutation_and_sign_flip():
    _, samples = _mlp_samples()
    perm1, sign1 = [2, 0, 3, 1], [1, -1, -1, 1]
    perm2, sign2 = [1, 2, 0], [-1, 1, -1]
    relabelled = _relabel(samples, 1, perm1, sign1, perm2, sign2)
    torch.testing.assert_close(_outputs(relabelled, 1), _outputs(samples, 1), atol=1e-5, rtol=0)  # same function
    aligned, maps = align_hidden_units(relabelled, 0, LAYERS, return_permutations=True)
    for name in samples:
        torch.testing.assert_close(aligned[name], samples[name], atol=1e-6, rtol=0)
    # Chain 1's unit i is the relabelled chain's unit inv(perm)[i], with the same sign.
    inverse1 = torch.argsort(torch.tensor(perm1))
    assert maps[0][0][1].tolist() == inverse1.tolist()
    assert maps[0][1][1].tolist() == torch.tensor(sign1, dtype=torch.float)[inverse1].tolist()
    assert maps[0][0][0].tolist() == [0, 1, 2, 3] and maps[0][1][0].tolist() == [1.0] * 4  # the reference chain
    torch.testing.assert_close(_outputs(aligned, 1), _outputs(relabelled, 1), atol=1e-5, rtol=0)


def test_alignment_to_given_reference_weights_and_without_sign_flips():
    centre, samples = _mlp_samples(chains=3)
    relabelled = _relabel(samples, 2, [3, 2, 1, 0], [1, 1, 1, 1], [2, 1, 0], [1, 1, 1])
    relabelled = _relabel(relabelled, 0, [1, 0, 2, 3], [1, 1, 1, 1], [0, 2, 1], [1, 1, 1])
    even = [HiddenLayer(layer.weight_in, layer.weight_out, layer.bias_in, odd=False) for layer in LAYERS]
    aligned = align_hidden_units(relabelled, centre, even)
    for name in samples:
        torch.testing.assert_close(aligned[name], samples[name], atol=1e-6, rtol=0)
    flipped = _relabel(samples, 1, [0, 1, 2, 3], [-1, 1, 1, 1], [0, 1, 2], [1, 1, 1])
    assert not torch.allclose(align_hidden_units(flipped, 0, even)["fc1.weight"][1], samples["fc1.weight"][1])
    torch.testing.assert_close(align_hidden_units(flipped, 0, LAYERS)["fc1.weight"], samples["fc1.weight"])


def test_hidden_layers_of_zoo_mlps_know_which_activations_are_odd():
    torch.manual_seed(0)
    tanh = BNN(build_model("tanh-small", input_shape=(2,), num_classes=2), NormalPrior(0.0, 1.0), Categorical(5))
    assert hidden_layers(tanh) == [
        HiddenLayer("fc1.weight", "fc2.weight", "fc1.bias", odd=True),
        HiddenLayer("fc2.weight", "out.weight", "fc2.bias", odd=True),
    ]
    relu = BNN(build_model("mlp:6", input_shape=(3,), num_classes=2), NormalPrior(0.0, 1.0), Categorical(5))
    assert hidden_layers(relu) == [HiddenLayer("fc1.weight", "out.weight", "fc1.bias", odd=False)]


def test_linear_assignment_is_exact():
    g = torch.Generator().manual_seed(0)
    for n in (1, 2, 5, 7):
        for _ in range(5):
            cost = torch.randn(n, n, generator=g)
            best = min(itertools.permutations(range(n)), key=lambda p: float(cost[torch.arange(n), list(p)].sum()))
            found = linear_assignment(cost)
            total = float(cost[torch.arange(n), found].sum())
            assert total == pytest.approx(float(cost[torch.arange(n), list(best)].sum()), abs=1e-6)
            assert sorted(found.tolist()) == list(range(n))
    cost = torch.rand(30, 30, generator=g)
    rows, cols = scipy.optimize.linear_sum_assignment(cost.numpy())
    assert float(cost[torch.arange(30), linear_assignment(cost)].sum()) == pytest.approx(
        float(cost.numpy()[rows, cols].sum()), abs=1e-6
    )


# ------------------------------------------------------------------------------------ predictive distances
def test_wasserstein_1d_hand_values_and_scipy():
    a = torch.randn(200, 3, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(wasserstein_1d(a, a), torch.zeros(3))
    torch.testing.assert_close(wasserstein_1d(a, a + 0.7), torch.full((3,), 0.7), atol=1e-5, rtol=0)
    # CDFs of {0, 1} and {0.5, 0.5, 1.5, 1.5} differ by 1/2 on [0, 0.5) and on [1, 1.5): W1 = 1/4 + 1/4.
    hand = wasserstein_1d(torch.tensor([[0.0], [1.0]]), torch.tensor([[0.5], [0.5], [1.5], [1.5]]))
    torch.testing.assert_close(hand, torch.tensor([0.5]))
    b = torch.rand(77, 3, generator=torch.Generator().manual_seed(1)).double()
    for column in range(3):
        expected = scipy.stats.wasserstein_distance(a[:, column].numpy(), b[:, column].numpy())
        assert float(wasserstein_1d(a.double(), b)[column]) == pytest.approx(expected, rel=1e-9)


def test_predictive_distance_kl_and_w1():
    g = torch.Generator().manual_seed(0)
    p1 = torch.rand(50, 4, generator=g) * 0.5 + 0.25
    probs = torch.stack([1 - p1, p1], -1)  # (S, N, C)
    torch.testing.assert_close(predictive_distance(probs, probs), torch.zeros(4))
    torch.testing.assert_close(predictive_distance(probs, probs, kind="w1"), torch.zeros(4))
    shifted = torch.stack([0.9 - p1, p1 + 0.1], -1)
    torch.testing.assert_close(predictive_distance(probs, shifted, kind="w1"), torch.full((4,), 0.1), atol=1e-6, rtol=0)
    half = torch.full((3, 1, 2), 0.5)
    quarter = torch.tensor([0.25, 0.75]).expand(3, 1, 2)
    # KL((1/2, 1/2) || (1/4, 3/4)) = 1/2 log 2 + 1/2 log(2/3) = 1/2 log(4/3).
    torch.testing.assert_close(predictive_distance(half, quarter), torch.tensor([0.5 * math.log(4 / 3)]))
    with pytest.raises(ValueError, match="kind"):
        predictive_distance(probs, probs, kind="tv")
    with pytest.raises(ValueError, match=r"\(S, N, C\)"):
        predictive_distance(probs[..., 0], probs[..., 0])


# -------------------------------------------------------------------------------------------------- plots
def test_posterior_shape_plots_draw():
    _, samples = _mlp_samples(chains=3, draws=40)
    figure = plot_marginals(samples, ["fc1.weight", "out.bias"], max_panels=5, comparison=samples)
    assert isinstance(figure, Figure) and sum(ax.get_visible() for ax in figure.axes) == 5
    figure = plot_marginals(samples, indices=[("fc2.weight", (2, 3))])
    assert "fc2.weight[2, 3]" in figure.axes[0].get_title()
    with pytest.raises(ValueError, match="does not fit"):
        plot_marginals(samples, indices=[("fc2.weight", (3, 0))])
    g = torch.Generator().manual_seed(0)
    grid = torch.stack(torch.meshgrid(torch.linspace(0, 1, 4), torch.linspace(0, 1, 5), indexing="ij"), -1)
    grid = grid.reshape(-1, 2)
    probs_a = torch.softmax(torch.randn(6, 20, 2, generator=g), -1)
    probs_b = torch.softmax(torch.randn(8, 20, 2, generator=g), -1)
    maps = plot_vi_vs_nuts(probs_a, probs_b, inputs=grid, grid_shape=(4, 5), x_train=grid, y_train=torch.arange(20) % 2)
    assert len([ax for ax in maps.axes if ax.get_title()]) == 6
    scatter = plot_vi_vs_nuts(probs_a, probs_b)
    assert scatter.axes[0].get_xlabel().startswith("NUTS")


# ---------------------------------------------------------------------------------------------- experiment
@pytest.mark.parametrize("task", ["classification", "regression"])
def test_nuts_reference_experiment_smoke(task, tmp_path):
    from pyro_bnn.reproduce.studies.nuts_reference import Settings, run

    settings = Settings(
        task=task, num_chains=2, num_samples=4, warmup=4, max_tree_depth=3, vi_epochs=2, vi_particles=2, vi_draws=8
    )
    result = run(settings, tmp_path)
    stem = "nuts-moons" if task == "classification" else "nuts-cubic"
    assert {p.name for p in tmp_path.iterdir()} == {
        f"{stem}{suffix}" for suffix in (".md", ".json", "-marginals.png", "-predictive.png")
    }
    text = (tmp_path / f"{stem}.md").read_text()
    assert "weights, aligned to chain 0" in text and "NUTS vs VI" in text
    assert len(result["nuts_chains"]) == 2
    assert set(result["weights"]["rhat_per_site"]) == set(result["weights"]["marginals_vs_chain0"]) - {"all"}
