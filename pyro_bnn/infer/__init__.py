"""Inference: the SVI trainer, KL annealing, minibatch KL weighting, callbacks and checkpoints."""

from pyro_bnn.infer.annealing import (
    KLSchedule,
    ScheduleKind,
    constant,
    cyclical,
    linear_warmup,
    parse_kl_schedule,
    scale_latents,
)
from pyro_bnn.infer.callbacks import Callback, Checkpoint, EarlyStopping, HistoryLogger
from pyro_bnn.infer.checkpoint import load_checkpoint, save_checkpoint
from pyro_bnn.infer.elbo import ElboKind, make_elbo
from pyro_bnn.infer.kl_weighting import KLWeighting, blundell_fraction, minibatch_kl_weight
from pyro_bnn.infer.trainer import NonFiniteLossError, Trainer

__all__ = [
    "Callback",
    "Checkpoint",
    "EarlyStopping",
    "ElboKind",
    "HistoryLogger",
    "KLSchedule",
    "KLWeighting",
    "NonFiniteLossError",
    "ScheduleKind",
    "Trainer",
    "blundell_fraction",
    "constant",
    "cyclical",
    "linear_warmup",
    "load_checkpoint",
    "make_elbo",
    "minibatch_kl_weight",
    "parse_kl_schedule",
    "save_checkpoint",
    "scale_latents",
]
