"""One training step of each competitor library's mean-field BNN, for the step-time benchmark.

Every builder takes a batch ``x`` of shape ``(B, 1, 28, 28)``, labels ``y`` of shape ``(B,)`` (int64) and the
training-set size ``num_data`` (N), builds that library's mean-field Gaussian Bayesian version of the 3FC network
(``build_model("3fc", ...)``: flatten, then 784-1000-1000-1000-10 with ReLU, 2.8 M weights) on ``x.device``, and
returns ``step(x, y)`` doing ONE idiomatic training step on a batch of that shape: one Monte Carlo weight draw,
forward, the library's ELBO loss, backward and an Adam update (lr 1e-3, torch's default implementation, or the
library's own Adam where it brings one). Each library is imported inside its builder, so this module imports without
any of them; :func:`missing` says which are not installed.

Common choices, where the library lets us make them:

- prior: N(0, 1) on every weight and bias;
- posterior: factorised Gaussian with initial standard deviation 1e-3 (softplus(rho) = 1e-3 for the libraries that
  parameterise it by rho, log sd = log 1e-3 for posteriors, ``init_scale=1e-3`` for Pyro's AutoNormal);
- loss: the minibatch estimate of the negative ELBO, i.e. mean NLL + KL / N (or N / B times the summed NLL + KL,
  which is the same up to the factor N), following each library's own scaling idiom.

The builders:

- :func:`bayesian_torch`: ``dnn_to_bnn`` swaps the net's ``nn.Linear`` layers for ``LinearReparameterization``
  layers (prior N(0, 1), ``posterior_rho_init`` so that softplus(rho) = 1e-3); the loss is the README's
  ``cross_entropy + get_kl_loss(net) / batch_size``. Note that bayesian-torch's ``kl_div`` returns the *mean* KL per
  weight of each tensor (not the sum), so its documented loss weighs the KL differently from the true ELBO; the
  computation per step is the same as with the summed KL, so the timing is unaffected.
- :func:`posteriors_vi_diag`: the posteriors README loop: ``posteriors.vi.diag.build(log_posterior, torchopt.adam(),
  temperature=1 / N)`` with ``log_posterior = -cross_entropy + diag_normal_log_prob(params) / N`` through
  ``torch.func.functional_call`` of the net; the objective is then (negative ELBO) / N. ``init_log_sds=log(1e-3)``;
  the means start at the net's own initial weights. Adam is torchopt's functional ``adam(lr=1e-3)``.
- :func:`torch_uncertainty_bayes_linear`: the same MLP made of ``torch_uncertainty.layers.bayesian.BayesLinear``
  (Bayes by Backprop: a Monte Carlo KL from log q - log p at the drawn weights), trained with
  ``torch_uncertainty.losses.ELBOLoss(model, nn.CrossEntropyLoss(), kl_weight, num_samples=1)``. Its prior is a
  two-Gaussian scale mixture; both scales set to 1 make it N(0, 1). Its ``KLDiv`` *averages* the KL over the
  Bayesian layers, so ``kl_weight = num_layers / N`` gives mean cross-entropy + KL / N.
- :func:`pyro_autonormal`: plain Pyro: ``to_pyro_module_`` on the net, ``PyroSample(Normal(0, 1))`` on every
  parameter, a model with ``pyro.plate("data", N, subsample_size=B)`` around the Categorical likelihood (so Pyro
  scales the log-likelihood by N / B), ``AutoNormal(model, init_scale=1e-3)`` (means start at the prior median 0),
  ``SVI(..., pyro.optim.Adam({"lr": 1e-3}), Trace_ELBO())``. Works with and without Pyro's
  ``module_local_params`` setting (which importing pyro_bnn turns on).
- :func:`tyxe`: TyXe 0.0.2's ``VariationalBNN`` with ``IIDPrior(Normal(0, 1))``, ``likelihoods.Categorical(N)`` and
  ``partial(AutoNormal, init_scale=1e-3)``. The step is exactly what ``VariationalBNN.fit`` does per batch with its
  defaults: ``SVI(bnn.model, bnn.guide, optim, loss=TraceMeanField_ELBO(1))`` (``closed_form_kl=True`` is fit's
  default, so TyXe's KL is analytic) and ``svi.step((x,), y)``, with the net in training mode. TyXe uses
  ``pyro.util.deep_getattr``, which Pyro 1.9 removed; :func:`_restore_pyro_deep_getattr` puts it back first.

Install the competitors with ``pip install -r bench/requirements.txt -c bench/constraints.txt`` (the constraints file
pins torch so that the install never changes it).
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

# Imported here rather than lazily: importing pyro_bnn sets Pyro's module_local_params, and a PyroModule built before
# that setting changes cannot be combined with one built after it (TyXe's likelihood and net would be).
from pyro_bnn.models import build_model

INSTALL_HINT = "pip install -r bench/requirements.txt -c bench/constraints.txt"
"""How to install the competitors (printed by the benchmark when one is missing)."""

PRIOR_SCALE = 1.0
"""Standard deviation of the N(0, PRIOR_SCALE^2) prior on every weight and bias."""

INIT_SCALE = 1e-3
"""Initial posterior standard deviation of every weight and bias."""

LR = 1e-3
"""Adam's learning rate."""

