"""Fitting SWAG: SGD on the BNN's own log joint, then the moments of its iterates at a constant learning rate.

The trajectory follows the per-example negative log joint of :class:`~pyro_bnn.sgmcmc.LogJoint` (the MAP objective
``-(log p(w) + (N / B) sum_b log p(y_b | x_b, w)) / N``), so the prior acts as weight decay exactly as the model
states it. A run is ``pretrain_epochs`` of SGD at ``pretrain_lr`` (to reach the basin; skip it by starting from a
MAP network), then ``epochs`` at the constant ``lr`` with one iterate collected every ``collect_every`` steps of that
phase (once an epoch by default, as in the paper).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyro
import torch
from tqdm.auto import tqdm

from pyro_bnn.bnn import BNN
from pyro_bnn.checks import Settings, non_negative_int, positive_float, positive_int
from pyro_bnn.sgmcmc.log_joint import LogJoint
from pyro_bnn.sgmcmc.run import check_finite_batch, start_weights
from pyro_bnn.sgmcmc.run import check_options as check_start
from pyro_bnn.swag.moments import SwagMoments
from pyro_bnn.swag.posterior import MultiSwag, SwagPosterior


class SwagDivergenceError(RuntimeError):
    """The SGD trajectory's objective or weights became NaN or infinite."""


@dataclass(frozen=True)
class SwagOptions(Settings):
    """How a SWAG trajectory runs (checked when made).

    Attributes:
        lr: The constant SGD learning rate of the collection phase (the SWAG learning rate).
        epochs: Epochs of the collection phase.
        rank: K, the deviation columns kept (0: SWAG-Diagonal only; the paper's K is 20).
        pretrain_epochs: Epochs of SGD before collecting (0: start collecting at once, e.g. from a MAP network).
        pretrain_lr: The learning rate of those epochs (None: ``lr``).
        momentum: SGD momentum (the paper's 0.9).
        collect_every: Steps of the collection phase between collected iterates, counted from its first step
            (pre-training steps do not count; None: one at the end of each epoch).
    """

    lr: float
    epochs: int
    rank: int = 20
    pretrain_epochs: int = 0
    pretrain_lr: float | None = None
    momentum: float = 0.9
    collect_every: int | None = None

    def check(self) -> None:
        positive_float(self.lr, "lr")
        positive_int(self.epochs, "epochs")
        non_negative_int(self.rank, "rank")
        non_negative_int(self.pretrain_epochs, "pretrain_epochs")
        if self.pretrain_lr is not None:
            positive_float(self.pretrain_lr, "pretrain_lr")
        if isinstance(self.momentum, bool) or not isinstance(self.momentum, (int, float)) or not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be a number in [0, 1), got {self.momentum!r}")
        if self.collect_every is not None:
            positive_int(self.collect_every, "collect_every")
        if self.rank == 1:
            raise ValueError("rank=1 gives no low-rank covariance (it divides by K - 1); use 0 (diagonal) or >= 2")


