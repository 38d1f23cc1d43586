"""Fitting laplace-torch around a BNN's MAP weights: the plain network at the MAP, the likelihood and prior it maps
to, the Hessian over the training data and the prior precision tuned by the marginal likelihood."""

from __future__ import annotations

import collections
import copy
import functools
import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from pyro_bnn.bnn import BNN
from pyro_bnn.laplace.options import MARGLIK_WINDOW, LaplaceOptions, PriorStructure, Subset
from pyro_bnn.laplace.posterior import LaplacePosterior, on_model_device
from pyro_bnn.likelihoods import Categorical, Gaussian, KLScale, Likelihood
from pyro_bnn.predict import ParameterSource, as_source
from pyro_bnn.priors import NormalPrior

INSTALL_HINT = "pip install 'pyro-bnn[laplace]'"
"""How to install laplace-torch with pyro_bnn (the ``laplace`` extra of setup.cfg)."""


ADAM_BETA2 = 0.99
"""Adam's second-moment decay in the prior precision's tuning. Torch's default (0.999) remembers the large gradients
of a far start for about a thousand steps and so crawls near the optimum: from 1000 times the optimum of a
Bayesian linear regression it is still 13 % above it after 2000 steps (0.7 % after 3000), where 0.99 settles within
1e-6 in 1100."""


class MarglikNotSettledWarning(UserWarning):
    """The prior precision's tuning reached ``marglik_steps`` before the log precision settled."""


@contextmanager
def _quiet_jit_script() -> Iterator[None]:
    """Silences torch's deprecation of ``torch.jit.script`` (torch 2.10+), and nothing else: laplace-torch's
    dependencies call it at import, and torch itself the first time forward-mode AD runs (curvlinops' GGN)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.*is deprecated", category=FutureWarning)
        yield


def import_laplace() -> Any:
    """laplace-torch's ``laplace`` module, or a one-line ImportError naming the extra that installs it."""
    try:
        with _quiet_jit_script():
            import laplace
    except ImportError:
        raise ImportError(
            f"Laplace approximations need laplace-torch, which is not installed: {INSTALL_HINT}"
        ) from None
    return laplace


def laplace_likelihood(likelihood: Likelihood) -> str:
    """laplace-torch's name for a pyro_bnn likelihood: ``"classification"`` for
    :class:`~pyro_bnn.likelihoods.Categorical`, ``"regression"`` for :class:`~pyro_bnn.likelihoods.Gaussian`.

    Raises:
        ValueError: any other likelihood.
    """
    if isinstance(likelihood, Categorical):
        return "classification"
    if isinstance(likelihood, Gaussian):
        return "regression"
    raise ValueError(f"Laplace covers the Categorical and Gaussian likelihoods only, got {type(likelihood).__name__}")


def prior_start(bnn: BNN, options: LaplaceOptions) -> tuple[float, float]:
    """The prior precision and mean the approximation starts from: the BNN's Normal prior as ``(1 / scale^2, loc)``,
    its precision replaced by the options' where given; the options' precision around 0 for another prior.

    Raises:
        ValueError: no precision given and the prior is not a :class:`~pyro_bnn.priors.NormalPrior`.
    """
    if options.prior_precision is not None:
        mean = float(bnn.prior.loc) if isinstance(bnn.prior, NormalPrior) else 0.0
        return options.prior_precision, mean
    if not isinstance(bnn.prior, NormalPrior):
        raise ValueError(
            f"the Laplace prior precision is read from a NormalPrior, got {type(bnn.prior).__name__}; "
            "pass prior_precision="
        )
    return float(bnn.prior.scale) ** -2, float(bnn.prior.loc)


def map_network(bnn: BNN, values: Mapping[str, torch.Tensor]) -> nn.Module:
    """A plain copy of ``bnn.net`` whose weight sites are ordinary ``nn.Parameter`` s at ``values``.

    Args:
        bnn: The model (not changed).
        values: ``{site name: param_shape}``, e.g. MAP weights.

    Returns:
        The network, in eval mode; its other parameters and buffers are copies of the BNN's.
    """
    net = copy.deepcopy(bnn.net)
    for site in bnn.sites:
        layer = net.get_submodule(site.layer)
        delattr(layer, site.attr)  # the BNN's stand-in buffer
        layer.register_parameter(site.attr, nn.Parameter(values[site.name].detach().clone()))
    return net.eval()


