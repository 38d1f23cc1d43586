"""Regression likelihoods whose noise the network predicts: a heteroscedastic Gaussian and a Student-t.

A network for these likelihoods outputs ``2 D`` numbers per input for ``D`` targets: the first ``D`` are the means,
the last ``D`` the raw (unconstrained) scales, which :class:`ScaleLink` maps to a standard deviation
``min_scale + link(raw)``. The floor ``min_scale`` keeps the log density finite when the network drives a scale
towards 0 on a point it fits exactly (without it one point can send the loss to minus infinity).
"""

from __future__ import annotations

import math
from enum import Enum

import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.distributions import Distribution
from torch import nn

from pyro_bnn.checks import enum_member, positive_float
from pyro_bnn.likelihoods.base import KLScale, Likelihood

DEFAULT_MIN_SCALE = 1e-3
"""The default floor on a predicted noise standard deviation (in target units)."""


class ScaleLink(str, Enum):
    """How a network's raw scale output ``r`` becomes a noise standard deviation ``min_scale + link(r)``."""

    SOFTPLUS = "softplus"
    """``log(1 + exp(r))`` (the default): linear for large ``r``, so a large output does not blow the scale up."""
    EXP = "exp"
    """``exp(r)``: ``r`` is the log-scale (plus the floor), the classic mean and log-variance head."""


class NoiseScale(str, Enum):
    """Where a Student-t likelihood's scale comes from."""

    FIXED = "fixed"
    """One scale given by the user, a buffer."""
    LEARNED = "learned"
    """One scale learned as a point estimate (a model parameter the trainer optimises), starting at ``scale``."""
    PREDICTED = "predicted"
    """A scale per input and output predicted by the network: it outputs ``2 D`` numbers (means, raw scales)."""


def _link(raw: torch.Tensor, link: ScaleLink, min_scale: float) -> torch.Tensor:
    return min_scale + (F.softplus(raw) if link is ScaleLink.SOFTPLUS else raw.exp())


def split_mean_scale(
    output: torch.Tensor, *, link: ScaleLink | str = ScaleLink.SOFTPLUS, min_scale: float = DEFAULT_MIN_SCALE
) -> tuple[torch.Tensor, torch.Tensor]:
    """Splits a two-headed network output into means and noise standard deviations.

    Args:
        output: ``(..., B, 2 D)``: means in ``[..., :D]``, raw scales in ``[..., D:]``.
        link: The :class:`ScaleLink`.
        min_scale: The floor added to every scale (> 0).

    Returns:
        ``(means, scales)``, each ``(..., B, D)``; every scale is ``>= min_scale``.

    Raises:
        ValueError: when the last dimension is odd (or 0), or ``min_scale`` is not a finite number > 0 (a negative
            or NaN floor gave negative or NaN scales).
    """
    # checked here too, not only by the likelihoods' constructors: a direct call is public API
    min_scale = positive_float(min_scale, "split_mean_scale min_scale")
    width = output.shape[-1]
    if width == 0 or width % 2:
        raise ValueError(
            f"a network for a predicted-noise likelihood outputs 2 D values (D means, D raw scales), got {width}"
        )
    half = width // 2
    return output[..., :half], _link(output[..., half:], enum_member(ScaleLink, link, "scale link"), min_scale)


def _check_regression_targets(y: torch.Tensor, means: torch.Tensor, width: int) -> None:
    if not y.dtype.is_floating_point:
        raise ValueError(f"regression targets must be floating point, got {y.dtype}")
    if y.shape != means.shape[-2:]:
        raise ValueError(
            f"targets of shape {tuple(y.shape)} do not match the {means.shape[-1]} means of network outputs "
            f"(B, {width}) with B = {means.shape[-2]} (expected (B, D); reshape a 1-D target to (B, 1))"
        )


