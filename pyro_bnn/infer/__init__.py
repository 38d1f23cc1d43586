"""Inference: training objectives, the SVI trainer, KL annealing, minibatch KL weighting, optimiser parameter groups
and their learning-rate schedules, callbacks, checkpoints."""

from pyro_bnn.infer.annealing import (
    KLSchedule,
    ScheduleKind,
    constant,
    cyclical,
    linear_warmup,
    parse_kl_schedule,
    scale_latents,
)
from pyro_bnn.infer.auto_objective import AutoELBO
from pyro_bnn.infer.callbacks import Callback, Checkpoint, EarlyStopping, HistoryLogger
from pyro_bnn.infer.checkpoint import CheckpointMismatchError, load_checkpoint, save_checkpoint
from pyro_bnn.infer.fast import FastMeanFieldELBO
from pyro_bnn.infer.kl_weighting import KLWeighting, blundell_fraction, minibatch_kl_weight
from pyro_bnn.infer.lr_schedules import LRSchedule, group_scheduler, lr_multiplier
from pyro_bnn.infer.mixture_kl import MixtureMeanKL, component_of_rows, mixture_mean_kl
from pyro_bnn.infer.objectives import (
    ElboKind,
    MeanFieldELBO,
    Objective,
    ObjectiveTerms,
    TraceELBO,
    make_objective,
)
from pyro_bnn.infer.optim import ParamGroups
from pyro_bnn.infer.steps import EagerStep, GraphedStepRunner, NonFiniteStep, StepParts, StepRunner
from pyro_bnn.infer.trainer import NonFiniteLossError, SchedulerInterval, Trainer
from pyro_bnn.infer.trainer_options import (
    LRSchedulerOptions,
    ObjectiveOptions,
    ResumeOptions,
    RuntimeOptions,
    ValidationOptions,
)
from pyro_bnn.infer.validation import Validation
from pyro_bnn.infer.warm_start import map_warm_start

__all__ = [
    "AutoELBO",
    "Callback",
    "Checkpoint",
    "CheckpointMismatchError",
    "EagerStep",
    "EarlyStopping",
    "ElboKind",
    "FastMeanFieldELBO",
    "GraphedStepRunner",
    "HistoryLogger",
    "MeanFieldELBO",
    "MixtureMeanKL",
    "Objective",
    "ObjectiveOptions",
    "ObjectiveTerms",
    "ParamGroups",
    "SchedulerInterval",
    "TraceELBO",
    "KLSchedule",
    "KLWeighting",
    "LRSchedule",
    "LRSchedulerOptions",
    "NonFiniteLossError",
    "NonFiniteStep",
    "ResumeOptions",
    "RuntimeOptions",
    "ScheduleKind",
    "StepParts",
    "StepRunner",
    "Trainer",
    "Validation",
    "ValidationOptions",
    "blundell_fraction",
    "component_of_rows",
    "constant",
    "cyclical",
    "group_scheduler",
    "linear_warmup",
    "load_checkpoint",
    "lr_multiplier",
    "make_objective",
    "map_warm_start",
    "minibatch_kl_weight",
    "mixture_mean_kl",
    "parse_kl_schedule",
    "save_checkpoint",
    "scale_latents",
]