def _epoch(loader: Iterable, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    if hasattr(loader, "set_epoch"):
        loader.set_epoch(epoch)
    empty = True
    for x, y in loader:
        empty = False
        yield x, y
    if empty:
        raise ValueError("the loader yielded no batch; SWAG needs (x, y) minibatches of the training set")


def fit_swag(
    bnn: BNN,
    loader: Iterable,
    options: SwagOptions,
    *,
    init: str | Mapping[str, torch.Tensor] = "network",
    seed: int = 0,
    progress: bool = True,
) -> SwagPosterior:
    """Runs SGD on the model's log joint and returns the SWAG posterior of its iterates.

    Args:
        bnn: A weight-space model that SG-MCMC also accepts (:func:`~pyro_bnn.sgmcmc.check_supported`): real-valued
            weight sites, no hyperparameter sites, no per-example latents, ``dataset_size`` = N. Parameters the prior
            does not select stay at their values.
        loader: Re-iterable ``(x, y)`` minibatches of the N training examples, ``x`` ``(B, *input_shape)``.
        options: The trajectory (:class:`SwagOptions`).
        init: ``"network"`` (the network's initial weights), ``"prior"`` (a prior draw) or ``{site: site_shape}``
            (e.g. a MAP network's weights).
        seed: Seeds Pyro and torch once before the start is drawn, and the posterior's draws.
        progress: Show a tqdm progress bar over the epochs.

    Returns:
        :class:`~pyro_bnn.swag.SwagPosterior` over ``bnn.site_names``; ``posterior.diagonal()`` is SWAG-Diagonal of
        the same trajectory.

    Raises:
        ValueError: an unsupported model or a bad option (one line, before any data is read).
        SwagDivergenceError: the objective or the weights became NaN or infinite.
    """
    if not isinstance(options, SwagOptions):
        raise ValueError(f"options must be a SwagOptions, got {type(options).__name__}")
    log_joint = LogJoint(bnn)  # refuses models it cannot follow
    log_joint.check_loader(loader)
    check_start(1, 0.5, init, seed)
    pyro.set_rng_seed(seed)
    theta = start_weights(log_joint, init, 1)[0].requires_grad_(True)
    moments = SwagMoments(log_joint.dim, options.rank, device=theta.device)
    optimiser = torch.optim.SGD([theta], lr=options.pretrain_lr or options.lr, momentum=options.momentum)
    modes = [(module, module.training) for module in bnn.modules()]
    bnn.eval()
    total = options.pretrain_epochs + options.epochs
    size = bnn.likelihood.dataset_size
    step = 0  # every SGD step, for the divergence message
    collection_step = 0  # steps of the collection phase only: collect_every counts these, whatever pretrain_epochs
    try:
        for epoch in tqdm(range(total), desc="SWAG", disable=not progress, leave=False, dynamic_ncols=True):
            collecting = epoch >= options.pretrain_epochs
            if collecting:
                for group in optimiser.param_groups:
                    group["lr"] = options.lr
            for x, y in _epoch(loader, epoch):
                x, y = x.to(theta.device, non_blocking=True), y.to(theta.device, non_blocking=True)
                loss = -log_joint(theta, x, y) / size
                if not torch.isfinite(loss):
                    check_finite_batch(x, y, step + 1)
                    raise SwagDivergenceError(_diverged(step + 1, epoch, optimiser, "the objective"))
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                step += 1
                if collecting:
                    collection_step += 1
                    if options.collect_every and collection_step % options.collect_every == 0:
                        _collect(moments, theta, step, epoch, optimiser)
            if collecting and not options.collect_every:
                _collect(moments, theta, step, epoch, optimiser)
    finally:
        for module, training in modes:
            module.training = training
    if moments.count == 0:
        raise ValueError(
            f"no iterate was collected: collect_every={options.collect_every} is more than the steps of the "
            f"collection phase ({options.epochs} epoch(s))"
        )
    if moments.count == 1:
        warnings.warn(
            "SWAG collected one iterate: its variance is zero and every draw is the same network; collect more "
            f"(epochs={options.epochs}, collect_every={options.collect_every})",
            stacklevel=2,
        )
    posterior = SwagPosterior(
        log_joint.names,
        log_joint.shapes,
        moments.mean,
        moments.variance,
        moments.deviations if moments.count >= 2 else moments.deviations[:0],
        moments.count,
        seed=seed,
    )
    return posterior


def _collect(moments: SwagMoments, theta: torch.Tensor, step: int, epoch: int, optimiser) -> None:
    if not torch.isfinite(theta).all():
        raise SwagDivergenceError(_diverged(step, epoch, optimiser, "the weights"))
    moments.collect(theta.detach())


def _diverged(step: int, epoch: int, optimiser, what: str) -> str:
    lr = optimiser.param_groups[0]["lr"]
    return f"SWAG diverged: {what} became NaN or infinite at step {step} (epoch {epoch + 1}, lr {lr:g}); lower lr"


def fit_multiswag(
    bnn: BNN,
    loader: Iterable,
    options: SwagOptions,
    num_models: int,
    *,
    init: str | Sequence[Mapping[str, torch.Tensor]] = "prior",
    seed: int = 0,
    progress: bool = True,
) -> MultiSwag:
    """MultiSWAG: ``num_models`` SWAG runs from independent starts, as one equal mixture.

    Args:
        bnn, loader, options: As :func:`fit_swag`.
        num_models: M, the independent runs.
        init: ``"prior"`` (member m starts from a prior draw under seed ``seed + m``; a wide layer under a broad
            prior starts with huge outputs and may diverge), ``"network"`` (all from the network's initial weights;
            members differ only by the order of their minibatches, so the loader must shuffle by torch's global
            generator, which each member's seed sets, as ``DataLoader(shuffle=True)`` does; a
            :class:`~pyro_bnn.data.BatchLoader` shuffles by its own seed and is refused), or one
            ``{site: site_shape}`` start per member (e.g. the initial weights of the network built under M seeds,
            as a deep ensemble starts).
        seed: Member m runs with ``seed + m``.
        progress: Progress bars.

    Returns:
        :class:`~pyro_bnn.swag.MultiSwag` of the M posteriors.

    Raises:
        ValueError: as :func:`fit_swag`; or a member followed member 0's trajectory exactly (a shared start and a
            loader whose order the seed does not change), found after that member's run.
    """
    num_models = positive_int(num_models, "num_models")
    if isinstance(init, str):
        starts: list = [init] * num_models
    else:
        starts = list(init)
        if len(starts) != num_models:
            raise ValueError(f"init gives {len(starts)} starts for num_models={num_models}; give one per member")
    members: list[SwagPosterior] = []
    for m, start in enumerate(starts):
        members.append(fit_swag(bnn, loader, options, init=start, seed=seed + m, progress=progress))
        if (
            m
            and torch.equal(members[-1].mean, members[0].mean)
            and torch.equal(members[-1].variance, members[0].variance)
        ):
            raise ValueError(
                f"MultiSWAG member {m} followed member 0's trajectory exactly: the same start, and a loader whose "
                "order does not change with the seed (a BatchLoader shuffles by its own seed); use init='prior', "
                "one start per member, or a loader shuffled by torch's generator"
            )
    return MultiSwag(members)
