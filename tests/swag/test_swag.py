"""SWAG against oracles: its moments on a hand-made trajectory, the covariance of its draws, and on Bayesian linear
regression (the ``conjugate`` fixture) its mean at the exact posterior mean and its spread growing with the learning
rate, as the stationary distribution of constant-rate SGD does (Mandt et al., 2017; the SWAG paper's Section 3)."""

from __future__ import annotations

import functools

import pytest
import torch

from pyro_bnn.data import BatchLoader
from pyro_bnn.predict import predict
from pyro_bnn.swag import (
    MultiSwag,
    SwagDivergenceError,
    SwagMoments,
    SwagOptions,
    SwagPosterior,
    fit_multiswag,
    fit_swag,
)


def test_the_moments_of_a_hand_made_trajectory_are_exact():
    g = torch.Generator().manual_seed(0)
    trajectory = torch.randn(7, 5, generator=g, dtype=torch.float64)
    moments = SwagMoments(5, rank=3)
    running = []
    for n, theta in enumerate(trajectory, start=1):
        moments.collect(theta)
        running.append(theta - trajectory[:n].mean(0))  # the deviation from the mean after this iterate
    torch.testing.assert_close(moments.mean, trajectory.mean(0))
    torch.testing.assert_close(moments.sq_mean, (trajectory**2).mean(0))
    torch.testing.assert_close(moments.variance, trajectory.var(0, unbiased=False))
    torch.testing.assert_close(moments.deviations, torch.stack(running[-3:]))
    assert moments.count == 7


def test_a_diagonal_trajectory_keeps_no_deviations_and_floors_its_variance():
    moments = SwagMoments(2, rank=0)
    for _ in range(3):
        moments.collect(torch.tensor([1.0, 2.0]))
    assert moments.deviations.shape == (0, 2)
    assert (moments.variance > 0).all() and moments.variance.max() < 1e-20


def _posterior(rank: int, seed: int = 0) -> SwagPosterior:
    g = torch.Generator().manual_seed(1)
    mean = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    variance = torch.tensor([0.2, 0.05, 0.1], dtype=torch.float64)
    deviations = torch.randn(rank, 3, generator=g, dtype=torch.float64) * 0.4
    return SwagPosterior(["a", "b"], [(2,), (1,)], mean, variance, deviations, 10, seed=seed)


@pytest.mark.parametrize("rank", [0, 4])
def test_draws_follow_the_stated_covariance(rank):
    posterior = _posterior(rank)
    draws = posterior.sample_flat(0, 20_000)
    expected = posterior.covariance()
    if rank:  # SWAG: half the diagonal plus half the low-rank part
        low_rank = posterior.deviations.T @ posterior.deviations / 3
        torch.testing.assert_close(expected, 0.5 * (torch.diag(posterior.variance) + low_rank))
    else:
        torch.testing.assert_close(expected, torch.diag(posterior.variance))
    torch.testing.assert_close(draws.mean(0), posterior.mean, atol=0.015, rtol=0)
    # each entry's Monte Carlo sd is at most ~0.2 * sqrt(2 / 20000) = 0.002; 0.01 fails a wrong scale or rank
    torch.testing.assert_close(torch.cov(draws.T), expected, atol=0.01, rtol=0)


def test_draws_are_reproducible_and_do_not_depend_on_chunks():
    posterior = _posterior(4, seed=3)
    whole = posterior.sample(10)
    parts = [posterior.sample(4), posterior.sample(6, start=4)]
    for name in ("a", "b"):
        torch.testing.assert_close(whole[name], torch.cat([part[name] for part in parts]))
    assert whole["a"].shape == (10, 2) and whole["b"].shape == (10, 1)
    assert not torch.equal(whole["a"], _posterior(4, seed=4).sample(10)["a"])


def _swag(conjugate, lr, epochs=300, **options):
    loader = BatchLoader(conjugate.x, conjugate.y, batch_size=10, shuffle=True, seed=1)
    settings = {"epochs": epochs, "pretrain_epochs": 50, "collect_every": 1, **options}
    return fit_swag(conjugate.bnn, loader, SwagOptions(lr=lr, **settings), progress=False)


def test_on_linear_regression_the_mean_is_the_posterior_mean(conjugate):
    posterior = _swag(conjugate, lr=0.02)
    # the posterior sd is 0.156; a missing prior moves the mean by ~0.03, a wrong N/B scale by more
    torch.testing.assert_close(posterior.mean, conjugate.mean, atol=0.005, rtol=0)
    assert posterior.count == 300 * 4 and posterior.rank == 20


