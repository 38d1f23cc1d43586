"""The log joint density that SG-MCMC follows: prior plus the N/B-scaled minibatch log-likelihood, on flat weights.

For a minibatch ``(x, y)`` of ``B`` of the ``N`` training examples and weights ``w``,

    log p~(w) = log p(w) + (N / B) * sum_{b in batch} log p(y_b | x_b, w),

an unbiased estimate of the full-data log joint ``log p(w) + sum_n log p(y_n | x_n, w)``. It is what Pyro's own trace
of the model gives (:func:`model_log_joint`: the likelihood's data plate applies the N/B scale), computed here
without tracing (:class:`LogJoint`): one network pass through :meth:`~pyro_bnn.bnn.BNN.run_network`, each weight
site's prior density from the prior's own distribution. The tests check the two against each other and against a
hand computation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pyro
import torch
from pyro import poutine
from torch.distributions import constraints

from pyro_bnn.bnn import BNN
from pyro_bnn.checks import positive_float
from pyro_bnn.likelihoods.base import KLScale
from pyro_bnn.sites import unflatten


def _real_support(support: constraints.Constraint) -> bool:
    """Whether a prior's support is all of R^shape (possibly wrapped in ``independent``)."""
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    return support is constraints.real


def check_supported(bnn: BNN) -> None:
    """Raises a one-line ValueError when SG-MCMC cannot sample ``bnn`` on its weights alone.

    Supported: weight-space models whose every weight site has a prior on all of R (Normal, Laplace, Cauchy, the
    scale mixture, the improper flat prior), without hyperparameter sites or per-example latents, and a likelihood
    that scales the minibatch by N/B (``kl_scale="dataset"``).
    """
    if not isinstance(bnn, BNN):
        raise ValueError(f"SG-MCMC samples a pyro_bnn BNN, got {type(bnn).__name__}")
    if bnn.hyper_site_names:
        raise ValueError(
            f"SG-MCMC samples weight-space models only: this prior has hyperparameter sites "
            f"{bnn.hyper_site_names[:3]} (constrained scales); use a prior without hyperpriors"
        )
    if bnn.local_latents:
        raise ValueError(
            f"SG-MCMC samples weight-space models only: this model has per-example latents {bnn.local_site_names[:3]}"
        )
    if not bnn.sites:
        raise ValueError("the model has no random weights to sample (its prior selects no parameter)")
    if bnn.likelihood.kl_scale is not KLScale.DATASET:
        raise ValueError(
            f"SG-MCMC needs the N/B-scaled minibatch likelihood (kl_scale='dataset'), got "
            f"kl_scale={bnn.likelihood.kl_scale.value!r}, whose log joint is not the posterior's"
        )
    for site in bnn.sites:
        support = bnn.prior.distribution(site, {}).support
        if not _real_support(support):
            raise ValueError(f"weight site {site.name!r} has a prior on {support}, not on all reals; SG-MCMC needs R")