def fit_laplace(
    bnn: BNN,
    point: Mapping[str, torch.Tensor] | ParameterSource | Callable,
    train_loader: Iterable,
    options: LaplaceOptions | None = None,
    **option_values: Any,
) -> LaplacePosterior:
    """Fits a Laplace approximation with laplace-torch around the point estimate of a BNN's weights.

    The BNN's network is copied with its weight sites set to the point's values, laplace-torch's Hessian (the GGN,
    in the chosen structure) is summed over ``train_loader``, and the prior precision is tuned by the marginal
    likelihood. The posterior is ``N(point, (H + prior precision)^-1)`` over the chosen weights; for the
    approximation to mean what it says the point should be a MAP of the same prior and data.

    Args:
        bnn: A weight-space BNN with a Categorical or Gaussian likelihood and no per-example latents.
        point: The MAP weights ``{site: param_shape}``, or any parameter source with a point network (a MAP guide,
            ``AutoDelta``, whose median is its point; a :class:`~pyro_bnn.predict.PointEstimate`).
        train_loader: The training ``(x, y)`` batches the MAP was fitted to, with ``.dataset`` (a torch
            ``DataLoader`` or :class:`~pyro_bnn.data.BatchLoader`); its size must be the likelihood's
            ``dataset_size``.
        options: The approximation's choices (:class:`~pyro_bnn.laplace.LaplaceOptions`); default as built from
            ``option_values``.
        **option_values: Fields of ``LaplaceOptions`` (``subset="all", structure="full"``) when ``options`` is None.

    Returns:
        The fitted :class:`~pyro_bnn.laplace.LaplacePosterior`.

    Raises:
        ImportError: laplace-torch is not installed (naming the ``laplace`` extra).
        ValueError: an unknown option, a likelihood or prior it cannot map, per-example latents, hyperpriors, the
            ``"paper"`` KL scale, a point without values for every weight site, a loader without ``.dataset`` or of
            another size, or a network that the chosen subset does not fit (one line each).
    """
    if options is not None and option_values:
        raise ValueError(f"pass options or option values, not both; got options and {sorted(option_values)}")
    options = options if options is not None else LaplaceOptions(**option_values)
    laplace = import_laplace()
    if not isinstance(bnn, BNN):
        raise ValueError(f"fit_laplace needs a pyro_bnn BNN, got {type(bnn).__name__}")
    kind = laplace_likelihood(bnn.likelihood)
    if bnn.local_latents:
        raise ValueError(f"Laplace covers weight sites only; the model has per-example latents {bnn.local_site_names}")
    if bnn.likelihood.kl_scale is not KLScale.DATASET:
        raise ValueError(
            f"Laplace needs the full-data objective (kl_scale='dataset'); the likelihood has "
            f"kl_scale={bnn.likelihood.kl_scale.value!r}"
        )
    if bnn.hyper_site_names:
        raise ValueError(f"Laplace needs a fixed prior; the model has hyperprior sites {bnn.hyper_site_names[:3]}")
    precision, prior_mean = prior_start(bnn, options)
    dataset = getattr(train_loader, "dataset", None)
    if dataset is None:
        raise ValueError("the training loader must expose .dataset (a torch DataLoader or pyro_bnn BatchLoader)")
    if getattr(train_loader, "drop_last", False):
        raise ValueError("the training loader drops its last batch (drop_last=True); the curvature sums every example")
    if len(dataset) != bnn.likelihood.dataset_size:
        raise ValueError(
            f"the loader holds {len(dataset)} examples but the likelihood's dataset_size is "
            f"{bnn.likelihood.dataset_size}; fit the Laplace approximation on the MAP's training data"
        )
    x_first, y_first = next(iter(train_loader))
    bnn.validate_batch(x_first, y_first)  # inputs the network cannot take, targets the likelihood cannot
    values = as_source(bnn, point).point(bnn, x_first)
    if values is None:
        raise ValueError(f"Laplace needs a point estimate (a MAP); the {type(point).__name__} has no point network")
    missing = [name for name in bnn.site_names if name not in values]
    if missing:
        raise ValueError(f"the point estimate has no values for the weight sites {missing[:5]}")
    values = {name: values[name].detach() for name in bnn.site_names}
    if not_finite := [name for name, value in values.items() if not torch.isfinite(value).all()]:
        raise ValueError(f"the point estimate holds NaN or infinite values at the weight sites {not_finite[:5]}")
    net = map_network(bnn, values)
    if options.subset is Subset.ALL:
        others = [name for name, _ in net.named_parameters() if name not in values]
        if others:
            raise ValueError(f"subset='all' needs every network parameter to be a weight site; not sites: {others[:5]}")
    sigma_noise = float(bnn.likelihood.scale) if kind == "regression" else 1.0
    la = laplace.Laplace(
        net,
        kind,
        subset_of_weights=options.subset.value,
        hessian_structure=options.structure.value,
        sigma_noise=sigma_noise,
        prior_precision=precision,
        prior_mean=prior_mean,
    )
    if options.subset is Subset.LAST_LAYER and options.prior_structure is PriorStructure.LAYERWISE:
        la.__class__ = _per_tensor_prior_class(type(la))
    try:
        with on_model_device(net), _quiet_jit_script():
            la.fit(train_loader)
    except ValueError as err:
        if options.subset is Subset.LAST_LAYER and "only has one module" in str(err):  # its last-layer search
            raise ValueError(
                f"last-layer Laplace needs layers before the last one; the network is one {type(net).__name__}, all "
                "of it the last layer: use subset='all'"
            ) from None
        if options.subset is Subset.LAST_LAYER and "last layer" in str(err):  # laplace-torch's last-layer search
            raise ValueError(
                f"last-layer Laplace needs a network that ends in an nn.Linear; laplace-torch: {err}"
            ) from None
        raise
    if not math.isfinite(float(la.loss)):
        _check_finite_data(train_loader)
        raise ValueError(
            f"the training loss at the point is {float(la.loss)}: the network's outputs on the training data are not "
            "finite at these weights"
        )
    if options.tune_prior:
        with on_model_device(net), _quiet_jit_script():
            _tune_prior_precision(la, precision, options)
    return LaplacePosterior(bnn, la, values, _sampled_sites(bnn, la, options))