def test_on_linear_regression_the_spread_grows_with_the_learning_rate(conjugate):
    variances = [_swag(conjugate, lr=lr).variance.mean().item() for lr in (0.01, 0.02, 0.04)]
    # measured 4.0e-5, 1.6e-4, 7.4e-4: each doubling of the rate widens the iterates (about 4x with reshuffled
    # minibatches, whose noise cancels over an epoch); a constant or shrinking spread fails
    assert variances[0] * 2 < variances[1] and variances[1] * 2 < variances[2]


def test_predict_scores_swag_and_its_swa_point_network(conjugate):
    posterior = _swag(conjugate, lr=0.02, epochs=40)
    prediction = predict(conjugate.bnn, posterior, conjugate.x, point=True)
    assert prediction.means.shape == (30, len(conjugate.x), 1)
    swa = conjugate.x @ posterior.mean[:2].float() + posterior.mean[2].float()
    torch.testing.assert_close(prediction.point.means.reshape(-1), swa, atol=1e-5, rtol=0)
    assert prediction.means.std(0).mean() > 1e-4  # the draws differ


def test_a_saved_posterior_loads_back_without_pickle(tmp_path):
    posterior = _posterior(4, seed=2)
    posterior.save(tmp_path / "swag.pt")
    loaded = SwagPosterior.load(tmp_path / "swag.pt")
    torch.testing.assert_close(loaded.sample(5)["a"], posterior.sample(5)["a"])
    assert [p.name for p in tmp_path.iterdir()] == ["swag.pt"]  # no temporary file left
    torch.save({"format": "other"}, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match=r"bad.pt is not a pyro_bnn SWAG posterior file: expected format"):
        SwagPosterior.load(tmp_path / "bad.pt")
    # as checkpoints are read: an empty file was a bare EOFError, a cut one torch's lines without the path, a
    # hostile one torch's advice to load with weights_only=False
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty.pt is not a readable SWAG posterior file: the file is empty"):
        SwagPosterior.load(tmp_path / "empty.pt")
    data = (tmp_path / "swag.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut.pt is not a readable SWAG posterior file \(truncated or corrupt"):
        SwagPosterior.load(tmp_path / "cut.pt")
    torch.save({"format": "pyro_bnn.swag/1", "x": functools.partial(print)}, tmp_path / "evil.pt")
    with pytest.raises(ValueError, match=r"^refusing to load .*evil.pt") as info:
        SwagPosterior.load(tmp_path / "evil.pt")
    assert "weights_only" not in str(info.value)


def test_multiswag_takes_sample_i_from_member_i_mod_m():
    members = [_posterior(4, seed=s) for s in (0, 1)]
    mixture = MultiSwag(members)
    draws = mixture.sample(4)["a"]
    torch.testing.assert_close(draws[0], members[0].sample(1)["a"][0])
    torch.testing.assert_close(draws[1], members[1].sample(1)["a"][0])
    torch.testing.assert_close(draws[2], members[0].sample(1, start=1)["a"][0])


def test_multiswag_members_start_apart(conjugate):
    loader = BatchLoader(conjugate.x, conjugate.y, batch_size=10, shuffle=True, seed=1)
    options = SwagOptions(lr=0.02, epochs=5, pretrain_epochs=0, rank=2)
    mixture = fit_multiswag(conjugate.bnn, loader, options, 2, progress=False)
    assert len(mixture.members) == 2
    assert not torch.allclose(mixture.members[0].mean, mixture.members[1].mean)


def test_a_loader_of_another_size_and_data_that_is_not_finite_are_named(conjugate):
    options = SwagOptions(lr=0.02, epochs=2, rank=2)
    # docs/swag.md promises the first; the run went on with the wrong N/B scale
    with pytest.raises(ValueError, match=r"^the loader holds 30 examples but the likelihood's dataset_size is 40;"):
        fit_swag(conjugate.bnn, BatchLoader(conjugate.x[:30], conjugate.y[:30], batch_size=10), options, progress=False)
    # a NaN input was reported as "SWAG diverged ...; lower lr"
    x = conjugate.x.clone()
    x[5, 1] = float("nan")
    with pytest.raises(ValueError, match=r"^the minibatch of step 1 holds NaN or infinite inputs"):
        fit_swag(conjugate.bnn, BatchLoader(x, conjugate.y, batch_size=40), options, progress=False)
    with pytest.raises(ValueError, match=r"^init\['bias'\] holds NaN or infinite values"):
        init = {"weight": torch.zeros(1, 2), "bias": torch.tensor([float("inf")])}
        fit_swag(
            conjugate.bnn, BatchLoader(conjugate.x, conjugate.y, batch_size=40), options, init=init, progress=False
        )


def test_one_collected_iterate_is_warned_about(conjugate):
    loader = BatchLoader(conjugate.x, conjugate.y, batch_size=40)
    with pytest.warns(UserWarning, match=r"^SWAG collected one iterate: its variance is zero"):
        posterior = fit_swag(conjugate.bnn, loader, SwagOptions(lr=0.02, epochs=1, rank=0), progress=False)
    assert posterior.count == 1


