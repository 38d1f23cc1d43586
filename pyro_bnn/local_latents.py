"""Per-example latent variables: one value per row of the minibatch, entering the network at one submodule.

A :class:`LocalLatent` is sampled by :class:`~pyro_bnn.BNN` inside the likelihood's data plate (see
:mod:`pyro_bnn.sites` for the dimensions) and changes the input of one submodule of the network through a
temporary forward pre-hook. The base class knows nothing about what the latent means. Node noise
(:mod:`pyro_bnn.node_noise`) is not built on it: its multiplicative noise on each layer's inputs is one global site per
layer (a parameter of the network that its prior selects), shared by every example, not a per-example latent.

A guide of per-example latents that trains on minibatches opens the model's data plate itself,
``bnn.likelihood.plate(x.shape[0], x.device)``, and samples each latent there, shared by every row or amortised
(computed from the row): the Trainer's batches carry no row indices, so a guide with parameters per training example
(AutoNormal, AutoDelta, Bayes by Backprop) cannot tell which examples a batch holds and needs the whole training set in
every batch (:class:`~pyro_bnn.guides.WholeDataPlates`; docs/guides.md, "Per-example latents").
"""

from __future__ import annotations

import torch
from pyro.distributions import Distribution
from torch import nn


class LocalLatent(nn.Module):
    """Base class of a per-example latent site.

    Subclasses implement :meth:`prior` and :meth:`apply`, and may override :meth:`point_value`. Prior parameters
    should be registered buffers so that ``bnn.to(device)`` moves them.

    Args:
        name: The Pyro site name (unique within the model, different from every weight site).
        target: Path of the submodule of the network whose input the latent changes (``"fc1"``, ``"0"``).
        event_shape: Shape of one example's value.

    Shapes:
        A value is ``(B, *event_shape)`` for one draw and ``(S, B, *event_shape)`` for S draws.
    """

    def __init__(self, name: str, target: str, event_shape: tuple[int, ...]) -> None:
        super().__init__()
        if not isinstance(name, str) or not name:
            raise ValueError(f"a local latent needs a non-empty site name, got {name!r}")
        self.name = name
        self.target = target
        self.event_shape = torch.Size(event_shape)

    def prior(self, batch_size: int) -> Distribution:
        """The prior of B examples' values: batch shape ``(B,)``, event shape :attr:`event_shape`."""
        raise NotImplementedError

    def apply(self, inputs: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """The target module's new input.

        Args:
            inputs: The target's input ``(B, ...)``.
            value: This latent's value for the same rows, ``(B, *event_shape)``.
        """
        raise NotImplementedError

    def point_value(self, batch_size: int) -> torch.Tensor:
        """The value used where the network runs once without drawing (input checks, point-estimate prediction):
        the prior mean, ``(B, *event_shape)``."""
        return self.prior(batch_size).mean

    def extra_repr(self) -> str:
        return f"name={self.name!r}, target={self.target!r}, event_shape={tuple(self.event_shape)}"
