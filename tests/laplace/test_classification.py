"""Laplace around a trained MAP classifier: the weight draws feed predict and the ArviZ export unchanged, the GLM
predictive is a Prediction that is less confident than the MAP far from the data, and for last-layer Laplace (where
the network is linear in the random weights) the GLM and the weight-space predictive agree."""

from __future__ import annotations

import pytest
import torch

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.diagnostics.arviz_export import posterior_dataset, to_inference_data
from pyro_bnn.infer import Trainer
from pyro_bnn.laplace import LaplaceSource, fit_laplace, import_laplace, predict_laplace
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.predict import Samples, predict
from pyro_bnn.priors import NormalPrior

try:
    import_laplace()
except ImportError:
    pytest.skip("laplace-torch comes with the laplace extra: pip install -e '.[laplace]'", allow_module_level=True)

N = 40


def _blobs(n=N, seed=0):
    """Two Gaussian blobs at (-2, 0) and (2, 0), labels 0 and 1, alternating."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 2
    x = torch.randn(n, 2, generator=g) * 0.7 + torch.stack([4.0 * y - 2.0, torch.zeros(n)], 1)
    return x, y


@pytest.fixture(scope="module")
def trained():
    """A MAP of a one-hidden-layer MLP (8 tanh units) on the blobs, trained with the library's Trainer."""
    import pyro

    pyro.clear_param_store()
    torch.manual_seed(0)
    x, y = _blobs()
    net = build_model("mlp:8", input_shape=(2,), num_classes=2, activation="tanh")
    bnn = BNN(net, NormalPrior(0.0, 1.0), Categorical(N))
    loader = BatchLoader(x, y, N)
    trainer = Trainer(bnn, "map", optim=lambda params: torch.optim.Adam(params, lr=0.05), seed=0, progress=False)
    trainer.fit(loader, 150)
    return bnn, trainer.guide, loader


@pytest.fixture(scope="module")
def last_layer_kfac(trained):
    bnn, guide, loader = trained
    return fit_laplace(bnn, guide, loader, subset="last_layer", structure="kron")


FAR = torch.tensor([[0.0, 30.0], [0.0, -30.0], [30.0, 30.0], [-30.0, 30.0]])


def test_weight_draws_go_through_predict_and_the_arviz_export(trained, last_layer_kfac):
    bnn, guide, loader = trained
    posterior = last_layer_kfac
    assert posterior.sampled_sites == ["out.weight", "out.bias"]
    x, y = _blobs(seed=1)
    torch.manual_seed(3)
    prediction = predict(bnn, posterior.source(), (x, y), num_samples=20, point=True)
    assert prediction.probs.shape == (20, N, 2) and prediction.log_likelihood.shape == (20, N)
    assert prediction.num_samples == 20 and torch.isfinite(prediction.probs).all()
    metrics = prediction.metrics()
    assert metrics["accuracy"] > 0.9 and 0 < metrics["nll"] < 1 and 0 <= metrics["ece"] <= 1
    # the point network is the MAP itself
    map_values = {name: value.detach() for name, value in guide.median().items()}
    map_prediction = predict(bnn, map_values, (x, y))
    torch.testing.assert_close(prediction.point.probs, map_prediction.probs[:1])

    draws = posterior.sample(20, generator=torch.Generator().manual_seed(0))
    assert {name: tuple(v.shape) for name, v in draws.items()} == {
        "fc1.weight": (20, 8, 2),
        "fc1.bias": (20, 8),
        "out.weight": (20, 2, 8),
        "out.bias": (20, 2),
    }
    # last-layer Laplace: the hidden layer sits at its MAP in every draw, the output layer varies
    assert (draws["fc1.weight"] == map_values["fc1.weight"]).all()
    assert draws["out.weight"].std(0).min() > 0
    as_samples = predict(bnn, Samples(draws), (x, y))
    assert as_samples.probs.shape == (20, N, 2)
    data = to_inference_data(bnn, {name: v.unsqueeze(0) for name, v in draws.items()}, (x, y))
    assert dict(posterior_dataset(data)["out.weight"].sizes)["draw"] == 20
    # the exported log-likelihood is the prediction's, draw for draw
    exported = torch.as_tensor(data["log_likelihood"]["obs"].values).reshape(20, N)
    torch.testing.assert_close(exported, as_samples.log_likelihood.to(exported.dtype), rtol=1e-5, atol=1e-5)


def test_the_glm_prediction_is_normalised_and_humbler_than_the_map_far_from_the_data(trained, last_layer_kfac):
    bnn, _, _ = trained
    prediction = predict_laplace(last_layer_kfac, FAR, predictive="glm", link="probit", point=True)
    assert prediction.probs.shape == (1, len(FAR), 2) and prediction.targets is None
    assert torch.isfinite(prediction.probs).all()
    torch.testing.assert_close(prediction.probs.sum(-1), torch.ones(1, len(FAR)))
    glm_confidence = prediction.mean_probs().max(-1).values
    map_confidence = prediction.point.mean_probs().max(-1).values
    assert (map_confidence > 0.9).all(), map_confidence  # the MAP is confident far away; the Laplace is not as much
    assert (glm_confidence < map_confidence - 0.02).all(), (glm_confidence, map_confidence)


