"""Turning the optimiser argument (a ``pyro.optim`` optimiser, a factory or None) into a torch optimiser."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from pyro.optim import PyroOptim
from pyro.optim.lr_scheduler import PyroLRScheduler

OptimizerFactory = Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]

_FUSABLE = (torch.optim.Adam, torch.optim.AdamW)
# torch's fused Adam runs on CUDA from 2.0 and on CPU from 2.4; setup.cfg admits torch >= 2.1.
_FUSED_DEVICES = ("cpu", "cuda") if torch.torch_version.TorchVersion(torch.__version__) >= (2, 4) else ("cuda",)


def _fused_args(constructor: Callable, args: dict, params: Sequence[torch.nn.Parameter]) -> dict:
    """``args`` plus ``fused=True`` for Adam / AdamW when the caller chose no implementation (neither ``fused`` nor
    ``foreach``) and every parameter is a floating tensor on a device the installed torch has the kernel for (CUDA;
    the CPU from torch 2.4).

    The fused kernel computes the same update in one pass over each parameter; for the 5.6 M variational parameters
    of the 3FC network on a 2-core CPU it takes 3 ms per step where the default takes 10 ms."""
    if constructor not in _FUSABLE or "fused" in args or "foreach" in args:
        return args
    if not params or not all(p.is_floating_point() and p.device.type in _FUSED_DEVICES for p in params):
        return args
    return {**args, "fused": True}


def build_optimizer(
    optim: PyroOptim | OptimizerFactory | None, named_params: Sequence[tuple[str, torch.nn.Parameter]]
) -> tuple[torch.optim.Optimizer, dict]:
    """Builds one torch optimiser over all trainable parameters.

    Args:
        optim: ``pyro.optim.Adam({"lr": 1e-3})`` or any other ``pyro.optim`` optimiser (its arguments may be a
            callable of the parameter name, which then names parameters ``"model.<name>"`` or ``"guide.<name>"``);
            or a factory ``params -> torch.optim.Optimizer``; None means Adam with lr 1e-3. A ``pyro.optim`` Adam or
            AdamW (and the default) runs torch's fused kernel where the parameters allow it and the arguments name
            no implementation; a factory builds exactly what it says.
        named_params: ``(name, parameter)`` pairs.

    Returns:
        The optimiser and the gradient-clipping arguments (``clip_norm`` / ``clip_value``) of a PyroOptim.
    """
    params = [p for _, p in named_params]
    if optim is None:
        return torch.optim.Adam(params, **_fused_args(torch.optim.Adam, {"lr": 1e-3}, params)), {}
    if isinstance(optim, PyroLRScheduler):
        raise TypeError(
            "pass the optimiser itself (e.g. pyro.optim.Adam) and the schedule as lr_scheduler="
            "lambda opt: torch.optim.lr_scheduler.StepLR(opt, ...), stepped once per epoch"
        )
    if isinstance(optim, PyroOptim):
        if callable(optim.pt_clip_args):
            raise TypeError("per-parameter clip_args callables are not supported; pass a dict")
        args = optim.pt_optim_args
        if callable(args):
            groups = [{"params": [p], **args(name)} for name, p in named_params]
            return optim.pt_optim_constructor(groups), dict(optim.pt_clip_args)
        args = _fused_args(optim.pt_optim_constructor, args, params)
        return optim.pt_optim_constructor(params, **args), dict(optim.pt_clip_args)
    if isinstance(optim, torch.optim.Optimizer):
        raise TypeError(
            "pass a factory (lambda params: torch.optim.SGD(params, lr=0.1)) rather than an optimiser instance: "
            "the guide's parameters do not exist until training starts"
        )
    if callable(optim):
        return optim(params), {}
    raise TypeError(f"optim must be a pyro.optim optimiser, a factory params -> Optimizer, or None; got {optim!r}")


def clip_gradients(
    params: Sequence[torch.nn.Parameter], clip_norm: float | None = None, clip_value: float | None = None
):
    """Applies a PyroOptim's ``clip_args`` to all parameters at once."""
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(params, clip_norm)
    if clip_value is not None:
        torch.nn.utils.clip_grad_value_(params, clip_value)