class HeteroscedasticGaussian(Likelihood):
    """``y ~ Normal(mean(x), scale(x)^2)`` with both predicted by the network, independently over D outputs.

    The network outputs ``(B, 2 D)``: the means ``[:, :D]`` and raw scales ``[:, D:]``, with
    ``scale = min_scale + link(raw)`` (:func:`split_mean_scale`). For one target (``D = 1``) that is a network
    with 2 outputs. Targets are ``(B, D)``.

    Args:
        dataset_size: Number of training examples N.
        min_scale: Floor on the predicted standard deviation (finite, > 0), in target units.
        link: :class:`ScaleLink` (``"softplus"`` by default, or ``"exp"``: a log-scale head).
        kl_scale: As in :class:`~pyro_bnn.likelihoods.Likelihood`.
    """

    def __init__(
        self,
        dataset_size: int,
        min_scale: float = DEFAULT_MIN_SCALE,
        link: ScaleLink | str = ScaleLink.SOFTPLUS,
        kl_scale: KLScale | str = KLScale.DATASET,
    ) -> None:
        super().__init__(dataset_size, kl_scale)
        self.min_scale = positive_float(min_scale, "HeteroscedasticGaussian min_scale")
        self.link = enum_member(ScaleLink, link, "scale link")

    def mean_scale(self, output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(means, scales)``, each ``(..., B, D)``, of network outputs ``(..., B, 2 D)``."""
        return split_mean_scale(output, link=self.link, min_scale=self.min_scale)

    def distribution(self, output: torch.Tensor) -> Distribution:
        means, scales = self.mean_scale(output)
        return dist.Normal(means, scales).to_event(1)

    def check_targets(self, output: torch.Tensor, y: torch.Tensor) -> None:
        means, _ = self.mean_scale(output)
        _check_regression_targets(y, means, output.shape[-1])

    def prediction_fields(self, output: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{"means": (S, N, D), "noise_scale": (S, N, D)}``: each sample's predicted means and noise sds."""
        means, scales = self.mean_scale(output)
        return {"means": means, "noise_scale": scales}

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, min_scale={self.min_scale:g}, link={self.link.value!r}"


class StudentT(Likelihood):
    """``y ~ StudentT(df, mean, scale)`` independently over the D outputs: a Gaussian with heavier tails.

    ``df`` is fixed by the user. The scale is fixed, learned, or predicted by the network (:class:`NoiseScale`);
    with ``"predicted"`` the network outputs ``(B, 2 D)`` as for :class:`HeteroscedasticGaussian`, otherwise
    ``(B, D)`` means. The noise variance is ``scale^2 df / (df - 2)`` for ``df > 2`` and infinite otherwise.

    Args:
        dataset_size: Number of training examples N.
        df: Degrees of freedom (finite, > 0; ``df -> inf`` is the Gaussian).
        scale: The fixed scale, or the initial value of a learned one (finite, > 0); unused when predicted.
        noise: :class:`NoiseScale`: ``"fixed"`` (default), ``"learned"`` or ``"predicted"``.
        min_scale: Floor on a predicted scale (finite, > 0).
        link: :class:`ScaleLink` of a predicted scale.
        kl_scale: As in :class:`~pyro_bnn.likelihoods.Likelihood`.
    """

    def __init__(
        self,
        dataset_size: int,
        df: float,
        scale: float = 1.0,
        noise: NoiseScale | str = NoiseScale.FIXED,
        min_scale: float = DEFAULT_MIN_SCALE,
        link: ScaleLink | str = ScaleLink.SOFTPLUS,
        kl_scale: KLScale | str = KLScale.DATASET,
    ) -> None:
        super().__init__(dataset_size, kl_scale)
        self.register_buffer("df", torch.tensor(positive_float(df, "StudentT df")))
        self.noise = enum_member(NoiseScale, noise, "Student-t noise scale")
        self.min_scale = positive_float(min_scale, "StudentT min_scale")
        self.link = enum_member(ScaleLink, link, "scale link")
        log_scale = torch.tensor(math.log(positive_float(scale, "StudentT scale")))
        if self.noise is NoiseScale.LEARNED:
            self.log_scale = nn.Parameter(log_scale)
        else:
            self.register_buffer("log_scale", log_scale)

    @property
    def predicts_scale(self) -> bool:
        """Whether the network outputs the scale (``noise="predicted"``)."""
        return self.noise is NoiseScale.PREDICTED

    def mean_scale(self, output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(means (..., B, D), scale)``: the scale is ``(..., B, D)`` when predicted, else a scalar tensor."""
        if self.predicts_scale:
            return split_mean_scale(output, link=self.link, min_scale=self.min_scale)
        return output, self.log_scale.exp()

    def distribution(self, output: torch.Tensor) -> Distribution:
        means, scale = self.mean_scale(output)
        return dist.StudentT(self.df, means, scale.expand_as(means)).to_event(1)

    def check_targets(self, output: torch.Tensor, y: torch.Tensor) -> None:
        means, _ = self.mean_scale(output)
        _check_regression_targets(y, means, output.shape[-1])

    def prediction_fields(self, output: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{"means": (S, N, D), "noise_scale": (S, N, D) or (), "noise_df": ()}``."""
        means, scale = self.mean_scale(output)
        if not self.predicts_scale:
            scale = scale.detach()
        return {"means": means, "noise_scale": scale, "noise_df": self.df.detach()}

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, df={float(self.df):g}, noise={self.noise.value!r}"
