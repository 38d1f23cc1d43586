"""The GLM moments of a Kronecker-factored Laplace approximation from rank-one Jacobians against laplace-torch's
own ``J Sigma J^T`` over the full Jacobian (the oracle), and predict_laplace's use of them: the same probabilities
and draws as laplace-torch's route, and that route wherever the rank-one form does not apply."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pyro_bnn.laplace import import_laplace

try:
    laplace = import_laplace()
except ImportError:
    pytest.skip("laplace-torch comes with the laplace extra: pip install -e '.[laplace]'", allow_module_level=True)

from pyro_bnn.laplace.kron_glm import kron_glm_moments, rank_one_layers  # noqa: E402


def _fitted(net: nn.Module, structure: str = "kron", subset: str = "all", inputs: int = 5, seed: int = 0):
    """laplace-torch fitted on 40 random points of 3 classes, with a different prior precision per parameter."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(40, inputs, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (40,), generator=g)
    la = laplace.Laplace(net, "classification", subset_of_weights=subset, hessian_structure=structure)
    la.fit(torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=10))
    if structure == "kron" and subset == "all":
        la.prior_precision = 0.5 + torch.rand(len(la.params), generator=g, dtype=torch.float64)
    return la


def _mlp(bias: bool = True) -> nn.Module:
    torch.manual_seed(1)
    layers = [nn.Linear(5, 7, bias=bias), nn.Tanh(), nn.Linear(7, 6), nn.ReLU(), nn.Linear(6, 3)]
    return nn.Sequential(*layers).double()


@pytest.mark.parametrize("bias", [True, False])
def test_the_moments_equal_laplace_torch_s_over_the_full_jacobian(bias):
    la = _fitted(_mlp(bias))
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    layers = rank_one_layers(la, x[:2])
    assert layers is not None and len(layers) == 3
    f_mu, f_var = kron_glm_moments(la, x, layers)
    jacobians, want_mu = la.backend.jacobians(x)
    want_var = la.functional_variance(jacobians)
    assert f_var.shape == (6, 3, 3)
    torch.testing.assert_close(f_mu, want_mu, rtol=0, atol=1e-12)
    torch.testing.assert_close(f_var, want_var, rtol=1e-10, atol=1e-12)
    assert want_var.diagonal(dim1=1, dim2=2).min() > 1e-3  # a variance worth comparing


def test_a_scalar_prior_precision_gives_laplace_torch_s_moments_too():
    la = _fitted(_mlp())
    la.prior_precision = torch.tensor([2.5], dtype=torch.float64)
    x = torch.randn(4, 5, dtype=torch.float64)
    jacobians, _ = la.backend.jacobians(x)
    _, f_var = kron_glm_moments(la, x, rank_one_layers(la, x[:2]))
    torch.testing.assert_close(f_var, la.functional_variance(jacobians), rtol=1e-10, atol=1e-12)


class _Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden, self.out = nn.Linear(5, 5), nn.Linear(5, 3)

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(torch.tanh(self.hidden(x)))))