_HIDDEN = (1000, 1000, 1000)


def _net(device: torch.device) -> nn.Module:
    """The deterministic 3FC network (784-1000-1000-1000-10, ReLU, flattens its input) on ``device``."""
    return build_model("3fc", input_shape=(1, 28, 28), num_classes=10).to(device)


def _softplus_inverse(sd: float) -> float:
    """The rho with softplus(rho) = ``sd`` (the posterior scale parameterisation of the Bayes-by-Backprop layers)."""
    return math.log(math.expm1(sd))


def bayesian_torch(x: torch.Tensor, y: torch.Tensor, num_data: int) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """bayesian-torch: ``dnn_to_bnn`` with Reparameterization layers, cross-entropy + ``get_kl_loss`` / B, Adam.

    Args:
        x: A first input batch, shape ``(B, 1, 28, 28)``; everything is built on its device.
        y: Class labels, shape ``(B,)``, int64.
        num_data: Training-set size N (unused: bayesian-torch's documented loss divides the KL by the batch size).

    Returns:
        ``step(x, y)``, one training step on a batch.
    """
    from bayesian_torch.models.dnn_to_bnn import dnn_to_bnn, get_kl_loss

    del num_data  # the README idiom scales the KL by 1 / batch size (see the module docstring)
    net = _net(torch.device("cpu"))
    dnn_to_bnn(
        net,
        {
            "prior_mu": 0.0,
            "prior_sigma": PRIOR_SCALE,
            "posterior_mu_init": 0.0,
            "posterior_rho_init": _softplus_inverse(INIT_SCALE),
            "type": "Reparameterization",
            "moped_enable": False,
        },
    )
    net.to(x.device)
    optimizer = torch.optim.Adam(net.parameters(), lr=LR)
    batch_size = len(x)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y) + get_kl_loss(net) / batch_size
        loss.backward()
        optimizer.step()

    return step


