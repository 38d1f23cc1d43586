"""The pieces of a :class:`~pyro_bnn.infer.Trainer`'s fit: one epoch (the batches, their KL weights, the steps and the
NaN checks, the scheduler's per-step updates and the epoch's record), the step runner, the guide and parameters it
trains, and the checks a fit makes of its training loader and of the parameters after each epoch."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from tqdm.auto import tqdm

from pyro_bnn.bnn import BNN
from pyro_bnn.guides import GuideSpec, parse_guide
from pyro_bnn.infer.annealing import step_progress
from pyro_bnn.infer.callbacks import last_checkpoint_text
from pyro_bnn.infer.divergence import DIVERGENCE_ADVICE, NonFiniteLossError, non_finite_loss_message
from pyro_bnn.infer.kl_weighting import minibatch_kl_weight
from pyro_bnn.infer.objectives import ObjectiveTerms
from pyro_bnn.infer.optim import clip_gradients
from pyro_bnn.infer.steps import (
    GraphedStepRunner,
    NonFiniteStep,
    StepParts,
    StepRunner,
    default_step_runner,
    parameters_finite,
)
from pyro_bnn.infer.trainable import TrainableModel
from pyro_bnn.infer.trainer_options import RuntimeOptions, SchedulerInterval
from pyro_bnn.infer.warm_start import map_warm_start
from pyro_bnn.likelihoods import KLScale

if TYPE_CHECKING:
    from pyro_bnn.infer.trainer import Trainer


def dataset_size(loader: Iterable) -> int:
    """The number of training examples behind ``loader``."""
    dataset = getattr(loader, "dataset", None)
    if dataset is None:
        raise ValueError("the training loader must expose .dataset (a torch DataLoader or pyro_bnn BatchLoader)")
    return len(dataset)


def model_dataset_size(model: BNN | TrainableModel) -> int:
    """N, the data set size the model's data term is scaled for: its likelihood's, or its own."""
    return model.likelihood.dataset_size if isinstance(model, BNN) else model.dataset_size


def kl_scale_of(model: BNN | TrainableModel) -> KLScale:
    """How the model scales its data term: its likelihood's choice; N/B for a model that is not a BNN."""
    return model.likelihood.kl_scale if isinstance(model, BNN) else KLScale.DATASET


def check_dataset_size(loader: Iterable, bnn: BNN | TrainableModel) -> None:
    """Refuses a training loader whose dataset is not the one the likelihood scales the data term for."""
    size, expected = dataset_size(loader), model_dataset_size(bnn)
    if size != expected:
        owner = "the likelihood was built with" if isinstance(bnn, BNN) else "the model was built with"
        raise ValueError(
            f"the training loader has {size} examples but {owner} dataset_size={expected}; they must match for the "
            "N/B scaling"
        )


def check_parameters_finite(trainer: Trainer) -> None:
    """Refuses, after an epoch, parameters that are NaN or infinite: a checkpoint must never hold them."""
    if not parameters_finite(trainer._params):
        raise NonFiniteLossError(
            f"parameters became NaN or infinite during epoch {trainer.epoch + 1} (after its last checked loss); "
            f"training stopped and {last_checkpoint_text(trainer.callbacks)}. {DIVERGENCE_ADVICE}"
        )


def guide_parts(guide: Any) -> tuple[GuideSpec | None, nn.Module | None, Any]:
    """The Trainer's ``guide`` argument as (its spec or None, the guide module or None, a builder ``bnn -> guide``
    or None)."""
    spec = parse_guide(guide) if isinstance(guide, str) else guide if isinstance(guide, GuideSpec) else None
    if spec is not None:
        guide = spec.build
    if not isinstance(guide, nn.Module) and not callable(guide):
        raise ValueError(
            f"guide must be a guide module, a builder bnn -> guide or a guide spec like 'flat:rel=1', got {guide!r}"
        )
    return (spec, guide, None) if isinstance(guide, nn.Module) else (spec, None, guide)


