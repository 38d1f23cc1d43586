"""Recognising divergence: the errors the trainer raises when values stop being finite, and the checks behind them."""

from __future__ import annotations

import torch

DIVERGENCE_ADVICE = (
    "Try a lower learning rate, a smaller init scale or gradient clipping (clip_norm; --clip-norm on the command "
    "line, in a run started again)."
)
"""The last sentence of every divergence message. ``clip_norm`` is both the ``pyro.optim`` clip argument and the
run option; a resumed run keeps its settings, so clipping, like a lower learning rate, takes a run started again
(``--overwrite``). The message is recorded as it is (``stopped.json``), so it names both spellings."""


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; training stopped (before the optimiser step, unless the step was replayed
    from a CUDA graph or the loss is checked only every k steps) and no checkpoint was written."""


class NonFiniteOutputError(ValueError):
    """The network's predictions are NaN or infinite."""


def finite(x: torch.Tensor) -> bool:
    """Whether a tensor holds no NaN or infinity (integer tensors always do)."""
    return not x.dtype.is_floating_point or bool(torch.isfinite(x).all())


def is_argument_check(err: ValueError) -> bool:
    """Whether ``err`` is torch.distributions' argument validation (``Expected parameter ... to satisfy ...``), which
    overflowing parameters trip before any loss is computed."""
    return str(err).startswith("Expected parameter")


def non_finite_loss_message(
    loss_value: float,
    *,
    epoch: int,
    step: int,
    x: torch.Tensor,
    nan_check_every: int,
    where: str,
    applied: bool = False,
) -> str:
    """The one-paragraph message of a :class:`NonFiniteLossError`.

    Args:
        loss_value: The loss read (NaN or infinite).
        epoch: The epoch, counted from 1.
        step: The step within it, counted from 1.
        x: The step's input batch (a non-finite batch is named as the cause).
        nan_check_every: Steps between loss checks (with more than 1 the parameters may already be non-finite).
        where: What became of checkpoints, e.g. ``"the last good checkpoint is run/checkpoint.pt"``.
        applied: The step was replayed from a CUDA graph, its optimiser update already made.
    """
    before = "after the optimiser step (replayed from a CUDA graph)" if applied else "before the optimiser step"
    if not finite(x):
        return (
            f"the input batch of epoch {epoch}, step {step} holds NaN or infinite values; training stopped {before} "
            f"and {where}. Check the data."
        )
    if nan_check_every == 1:
        when = f"at epoch {epoch}, step {step}; training stopped {before}"
    else:
        when = (
            f"by epoch {epoch}, step {step} (checked every {nan_check_every} steps, so the parameters may already be "
            "non-finite); training stopped"
        )
    return f"loss became {loss_value} {when} and {where}. {DIVERGENCE_ADVICE}"