def posteriors_vi_diag(x: torch.Tensor, y: torch.Tensor, num_data: int) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """posteriors: ``posteriors.vi.diag`` build/init/update with torchopt's Adam and temperature 1 / N.

    Args:
        x: A first input batch, shape ``(B, 1, 28, 28)``; everything is built on its device.
        y: Class labels, shape ``(B,)``, int64.
        num_data: Training-set size N (scales the log prior and the temperature).

    Returns:
        ``step(x, y)``, one ``transform.update`` on a batch.
    """
    import posteriors
    import torchopt

    net = _net(x.device)

    def log_posterior(
        params: dict[str, torch.Tensor], batch: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """posteriors' log posterior per datum: mean log-likelihood + log prior / N, and the logits as aux."""
        inputs, labels = batch
        output = torch.func.functional_call(net, params, (inputs,))
        log_prior = posteriors.diag_normal_log_prob(params, 0.0, PRIOR_SCALE)
        return -F.cross_entropy(output, labels) + log_prior / num_data, output

    transform = posteriors.vi.diag.build(
        log_posterior, torchopt.adam(lr=LR), temperature=1 / num_data, n_samples=1, init_log_sds=math.log(INIT_SCALE)
    )
    state = transform.init(dict(net.named_parameters()))

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        nonlocal state
        state, _ = transform.update(state, (x, y))

    return step


def torch_uncertainty_bayes_linear(
    x: torch.Tensor, y: torch.Tensor, num_data: int
) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """torch-uncertainty: the 3FC MLP of ``BayesLinear`` layers trained with ``ELBOLoss`` and Adam.

    Args:
        x: A first input batch, shape ``(B, 1, 28, 28)``; everything is built on its device.
        y: Class labels, shape ``(B,)``, int64.
        num_data: Training-set size N (sets the KL weight).

    Returns:
        ``step(x, y)``, one training step on a batch.
    """
    from torch_uncertainty.layers.bayesian import BayesLinear
    from torch_uncertainty.losses import ELBOLoss

    widths = (28 * 28, *_HIDDEN, 10)
    layers: list[nn.Module] = [nn.Flatten()]
    for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        if i:
            layers.append(nn.ReLU())
        layers.append(
            BayesLinear(
                n_in,
                n_out,
                prior_sigma_1=PRIOR_SCALE,  # both mixture components N(0, 1): the prior is N(0, 1)
                prior_sigma_2=PRIOR_SCALE,
                prior_pi=1.0,
                sigma_init=_softplus_inverse(INIT_SCALE),
                device=x.device,
            )
        )
    model = nn.Sequential(*layers).to(x.device)
    num_layers = len(widths) - 1
    # ELBOLoss's KLDiv averages the KL over the Bayesian layers: num_layers / N makes it mean CE + KL / N.
    criterion = ELBOLoss(model, nn.CrossEntropyLoss(), kl_weight=num_layers / num_data, num_samples=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        optimizer.zero_grad()
        loss = criterion(x, y)
        loss.backward()
        optimizer.step()

    return step


def pyro_autonormal(x: torch.Tensor, y: torch.Tensor, num_data: int) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """Plain Pyro: the net as a PyroModule with N(0, 1) PyroSample priors, AutoNormal, Trace_ELBO, Pyro's Adam.

    Args:
        x: A first input batch, shape ``(B, 1, 28, 28)``; everything is built on its device.
        y: Class labels, shape ``(B,)``, int64.
        num_data: Training-set size N (the size of the subsampled data plate).

    Returns:
        ``step(x, y)``, one ``svi.step(x, y)``.
    """
    import pyro
    import pyro.distributions as dist
    from pyro.infer import SVI, Trace_ELBO
    from pyro.infer.autoguide import AutoNormal
    from pyro.nn import PyroSample
    from pyro.nn.module import to_pyro_module_

    pyro.clear_param_store()
    net = _net(x.device)
    to_pyro_module_(net)
    for module in list(net.modules()):
        for name, param in list(module.named_parameters(recurse=False)):
            prior = dist.Normal(torch.tensor(0.0, device=x.device), torch.tensor(PRIOR_SCALE, device=x.device))
            setattr(module, name, PyroSample(prior.expand(param.shape).to_event(param.dim())))

    def model(inputs: torch.Tensor, labels: torch.Tensor) -> None:
        logits = net(inputs)
        with pyro.plate("data", num_data, subsample_size=len(inputs), device=inputs.device):
            pyro.sample("obs", dist.Categorical(logits=logits), obs=labels)

    guide = AutoNormal(model, init_scale=INIT_SCALE)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": LR}), Trace_ELBO())

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        svi.step(x, y)

    return step


def _restore_pyro_deep_getattr() -> None:
    """Puts back ``pyro.util.deep_getattr`` (removed in Pyro 1.9), which TyXe 0.0.2 calls.

    TyXe uses it to read dotted attributes (``"net.fc1.weight.loc"``) in its own ``tyxe.guides.AutoNormal`` and in
    ``tyxe.util.deep_hasattr``; Pyro's version was ``functools.reduce(getattr, name.split("."), obj)``.
    """
    import pyro.util

    if not hasattr(pyro.util, "deep_getattr"):
        pyro.util.deep_getattr = lambda obj, name: functools.reduce(getattr, name.split("."), obj)


def tyxe(x: torch.Tensor, y: torch.Tensor, num_data: int) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """TyXe: ``VariationalBNN`` with an IID N(0, 1) prior and AutoNormal; the per-batch step of its ``fit``.

    Args:
        x: A first input batch, shape ``(B, 1, 28, 28)``; everything is built on its device.
        y: Class labels, shape ``(B,)``, int64.
        num_data: Training-set size N (TyXe's likelihood scales the log-likelihood by N / B).

    Returns:
        ``step(x, y)``, one ``svi.step((x,), y)`` of the SVI that ``VariationalBNN.fit`` builds.
    """
    _restore_pyro_deep_getattr()
    import pyro
    import pyro.distributions as dist
    import tyxe as tx
    from pyro.infer import SVI, TraceMeanField_ELBO
    from pyro.infer.autoguide import AutoNormal

    pyro.clear_param_store()
    net = _net(x.device)
    prior = tx.priors.IIDPrior(
        dist.Normal(torch.tensor(0.0, device=x.device), torch.tensor(PRIOR_SCALE, device=x.device))
    )
    likelihood = tx.likelihoods.Categorical(num_data)
    guide = functools.partial(AutoNormal, init_scale=INIT_SCALE)
    bnn = tx.VariationalBNN(net, prior, likelihood, guide)
    bnn.net.train(True)
    # What VariationalBNN.fit(loader, optim, num_epochs) does (defaults num_particles=1, closed_form_kl=True),
    # and then per batch: svi.step(tuple(inputs), labels).
    svi = SVI(bnn.model, bnn.guide, pyro.optim.Adam({"lr": LR}), loss=TraceMeanField_ELBO(1))

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        svi.step((x,), y)

    return step


_PACKAGES = {
    "bayesian-torch": ("bayesian_torch",),
    "posteriors vi.diag": ("posteriors", "torchopt"),
    "torch-uncertainty BayesLinear": ("torch_uncertainty", "lightning"),
    "Pyro AutoNormal": ("pyro",),
    "TyXe": ("tyxe", "pyro"),
}


def missing() -> dict[str, str]:
    """The competitors whose packages are not importable.

    Returns:
        ``{name: reason}`` for each name of :data:`AVAILABLE` whose library (or one it needs) is not installed.
    """
    out = {}
    for name, modules in _PACKAGES.items():
        absent = [module for module in modules if importlib.util.find_spec(module) is None]
        if absent:
            out[name] = f"not installed ({', '.join(absent)}): {INSTALL_HINT}"
    return out


AVAILABLE: dict[str, Callable[[torch.Tensor, torch.Tensor, int], Callable[[torch.Tensor, torch.Tensor], None]]] = {
    "bayesian-torch": bayesian_torch,
    "posteriors vi.diag": posteriors_vi_diag,
    "torch-uncertainty BayesLinear": torch_uncertainty_bayes_linear,
    "Pyro AutoNormal": pyro_autonormal,
    "TyXe": tyxe,
}
"""The competitors by display name: ``AVAILABLE[name](x, y, num_data)`` returns the ``step(x, y)`` to time."""
