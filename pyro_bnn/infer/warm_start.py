"""A short MAP warm start: the point estimate a variational guide can start its locations from.

A :class:`~pyro_bnn.infer.Trainer` given a ``loc=map`` guide spec runs :func:`map_warm_start` before building its
guide.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from pyro.infer.autoguide import AutoDelta

from pyro_bnn.bnn import BNN
from pyro_bnn.guides import init_to_network, whole_data_plates

__all__ = ["map_warm_start"]


def map_warm_start(bnn: BNN, train_loader: Iterable, epochs: int, **trainer_kwargs: Any) -> dict[str, torch.Tensor]:
    """Trains a MAP estimate (an AutoDelta started at the network's initial weights) and makes its weights the
    network's new initial values, so a guide built afterwards with locations from the network starts there.

    Deterministic parameters of the network (those the prior does not select) keep their MAP values too. A
    :class:`~pyro_bnn.infer.Trainer` given a guide spec with ``loc=map`` runs it before building the guide.

    Args:
        bnn: The model.
        train_loader: Training batches, as for :meth:`~pyro_bnn.infer.Trainer.fit`.
        epochs: Epochs of MAP training (>= 1).
        trainer_kwargs: Passed to :class:`~pyro_bnn.infer.Trainer` (``optim``, ``runtime``, ...).

    Returns:
        The MAP weights ``{site name: param_shape}``.
    """
    from pyro_bnn.infer.trainer import Trainer  # the trainer runs this function: imported when it is called

    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"a MAP warm start needs epochs >= 1, got {epochs!r}")

    def point(model):  # a model with per-example latents: the same refusal of minibatches as the guide it starts
        return AutoDelta(
            model, init_loc_fn=init_to_network(model), create_plates=whole_data_plates(model, "the MAP warm start")
        )

    trainer = Trainer(bnn, point, **trainer_kwargs)
    trainer.fit(train_loader, epochs)
    median = trainer.guide.median()
    values = {name: median[name].detach() for name in bnn.site_names}
    bnn.set_initial_values(values)
    return values
