"""The entry point: :func:`sample_sgmcmc` runs SGLD, SGHMC or cyclical SG-MCMC chains on a BNN's own log joint."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping

import pyro
import torch
from pyro import poutine
from tqdm.auto import tqdm

from pyro_bnn.bnn import BNN
from pyro_bnn.checks import non_negative_int, positive_int
from pyro_bnn.sgmcmc.log_joint import LogJoint
from pyro_bnn.sgmcmc.result import SGMCMCDivergenceError, SGMCMCResult, divergence_message
from pyro_bnn.sgmcmc.samplers import (
    DEFAULT_EXPLORATION,
    DEFAULT_FRICTION,
    DEFAULT_NUM_CYCLES,
    Method,
    StepPlan,
    as_method,
    check_method_options,
    sghmc_step,
    sgld_step,
)

INITS = ("prior", "network")
"""The named starting points: a draw from the prior per chain, or the network's own initial weights."""


def _batches(loader: Iterable) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The loader's ``(x, y)`` batches, epoch after epoch (``set_epoch`` called where the loader has it)."""
    epoch = 0
    while True:
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        empty = True
        for x, y in loader:
            empty = False
            yield x, y
        if empty:
            raise ValueError("the loader yielded no batch; SG-MCMC needs (x, y) minibatches of the training set")
        epoch += 1


def start_weights(log_joint: LogJoint, init: str | Mapping[str, torch.Tensor], num_chains: int) -> torch.Tensor:
    """The chains' flat starting weights ``(num_chains, D)`` on the model's device (prior draws under the seed the
    caller has set)."""
    bnn = log_joint.bnn
    reference = next(iter(bnn.initial_values().values()))
    if init == "network":
        flat = log_joint.flatten(bnn.initial_values()).detach()
        if not torch.isfinite(flat).all():
            raise ValueError(
                "the network's initial weights hold NaN or infinite values; the chains need a finite start"
            )
        return flat.expand(num_chains, -1).clone().to(reference.device)
    if init == "prior":
        try:
            with torch.no_grad(), poutine.block():
                draws = [log_joint.flatten(bnn.sample_parameters()) for _ in range(num_chains)]
        except NotImplementedError:
            raise ValueError(
                "the prior cannot be sampled (an improper prior?): pass init='network' or init={site: value}"
            ) from None
        return torch.stack(draws).detach().to(reference.device)
    values = {}
    for site in bnn.sites:
        if site.name not in init:
            raise ValueError(f"init lacks weight site {site.name!r}; it needs every site {bnn.site_names[:5]}")
        value = init[site.name]
        if not isinstance(value, torch.Tensor) or not value.dtype.is_floating_point:
            raise ValueError(f"init[{site.name!r}] must be a floating-point tensor, got {type(value).__name__}")
        if tuple(value.shape) == tuple(site.shape):
            value = value.expand(num_chains, *site.shape)
        elif tuple(value.shape) != (num_chains, *site.shape):
            per_chain = f" or {(num_chains, *site.shape)} for {num_chains} chains" if num_chains > 1 else ""
            raise ValueError(
                f"init[{site.name!r}] has shape {tuple(value.shape)}; expected {tuple(site.shape)}{per_chain}"
            )
        if not torch.isfinite(value).all():
            raise ValueError(f"init[{site.name!r}] holds NaN or infinite values; the chains need a finite start")
        values[site.name] = value
    return log_joint.flatten(values).detach().to(device=reference.device, dtype=reference.dtype).clone()


def check_finite_batch(x: torch.Tensor, y: torch.Tensor, step: int) -> None:
    """A one-line ValueError when the minibatch of ``step`` (counted from 1) holds NaN or infinite inputs ``x`` or
    targets ``y``: called where the log joint stopped being finite, so that bad data is not read as a divergence."""
    for name, value in (("inputs", x), ("targets", y)):
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise ValueError(f"the minibatch of step {step} holds NaN or infinite {name}; the data must be finite")


