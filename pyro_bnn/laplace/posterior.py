"""A fitted Laplace approximation as a posterior over a BNN's weight sites, and the parameter source that feeds its
weight draws to :func:`pyro_bnn.predict.predict`."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from typing import Any

import torch

from pyro_bnn.bnn import BNN
from pyro_bnn.checks import positive_int
from pyro_bnn.predict import ParameterSource


def on_model_device(module: torch.nn.Module) -> contextlib.AbstractContextManager:
    """Makes ``module``'s device the default of torch's factory functions while laplace-torch runs (a null context
    on the CPU).

    laplace-torch 0.3 builds some tensors without a device: its curvlinops backend's full Hessian multiplies by a
    ``torch.eye`` made on the CPU, which fails for a model on a GPU (seen on an H200 with curvlinops 3.0.1). Its public
    calls are wrapped in this, in one place, rather than patched.
    """
    device = next(module.parameters()).device
    return contextlib.nullcontext() if device.type == "cpu" else torch.device(device)


class LaplacePosterior:
    """``N(w_MAP, Sigma)`` over some of a BNN's weight sites, the rest at their MAP values.

    Built by :func:`~pyro_bnn.laplace.fit_laplace`; it wraps laplace-torch's fitted object (:attr:`laplace`), whose
    parameter vector holds :attr:`sampled_sites` flattened in order.

    Args:
        bnn: The model the approximation belongs to.
        laplace: laplace-torch's fitted approximation (a ``ParametricLaplace``).
        map_values: ``{site: param_shape}`` for every weight site: the approximation's mean.
        sampled_sites: The sites the approximation covers, in the order of laplace-torch's parameter vector.
    """

    def __init__(
        self, bnn: BNN, laplace: Any, map_values: Mapping[str, torch.Tensor], sampled_sites: list[str]
    ) -> None:
        self.bnn = bnn
        self.laplace = laplace
        self.map_values = dict(map_values)
        self.sampled_sites = list(sampled_sites)
        shapes = {site.name: site.shape for site in bnn.sites}
        self._sizes = [math.prod(shapes[name]) for name in self.sampled_sites]
        self._rank_one: tuple[list[torch.nn.Linear] | None] | None = None  # rank_one_layers's answer, once asked
        if sum(self._sizes) != laplace.n_params:
            raise ValueError(
                f"the sites {self.sampled_sites} hold {sum(self._sizes)} weights but the approximation "
                f"{laplace.n_params}"
            )

    @property
    def prior_precision(self) -> torch.Tensor:
        """The prior precision in use (tuned, when the options asked for it): ``(1,)`` scalar or ``(L,)`` one per
        parameter tensor of :attr:`sampled_sites`."""
        return self.laplace.prior_precision.detach()

    def log_marginal_likelihood(self) -> torch.Tensor:
        """laplace-torch's Laplace estimate of ``log p(D)`` at the current prior precision, a scalar tensor."""
        with torch.no_grad():
            return self.laplace.log_marginal_likelihood().detach()

    def mean(self) -> dict[str, torch.Tensor]:
        """The approximation's mean, the MAP: ``{site: param_shape}`` for every weight site."""
        return dict(self.map_values)

    def precision(self) -> torch.Tensor:
        """The posterior precision over :attr:`sampled_sites` as a dense ``(P, P)`` matrix (P their total size; a
        diagonal or Kronecker-factored precision is expanded, so keep P small)."""
        with torch.no_grad():
            matrix = self.laplace.posterior_precision
            if isinstance(matrix, torch.Tensor):
                return matrix.diag() if matrix.dim() == 1 else matrix.clone()
            return matrix.to_matrix()

    def covariance(self) -> torch.Tensor:
        """The posterior covariance over :attr:`sampled_sites`, a dense ``(P, P)`` matrix."""
        with torch.no_grad():
            matrix = self.laplace.posterior_precision
            if isinstance(matrix, torch.Tensor):
                return (1 / matrix).diag() if matrix.dim() == 1 else torch.linalg.inv(matrix)
            return matrix.to_matrix(exponent=-1)

    def sample_vectors(self, num_samples: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``num_samples`` draws of the sampled sites, flattened: ``(S, P)``, in laplace-torch's order."""
        num_samples = positive_int(num_samples, "num_samples")
        with torch.no_grad():
            with on_model_device(self.laplace.model):
                return self.laplace.sample(num_samples, generator=generator).detach()

    def sample(
        self, num_samples: int, generator: torch.Generator | None = None, *, repeat_map: bool = True
    ) -> dict[str, torch.Tensor]:
        """Draws from the approximation, one tensor per weight site.

        Args:
            num_samples: S.
            generator: Random numbers for the draws (default: torch's global generator).
            repeat_map: Also give the sites outside :attr:`sampled_sites` (last-layer Laplace), at their MAP values
                repeated S times (an expanded view, no copy).

        Returns:
            ``{site: (S, *param_shape)}``: the layout of :class:`~pyro_bnn.predict.Samples` and, with a leading chain
            dimension (``value.unsqueeze(0)``), of :func:`~pyro_bnn.diagnostics.arviz_export.to_inference_data`.
        """
        flat = self.sample_vectors(num_samples, generator)
        shapes = {site.name: site.shape for site in self.bnn.sites}
        draws = {
            name: piece.reshape(num_samples, *shapes[name])
            for name, piece in zip(self.sampled_sites, flat.split(self._sizes, dim=1), strict=True)
        }
        if repeat_map:
            for name in self.bnn.site_names:
                if name not in draws:
                    draws[name] = self.map_values[name].expand(num_samples, *shapes[name])
        return {name: draws[name] for name in self.bnn.site_names if name in draws}

    def rank_one_layers(self, probe: torch.Tensor) -> list[torch.nn.Linear] | None:
        """:func:`pyro_bnn.laplace.kron_glm.rank_one_layers` of this approximation, checked on the first ``probe``
        it is asked with and kept: the answer is the network's and the approximation's (the check computes the
        probe's moments through laplace-torch's full Jacobian as well, so it is not repeated per call).

        Args:
            probe: Inputs ``(B, *input_shape)`` on the model's device (the first two are used).
        """
        if self._rank_one is None:
            # imported here: kron_glm imports fit, which imports this module
            from pyro_bnn.laplace.kron_glm import rank_one_layers

            with on_model_device(self.laplace.model):
                self._rank_one = (rank_one_layers(self.laplace, probe),)
        return self._rank_one[0]

    def source(self) -> LaplaceSource:
        """The parameter source of this posterior for :func:`~pyro_bnn.predict.predict` (MC predictive)."""
        return LaplaceSource(self)


class LaplaceSource(ParameterSource):
    """Weight draws from a :class:`LaplacePosterior`, drawn a chunk at a time as :func:`~pyro_bnn.predict.predict`
    asks (torch's global generator, so ``pyro.set_rng_seed`` fixes them).

    The sites the approximation does not cover stay at their MAP values, passed once without sample dimensions.
    The point network is the MAP (the approximation's mean), so ``predict(..., point=True)`` scores it beside the
    draws.

    Args:
        posterior: The fitted approximation.
    """

    def __init__(self, posterior: LaplacePosterior) -> None:
        if not isinstance(posterior, LaplacePosterior):
            raise ValueError(f"a Laplace source needs a LaplacePosterior, got {type(posterior).__name__}")
        self.posterior = posterior

    def prepare(self, bnn: BNN, x: torch.Tensor) -> None:
        if bnn is not self.posterior.bnn:
            raise ValueError("this Laplace source belongs to another BNN; predict with the model it was fitted on")

    def point(self, bnn: BNN, x: torch.Tensor) -> dict[str, torch.Tensor] | None:
        """The MAP weights, ``{site: param_shape}``."""
        self.prepare(bnn, x)
        return self.posterior.mean()

    def draw_globals(self, bnn: BNN, start: int, num_samples: int, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """``num_samples`` fresh draws: ``{site: (S, 1, *param_shape)}`` for the sampled sites, ``param_shape``
        (the MAP) for the others."""
        draws = self.posterior.sample(num_samples, repeat_map=False)
        return {
            name: draws[name].unsqueeze(1).to(x.device) if name in draws else value.to(x.device)
            for name, value in self.posterior.map_values.items()
        }


__all__ = ["LaplacePosterior", "LaplaceSource"]