def trainable_parameters(bnn: nn.Module, guide: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The model's and the guide's trainable parameters, each once, named ``model.<name>`` / ``guide.<name>``."""
    named, seen = [], set()
    for prefix, module in (("model", bnn), ("guide", guide)):
        for name, param in module.named_parameters():
            if id(param) not in seen and param.requires_grad:
                seen.add(id(param))
                named.append((f"{prefix}.{name}", param))
    if not named:
        raise ValueError("nothing to train: neither the model nor the guide has parameters")
    return named


def check_all_labels(loader: Iterable, bnn: BNN, x: torch.Tensor) -> None:
    """Checks every training target at once where the loader holds them as tensors (labels >= C, wrong dtype).

    Call after ``bnn.validate_batch(x, ...)`` has accepted the batch's inputs.
    """
    tensors = getattr(getattr(loader, "dataset", None), "tensors", None)
    if tensors is not None and len(tensors) == 2:
        bnn.validate_targets(x, tensors[1])


def spec_warm_start(trainer: Trainer, loader: Iterable) -> None:
    """Runs the MAP warm start a ``loc=map`` guide spec asks for (:func:`~pyro_bnn.infer.warm_start.map_warm_start`)
    before a fresh trainer builds its guide: the guide's locations start at a short MAP fit, from Python as from the
    CLI."""
    epochs = trainer.guide_spec.map_warm_start_epochs if trainer.guide_spec is not None else 0
    if epochs and trainer.optimizer is None and trainer.guide is None:
        runtime = RuntimeOptions(device=trainer.device, seed=trainer.seed, progress=trainer.progress)
        map_warm_start(trainer.bnn, loader, epochs, optim=trainer.optim, runtime=runtime)


def make_step_runner(trainer: Trainer) -> StepRunner:
    """The fit's step runner: ``trainer``'s own renewed where it keeps state across fits (``new_fit()``, as a CUDA
    graph does), a new one otherwise; sets ``trainer.graph_reason`` (why it replays no CUDA graph, if it does not)."""
    if hasattr(trainer.step_runner, "new_fit"):
        trainer.step_runner.new_fit()
        return trainer.step_runner
    clip = (lambda params: clip_gradients(params, **trainer._clip)) if trainer._clip else None
    parts = StepParts(trainer.objective, trainer.bnn, trainer.guide, trainer.optimizer, trainer._params, clip)
    if trainer._step_runner_factory is None:
        per_step = trainer.scheduler is not None and trainer.lr_scheduler_interval is SchedulerInterval.STEP
        runner, trainer.graph_reason = default_step_runner(
            parts, trainer.device, per_step_scheduler=per_step, cuda_graph=trainer.cuda_graph
        )
        return runner
    runner = trainer._step_runner_factory(parts)
    graphed = isinstance(runner, GraphedStepRunner)
    trainer.graph_reason = None if graphed else f"the step runner passed in is a {type(runner).__name__}"
    return runner


def non_finite_message(trainer: Trainer, loss: float, step: int, x: torch.Tensor, applied: bool = False) -> str:
    """The error for a NaN or infinite ``loss`` at ``step`` of the current epoch (``applied``: the step's optimiser
    update was already made, as in a step replayed from a CUDA graph)."""
    return non_finite_loss_message(
        loss,
        epoch=trainer.epoch + 1,
        step=step,
        x=x,
        nan_check_every=trainer.nan_check_every,
        where=last_checkpoint_text(trainer.callbacks),
        applied=applied,
    )


def train_epoch(trainer: Trainer, loader: Iterable, num_steps: int, epochs: int) -> dict[str, Any]:
    """Runs one epoch of ``trainer``'s steps and returns its record (the validation metrics are added later)."""
    trainer.bnn.train()
    run, runner = trainer.run_state, trainer.step_runner
    if hasattr(loader, "set_epoch"):
        loader.set_epoch(run.epoch)
    # Sums of the per-step loss and data term, kept on the device: read at logging intervals only.
    totals = torch.zeros(2, device=trainer.device, dtype=torch.float64)
    total_weight = 0.0
    start = time.perf_counter()
    # The bar wraps one iterator, made here: tqdm.auto's class (tqdm_asyncio) calls iter() on a plain iterable in
    # its constructor and again when the bar is iterated, so a BatchLoader, which fixes its order and advances its
    # epoch at iter() time, trained every epoch e on the order of e + 1 (batched runs, on that of e), and a torch
    # DataLoader made two iterators per epoch (its workers started twice, its seed drawn twice).
    # Where stderr is a file or a pipe (a log) a bar redrawn in place is noise: one line per epoch instead. A
    # notebook's stderr is no terminal either, but tqdm.auto draws its bar there as a widget.
    log_lines = trainer.progress and not sys.stderr.isatty() and "ipykernel" not in sys.modules
    bar = tqdm(
        iter(loader),
        mininterval=1.0,
        total=num_steps,
        desc=f"epoch {run.epoch + 1}/{epochs}",
        disable=not trainer.progress or log_lines,
        leave=False,
        dynamic_ncols=True,
    )
    per_step = trainer.scheduler is not None and trainer.lr_scheduler_interval is SchedulerInterval.STEP
    used: dict[str, float] | None = None  # the rates the last step trained with (per-step schedules)
    for step, (x, y) in enumerate(bar, start=1):
        x, y = x.to(trainer.device, non_blocking=True), y.to(trainer.device, non_blocking=True)
        kl_weight = trainer.kl_schedule(step_progress(run.epoch, step, num_steps))
        kl_weight *= minibatch_kl_weight(trainer.kl_weighting, step, num_steps)
        check = step % trainer.nan_check_every == 0 or step == num_steps
        try:
            terms: ObjectiveTerms = runner.step(x, y, kl_weight, check)
        except NonFiniteStep as stop:
            message = trainer._non_finite_message(stop.loss, step, x, applied=stop.applied)
            raise NonFiniteLossError(message) from stop.__cause__
        run.global_step += 1
        if per_step:
            # Read before the scheduler moves them: after it, they are the next epoch's first step's rates.
            used = learning_rates(trainer.optimizer)
            trainer.scheduler.step()
        totals += torch.stack([terms.loss, terms.data_term]).double()
        total_weight += kl_weight
        if trainer.progress and (step % 10 == 0 or step == num_steps):
            bar.set_postfix(loss=f"{float(totals[0]) / step:.4g}", refresh=False)
    bar.close()
    total_loss, total_data = totals.tolist()
    seconds = time.perf_counter() - start
    if log_lines:
        print(f"epoch {run.epoch + 1}/{epochs}: loss {total_loss / num_steps:.4g} ({seconds:.1f} s)", file=sys.stderr)
    return {
        "epoch": run.epoch + 1,
        "loss": total_loss / num_steps,
        "data_term": total_data / num_steps,
        "kl_term": (total_loss - total_data) / num_steps,
        "kl_weight": total_weight / num_steps,
        "time_s": seconds,
        # A per-epoch scheduler steps after the record is made: the optimiser's rates are still the epoch's.
        **(used if used is not None else learning_rates(trainer.optimizer)),
    }


def learning_rates(optimizer: torch.optim.Optimizer) -> dict[str, float]:
    """An epoch record's rates, read from ``optimizer`` when its rates are those the epoch's last step used:
    ``lr``, the first group's, and ``lr_<name>`` for each named group (ParamGroups: ``"model"``, ``"guide"``)."""
    groups = optimizer.param_groups
    return {"lr": groups[0]["lr"], **{f"lr_{g['name']}": g["lr"] for g in groups if "name" in g}}