def check_options(num_chains: int, friction: float, init: object, seed: int = 0) -> None:
    """One-line ValueErrors for the chains' options that :class:`StepPlan` does not check (reads no data)."""
    num_chains = positive_int(num_chains, "num_chains")
    if isinstance(friction, bool) or not isinstance(friction, (int, float)) or not (0 < friction <= 1):
        raise ValueError(f"friction must be a number in (0, 1], got {friction!r}")
    if isinstance(init, str) and init not in INITS:
        raise ValueError(f"unknown init {init!r}; expected one of {INITS} or a dict {{site: value}}")
    if not isinstance(init, (str, Mapping)):
        raise ValueError(f"init must be one of {INITS} or a dict {{site: value}}, got {type(init).__name__}")
    seed = non_negative_int(seed, "seed")


def sample_sgmcmc(
    bnn: BNN,
    loader: Iterable,
    *,
    method: Method | str = Method.SGLD,
    step_size: float,
    num_draws: int,
    burn_in: int = 0,
    thin: int = 1,
    num_chains: int = 4,
    friction: float | None = None,
    num_cycles: int | None = None,
    exploration: float | None = None,
    init: str | Mapping[str, torch.Tensor] = "prior",
    seed: int = 0,
    progress: bool = True,
    temperature: float = 1.0,
) -> SGMCMCResult:
    """Runs SG-MCMC chains on the model's minibatch log joint ``log p(w) + (N / B) log p(y_batch | x_batch, w)``.

    The chains run side by side, vectorised: each step takes the loader's next minibatch (epoch after epoch) and
    scores it under every chain's weights in one network pass (``torch.vmap``), so all chains see the same sequence
    of minibatches while their starts (``init="prior"``: one prior draw each) and injected noise are their own.
    Pyro and torch are seeded with ``seed`` once, so a chain's draws depend on ``num_chains`` too. The model runs
    in eval mode (dropout off); parameters the prior does not select stay at their values.

    Args:
        bnn: A weight-space model (:func:`~pyro_bnn.sgmcmc.check_supported`): real-valued weight sites, no
            hyperparameter sites, no per-example latents, the likelihood's ``dataset_size`` = N.
        loader: Re-iterable ``(x, y)`` minibatches of the N training examples, ``x`` ``(B, *input_shape)``.
        method: ``"sgld"``, ``"sghmc"``, ``"csgld"`` or ``"csghmc"`` (:class:`~pyro_bnn.sgmcmc.Method`).
        step_size: ``eps`` of :mod:`pyro_bnn.sgmcmc.samplers` (SGHMC: the learning rate); for the cyclical methods
            the peak ``eps_0`` of each cycle.
        num_draws: Draws kept per chain (cyclical: a multiple of ``num_cycles``, the same from every cycle).
        burn_in: Steps discarded before the first kept one; for the cyclical methods, whole cycles.
        thin: Keep every ``thin``-th step.
        num_chains: Chains, run side by side.
        friction: SGHMC's ``alpha`` in (0, 1] (the momentum decays by ``1 - alpha`` per step); momentum methods
            only, default 0.1.
        num_cycles: Kept cycles; cyclical methods only, default 4.
        exploration: Share of each cycle spent in the noise-free exploration stage, in [0, 1); cyclical methods
            only, default 0.5.
        init: ``"prior"`` (a prior draw per chain), ``"network"`` (the network's initial weights) or
            ``{site: site_shape}`` / ``{site: (num_chains, *site_shape)}``.
        seed: Seeds Pyro and torch once, before the starts are drawn.
        progress: Show a tqdm progress bar over the steps.
        temperature: The likelihood temperature T: the chains sample ``p(w) p(D | w)^(1/T)`` (T < 1: a cold
            posterior; see docs/tempering.md).

    Returns:
        :class:`~pyro_bnn.sgmcmc.SGMCMCResult` with ``samples`` ``{site: (num_chains, num_draws, *site_shape)}``.

    Raises:
        ValueError: an unsupported model or a bad option (one line, naming it), or an option the method does not
            read (``friction`` for SGLD, ``num_cycles`` or ``exploration`` for the constant-step methods).
        SGMCMCDivergenceError: a chain's log joint or weights became NaN or infinite.
    """
    method = as_method(method)
    check_method_options(method, friction=friction, num_cycles=num_cycles, exploration=exploration)
    friction = DEFAULT_FRICTION if friction is None else friction
    num_cycles = DEFAULT_NUM_CYCLES if num_cycles is None else num_cycles
    exploration = DEFAULT_EXPLORATION if exploration is None else exploration
    log_joint = LogJoint(bnn, temperature)  # refuses models it cannot sample
    log_joint.check_loader(loader)
    check_options(num_chains, friction, init, seed)
    plan = StepPlan(
        step_size=step_size,
        num_draws=num_draws,
        burn_in=burn_in,
        thin=thin,
        num_cycles=num_cycles if method.cyclical else None,
        exploration=exploration,
    )
    pyro.set_rng_seed(seed)
    theta = start_weights(log_joint, init, num_chains)
    modes = [(module, module.training) for module in bnn.modules()]
    bnn.eval()
    start = time.perf_counter()
    try:
        draws, trace = _run_chains(log_joint, loader, plan, method, friction, theta, progress)
    finally:
        for module, training in modes:
            module.training = training
    return SGMCMCResult(
        samples={name: value.detach().contiguous() for name, value in log_joint.unflatten(draws).items()},
        log_joint=trace,
        method=method,
        step_size=float(step_size),
        steps_per_chain=plan.total_steps,
        seconds=time.perf_counter() - start,
    )