class _PerTensorPrior:
    """A mixin of laplace-torch's last-layer Laplace classes whose ``prior_precision_diag`` (the precision of each
    weight, ``(P,)``) also reads one precision per parameter tensor of the last layer (``(n_layers,)``: its weight,
    then its bias), each spread over its tensor's entries as laplace-torch's all-weights classes spread theirs.
    laplace-torch 0.3's last-layer classes take one precision or one per weight only ("Mismatch of prior and
    model"), though they accept and tune ``n_layers`` of them."""

    @property
    def prior_precision_diag(self) -> torch.Tensor:
        precision = self.prior_precision
        if isinstance(precision, torch.Tensor) and precision.ndim == 1 and 1 < len(precision) == self.n_layers:
            sizes = [param.numel() for param in self.model.last_layer.parameters()]  # the order of the weights
            return precision.repeat_interleave(torch.tensor(sizes, device=precision.device))
        return super().prior_precision_diag


@functools.cache
def _per_tensor_prior_class(cls: type) -> type:
    """``cls`` (a laplace-torch last-layer Laplace class) with :class:`_PerTensorPrior`. Its ``_key`` is None:
    ``laplace.Laplace`` picks its class by the ``_key`` of every subclass of ``BaseLaplace``, and must not pick this
    one for ``cls``'s."""
    return type(f"PerTensorPrior{cls.__name__}", (_PerTensorPrior, cls), {"_key": None})


