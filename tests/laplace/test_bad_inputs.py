"""What Laplace refuses, each with a one-line error: unknown choices, likelihoods and priors it cannot map, points
and loaders that do not fit, networks the subset does not fit, and a missing laplace-torch."""

from __future__ import annotations

import sys

import pyro.distributions as dist
import pytest
import torch
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.laplace import LaplaceOptions, fit_laplace, import_laplace, predict_laplace
from pyro_bnn.likelihoods import Categorical, Gaussian, Likelihood
from pyro_bnn.priors import LaplacePrior, NormalPrior

N = 12


def _one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"subset": "first_layer"}, r"unknown Laplace subset 'first_layer'; expected one of 'last_layer', 'all'"),
        ({"subset": "subnetwork"}, r"unknown Laplace subset 'subnetwork'"),
        ({"structure": "lowrank"}, r"unknown Hessian structure 'lowrank'; expected one of 'diag', 'kron', 'full'"),
        ({"prior_structure": "diag"}, r"unknown prior structure 'diag'"),
        ({"prior_precision": 0.0}, r"prior_precision must be a finite number > 0 or None, got 0.0"),
        ({"prior_precision": float("inf")}, r"prior_precision must be a finite number > 0"),
        ({"marglik_steps": 0}, r"marglik_steps must be an int >= 1, got 0"),
        ({"marglik_steps": 99}, r"marglik_steps must be at least 100 \(the window .*\), got 99"),
        ({"marglik_lr": -1.0}, r"marglik_lr must be a finite number > 0, got -1.0"),
        ({"marglik_tol": 0.0}, r"marglik_tol must be a finite number > 0, got 0.0"),
        ({"tune_prior": "yes"}, r"tune_prior must be True or False"),
    ],
)
def test_options_refuse_unknown_choices_and_bad_numbers(options, match):
    with pytest.raises(ValueError, match=match) as excinfo:
        LaplaceOptions(**options)
    _one_line(excinfo)


def test_options_take_strings_or_enums_and_are_frozen():
    options = LaplaceOptions(subset="all", structure="full")
    assert options.subset.value == "all" and options.structure.value == "full"
    assert LaplaceOptions(subset=options.subset) == LaplaceOptions(subset="all")
    with pytest.raises(AttributeError):
        options.subset = "last_layer"


def _data():
    torch.manual_seed(0)
    return torch.randn(N, 2), torch.randn(N, 1)


def _regression(prior=None, likelihood=None, net=None):
    x, y = _data()
    net = net if net is not None else nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    bnn = BNN(net, prior or NormalPrior(0.0, 1.0), likelihood or Gaussian(N))
    return bnn, bnn.initial_values(), BatchLoader(x, y, 4)


class _Bernoulli(Likelihood):
    def distribution(self, output):
        return dist.Bernoulli(logits=output).to_event(1)


def test_a_likelihood_it_cannot_map_is_refused():
    bnn, point, loader = _regression(likelihood=_Bernoulli(N))
    with pytest.raises(
        ValueError, match=r"Laplace covers the Categorical and Gaussian likelihoods only, got _Bernoulli"
    ):
        fit_laplace(bnn, point, loader)


def test_the_papers_kl_scale_is_refused():
    bnn, point, loader = _regression(likelihood=Gaussian(N, kl_scale="paper"))
    with pytest.raises(ValueError, match=r"needs the full-data objective \(kl_scale='dataset'\); .* kl_scale='paper'"):
        fit_laplace(bnn, point, loader)


def test_a_prior_precision_is_read_from_a_normal_prior_only():
    bnn, point, loader = _regression(prior=LaplacePrior(0.0, 1.0))
    with pytest.raises(ValueError, match=r"read from a NormalPrior, got LaplacePrior; pass prior_precision=") as err:
        fit_laplace(bnn, point, loader, tune_prior=False)
    _one_line(err)
    # given explicitly, the Gaussian prior of the approximation is the caller's choice
    posterior = fit_laplace(bnn, point, loader, prior_precision=4.0, tune_prior=False)
    assert float(posterior.prior_precision) == 4.0


