"""A run's optimiser, learning-rate schedules and objective, from its :class:`RunConfig`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyro

from pyro_bnn.infer import ParamGroups, group_scheduler
from pyro_bnn.infer.objective_registry import make_objective
from pyro_bnn.infer.objectives import Objective
from pyro_bnn.infer.optim import OptimizerKind
from pyro_bnn.runs.config import RunConfig


def _is_plain_adam(config: RunConfig) -> bool:
    return (
        config.optimizer == OptimizerKind.ADAM.value
        and config.lr_variational is None
        and not config.weight_decay
        and config.lr_schedule == config.lr_variational_schedule == "constant"
    )


def run_optimizer(config: RunConfig, dataset_size: int) -> pyro.optim.PyroOptim | ParamGroups:
    """The run's optimiser: one Adam over everything (the weight-space default), else two parameter groups.

    The model's group (deterministic weights) has ``lr`` and ``weight_decay``, the guide's group (variational
    parameters) ``lr_variational`` (default ``lr``) and no weight decay. The loss the trainer minimises is the
    summed full-data one (N times the mean loss per example), so for SGD the learning rates are divided by N and
    the weight decay multiplied by N: the steps are then exactly those of SGD at ``lr`` on the per-example mean loss
    with ``weight_decay``, the implicit-BNN authors' setting (Adam is unchanged by the loss's scale; only its weight
    decay is rescaled the same way). ``clip_norm`` clips the gradient of all parameters together before each step.
    """
    config = config.resolved()
    clip = None if config.clip_norm is None else {"clip_norm": config.clip_norm}
    if _is_plain_adam(config):
        return pyro.optim.Adam({"lr": config.lr}, clip)
    lr_variational = config.lr_variational if config.lr_variational is not None else config.lr
    decay = config.weight_decay * dataset_size
    if config.optimizer == OptimizerKind.SGD.value:
        sgd = {"momentum": 0.9, "nesterov": True}
        return ParamGroups(
            model={"lr": config.lr / dataset_size, "weight_decay": decay, **sgd},
            guide={"lr": lr_variational / dataset_size, **sgd},
            clip_norm=config.clip_norm,
        )
    import torch

    return ParamGroups(
        constructor=torch.optim.Adam,
        model={"lr": config.lr, "weight_decay": decay},
        guide={"lr": lr_variational},
        clip_norm=config.clip_norm,
    )


def run_lr_scheduler(config: RunConfig, steps_per_epoch: int) -> Callable[[Any], Any] | None:
    """A factory ``optimizer -> LambdaLR`` stepping both groups' schedules once per optimiser step, or None when
    both are constant. A schedule for a group the optimiser lacks (``lr_schedule`` when every weight is random: the
    model has no parameters) is an :class:`~pyro_bnn.infer.auto_objective.UnusedOptionWarning` naming the option
    when the trainer builds the scheduler."""
    if config.lr_schedule == config.lr_variational_schedule == "constant":
        return None
    total = max(1, config.epochs * steps_per_epoch)
    schedules = {"model": config.lr_schedule, "guide": config.lr_variational_schedule}
    return lambda optimizer: group_scheduler(optimizer, schedules, total, option_names=OPTION_NAMES)


OPTION_NAMES = {"model": "lr_schedule (--lr-schedule)", "guide": "lr_variational_schedule (--lr-variational-schedule)"}
"""The run option that sets each group's schedule, as a warning names it (a model group with no parameters, every
weight random, leaves ``lr_schedule`` unused; committed runs have such configs, so a warning, not a refusal)."""


def run_objective(config: RunConfig) -> Objective:
    """The run's objective: the registered ``--elbo`` objective built from the options of the config it takes
    (``num_particles``, ``vectorize_particles`` when there are several, ``samples_per_example``); which objective
    ``auto`` picks for the guide is :class:`~pyro_bnn.infer.AutoELBO`'s decision."""
    return make_objective(
        config.elbo,
        config.num_particles,
        config.num_particles > 1,
        samples_per_example=config.samples_per_example,
    )