def _tune_prior_precision(la: Any, precision: float, options: LaplaceOptions) -> int:
    """Tunes ``la``'s prior precision from ``precision`` by maximising laplace-torch's Laplace estimate of the log
    marginal likelihood, as its ``optimize_prior_precision(method="marglik")`` does (Adam on the log precision, here
    with a second-moment decay of :data:`ADAM_BETA2`), but until the log precision settles (the last
    :data:`~pyro_bnn.laplace.options.MARGLIK_WINDOW` steps move it less than ``options.marglik_tol`` all told)
    rather than for a fixed number of steps, which stops short of the optimum the farther the start is from it.
    Warns (:class:`MarglikNotSettledWarning`) when ``options.marglik_steps`` steps do not settle it; returns the
    steps taken."""
    from laplace.utils import fix_prior_prec_structure

    start = la.prior_precision.detach()  # (1,): the precision laplace-torch was built with
    if options.prior_structure is not PriorStructure.SCALAR:
        start = fix_prior_prec_structure(
            float(precision), options.prior_structure.value, la.n_layers, la.n_params, start.device, start.dtype
        )
    log_precision = start.log().clone().requires_grad_(True)
    optimizer = torch.optim.Adam([log_precision], lr=options.marglik_lr, betas=(0.9, ADAM_BETA2))
    history = collections.deque([log_precision.detach().clone()], maxlen=MARGLIK_WINDOW + 1)
    change, steps = math.inf, 0
    while steps < options.marglik_steps and not change < options.marglik_tol:
        optimizer.zero_grad()
        (-la.log_marginal_likelihood(prior_precision=log_precision.exp())).backward()
        optimizer.step()
        steps += 1
        history.append(log_precision.detach().clone())
        if len(history) == history.maxlen:
            change = float((history[-1] - history[0]).abs().max())
    la.prior_precision = log_precision.detach().exp()
    if not change < options.marglik_tol:
        window = min(steps, MARGLIK_WINDOW)
        moved = float((history[-1] - history[0]).abs().max())
        warnings.warn(
            f"the prior precision's tuning did not settle in marglik_steps={options.marglik_steps} Adam steps: its "
            f"log moved {moved:.2g} over the last {window} steps (settled: under marglik_tol={options.marglik_tol:g} "
            f"over {MARGLIK_WINDOW}); the precision {_short(la.prior_precision)} may be short of the marginal "
            "likelihood's optimum",
            MarglikNotSettledWarning,
            stacklevel=3,
        )
    return steps


def _short(value: torch.Tensor) -> str:
    values = [f"{float(v):.4g}" for v in value.flatten()[:3]]
    return values[0] if value.numel() == 1 else f"[{', '.join(values)}{', ...' if value.numel() > 3 else ''}]"


def _check_finite_data(train_loader: Iterable) -> None:
    """A one-line ValueError naming the first batch of ``train_loader`` with NaN or infinite inputs or targets."""
    for index, (x, y) in enumerate(train_loader):
        for name, value in (("inputs", x), ("targets", y)):
            if value.is_floating_point() and not torch.isfinite(value).all():
                raise ValueError(f"batch {index} of the training loader holds NaN or infinite {name}")


def _sampled_sites(bnn: BNN, la: Any, options: LaplaceOptions) -> list[str]:
    """The weight sites in the order of laplace-torch's parameter vector."""
    if options.subset is Subset.ALL:
        return [name for name, param in la.model.named_parameters() if param.requires_grad]
    extractor = la.model  # laplace-torch's FeatureExtractor around its own copy of the network
    layer_name = next(name for name, module in extractor.model.named_modules() if module is extractor.last_layer)
    names = [f"{layer_name}.{attr}" if layer_name else attr for attr, _ in extractor.last_layer.named_parameters()]
    not_sites = [name for name in names if name not in bnn.site_names]
    if not names or not_sites:
        raise ValueError(
            f"laplace-torch took {layer_name!r} ({type(extractor.last_layer).__name__}) as the last layer, whose "
            f"parameters must be weight sites of the BNN; not sites: {not_sites or 'it has no parameters'}"
        )
    return names


__all__ = ["INSTALL_HINT", "fit_laplace", "import_laplace", "laplace_likelihood", "map_network", "prior_start"]
