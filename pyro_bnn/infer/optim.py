"""Turning the optimiser argument (a ``pyro.optim`` optimiser, :class:`ParamGroups`, a factory or None) into a torch
optimiser."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar

import torch
from pyro.optim import PyroOptim
from pyro.optim.lr_scheduler import PyroLRScheduler

from pyro_bnn.checks import Settings, non_negative_float, positive_float


class OptimizerKind(str, Enum):
    """Optimisers of a training run by name (``--optimizer``)."""

    ADAM = "adam"
    """Adam (torch's fused kernel where it exists): the weight-space default."""
    SGD = "sgd"
    """SGD with Nesterov momentum 0.9, the implicit-BNN authors' optimiser; its learning rates are per training
    example in a run (``pyro_bnn.experiments``), since the loss there is the summed full-data one."""


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


def fused_adam_args(args: dict, params: Sequence[torch.Tensor]) -> dict:
    """``torch.optim.Adam``'s keyword arguments ``args`` plus ``fused=True`` where the installed torch has the fused
    kernel for every parameter's device (see :func:`_fused_args`)."""
    return _fused_args(torch.optim.Adam, args, params)


_POSITIVE_OPTIONS = ("lr", "eps")
_NON_NEGATIVE_OPTIONS = ("weight_decay", "momentum", "dampening")


def _check_number(where: str, key: str, value: object, positive: bool) -> None:
    """A one-line ValueError unless ``value`` is a finite real number > 0 (``positive``) or >= 0."""
    (positive_float if positive else non_negative_float)(value, f"{where}: {key}")


@dataclass(frozen=True, kw_only=True)
class ParamGroups(Settings):
    """One optimiser with two parameter groups: the model's deterministic parameters and the guide's.

    Node-noise BNNs (implicit BNNs, Trinh et al., 2022) train the network's deterministic weights and the variational
    parameters of the noise together, with separate settings: e.g. SGD with Nesterov momentum 0.9, lr 0.05-0.1 and
    weight decay 5e-4 for the weights, and a large lr (1-5) without weight decay for the variational parameters::

        ParamGroups(
            model={"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4},
            guide={"lr": 2.0, "momentum": 0.9, "nesterov": True},
        )

    :func:`build_optimizer` puts every ``model.*`` parameter into the first group and every ``guide.*`` parameter
    into the second, in that order; a group without parameters is left out. Each group's dict carries ``"name"``
    (``"model"`` / ``"guide"``), which :func:`~pyro_bnn.infer.lr_schedules.group_scheduler` uses to give each group
    its own learning-rate schedule.

    Attributes:
        constructor: A ``torch.optim.Optimizer`` subclass (default SGD). Adam / AdamW run torch's fused kernel where
            the parameters allow it and neither group names an implementation (``fused`` / ``foreach``).
        model: The model's group options (keyword arguments of ``constructor``; ``lr`` required).
        guide: The guide's group options (likewise).
        clip_norm: Clip the gradient of all parameters (both groups together) to this norm before each step, as a
            PyroOptim's ``clip_args={"clip_norm": ...}`` does; None: no clipping.

    Raises:
        TypeError: ``constructor`` is not an optimiser class, or a group's options are not a dict.
        ValueError: One line naming the group and the value: an option ``constructor`` does not take, a missing
            ``lr``, an ``lr`` or ``eps`` that is not a finite number > 0, a ``weight_decay``, ``momentum`` or
            ``dampening`` that is not a finite number >= 0, ``nesterov`` without momentum, or a ``clip_norm``
            that is not a finite number > 0.
    """

    constructor: type[torch.optim.Optimizer] = torch.optim.SGD
    model: dict
    guide: dict
    clip_norm: float | None = None

    GROUPS: ClassVar[tuple[str, str]] = ("model", "guide")
    """The groups' names, in the order the optimiser holds them."""

    def check(self) -> None:
        if self.clip_norm is not None:
            _check_number("ParamGroups", "clip_norm", self.clip_norm, positive=True)
        if not (isinstance(self.constructor, type) and issubclass(self.constructor, torch.optim.Optimizer)):
            raise TypeError(f"ParamGroups.constructor must be a torch.optim.Optimizer class, got {self.constructor!r}")
        signature = inspect.signature(self.constructor).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.values())
        known = [name for name in signature if name not in ("params", "self")]
        for group in self.GROUPS:
            options = getattr(self, group)
            where = f"ParamGroups.{group}"
            if not isinstance(options, Mapping):
                raise TypeError(f"{where} must be a dict of {self.constructor.__name__} options, got {options!r}")
            options = dict(options)
            self._set(group, options)  # a copy: later changes to the caller's dict do not leak in
            for key in options:
                if key in ("params", "name"):
                    raise ValueError(f"{where}: {key!r} is set by build_optimizer, not by the options")
                if not takes_any and key not in known:
                    raise ValueError(
                        f"{where}: {self.constructor.__name__} takes no option {key!r}; expected one of "
                        f"{', '.join(known)}"
                    )
            if "lr" not in options:
                raise ValueError(f"{where} needs an 'lr' (each group has its own learning rate)")
            for key in _POSITIVE_OPTIONS + _NON_NEGATIVE_OPTIONS:
                if key in options:
                    _check_number(where, key, options[key], positive=key in _POSITIVE_OPTIONS)
            if options.get("nesterov") and not (options.get("momentum", 0) > 0 and options.get("dampening", 0) == 0):
                raise ValueError(
                    f"{where}: nesterov needs momentum > 0 and dampening 0, got momentum "
                    f"{options.get('momentum', 0)!r} and dampening {options.get('dampening', 0)!r}"
                )

    def build(self, named_params: Sequence[tuple[str, torch.nn.Parameter]]) -> torch.optim.Optimizer:
        """The optimiser over ``named_params`` (``"model.<name>"`` / ``"guide.<name>"`` pairs), groups in the order
        model, guide, each with its ``"name"``; an empty group is left out.

        Raises:
            ValueError: A parameter whose name starts with neither ``model.`` nor ``guide.``.
        """
        members: dict[str, list[torch.nn.Parameter]] = {group: [] for group in self.GROUPS}
        for name, param in named_params:
            group = name.partition(".")[0]
            if group not in members:
                raise ValueError(f"ParamGroups: parameter {name!r} is neither 'model.<name>' nor 'guide.<name>'")
            members[group].append(param)
        groups = [
            {"params": params, "name": group, **getattr(self, group)} for group, params in members.items() if params
        ]
        chosen = any("fused" in g or "foreach" in g for g in groups)
        params = [p for g in groups for p in g["params"]]
        defaults = {} if chosen else _fused_args(self.constructor, {}, params)
        return self.constructor(groups, **defaults)


