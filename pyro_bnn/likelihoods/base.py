"""The likelihood owns the data site and its plate; the ELBO's N/B minibatch scaling lives here and nowhere else."""

from __future__ import annotations

from enum import Enum

import pyro
import torch
from pyro.distributions import Distribution
from torch import nn

from pyro_bnn.checks import enum_member, positive_int
from pyro_bnn.sites import DATA_DIM, LIKELIHOOD_TAG


class KLScale(str, Enum):
    """How a step's data term is scaled against the KL term (``--kl-scale``)."""

    DATASET = "dataset"
    """The full-data ELBO (default): the minibatch log-likelihood times N/B plus the KL, so each step's loss
    estimates ``-sum_n log p(y_n | w) + KL`` over the whole training set."""
    PAPER = "paper"
    """The One Simple Trick code's objective: the *unscaled* minibatch log-likelihood plus the full KL on every step,
    ``sum_batch -log p(y | w) + KL`` (a short last batch included). Per step this is (B/N) times the full-data ELBO
    with the KL weighted by N/B: a prior N/B times stronger. It does not combine with Blundell's minibatch KL
    weighting, which assumes the N/B scaling."""


class Likelihood(nn.Module):
    """Base class: turns network outputs into the observation distribution inside the data plate.

    The plate has ``size=dataset_size`` and the current minibatch as its subsample, so Pyro scales the minibatch
    log-likelihood by ``dataset_size / batch_size`` and the ELBO estimates the full-data objective. The observation
    site carries :data:`pyro_bnn.sites.LIKELIHOOD_TAG`, which is how objectives and KL annealing tell the data term
    from everything else.

    Subclasses implement :meth:`distribution` and :meth:`prediction_fields`, and may check targets in
    :meth:`check_targets`.

    Args:
        dataset_size: Number of training examples N (the plate's full size).
        kl_scale: ``"dataset"`` (scale the minibatch by N/B, the default) or ``"paper"`` (no scaling; see
            :class:`KLScale`).
    """

    def __init__(self, dataset_size: int, kl_scale: KLScale | str = KLScale.DATASET) -> None:
        super().__init__()
        self.dataset_size = positive_int(dataset_size, "dataset_size")
        self.kl_scale = enum_member(KLScale, kl_scale, "KL scale")

    def distribution(self, output: torch.Tensor) -> Distribution:
        """Observation distribution given the network output ``(..., B, out)``; batch shape ``(..., B)``."""
        raise NotImplementedError

    def prediction_fields(self, output: torch.Tensor) -> dict[str, torch.Tensor]:
        """What a :class:`~pyro_bnn.predict.Prediction` holds for these outputs.

        Args:
            output: Network outputs ``(S, N, out)``.

        Returns:
            Keyword arguments of ``Prediction``: ``{"probs": (S, N, C)}`` for a classifier, ``{"means": (S, N, D),
            "noise_scale": ()}`` for a Gaussian.
        """
        raise NotImplementedError

    def log_likelihood(self, output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Unscaled log-likelihood of each target under each sample's output.

        Args:
            output: Network outputs ``(..., N, out)``.
            y: Targets for the N rows (``(N,)`` labels or ``(N, D)`` values).

        Returns:
            ``(..., N)``: ``log p(y_n | output_n)``, without the N/B plate scaling.
        """
        return self.distribution(output).log_prob(y)

    def check_targets(self, output: torch.Tensor, y: torch.Tensor) -> None:
        """Raises ValueError when targets ``y`` cannot be scored against ``output``."""

    def plate(self, batch_size: int, device: torch.device | str | None = None) -> pyro.plate:
        """The data plate for a minibatch of ``batch_size`` rows (at :data:`pyro_bnn.sites.DATA_DIM`).

        Guides that sample per-example latent sites open the same plate, so both sides scale by N/B.
        """
        if batch_size > self.dataset_size:
            raise ValueError(
                f"minibatch of {batch_size} examples is larger than dataset_size={self.dataset_size}; "
                "dataset_size must be the number of training examples"
            )
        # An explicit subsample (rather than subsample_size) gives the N/B scale without drawing random indices;
        # a plate as large as the minibatch gives scale 1 (the paper's unscaled objective).
        subsample = torch.arange(batch_size, device=device)
        size = self.dataset_size if self.kl_scale is KLScale.DATASET else batch_size
        return pyro.plate("data", size=size, subsample=subsample, dim=DATA_DIM)

    def forward(
        self, output: torch.Tensor, y: torch.Tensor | None = None, *, plate: pyro.plate | None = None
    ) -> torch.Tensor:
        """Scores (or, with ``y=None``, samples) the observations of one minibatch.

        Args:
            output: Network output, ``(B, out)``, or ``(S, B, out)`` under a sample plate.
            y: Targets for the B examples, or None to sample them.
            plate: The model's data plate when it already made one (:meth:`plate`) for per-example latents.

        Returns:
            The observed (or sampled) targets.
        """
        with plate if plate is not None else self.plate(output.shape[-2], output.device):
            return pyro.sample("obs", self.distribution(output), obs=y, infer={LIKELIHOOD_TAG: True})

    def extra_repr(self) -> str:
        scale = "" if self.kl_scale is KLScale.DATASET else f", kl_scale={self.kl_scale.value!r}"
        return f"dataset_size={self.dataset_size}{scale}"