def model_log_joint(bnn: BNN, weights: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The log joint of one minibatch read from Pyro's trace of the model (the reference :class:`LogJoint` is
    tested against): ``log_prob_sum`` of the model conditioned on ``weights``, which applies the data plate's N/B.

    Args:
        bnn: The model.
        weights: ``{site: param_shape}`` for every weight site.
        x: Minibatch inputs ``(B, *input_shape)``.
        y: Minibatch targets ``(B,)`` or ``(B, D)``.

    Returns:
        A scalar: ``log p(w) + (N / B) * sum_b log p(y_b | x_b, w)``.
    """
    trace = poutine.trace(poutine.condition(bnn, data=dict(weights))).get_trace(x, y)
    return trace.log_prob_sum()


class LogJoint:
    """The minibatch log joint of a weight-space BNN as a function of one flat weight vector.

    Args:
        bnn: A model that :func:`check_supported` accepts. Its deterministic parameters (those the prior does not
            select, a learned noise scale) stay at their current values.
        temperature: The likelihood temperature T: the target is the tempered posterior
            ``log p(w) + (1 / T) * log p(D | w)`` (T < 1: a cold posterior; 1: the posterior).

    Attributes:
        names: Weight site names, in the flat vector's order.
        shapes: Their shapes.
        dim: D, the number of scalar weights.
    """

    def __init__(self, bnn: BNN, temperature: float = 1.0) -> None:
        check_supported(bnn)
        self.bnn = bnn
        self.temperature = positive_float(temperature, "temperature")
        self.names = bnn.site_names
        self.shapes = [site.shape for site in bnn.sites]
        self.sizes = [math.prod(shape) for shape in self.shapes]
        self.dim = sum(self.sizes)
        with pyro.validation_enabled(False):  # a blown-up value must score -inf or NaN (a divergence), not raise
            self.priors = [bnn.prior.distribution(site, {}) for site in bnn.sites]
        self._checked = False

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{site: (*lead, *site_shape)}`` views of flat weights ``(*lead, D)``."""
        return unflatten(self.names, self.shapes, flat)

    def flatten(self, values: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Flat weights ``(*lead, D)`` from ``{site: (*lead, *site_shape)}`` (every weight site, same lead)."""
        missing = [name for name in self.names if name not in values]
        if missing:
            raise ValueError(f"values lack weight site(s) {missing[:5]}; the model's sites are {self.names[:5]}")
        pieces = []
        for name, shape in zip(self.names, self.shapes, strict=True):
            value = values[name]
            lead = value.shape[: value.dim() - len(shape)]
            if tuple(value.shape[len(lead) :]) != tuple(shape):
                raise ValueError(
                    f"value of site {name!r} has shape {tuple(value.shape)}, expected (..., *{tuple(shape)})"
                )
            pieces.append(value.reshape(*lead, -1))
        return torch.cat(pieces, dim=-1)

    def log_prior(self, flat: torch.Tensor) -> torch.Tensor:
        """``log p(w)`` of flat weights ``(*lead, D)``: ``(*lead,)``."""
        values = self.unflatten(flat)
        return sum(prior.log_prob(values[name]) for prior, name in zip(self.priors, self.names, strict=True))

    def log_likelihood(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``sum_b log p(y_b | x_b, w)`` over a minibatch, unscaled, for flat weights ``(D,)`` or ``(C, D)`` (one
        network pass per row, vectorised): ``()`` or ``(C,)``.

        The first call checks the minibatch in one line (``BNN.validate_targets``): a regression target ``(B,)``
        against outputs ``(B, 1)`` would broadcast to ``(B, B)`` and score every output against every target."""
        if not self._checked:
            self.bnn.validate_targets(x, y)
            self._checked = True
        if flat.dim() == 1:
            output = self.bnn.run_network(x, self.unflatten(flat))
        else:
            # vmap of the plain network pass (BNN.apply_parameters would do the same, with shape bookkeeping that
            # costs more than the pass itself on a small network).
            output = torch.vmap(lambda values: self.bnn.run_network(x, values))(self.unflatten(flat))
        return self.bnn.likelihood.log_likelihood(output, y).sum(-1)

    def check_loader(self, loader: object) -> None:
        """Refuses a loader that walks over another number of examples than the likelihood's ``dataset_size`` (the
        N of the N/B scale): the indices of a sampler over a subset of its dataset (``SubsetRandomSampler``), else
        its ``dataset``'s length (a sampler's length is draws per epoch, not examples: a weighted sampler may draw
        more); a loader without a sized dataset is taken as it is."""
        indices = getattr(getattr(loader, "sampler", None), "indices", None)
        try:
            count = len(indices if indices is not None else getattr(loader, "dataset", None))  # type: ignore[arg-type]
        except TypeError:
            return
        size = self.bnn.likelihood.dataset_size
        if count != size:
            raise ValueError(
                f"the loader holds {count} examples but the likelihood's dataset_size is {size}; build the "
                "likelihood with the size of the training set the loader walks over (the N of the N/B scale)"
            )

    def scale(self, batch_size: int) -> float:
        """N / (B T), the factor of a minibatch of ``batch_size`` rows (the likelihood plate's own scale, over the
        temperature).

        Raises:
            ValueError: a batch larger than the likelihood's ``dataset_size``.
        """
        size = self.bnn.likelihood.dataset_size
        if batch_size > size:
            raise ValueError(
                f"minibatch of {batch_size} examples is larger than dataset_size={size}; "
                "dataset_size must be the number of training examples"
            )
        return size / batch_size / self.temperature

    def __call__(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``log p(w) + (N / (B T)) * sum_b log p(y_b | x_b, w)``, differentiable in ``flat``.

        Args:
            flat: Weights ``(D,)``, or ``(C, D)`` for C chains at once.
            x: Minibatch inputs ``(B, *input_shape)``.
            y: Minibatch targets: ``(B,)`` class labels, or ``(B, D_out)`` regression targets.

        Returns:
            ``()``, or ``(C,)``: each row's own log joint (so the gradient of the sum is every row's gradient).
        """
        # Without argument checks: weights that blew up must give a non-finite log joint, which the sampler reports
        # as a divergence, not a distribution's complaint about its parameters.
        with pyro.validation_enabled(False):
            return self.log_prior(flat) + self.scale(x.shape[0]) * self.log_likelihood(flat, x, y)