def test_the_normal_priors_precision_is_the_start():
    bnn, point, loader = _regression(prior=NormalPrior(0.0, 0.5))
    assert float(fit_laplace(bnn, point, loader, tune_prior=False).prior_precision) == pytest.approx(4.0)


def test_points_and_loaders_that_do_not_fit_are_refused():
    bnn, point, loader = _regression()
    with pytest.raises(ValueError, match=r"pass options or option values, not both"):
        fit_laplace(bnn, point, loader, LaplaceOptions(), subset="all")
    with pytest.raises(ValueError, match=r"the loader holds 8 examples but the likelihood's dataset_size is 12"):
        fit_laplace(bnn, point, BatchLoader(torch.randn(8, 2), torch.randn(8, 1), 4))
    with pytest.raises(ValueError, match=r"must expose .dataset"):
        fit_laplace(bnn, point, [(torch.randn(4, 2), torch.randn(4, 1))])
    samples = {name: value.expand(3, *value.shape) for name, value in point.items()}
    with pytest.raises(ValueError, match=r"needs a point estimate \(a MAP\); the dict has no point network"):
        fit_laplace(bnn, samples, loader)


def test_networks_the_subset_does_not_fit_are_refused():
    # only the last layer random: every-weight Laplace has deterministic parameters it cannot leave out
    bnn, point, loader = _regression(prior=NormalPrior(0.0, 1.0, select=lambda name, module: name.startswith("2.")))
    with pytest.raises(ValueError, match=r"subset='all' needs every network parameter to be a weight site") as err:
        fit_laplace(bnn, point, loader, subset="all")
    _one_line(err)
    assert fit_laplace(bnn, point, loader, subset="last_layer").sampled_sites == ["2.weight", "2.bias"]
    # only the first layer random: the last layer laplace-torch finds holds no weight sites
    bnn, point, loader = _regression(prior=NormalPrior(0.0, 1.0, select=lambda name, module: name.startswith("0.")))
    with pytest.raises(
        ValueError, match=r"took '2' \(Linear\) as the last layer, .* not sites: \['2.weight', '2.bias'\]"
    ):
        fit_laplace(bnn, point, loader, subset="last_layer")
    # a network that ends in a parameter-free module: laplace-torch takes it for the last layer
    net = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 2), nn.Softmax(-1))
    bnn, point, loader = _regression(net=net, likelihood=Categorical(N))
    loader = BatchLoader(torch.randn(N, 2), torch.arange(N) % 2, 4)
    with pytest.raises(
        ValueError,
        match=r"last-layer Laplace needs a network that ends in an nn.Linear; laplace-torch: Use model with a linear",
    ) as err:
        fit_laplace(bnn, point, loader, subset="last_layer")
    _one_line(err)


def _fitted_regression():
    """A Laplace posterior of the small regression, and three inputs to predict."""
    bnn, point, loader = _regression()
    return fit_laplace(bnn, point, loader, tune_prior=False), torch.randn(3, 2)


def test_predict_laplace_refuses_unknown_predictives_and_links():
    posterior, x = _fitted_regression()
    with pytest.raises(ValueError, match=r"unknown Laplace predictive 'nn'; expected one of 'glm', 'mc'"):
        predict_laplace(posterior, x, predictive="nn")
    with pytest.raises(ValueError, match=r"unknown GLM link 'bridge'; expected one of 'probit', 'mc'"):
        predict_laplace(posterior, x, link="bridge")
    with pytest.raises(ValueError, match=r"num_samples must be an int >= 1, got 0"):
        predict_laplace(posterior, x, num_samples=0)


