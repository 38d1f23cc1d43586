"""One epoch of a :class:`~pyro_bnn.infer.Trainer`'s fit: the batches, their KL weights, the steps and the NaN checks,
the scheduler's per-step updates and the epoch's record; and the checks a fit makes of its training loader."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
from tqdm.auto import tqdm

from pyro_bnn.bnn import BNN
from pyro_bnn.infer.divergence import NonFiniteLossError
from pyro_bnn.infer.kl_weighting import minibatch_kl_weight
from pyro_bnn.infer.objectives import ObjectiveTerms
from pyro_bnn.infer.optim import clip_gradients
from pyro_bnn.infer.steps import GraphedStepRunner, NonFiniteStep, StepParts, StepRunner, default_step_runner
from pyro_bnn.infer.trainer_options import SchedulerInterval

if TYPE_CHECKING:
    from pyro_bnn.infer.trainer import Trainer


def dataset_size(loader: Iterable) -> int:
    """The number of training examples behind ``loader``."""
    dataset = getattr(loader, "dataset", None)
    if dataset is None:
        raise ValueError("the training loader must expose .dataset (a torch DataLoader or pyro_bnn BatchLoader)")
    return len(dataset)


def check_all_labels(loader: Iterable, bnn: BNN, x: torch.Tensor) -> None:
    """Checks every training target at once where the loader holds them as tensors (labels >= C, wrong dtype).

    Call after ``bnn.validate_batch(x, ...)`` has accepted the batch's inputs.
    """
    tensors = getattr(getattr(loader, "dataset", None), "tensors", None)
    if tensors is not None and len(tensors) == 2:
        with torch.no_grad():
            output = bnn.apply_parameters(x[:1], bnn.initial_values())
        targets = tensors[1]
        # check_targets compares the batch dimension too, so hand it an output with as many rows as targets.
        bnn.likelihood.check_targets(output[:1].expand(len(targets), *output.shape[1:]), targets.to(output.device))


def make_step_runner(trainer: Trainer) -> StepRunner:
    """The fit's step runner; sets ``trainer.graph_reason`` (why it replays no CUDA graph, if it does not)."""
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
    bar = tqdm(
        loader,
        mininterval=1.0,
        total=num_steps,
        desc=f"epoch {run.epoch + 1}/{epochs}",
        disable=not trainer.progress,
        leave=False,
        dynamic_ncols=True,
    )
    for step, (x, y) in enumerate(bar, start=1):
        x, y = x.to(trainer.device, non_blocking=True), y.to(trainer.device, non_blocking=True)
        kl_weight = trainer.kl_schedule(run.epoch + (step - 1) / num_steps)
        kl_weight *= minibatch_kl_weight(trainer.kl_weighting, step, num_steps)
        check = step % trainer.nan_check_every == 0 or step == num_steps
        try:
            terms: ObjectiveTerms = runner.step(x, y, kl_weight, check)
        except NonFiniteStep as stop:
            message = trainer._non_finite_message(stop.loss, step, x, applied=stop.applied)
            raise NonFiniteLossError(message) from stop.__cause__
        run.global_step += 1
        if trainer.scheduler is not None and trainer.lr_scheduler_interval is SchedulerInterval.STEP:
            trainer.scheduler.step()
        totals += torch.stack([terms.loss, terms.data_term]).double()
        total_weight += kl_weight
        if trainer.progress and (step % 10 == 0 or step == num_steps):
            bar.set_postfix(loss=f"{float(totals[0]) / step:.4g}", refresh=False)
    bar.close()
    total_loss, total_data = totals.tolist()
    optimizer = trainer.optimizer
    return {
        "epoch": run.epoch + 1,
        "loss": total_loss / num_steps,
        "data_term": total_data / num_steps,
        "kl_term": (total_loss - total_data) / num_steps,
        "kl_weight": total_weight / num_steps,
        "time_s": time.perf_counter() - start,
        "lr": optimizer.param_groups[0]["lr"],
        # Named groups (ParamGroups: "model", "guide") each log their own rate.
        **{f"lr_{g['name']}": g["lr"] for g in optimizer.param_groups if "name" in g},
    }
