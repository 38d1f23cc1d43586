"""What :class:`~pyro_bnn.infer.Trainer` needs of a model that is not a :class:`~pyro_bnn.BNN`.

A BNN owns its likelihood, so the trainer reads the data set size, the KL scaling and the predictive from it. A model
written by a user around random functions (:class:`pyro_bnn.compose.ComposedModel`) has no such likelihood object;
it states the same facts itself, through this protocol. The trainer checks a model against it when it is built.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

import torch

from pyro_bnn.predict import Prediction


@runtime_checkable
class TrainableModel(Protocol):
    """A Pyro model ``model(x, y)`` the trainer can fit, score and check, besides a :class:`~pyro_bnn.BNN`.

    Its observation site must carry :data:`pyro_bnn.sites.LIKELIHOOD_TAG` (the data term of the ELBO) and be scaled
    so that the minibatch estimates the full data set's log likelihood (N/B).

    Attributes:
        dataset_size: N, the number of training examples its data term is scaled for.
        max_plate_nesting: How many plates (batch dimensions, from the right) the model opens itself; the trainer's
            vectorised draws go to their left.
    """

    dataset_size: int
    max_plate_nesting: int

    def validate_batch(self, x: torch.Tensor, y: torch.Tensor | None = None) -> None:
        """Raises ValueError, in one line, for inputs ``x (B, ...)`` or targets ``y (B, ...)`` the model cannot
        take."""
        ...

    def predict(self, guide: torch.nn.Module, data: Iterable, *, num_samples: int) -> Prediction:
        """The posterior predictive of ``guide`` on a re-iterable loader of ``(x, y)`` batches, as a
        :class:`~pyro_bnn.predict.Prediction` (``probs (S, N, C)`` or ``means (S, N, D)``, with targets)."""
        ...