def test_predict_laplace_refuses_a_link_where_none_applies():
    # it ignored the link of a regression or of weight draws; the CLI refused both
    posterior, x = _fitted_regression()
    with pytest.raises(ValueError, match=r"^link='mc' applies to classifiers only; a regression's GLM predictive"):
        predict_laplace(posterior, x, link="mc")
    with pytest.raises(ValueError, match=r"^link='probit' applies to the GLM predictive only; predictive='mc'"):
        predict_laplace(posterior, x, predictive="mc", link="probit")
    assert predict_laplace(posterior, x, num_samples=5).means.shape == (5, 3, 1)


BATCH_AXIS = (
    r"^inputs of shape \(2,\) give network outputs of shape \(2,\), not \(N, outputs\) with N = 2, the inputs' "
    r"first axis: pass a batch of inputs \(N, \*input_shape\) \(a single example x as x.unsqueeze\(0\)\) to a "
    r"network whose outputs are \(N, outputs\) \(one output: \(N, 1\)\)$"
)


@pytest.mark.parametrize(("structure", "predictive"), [("kron", "glm"), ("full", "glm"), ("diag", "mc")])
def test_predict_laplace_names_one_example_without_its_batch_axis(structure, predictive):
    # one example x of shape (2,) went through the network (nn.Linear takes 1-D inputs) and ended in laplace-torch's
    # "einsum(): the number of subscripts in the equation (2) does not match the number of dimensions (1)"
    net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 2))  # its outputs (2,) as many as the inputs
    bnn, point, _ = _regression(net=net, likelihood=Categorical(N))
    loader = BatchLoader(torch.randn(N, 2), torch.arange(N) % 2, 4)
    posterior = fit_laplace(bnn, point, loader, structure=structure, tune_prior=False)
    x = torch.randn(2)
    with pytest.raises(ValueError, match=BATCH_AXIS) as err:
        predict_laplace(posterior, x, predictive=predictive)
    _one_line(err)
    assert predict_laplace(posterior, x.unsqueeze(0), predictive=predictive).probs.shape[1:] == (1, 2)


def test_fit_laplace_names_data_and_points_that_are_not_finite_or_do_not_fit():
    bnn, point, loader = _regression()
    x, y = next(iter(BatchLoader(*_data(), N)))
    bad = y.clone()
    bad[7, 0] = float("nan")
    # the fit returned a posterior of prior precision nan; it failed later in a Cholesky
    with pytest.raises(ValueError, match=r"^batch 1 of the training loader holds NaN or infinite targets$"):
        fit_laplace(bnn, point, BatchLoader(x, bad, 4), tune_prior=False)
    nan_point = {**point, "0.weight": torch.full_like(point["0.weight"], float("nan"))}
    with pytest.raises(
        ValueError, match=r"^the point estimate holds NaN or infinite values at the weight sites \['0.weight'\]"
    ):
        fit_laplace(bnn, nan_point, loader, tune_prior=False)
    # inputs the network cannot take: torch's "mat1 and mat2 shapes cannot be multiplied"
    with pytest.raises(ValueError, match=r"^the network cannot run on inputs of shape \(4, 3\)"):
        fit_laplace(bnn, point, BatchLoader(torch.randn(N, 3), y, 4), tune_prior=False)


def test_last_layer_laplace_of_a_single_linear_layer_asks_for_all_weights():
    bnn, point, loader = _regression(net=nn.Linear(2, 1))
    with pytest.raises(ValueError, match=r"^last-layer Laplace needs layers before the last one; .*subset='all'$"):
        fit_laplace(bnn, point, loader, subset="last_layer", tune_prior=False)
    assert fit_laplace(bnn, point, loader, subset="all", tune_prior=False).sampled_sites == ["weight", "bias"]


def test_a_missing_laplace_torch_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "laplace", None)  # `import laplace` now raises ImportError
    bnn, point, loader = _regression()
    with pytest.raises(
        ImportError,
        match=r"Laplace approximations need laplace-torch, which is not installed: pip install 'pyro-bnn\[laplace\]'",
    ) as err:
        fit_laplace(bnn, point, loader)
    _one_line(err)
    with pytest.raises(ImportError, match=r"pip install 'pyro-bnn\[laplace\]'"):
        import_laplace()
