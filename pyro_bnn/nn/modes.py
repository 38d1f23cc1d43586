"""Evaluation mode for the passes that are not training steps: checks, predictions and MC dropout.

A network's training mode does two things: dropout draws masks, and a layer with running statistics (batch norm)
normalises by the batch and updates them. A check on one example, a memory probe or a predictive pass must do
neither (batch norm in training mode cannot even run on one example); MC dropout wants the first without the second.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

DROPOUT_TYPES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
"""torch's dropout layers."""


def has_running_statistics(module: nn.Module) -> bool:
    """Whether ``module`` keeps running statistics that its training mode updates (batch norm, lazy or synced, and
    instance norm with ``track_running_stats=True``)."""
    return bool(getattr(module, "track_running_stats", False))


@contextmanager
def network_mode(net: nn.Module, *, dropout: bool = False) -> Iterator[nn.Module]:
    """Puts every module of ``net`` in evaluation mode, or with ``dropout`` (MC dropout) every module in training
    mode but those with running statistics (:func:`has_running_statistics`), and restores each module's own mode on
    exit (also when the block raises).

    With ``dropout`` any module that reads ``self.training`` (torch's dropout layers, ``F.dropout(x, p,
    self.training)`` in a module of one's own) draws its masks, and batch norm normalises by its running statistics
    and leaves them as they were.
    """
    modes = [(module, module.training) for module in net.modules()]
    net.train(dropout)
    if dropout:
        for module in net.modules():
            if has_running_statistics(module):
                module.eval()
    try:
        yield net
    finally:
        for module, training in modes:
            module.training = training