def _check_finite(
    value: torch.Tensor,
    theta: torch.Tensor,
    method: Method,
    step: int,
    plan: StepPlan,
    x: torch.Tensor,
    y: torch.Tensor,
) -> None:
    """Raises :class:`SGMCMCDivergenceError` naming the first chain whose log joint ``value`` ``(C,)`` or weights
    ``theta`` ``(C, D)`` are not finite (one check, one device sync, per step); a ValueError where the minibatch
    ``x``, ``y`` is to blame."""
    bad = ~(torch.isfinite(value) & torch.isfinite(theta).all(-1))
    if not bad.any():
        return
    check_finite_batch(x, y, step)
    chain = int(bad.nonzero()[0, 0])
    what = f"the log joint became {value[chain].item()}"
    if not torch.isfinite(theta[chain]).all():
        what = "the weights became NaN or infinite"
    raise SGMCMCDivergenceError(divergence_message(method, chain, step, plan.total_steps, what, plan.step_size))


def _run_chains(
    log_joint: LogJoint,
    loader: Iterable,
    plan: StepPlan,
    method: Method,
    friction: float,
    theta: torch.Tensor,
    progress: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Runs the chains from ``theta`` ``(C, D)``; returns their draws ``(C, num_draws, D)`` and every step's log
    joint ``(C, total_steps)``."""
    num_chains = theta.shape[0]
    momentum = torch.zeros_like(theta)
    draws = torch.empty(num_chains, plan.num_draws, log_joint.dim, dtype=theta.dtype, device=theta.device)
    trace = torch.empty(num_chains, plan.total_steps, dtype=theta.dtype, device=theta.device)
    batches = _batches(loader)
    kept = 0
    bar = tqdm(
        range(plan.total_steps),
        desc=f"{method.value}, {num_chains} chains",
        disable=not progress,
        leave=False,
        mininterval=1.0,
        dynamic_ncols=True,
    )
    for step in bar:
        x, y = next(batches)
        x, y = x.to(theta.device, non_blocking=True), y.to(theta.device, non_blocking=True)
        theta.requires_grad_(True)
        value = log_joint(theta if num_chains > 1 else theta[0], x, y).reshape(num_chains)
        _check_finite(value.detach(), theta.detach(), method, step + 1, plan, x, y)
        (grad,) = torch.autograd.grad(value.sum(), theta)  # rows are independent: row c holds chain c's gradient
        trace[:, step] = value.detach()
        eps, noise = plan.step_size_at(step), plan.sampling(step)
        with torch.no_grad():
            if method.momentum:
                theta, momentum = sghmc_step(theta.detach(), momentum, grad, eps, friction, noise)
            else:
                theta = sgld_step(theta.detach(), grad, eps, noise)
        if plan.keep(step):
            draws[:, kept] = theta
            kept += 1
    bad = ~torch.isfinite(theta).all(-1)
    if bad.any():
        chain = int(bad.nonzero()[0, 0])
        message = divergence_message(
            method, chain, plan.total_steps, plan.total_steps, "the weights became NaN or infinite", plan.step_size
        )
        raise SGMCMCDivergenceError(message)
    return draws, trace
