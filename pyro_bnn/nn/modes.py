"""Evaluation mode for the passes that are not training steps: checks, predictions and MC dropout.

A network's training mode does two things: dropout draws masks, and a layer with running statistics (batch norm)
normalises by the batch and updates them. A check on one example, a memory probe or a predictive pass must do
neither (batch norm in training mode cannot even run on one example); MC dropout wants the first without the second.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.nn.parameter import is_lazy

DROPOUT_TYPES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
"""torch's dropout layers."""

BATCH_NORM_TYPES = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.LazyBatchNorm1d,
    nn.LazyBatchNorm2d,
    nn.LazyBatchNorm3d,
    nn.SyncBatchNorm,
)
"""torch's batch norm layers (the lazy ones are no subclasses of the others): in training mode each normalises by
its batch's statistics, which couples the rows of a batch, with or without running statistics."""


def has_batch_norm(net: nn.Module) -> bool:
    """Whether any module of ``net`` is a batch norm layer (:data:`BATCH_NORM_TYPES`)."""
    return any(isinstance(module, BATCH_NORM_TYPES) for module in net.modules())


def has_running_statistics(module: nn.Module) -> bool:
    """Whether ``module`` keeps running statistics that its training mode updates (batch norm, lazy or synced, and
    instance norm with ``track_running_stats=True``)."""
    return bool(getattr(module, "track_running_stats", False))


def keeps_state(module: nn.Module) -> bool:
    """Whether ``module`` holds buffers of its own: the state a training-mode pass may update (batch norm's running
    statistics, spectral norm's power-iteration vectors), which a prediction must leave as it was."""
    return has_running_statistics(module) or next(module.buffers(recurse=False), None) is not None


@contextmanager
def network_mode(net: nn.Module, *, dropout: bool = False) -> Iterator[nn.Module]:
    """Puts every module of ``net`` in evaluation mode, or with ``dropout`` (MC dropout) every module in training
    mode but those that keep state (:func:`keeps_state`), and restores each module's own mode on exit (also when the
    block raises).

    With ``dropout`` any module without buffers that reads ``self.training`` draws its masks (torch's dropout layers,
    the dropout inside attention and recurrent layers, ``F.dropout(x, p, self.training)`` in a module of one's own),
    while batch norm normalises by its running statistics and spectral norm skips its power iteration, both leaving
    their buffers as they were.
    """
    modes = [(module, module.training) for module in net.modules()]
    net.train(dropout)
    if dropout:
        for module in net.modules():
            if keeps_state(module):
                module.eval()
    try:
        yield net
    finally:
        for module, training in modes:
            module.training = training


@contextmanager
def preserved_state(net: nn.Module) -> Iterator[nn.Module]:
    """Runs the block with ``net`` in whatever mode it is in, then puts back the buffers of every module that keeps
    state (:func:`keeps_state`: batch norm's running statistics and batch count, spectral norm's vectors), also when
    the block raises: for passes in training mode that are no training step (a guide's set-up pass).

    A lazy module's buffers that the block materialised are reset (``reset_running_stats``), the state they start
    from in a first training step.
    """
    saved = [
        (module, {name: None if is_lazy(b) else b.detach().clone() for name, b in module.named_buffers(recurse=False)})
        for module in net.modules()
        if keeps_state(module)
    ]
    try:
        yield net
    finally:
        with torch.no_grad():
            for module, buffers in saved:
                for name, value in buffers.items():
                    current = getattr(module, name, None)
                    if value is not None and isinstance(current, torch.Tensor) and current.shape == value.shape:
                        current.copy_(value)
                if any(value is None for value in buffers.values()) and hasattr(module, "reset_running_stats"):
                    module.reset_running_stats()
