"""Recognising divergence: the errors the trainer raises when values stop being finite, and the checks behind them."""

from __future__ import annotations

import torch


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; training stopped before the optimiser step and no checkpoint was written."""


class NonFiniteOutputError(ValueError):
    """The network's predictions are NaN or infinite."""


def finite(x: torch.Tensor) -> bool:
    """Whether a tensor holds no NaN or infinity (integer tensors always do)."""
    return not x.dtype.is_floating_point or bool(torch.isfinite(x).all())


def is_argument_check(err: ValueError) -> bool:
    """Whether ``err`` is torch.distributions' argument validation (``Expected parameter ... to satisfy ...``), which
    overflowing parameters trip before any loss is computed."""
    return str(err).startswith("Expected parameter")
