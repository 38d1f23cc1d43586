"""The implicit-BNN objective: mixture-mean KL, component assignment, scaling, and its relation to Trace_ELBO."""

from __future__ import annotations

import math

import pyro
import pytest
import torch
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.guides import NodeNoiseMixture, parse_guide
from pyro_bnn.infer import TraceELBO
from pyro_bnn.infer.mixture_kl import MixtureMeanKL, component_of_rows, mixture_mean_kl
from pyro_bnn.likelihoods import Categorical, Gaussian
from pyro_bnn.node_noise import NodeNoisePrior, add_node_noise, is_node_noise
from pyro_bnn.priors import NormalPrior, parse_prior


def _classifier(dataset_size: int = 40, prior_scale: float = 0.1, bias_noise: bool = True) -> BNN:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3))
    return BNN(add_node_noise(net, bias_noise=bias_noise), NodeNoisePrior(prior_scale), Categorical(dataset_size))


def _guide(bnn: BNN, k: int, x: torch.Tensor, y: torch.Tensor) -> NodeNoiseMixture:
    guide = NodeNoiseMixture(bnn, k)
    guide(x, y)
    return guide


def test_mixture_mean_kl_against_a_hand_computation():
    torch.manual_seed(0)
    net = nn.Linear(3, 1, bias=False)
    bnn = BNN(add_node_noise(net), NodeNoisePrior(0.2), Categorical(10))
    x, y = torch.randn(2, 3), torch.zeros(2, dtype=torch.long)
    guide = _guide(bnn, 2, x, y)
    mu = [[0.5, 1.0, 2.0], [1.5, 0.8, 1.0]]
    sigma = [[0.1, 0.3, 0.05], [0.2, 0.1, 0.4]]
    with torch.no_grad():
        guide.locs.copy_(torch.tensor(mu))
        guide.scale_raw.copy_(torch.tensor(sigma).expm1().log())
    expected = 0.0
    for d in range(3):
        mu_hat = (mu[0][d] + mu[1][d]) / 2
        var_hat = (sigma[0][d] ** 2 + sigma[1][d] ** 2) / 4
        expected += math.log(0.2 / math.sqrt(var_hat)) + (var_hat + (mu_hat - 1.0) ** 2) / (2 * 0.2**2) - 0.5
    assert mixture_mean_kl(bnn, guide).item() == pytest.approx(expected, rel=1e-5)


def test_component_assignment_k4_b3_s2():
    assert component_of_rows(6, 4).tolist() == [0, 1, 2, 3, 0, 1]
    bnn = _classifier()
    x, y = torch.randn(3, 5), torch.tensor([0, 1, 2])
    guide = _guide(bnn, 4, x, y)
    with torch.no_grad():
        guide.scale_raw.fill_(-40.0)  # each row's noise is its component's mean
    seen = {}
    run = bnn.run_network

    def spy(x_rows, values):
        seen["x"], seen["values"] = x_rows, values
        return run(x_rows, values)

    bnn.run_network = spy
    MixtureMeanKL(samples_per_example=2)(bnn, guide, x, y, 1.0)
    torch.testing.assert_close(seen["x"], x[[0, 0, 1, 1, 2, 2]])  # example b's copies are rows 2b, 2b + 1
    noise = torch.cat([seen["values"][site.name].reshape(6, -1) for site in guide.sites], -1)
    torch.testing.assert_close(noise, guide.locs.detach()[[0, 1, 2, 3, 0, 1]])


def test_components_without_a_row_get_exactly_zero_data_gradient():
    bnn = _classifier()
    x, y = torch.randn(1, 5), torch.tensor([2])
    guide = _guide(bnn, 4, x, y)
    terms = MixtureMeanKL(samples_per_example=2)(bnn, guide, x, y, 0.0)  # KL weight 0: the data term alone
    terms.loss.backward()
    assert guide.locs.grad[2:].abs().max().item() == 0.0
    assert guide.scale_raw.grad[2:].abs().max().item() == 0.0
    assert guide.locs.grad[:2].abs().min().item() > 0.0


def test_zero_noise_network_equals_its_deterministic_twin():
    torch.manual_seed(5)
    twin = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3))
    net = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3))
    net.load_state_dict(twin.state_dict())
    bnn = BNN(add_node_noise(net, bias_noise=True), NodeNoisePrior(1e-6), Categorical(40))
    x, y = torch.randn(8, 5), torch.randint(3, (8,))
    guide = _guide(bnn, 3, x, y)
    with torch.no_grad():
        guide.locs.fill_(1.0)
        guide.scale_raw.fill_(-40.0)
    terms = MixtureMeanKL(samples_per_example=2)(bnn, guide, x, y, 1.0)
    nll = nn.functional.cross_entropy(twin(x), y, reduction="sum")
    torch.testing.assert_close(terms.data_term, nll.detach() * 40 / 8)
    from pyro_bnn.predict import predict

    torch.testing.assert_close(predict(bnn, guide, x, num_samples=6).probs, twin(x).softmax(-1).expand(6, 8, 3))