class _Sequence(nn.Module):
    """A Linear applied to every position of a (B, 2, 5) input: its Jacobian is a sum of outer products."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden, self.out = nn.Linear(5, 4), nn.Linear(8, 3)

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(x.reshape(-1, 2, 5))).flatten(1))


class _Rows(_Sequence):
    """The same layer on the rows of a (B * 2, 5) reshape: two-dimensional, but two rows per example."""

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(x.reshape(-1, 5))).reshape(len(x), -1))


class _Doubled(nn.Linear):
    """A Linear whose forward is not ``W a + b``."""

    def forward(self, x):
        return nn.functional.linear(x, 2 * self.weight, self.bias)


class _Centred(nn.Module):
    """Subtracts the batch mean: each output depends on every example of the batch."""

    def forward(self, x):
        return x - x.mean(0, keepdim=True)


def test_a_regression_with_a_temperature_and_a_noise_scale_gives_laplace_torch_s_moments():
    torch.manual_seed(3)
    net = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 2)).double()
    x, y = torch.randn(40, 5, dtype=torch.float64), torch.randn(40, 2, dtype=torch.float64)
    la = laplace.Laplace(
        net, "regression", subset_of_weights="all", hessian_structure="kron", sigma_noise=0.4, temperature=2.0
    )
    la.fit(torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=10))
    probe = torch.randn(5, 5, dtype=torch.float64)
    jacobians, _ = la.backend.jacobians(probe)
    _, f_var = kron_glm_moments(la, probe, rank_one_layers(la, probe))
    torch.testing.assert_close(f_var, la.functional_variance(jacobians), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    ("case", "structure", "subset"),
    [
        ("diag", "diag", "all"),
        ("last layer", "kron", "last_layer"),
        ("a layer called twice", "kron", "all"),
        ("a layer on sequences", "kron", "all"),
        ("a layer on rows", "kron", "all"),
        ("a convolution", "kron", "all"),
        ("a Linear subclass", "kron", "all"),
        ("the batch mean subtracted", "kron", "all"),
        ("training mode", "kron", "all"),
    ],
)
def test_the_rank_one_form_is_refused_where_it_does_not_hold(case, structure, subset):
    torch.manual_seed(0)
    inputs = 10 if case in ("a layer on sequences", "a layer on rows") else 5
    net = {
        "a layer called twice": _Twice(),
        "a layer on sequences": _Sequence(),
        "a layer on rows": _Rows(),
        "a convolution": nn.Sequential(
            nn.Unflatten(1, (1, 1, 5)), nn.Conv2d(1, 2, (1, 3)), nn.Flatten(), nn.Linear(6, 3)
        ),
        "a Linear subclass": nn.Sequential(_Doubled(5, 4), nn.Tanh(), nn.Linear(4, 3)),
        "the batch mean subtracted": nn.Sequential(nn.Linear(5, 4), _Centred(), nn.Tanh(), nn.Linear(4, 3)),
    }.get(case, _mlp())
    la = _fitted(net.double(), structure, subset, inputs)
    if case == "training mode":
        la.model.train()
    assert rank_one_layers(la, torch.randn(2, inputs, dtype=torch.float64)) is None


@pytest.mark.parametrize("link", ["probit", "mc"])
def test_predict_laplace_gives_laplace_torch_s_predictive_through_the_rank_one_form(link, monkeypatch):
    from pyro_bnn import BNN
    from pyro_bnn.data import BatchLoader
    from pyro_bnn.infer import RuntimeOptions, Trainer
    from pyro_bnn.laplace import fit_laplace, predict_laplace
    from pyro_bnn.laplace import kron_glm as kron_glm_module
    from pyro_bnn.laplace import predictive as predictive_module
    from pyro_bnn.likelihoods import Categorical
    from pyro_bnn.models import build_model
    from pyro_bnn.priors import NormalPrior

    torch.manual_seed(0)
    y = torch.arange(60) % 3
    x = torch.randn(60, 4) * 0.8 + torch.nn.functional.one_hot(y, 4).float() * 2
    bnn = BNN(build_model("mlp:16,16", input_shape=(4,), num_classes=3), NormalPrior(0.0, 1.0), Categorical(60))
    optim = lambda params: torch.optim.Adam(params, lr=0.03)  # noqa: E731
    trainer = Trainer(bnn, "map", optim=optim, runtime=RuntimeOptions(seed=0, progress=False))
    trainer.fit(BatchLoader(x, y, 60), 100)
    posterior = fit_laplace(bnn, trainer.guide, BatchLoader(x, y, 60), subset="all", structure="kron")
    test = (torch.randn(25, 4) * 2, torch.arange(25) % 3)
    calls = []
    original = predictive_module._glm_outputs
    monkeypatch.setattr(
        predictive_module,
        "_glm_outputs",
        lambda p, x, *a: calls.append((len(x), a[-1] is not None)) or original(p, x, *a),
    )
    torch.manual_seed(5)
    fast = predict_laplace(posterior, test, link=link, num_samples=7)
    assert calls == [(25, True)]  # one batch of MC_BATCH_SIZE, through the rank-one form
    checks = []
    checker = kron_glm_module.rank_one_layers
    monkeypatch.setattr(
        kron_glm_module, "rank_one_layers", lambda la, probe: checks.append(len(probe)) or checker(la, probe)
    )
    predict_laplace(posterior, test, link=link, num_samples=7)
    assert checks == []  # the posterior's answer is kept: the check (a full Jacobian) runs once per posterior
    monkeypatch.setattr(posterior, "rank_one_layers", lambda probe: None)
    calls.clear()
    torch.manual_seed(5)
    plain = predict_laplace(posterior, test, link=link, num_samples=7)
    assert calls and all(not fast_path for _, fast_path in calls)
    assert fast.probs.shape == plain.probs.shape == ((1 if link == "probit" else 7), 25, 3)
    torch.testing.assert_close(fast.probs, plain.probs, rtol=0, atol=1e-5)
    assert (plain.probs.max(-1).values < 0.999).any()  # the spread moves the probabilities
