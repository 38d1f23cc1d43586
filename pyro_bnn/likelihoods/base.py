"""The likelihood owns the data site and its plate; the ELBO's N/B minibatch scaling lives here and nowhere else."""

from __future__ import annotations

import pyro
import torch
from pyro.distributions import Distribution
from torch import nn


class Likelihood(nn.Module):
    """Base class: turns network outputs into the observation distribution inside the data plate.

    The plate has ``size=dataset_size`` and the current minibatch as its subsample, so Pyro scales the minibatch
    log-likelihood by ``dataset_size / batch_size`` and the ELBO estimates the full-data objective.

    Args:
        dataset_size: Number of training examples N (the plate's full size).
    """

    def __init__(self, dataset_size: int) -> None:
        super().__init__()
        if isinstance(dataset_size, bool) or not isinstance(dataset_size, int) or dataset_size < 1:
            raise ValueError(
                f"dataset_size must be a positive int (the number of training examples), got {dataset_size!r}"
            )
        self.dataset_size = dataset_size

    def distribution(self, output: torch.Tensor) -> Distribution:
        """Observation distribution given the network output ``(..., B, out)``; batch shape ``(..., B)``."""
        raise NotImplementedError

    def check_targets(self, output: torch.Tensor, y: torch.Tensor) -> None:
        """Raises ValueError when targets ``y`` cannot be scored against ``output``."""

    def forward(self, output: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """Scores (or, with ``y=None``, samples) the observations of one minibatch.

        Args:
            output: Network output, ``(B, out)``, or ``(P, B, out)`` under a vectorised particle plate.
            y: Targets for the B examples, or None to sample them.

        Returns:
            The observed (or sampled) targets.
        """
        batch_size = output.shape[-2]
        if batch_size > self.dataset_size:
            raise ValueError(
                f"minibatch of {batch_size} examples is larger than dataset_size={self.dataset_size}; "
                "dataset_size must be the number of training examples"
            )
        # An explicit subsample (rather than subsample_size) gives the N/B scale without drawing random indices.
        subsample = torch.arange(batch_size, device=output.device)
        with pyro.plate("data", size=self.dataset_size, subsample=subsample, dim=-1):
            return pyro.sample("obs", self.distribution(output), obs=y)

    def extra_repr(self) -> str:
        return f"dataset_size={self.dataset_size}"