def test_multiswag_from_one_start_needs_a_loader_the_seed_shuffles(conjugate):
    # a BatchLoader shuffles by its own seed: from the network's start every member was the same SWAG run
    options = SwagOptions(lr=0.02, epochs=3, pretrain_epochs=0, rank=2)
    loader = BatchLoader(conjugate.x, conjugate.y, batch_size=10, shuffle=True, seed=1)
    with pytest.raises(ValueError, match=r"^MultiSWAG member 1 followed member 0's trajectory exactly: .*init='prior'"):
        fit_multiswag(conjugate.bnn, loader, options, 3, init="network", progress=False)
    shuffled = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(conjugate.x, conjugate.y), 10, shuffle=True)
    mixture = fit_multiswag(conjugate.bnn, shuffled, options, 2, init="network", progress=False)
    assert not torch.allclose(mixture.members[0].mean, mixture.members[1].mean)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"lr": 0.0, "epochs": 1}, "lr"),
        ({"lr": 0.1, "epochs": 0}, "epochs"),
        ({"lr": 0.1, "epochs": 1, "rank": 1}, "rank=1"),
        ({"lr": 0.1, "epochs": 1, "momentum": 1.0}, "momentum"),
        ({"lr": 0.1, "epochs": 1, "collect_every": 0}, "collect_every"),
    ],
)
def test_bad_options_get_one_line_errors(options, message):
    with pytest.raises(ValueError, match=message):
        SwagOptions(**options)


def test_a_diverging_trajectory_raises(conjugate):
    with pytest.raises(SwagDivergenceError, match="SWAG diverged"):
        _swag(conjugate, lr=1e4, epochs=2)


def test_a_start_of_the_wrong_shape_is_named_without_chains(conjugate):
    loader = BatchLoader(conjugate.x, conjugate.y, batch_size=10)
    start = {"weight": torch.zeros(3, 2), "bias": torch.zeros(1)}
    with pytest.raises(ValueError, match=r"^init\['weight'\] has shape \(3, 2\); expected \(1, 2\)$"):
        fit_swag(conjugate.bnn, loader, SwagOptions(lr=0.01, epochs=1, pretrain_epochs=0), init=start, progress=False)


@pytest.mark.parametrize("pretrain_epochs", [0, 1, 2, 3])
def test_collect_every_counts_only_the_steps_of_the_collection_phase(conjugate, pretrain_epochs):
    loader = BatchLoader(conjugate.x, conjugate.y, batch_size=10)  # 4 steps an epoch
    options = SwagOptions(lr=0.01, epochs=2, pretrain_epochs=pretrain_epochs, collect_every=3, rank=0)
    # 8 collection steps, one iterate after steps 3 and 6 of them: 2 whatever came before (the pre-training
    # steps were counted too, giving 3 iterates after 1 or 3 pre-training epochs)
    assert fit_swag(conjugate.bnn, loader, options, progress=False).count == 2


def test_the_iterate_is_collected_after_collect_every_steps_at_the_swag_rate(conjugate):
    loader = BatchLoader(conjugate.x, conjugate.y, batch_size=10)  # 4 steps an epoch
    # The same SGD steps at one rate, split as 4 pre-training + 4 collecting or as 8 collecting: both collect the
    # weights after SGD step 7 alone (3 steps into the split's collection; counting the pre-training steps too
    # collected step 6's)
    split = SwagOptions(lr=0.01, epochs=1, pretrain_epochs=1, collect_every=3, rank=0)
    whole = SwagOptions(lr=0.01, epochs=2, collect_every=7, rank=0)
    with pytest.warns(UserWarning, match="one iterate"):
        first = fit_swag(conjugate.bnn, loader, split, progress=False)
    with pytest.warns(UserWarning, match="one iterate"):
        second = fit_swag(conjugate.bnn, loader, whole, progress=False)
    assert first.count == second.count == 1
    torch.testing.assert_close(first.mean, second.mean, rtol=0, atol=0)


@pytest.mark.parametrize("pretrain_epochs", [0, 1])
def test_collect_every_beyond_the_collection_phase_collects_nothing_after_pre_training(conjugate, pretrain_epochs):
    loader = BatchLoader(conjugate.x, conjugate.y, batch_size=10)  # 4 steps an epoch
    options = SwagOptions(lr=0.01, epochs=1, pretrain_epochs=pretrain_epochs, collect_every=5, rank=0)
    message = r"^no iterate was collected: collect_every=5 is more than the steps of the collection phase \(1 epoch"
    with pytest.raises(ValueError, match=message):
        fit_swag(conjugate.bnn, loader, options, progress=False)
