"""Deep ensembles as a parameter source: M point networks predicted as an equally weighted mixture."""

from dataclasses import replace

import pytest
import torch
from pyro.infer.autoguide import AutoDelta
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.evaluation import entropy_decomposition, ood_metrics
from pyro_bnn.guides import init_to_network
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.predict import Ensemble, PointEstimate, predict
from pyro_bnn.priors import NormalPrior, nothing, weights_only
from pyro_bnn.runs import RunConfig, train_run
from pyro_bnn.runs.ensemble import load_ensemble

X = torch.randn(30, 4)
Y = torch.arange(30) % 3


def _net(seed, hidden=16):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 3))


def _deterministic(seed, hidden=16):
    """A network with no random site (what ``--guide mle`` trains)."""
    return BNN(_net(seed, hidden), NormalPrior(select=nothing), Categorical(100))


def _map_member(seed):
    """Random weights with a point estimate (AutoDelta, as ``--guide map``); biases stay module parameters."""
    bnn = BNN(_net(seed), NormalPrior(select=weights_only), Categorical(100))
    guide = AutoDelta(bnn, init_loc_fn=init_to_network(bnn))
    guide(X, Y)
    with torch.no_grad():
        for value in guide.median().values():
            value.add_(0.1 * torch.randn_like(value))  # point values away from the network's initial weights
    return bnn, guide


@pytest.mark.parametrize("kind", ["deterministic", "map"])
@pytest.mark.parametrize("copies", [1, 3])
def test_copies_of_one_network_predict_exactly_that_network(kind, copies):
    member = _deterministic(0) if kind == "deterministic" else _map_member(0)
    ensemble = Ensemble.from_networks([member] * copies)
    pred = predict(ensemble.bnn, ensemble, (X, Y))
    if kind == "deterministic":
        alone = predict(member, {}, (X, Y))
    else:
        bnn, guide = member
        alone = predict(bnn, PointEstimate(guide.median()), (X, Y))
    assert pred.probs.shape == (copies, 30, 3)
    # Bitwise: members that agree on every tensor leave no site to vary, so the ensemble's model is one plain
    # copy of the network and runs the same operations on the same values as the member alone.
    assert ensemble.bnn.sites == []
    for i in range(copies):
        assert torch.equal(pred.probs[i], alone.probs[0])
    assert torch.equal(pred.log_likelihood[0], alone.log_likelihood[0])
    # The metrics average over the S equal samples, and a float mean of S equal values may round off by an ulp.
    assert pred.metrics() == pytest.approx(alone.metrics(), rel=1e-6)


@pytest.mark.parametrize("kind", ["deterministic", "map"])
def test_two_members_give_the_mean_of_their_probabilities(kind):
    members = [_deterministic(1), _deterministic(2)] if kind == "deterministic" else [_map_member(1), _map_member(2)]
    ensemble = Ensemble.from_networks(members)
    pred = predict(ensemble.bnn, ensemble, X)
    alone = []
    for member in members:
        if kind == "deterministic":
            alone.append(predict(member, {}, X).probs[0])
        else:
            alone.append(predict(member[0], PointEstimate(member[1].median()), X).probs[0])
    assert pred.probs.shape == (2, 30, 3)
    # Not bitwise: the ensemble runs both members in one vmapped (batched) matmul, the members alone in plain
    # ones, and the kernels may round differently; a few float32 ulps of probabilities in [0, 1].
    for i in range(2):
        torch.testing.assert_close(pred.probs[i], alone[i], rtol=0, atol=1e-6)
    torch.testing.assert_close(pred.probs.mean(0), (alone[0] + alone[1]) / 2, rtol=0, atol=1e-6)
    assert pred.point is None and predict(ensemble.bnn, ensemble, X, point=True).point is None


def test_more_samples_than_members_cycle_through_them():
    ensemble = Ensemble.from_networks([_deterministic(1), _deterministic(2), _deterministic(3)])
    pred = predict(ensemble.bnn, ensemble, X, num_samples=6, chunk_size=4)  # a chunk crosses the cycle
    once = predict(ensemble.bnn, ensemble, X)
    assert once.probs.shape[0] == 3 and pred.probs.shape[0] == 6
    for i in range(6):
        torch.testing.assert_close(pred.probs[i], once.probs[i % 3], rtol=0, atol=1e-6)
    assert not torch.allclose(once.probs[0], once.probs[1])