def test_last_layer_glm_equals_the_weight_space_predictive(last_layer_kfac, trained):
    """With only the last layer random the logits are linear in the random weights, so the GLM's logit draws and
    the network's outputs under weight draws share one Gaussian: their mean probabilities agree to Monte Carlo
    error (4000 draws: sd of a mean probability <= 0.5 / sqrt(4000) = 0.008; 0.03 is ~4 sd), and the probit
    approximation lies near both (its own error on these points is below 0.05)."""
    bnn, _, _ = trained
    points = torch.cat([FAR, _blobs(8, seed=2)[0]])
    torch.manual_seed(4)
    glm_mc = predict_laplace(last_layer_kfac, points, predictive="glm", link="mc", num_samples=4000)
    weights_mc = predict_laplace(last_layer_kfac, points, predictive="mc", num_samples=4000)
    probit = predict_laplace(last_layer_kfac, points, predictive="glm", link="probit")
    assert glm_mc.probs.shape == weights_mc.probs.shape == (4000, len(points), 2)
    torch.testing.assert_close(glm_mc.mean_probs(), weights_mc.mean_probs(), rtol=0, atol=0.03)
    torch.testing.assert_close(probit.mean_probs(), weights_mc.mean_probs(), rtol=0, atol=0.05)


@pytest.mark.parametrize(
    ("subset", "structure"), [("last_layer", "diag"), ("last_layer", "full"), ("all", "kron"), ("all", "diag")]
)
def test_every_subset_and_structure_predicts(trained, subset, structure):
    bnn, guide, loader = trained
    posterior = fit_laplace(bnn, guide, loader, subset=subset, structure=structure)
    assert isinstance(posterior.source(), LaplaceSource)
    expected = ["out.weight", "out.bias"] if subset == "last_layer" else bnn.site_names
    assert posterior.sampled_sites == expected
    assert float(posterior.prior_precision) > 0
    x, y = _blobs(seed=1)
    for prediction in (
        predict(bnn, posterior.source(), (x, y), num_samples=8),
        predict_laplace(posterior, (x, y), predictive="glm", link="probit"),
    ):
        assert torch.isfinite(prediction.probs).all() and prediction.metrics()["accuracy"] > 0.9


@pytest.mark.parametrize(("subset", "structure"), [("all", "kron"), ("all", "diag"), ("last_layer", "full")])
def test_draws_land_on_their_own_sites(trained, subset, structure):
    """With a prior precision of 1e8 the approximation's spread is ~1e-4, so every draw is its site's MAP value: a
    draw vector split into the wrong sites (or in the wrong order) would put one site's values in another's place."""
    bnn, guide, loader = trained
    posterior = fit_laplace(
        bnn, guide, loader, subset=subset, structure=structure, prior_precision=1e8, tune_prior=False
    )
    draws = posterior.sample(3, torch.Generator().manual_seed(0))
    assert list(draws) == bnn.site_names
    for name in bnn.site_names:
        want = posterior.map_values[name].expand(3, *posterior.map_values[name].shape)
        torch.testing.assert_close(draws[name], want, rtol=0, atol=1e-2)
        assert not torch.equal(draws[name], want) or name not in posterior.sampled_sites  # drawn, not copied


def test_the_glm_batch_is_sized_by_its_jacobian_and_splits_a_loader(trained, monkeypatch):
    from pyro_bnn.laplace import predictive as predictive_module

    bnn, guide, loader = trained
    posterior = fit_laplace(bnn, guide, loader, subset="all", structure="diag")
    # 2 outputs x 42 weights (2-8-2 MLP) x 4 bytes = 336 bytes per input
    assert posterior.laplace.n_params == 2 * 8 + 8 + 8 * 2 + 2
    assert predictive_module.glm_batch_size(posterior) == predictive_module.MC_BATCH_SIZE
    monkeypatch.setattr(predictive_module, "GLM_JACOBIAN_BYTES", 336 * 7 + 100)
    assert predictive_module.glm_batch_size(posterior) == 7
    x, y = _blobs(30, seed=3)
    whole = predict_laplace(posterior, (x, y), predictive="glm", link="probit", batch_size=30)
    calls = []
    original = predictive_module._glm_outputs
    monkeypatch.setattr(predictive_module, "_glm_outputs", lambda p, x, *a: calls.append(len(x)) or original(p, x, *a))
    split = predict_laplace(posterior, BatchLoader(x, y, 20), predictive="glm", link="probit")
    assert calls == [7, 7, 6, 7, 3]  # each loader batch of 20 and 10 split to at most 7 inputs
    torch.testing.assert_close(split.probs, whole.probs)
    assert torch.equal(split.targets, whole.targets)
