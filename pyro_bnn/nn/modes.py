"""Evaluation mode for the passes that are not training steps: checks, predictions and MC dropout.

A network's training mode does two things: dropout draws masks, and batch norm normalises by the batch and updates its
running statistics. A check on one example, a memory probe or a predictive pass must do neither (batch norm in
training mode cannot even run on one example); MC dropout wants the first without the second.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

DROPOUT_TYPES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
"""torch's dropout layers: the modules MC dropout keeps in training mode."""


@contextmanager
def network_mode(net: nn.Module, *, dropout: bool = False) -> Iterator[nn.Module]:
    """Puts every module of ``net`` in evaluation mode, its dropout layers (:data:`DROPOUT_TYPES`) in training mode
    when ``dropout``, and restores each module's own mode on exit (also when the block raises).

    Batch norm then normalises by its running statistics and leaves them as they were.
    """
    modes = [(module, module.training) for module in net.modules()]
    net.eval()
    if dropout:
        for module in net.modules():
            if isinstance(module, DROPOUT_TYPES):
                module.train()
    try:
        yield net
    finally:
        for module, training in modes:
            module.training = training