def test_a_sample_count_that_weighs_the_members_unequally_is_warned_about(recwarn):
    ensemble = Ensemble.from_networks([_deterministic(1), _deterministic(2), _deterministic(3)])
    with pytest.warns(
        UserWarning, match=r"^num_samples=7 is no multiple of the ensemble's 3 members: they weigh 3 or 2 of 7"
    ):
        predict(ensemble.bnn, ensemble, X, num_samples=7)
    predict(ensemble.bnn, ensemble, X, num_samples=6)
    predict(ensemble.bnn, ensemble, X)
    assert not [w for w in recwarn if "no multiple" in str(w.message)]


def test_mismatched_architectures_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"'0.weight' is \(32, 4\)") as err:
        Ensemble.from_networks([_deterministic(1), _deterministic(2, hidden=32)])
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="at least one member"):
        Ensemble.from_networks([])
    with pytest.raises(ValueError, match="random sites without point values"):
        Ensemble.from_networks([_map_member(1)[0]])
    tanh, relu = _deterministic(1), _deterministic(2)
    relu.net[1] = nn.ReLU()
    with pytest.raises(ValueError, match="module '1' is a ReLU"):
        Ensemble.from_networks([tanh, relu])
    for plain in (nn.Sequential(nn.Linear(4, 3)), nn.Linear(4, 3)):  # a Sequential iterates over its layers
        with pytest.raises(ValueError, match=f"^ensemble member 0 is a plain {type(plain).__name__}; make it"):
            Ensemble.from_networks([plain])
    with pytest.raises(ValueError, match=r"^ensemble member 1 is a str, not a pyro_bnn BNN \(or \(bnn, point\)\)$"):
        Ensemble.from_networks([tanh, "net"])


def test_an_ensemble_predicts_only_with_its_own_model():
    member = _deterministic(1)
    ensemble = Ensemble.from_networks([member, _deterministic(2)])
    with pytest.raises(ValueError, match="its own model"):
        predict(member, ensemble, X)


TINY_DIGITS = RunConfig(
    dataset="digits",
    model="mlp:16",
    guide="mle",
    prior="normal:0,1",
    epochs=1,
    batch_size=128,
    lr=0.01,
    num_samples=2,
    num_val_samples=2,
    test_subset=100,
    device="cpu",
)


@pytest.fixture(scope="module", params=["mle", "map"])
def digits_runs(tmp_path_factory, request):
    root = tmp_path_factory.mktemp(f"ensemble-{request.param}")
    folders = []
    for seed in (0, 1):
        folder = root / f"seed{seed}"
        train_run(replace(TINY_DIGITS, guide=request.param, seed=seed), folder, progress=False)
        folders.append(folder)
    return root, folders


def test_load_ensemble_scores_trained_runs_like_a_bnn(digits_runs):
    from pyro_bnn.runs import runs

    _, folders = digits_runs
    bnn, ensemble = load_ensemble(folders)
    assert bnn is ensemble.bnn and ensemble.num_members == 2
    data = runs.load_data(TINY_DIGITS)
    x, y = data.test.x[:100], data.test.y[:100]
    pred = predict(bnn, ensemble, (x, y))
    assert pred.probs.shape == (2, 100, 10)
    metrics = pred.metrics()
    assert 0 <= metrics["accuracy"] <= 1
    split = entropy_decomposition(pred.probs)
    assert (split.epistemic > 0).any()  # two trained members disagree somewhere
    noise = predict(bnn, ensemble, torch.rand_like(x))
    scores = ood_metrics(pred.probs, noise.probs)
    assert set(scores) >= {"entropy", "mutual_information", "max_probability"}


def test_load_ensemble_refuses_runs_with_other_configs(digits_runs, tmp_path):
    _, folders = digits_runs
    other = tmp_path / "wide"
    guide = "map" if "map" in str(folders[0]) else "mle"
    train_run(replace(TINY_DIGITS, guide=guide, model="mlp:24", seed=2), other, progress=False)
    with pytest.raises(ValueError, match="differs .* in model") as err:
        load_ensemble([folders[0], other])
    assert "\n" not in str(err.value)


def test_load_ensemble_refuses_a_random_guide(tmp_path):
    run = tmp_path / "bbb"
    train_run(replace(TINY_DIGITS, guide="autonormal:0.05"), run, progress=False)
    with pytest.raises(ValueError, match="must be mle or map"):
        load_ensemble([run])