def build_optimizer(
    optim: PyroOptim | ParamGroups | OptimizerFactory | None,
    named_params: Sequence[tuple[str, torch.nn.Parameter]],
) -> tuple[torch.optim.Optimizer, dict]:
    """Builds one torch optimiser over all trainable parameters.

    Args:
        optim: ``pyro.optim.Adam({"lr": 1e-3})`` or any other ``pyro.optim`` optimiser (its arguments may be a
            callable of the parameter name, which then names parameters ``"model.<name>"`` or ``"guide.<name>"``);
            a :class:`ParamGroups` (one group for the model's parameters, one for the guide's); or a factory
            ``params -> torch.optim.Optimizer``; None means Adam with lr 1e-3. A ``pyro.optim`` Adam or AdamW, a
            ``ParamGroups`` of either (and the default) run torch's fused kernel where the parameters allow it and
            the arguments name no implementation; a factory builds exactly what it says.
        named_params: ``(name, parameter)`` pairs.

    Returns:
        The optimiser and the gradient-clipping arguments (``clip_norm`` / ``clip_value``) of a PyroOptim or a
        ParamGroups.
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
    if isinstance(optim, ParamGroups):
        return optim.build(named_params), ({} if optim.clip_norm is None else {"clip_norm": optim.clip_norm})
    if isinstance(optim, torch.optim.Optimizer):
        raise TypeError(
            "pass a factory (lambda params: torch.optim.SGD(params, lr=0.1)) rather than an optimiser instance: "
            "the guide's parameters do not exist until training starts"
        )
    if callable(optim):
        return optim(params), {}
    raise TypeError(
        f"optim must be a pyro.optim optimiser, a ParamGroups, a factory params -> Optimizer, or None; got {optim!r}"
    )


def clip_gradients(
    params: Sequence[torch.nn.Parameter], clip_norm: float | None = None, clip_value: float | None = None
):
    """Applies a PyroOptim's ``clip_args`` to all parameters at once."""
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(params, clip_norm)
    if clip_value is not None:
        torch.nn.utils.clip_grad_value_(params, clip_value)