def test_data_term_scales_to_the_data_set_and_full_batch_regression_with_copies_works():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(1, 16), nn.ReLU(), nn.Linear(16, 1))
    bnn = BNN(add_node_noise(net), NodeNoisePrior(0.3), Gaussian(20, scale=1.0))
    x, y = torch.randn(20, 1), torch.randn(20, 1)  # the whole data set in one batch, 40 rows with S = 2
    guide = _guide(bnn, 8, x, y)
    with torch.no_grad():
        guide.scale_raw.fill_(-40.0)
    terms = MixtureMeanKL(samples_per_example=2)(bnn, guide, x, y, 0.5)
    rows = torch.cat(
        [
            bnn.run_network(x[i : i + 1], guide.split(guide.locs[(2 * i + s) % 8].detach()[None]))
            for i in range(20)
            for s in range(2)
        ]
    )
    nll = -torch.distributions.Normal(rows, 1.0).log_prob(y.repeat_interleave(2, 0)).sum()
    torch.testing.assert_close(terms.data_term, nll.detach() * 20 / 40)
    torch.testing.assert_close(terms.kl_term, 0.5 * mixture_mean_kl(bnn, guide).detach())
    torch.testing.assert_close(terms.loss.detach(), terms.data_term + terms.kl_term)


def test_data_term_equals_trace_elbos_in_expectation():
    """With S = K every example's copies cover all components: the mean over draws of our data term equals
    Trace_ELBO's (one mixture draw per step) within Monte Carlo error; the KLs differ (see the module)."""
    bnn = _classifier()
    x, y = torch.randn(6, 5), torch.randint(3, (6,))
    guide = _guide(bnn, 2, x, y)
    with torch.no_grad():
        guide.scale_raw.fill_(math.log(math.expm1(0.3)))
    pyro.set_rng_seed(1)
    ours = torch.stack([MixtureMeanKL(2)(bnn, guide, x, y, 1.0).data_term for _ in range(1000)])
    # Trace_ELBO: 40 means of 100 vectorised particles each.
    trace = torch.stack([TraceELBO(100, vectorize_particles=True)(bnn, guide, x, y, 1.0).data_term for _ in range(40)])
    error = (ours.var() / len(ours) + trace.var() / len(trace)).sqrt()
    assert abs(ours.mean() - trace.mean()) < 4 * error
    assert error < 0.02 * trace.mean().abs()  # the check has power


def test_with_one_component_trace_elbo_estimates_the_same_kl():
    bnn = _classifier()
    x, y = torch.randn(4, 5), torch.randint(3, (4,))
    guide = _guide(bnn, 1, x, y)
    pyro.set_rng_seed(2)
    means = torch.stack([TraceELBO(200, vectorize_particles=True)(bnn, guide, x, y, 1.0).kl_term for _ in range(30)])
    error = means.std() / math.sqrt(len(means))
    assert abs(means.mean() - mixture_mean_kl(bnn, guide).detach()) < 4 * error
    assert error < 0.05 * means.mean()


def test_validate_refuses_what_it_cannot_score():
    x, y = torch.randn(2, 5), torch.zeros(2, dtype=torch.long)
    torch.manual_seed(0)
    weight_space = BNN(nn.Linear(5, 3), NormalPrior(0, 1), Categorical(10))
    guide = _guide(weight_space, 2, x, y)
    with pytest.raises(ValueError, match="not node-noise sites"):
        MixtureMeanKL().validate(weight_space, guide, x, y)
    bnn = _classifier()
    with pytest.raises(ValueError, match="needs a mixture-of-Normals guide"):
        MixtureMeanKL().validate(bnn, object(), x, y)
    with pytest.raises(ValueError, match="samples_per_example"):
        MixtureMeanKL(0)


@pytest.mark.parametrize("weight", [-1.0, math.nan, math.inf])
def test_a_kl_weight_every_other_objective_refuses_is_refused(weight):
    torch.manual_seed(0)
    bnn = _classifier()
    x, y = torch.randn(6, 5), torch.randint(0, 3, (6,))
    guide = _guide(bnn, 2, x, y)
    with pytest.raises(ValueError, match="KL weight must be a finite number >= 0") as error:
        MixtureMeanKL(samples_per_example=2)(bnn, guide, x, y, weight)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "prior, reason",
    [
        ("normal:1,0.1", None),
        ("laplace:1,0.1", None),  # torch has the Normal-Laplace KL
        ("hierarchical:normal,fixed,0.3", None),
        ("cauchy:1,0.1", "has no closed form against prior 'cauchy:1,0.1' (CauchyPrior)"),
        ("flat", "has no closed form against prior 'flat' (FlatPrior)"),
        ("mixture", "has no closed form against prior 'mixture' (ScaleMixturePrior)"),
        ("hierarchical:normal,halfcauchy,1", "takes no hierarchical prior ('hierarchical:normal,halfcauchy,1' adds"),
    ],
)
def test_the_priors_the_mixture_mean_kl_refuses_are_known_from_the_spec(prior, reason):
    refusal = MixtureMeanKL().choice_refusal(parse_guide("mixture:4"), prior)
    if reason is None:
        assert refusal is None
    else:
        assert refusal.startswith(f"(the mixture-mean KL) {reason}")
    # The spec's answer is the built model's: validate refuses exactly these (a hierarchical prior by its sites).
    bnn = BNN(add_node_noise(nn.Linear(5, 3)), parse_prior(prior, select=is_node_noise), Categorical(40))
    x, y = torch.randn(4, 5), torch.zeros(4, dtype=torch.long)
    if reason is None:
        MixtureMeanKL().validate(bnn, _guide(bnn, 2, x, y), x, y)
    elif not prior.startswith("hierarchical"):
        with pytest.raises(ValueError, match="no closed form"):
            MixtureMeanKL().validate(bnn, _guide(bnn, 2, x, y), x, y)
