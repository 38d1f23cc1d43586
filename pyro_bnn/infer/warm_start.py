"""A short MAP warm start: the point estimate a variational guide can start its locations from."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from pyro.infer.autoguide import AutoDelta

from pyro_bnn.bnn import BNN
from pyro_bnn.guides import init_to_network
from pyro_bnn.infer.trainer import Trainer


def map_warm_start(bnn: BNN, train_loader: Iterable, epochs: int, **trainer_kwargs: Any) -> dict[str, torch.Tensor]:
    """Trains a MAP estimate (an AutoDelta started at the network's initial weights) and makes its weights the
    network's new initial values, so a guide built afterwards with locations from the network starts there.

    Deterministic parameters of the network (those the prior does not select) keep their MAP values too.

    Args:
        bnn: The model.
        train_loader: Training batches, as for :meth:`Trainer.fit`.
        epochs: Epochs of MAP training (>= 1).
        trainer_kwargs: Passed to :class:`Trainer` (``optim``, ``device``, ``seed``, ``progress``, ...).

    Returns:
        The MAP weights ``{site name: param_shape}``.
    """
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"a MAP warm start needs epochs >= 1, got {epochs!r}")
    trainer = Trainer(bnn, lambda model: AutoDelta(model, init_loc_fn=init_to_network(model)), **trainer_kwargs)
    trainer.fit(train_loader, epochs)
    median = trainer.guide.median()
    values = {name: median[name].detach() for name in bnn.site_names}
    bnn.set_initial_values(values)
    return values
