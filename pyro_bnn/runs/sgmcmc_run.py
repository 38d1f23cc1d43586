"""A sampled run: what ``pyro-bnn sample`` does. SG-MCMC chains (:func:`pyro_bnn.sgmcmc.sample_sgmcmc`) on the
model and training data a ``train`` run of the same config would use, written as a run folder that ``pyro-bnn
evaluate`` re-scores like a trained one.

The folder holds ``config.json`` (the model and data; the training-only options at their defaults),
``checkpoint.pt`` (the draws ``{site: (chain, draw, *site_shape)}`` under :data:`~pyro_bnn.runs.runs.DRAWS`,
the sampler's options and the model's other state, plain tensors for ``torch.load(weights_only=True)``),
``metrics.json`` (the test metrics over every draw, the r-hat / ESS summary, the sampler's options and wall time)
and the test prediction's figure.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyro
import pyro.distributions as dist
import torch

from pyro_bnn._io import write_json_atomically
from pyro_bnn.checks import Settings
from pyro_bnn.data import DatasetSplits
from pyro_bnn.infer.checkpoint import save_checkpoint
from pyro_bnn.runs import runs
from pyro_bnn.runs.config import RunConfig, resolve_device
from pyro_bnn.runs.run_folder import CHECKPOINT, RunFolder
from pyro_bnn.runs.scoring import save_prediction_figure, score
from pyro_bnn.sgmcmc import Method, StepPlan, check_supported, sample_sgmcmc
from pyro_bnn.sgmcmc.run import check_options
from pyro_bnn.sgmcmc.samplers import DEFAULT_EXPLORATION, DEFAULT_FRICTION, DEFAULT_NUM_CYCLES, as_method

TRAINING_ONLY = (
    "guide",
    "elbo",
    "samples_per_example",
    "epochs",
    "optimizer",
    "lr",
    "lr_variational",
    "weight_decay",
    "lr_schedule",
    "lr_variational_schedule",
    "num_particles",
    "kl_anneal",
    "kl_weighting",
    "num_val_samples",
    "patience",
    "num_samples",
    "clip_norm",
)
"""Run options a sampled run has no use for (they steer variational training), kept at their defaults in its
config. ``num_samples`` is set to the number of draws kept: the test metrics average over every draw."""


@dataclass(frozen=True)
class SamplerOptions(Settings):
    """The chains of a sampled run (the arguments of :func:`~pyro_bnn.sgmcmc.sample_sgmcmc` of those names).

    Attributes:
        method: ``sgld``, ``sghmc``, ``csgld`` or ``csghmc`` (:class:`~pyro_bnn.sgmcmc.Method`).
        step_size: The (peak) step size, a finite number > 0.
        num_draws: Draws kept per chain, >= 1 (cyclical methods: a multiple of ``num_cycles``).
        burn_in: Steps (cyclical: cycles) discarded first, >= 0.
        thin: Keep every ``thin``-th step, >= 1.
        num_chains: Chains run side by side, >= 1.
        num_cycles: Kept cycles of the cyclical methods, >= 1 (ignored by the others).
        friction: SGHMC's friction in (0, 1].
        exploration: The noise-free share of each cycle, in [0, 1) (cyclical methods).
        init: ``prior`` (a prior draw per chain) or ``network`` (the network's initial weights).
    """

    method: Method | str = Method.SGLD
    step_size: float = 1e-4
    num_draws: int = 100
    burn_in: int = 0
    thin: int = 1
    num_chains: int = 4
    num_cycles: int = DEFAULT_NUM_CYCLES
    friction: float = DEFAULT_FRICTION
    exploration: float = DEFAULT_EXPLORATION
    init: str = "prior"

    def check(self) -> SamplerOptions:
        """Checks every option (one-line ValueError naming it) and makes ``method`` a
        :class:`~pyro_bnn.sgmcmc.Method`; reads no data. Called when made; returns self."""
        method = as_method(self.method)
        StepPlan(
            step_size=self.step_size,
            num_draws=self.num_draws,
            burn_in=self.burn_in,
            thin=self.thin,
            num_cycles=self.num_cycles if method.cyclical else None,
            exploration=self.exploration,
        )  # validates the step size, draws, burn-in, thinning and cycles
        check_options(self.num_chains, self.friction, self.init)
        self._set("method", method)
        return self

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON values (the method by name; the friction only for the momentum methods, the cycle
        options only for the cyclical ones)."""
        values = dataclasses.asdict(self)
        method = as_method(self.method)
        values["method"] = method.value
        if not method.momentum:
            values.pop("friction")
        if not method.cyclical:
            values.pop("num_cycles")
            values.pop("exploration")
        return values


def sample_config(config: RunConfig, options: SamplerOptions) -> tuple[RunConfig, list[str]]:
    """The config a sampled run records, and one warning per training-only option that was set
    (:data:`TRAINING_ONLY`): those are reset to their defaults, and ``num_samples`` becomes the number of draws.

    Raises:
        ValueError: a bad option of the config, or a model SG-MCMC cannot sample (node noise, a hyperprior, a prior
            not on all reals, the ``paper`` KL scale) or start from (an improper prior with ``init="prior"``),
            found without data.
    """
    defaults = RunConfig()
    warnings = [
        f"--{name.replace('_', '-')} is unused: sampling does not train a guide"
        for name in TRAINING_ONLY
        if getattr(config, name) != getattr(defaults, name)
    ]
    reset = {name: getattr(defaults, name) for name in TRAINING_ONLY}
    if config.node_noise:
        raise ValueError("SG-MCMC samples weight-space models only; --node-noise makes the weights deterministic")
    reset["num_samples"] = options.num_chains * options.num_draws
    config = dataclasses.replace(config, **reset).resolved()
    resolve_device(config.device)
    bnn = runs.meta_bnn(config)
    check_supported(bnn)
    if options.init == "prior":
        improper = [s.name for s in bnn.sites if isinstance(bnn.prior.distribution(s, {}), dist.ImproperUniform)]
        if improper:
            raise ValueError(
                f"--prior {config.prior} is improper and cannot be sampled, but the chains start from prior draws "
                f"(--init prior, the default; site {improper[0]!r}): pass --init network"
            )
    return config, warnings


def sample_run(
    config: RunConfig,
    options: SamplerOptions,
    out_dir: str | os.PathLike,
    *,
    data: DatasetSplits | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Samples the posterior of a run's model with SG-MCMC and writes the run folder (module docstring).

    Args:
        config: The model and data (:func:`sample_config`'s result).
        options: The chains (checked).
        out_dir: The run folder (created); an earlier run in it is refused unless ``overwrite``.
        data: The run's data, if already loaded (``runs.load_data(config)``).
        overwrite: Replace an earlier run in ``out_dir`` once this one has finished.
        progress: Show the sampler's progress bar.

    Returns:
        The metrics written to ``metrics.json``.

    Raises:
        SGMCMCDivergenceError: a chain diverged (nothing is written then).
    """
    options = options.check()
    runs.prepare_run_dir(config, out_dir, resume=False, overwrite=overwrite, resumable=False)
    device = resolve_device(config.device)
    data = data if data is not None else runs.load_data(config)
    with RunFolder(out_dir, overwrite=overwrite) as out:
        return _sample_in(config, options, Path(out), data, device, progress)


def _sample_in(
    config: RunConfig, options: SamplerOptions, out: Path, data: DatasetSplits, device: torch.device, progress: bool
) -> dict[str, Any]:
    write_json_atomically(out / "config.json", json.loads(config.to_json()))
    pyro.set_rng_seed(config.seed)
    bnn, _ = runs.build_bnn(config, data)
    bnn.to(device)
    train, _, _ = data.loaders(config.batch_size, seed=config.seed, device=device)
    result = sample_sgmcmc(
        bnn,
        train,
        method=options.method,
        step_size=options.step_size,
        num_draws=options.num_draws,
        burn_in=options.burn_in,
        thin=options.thin,
        num_chains=options.num_chains,
        friction=options.friction if options.method.momentum else None,
        num_cycles=options.num_cycles if options.method.cyclical else None,
        exploration=options.exploration if options.method.cyclical else None,
        init=options.init,
        seed=config.seed,
        progress=progress,
        temperature=config.temperature,
    )
    draws = {name: value.cpu() for name, value in result.samples.items()}
    sampler = {**options.to_dict(), "steps_per_chain": result.steps_per_chain}
    save_checkpoint(
        {
            "config": config.to_json(),
            "model": {k: v.cpu() for k, v in bnn.state_dict().items()},
            runs.DRAWS: draws,
            "sgmcmc": sampler,
        },
        out / CHECKPOINT,
    )
    start = time.perf_counter()
    metrics, prediction = score(bnn, result.source(), data.test.x.to(device), data.test.y.to(device), config)
    # r-hat is NaN for a single chain, or for a weight no chain moved: null in JSON
    convergence = {k: v if math.isfinite(v) else None for k, v in result.convergence().items()}
    metrics.update(
        sampler=sampler,
        convergence=convergence,
        sample_time_s=result.seconds,
        score_time_s=time.perf_counter() - start,
        num_samples=config.num_samples,
        device=str(device),
        num_train=len(data.train),
    )
    write_json_atomically(out / "metrics.json", metrics)
    title = f"{config.model} {config.activation} on {config.dataset}, {result.method.value}"
    save_prediction_figure(prediction, config, out, title=title, train=data.train, test=data.test)
    return metrics


def format_sample_summary(metrics: dict[str, Any], out: str | os.PathLike) -> str:
    """A few lines: the sampler, the test metrics and the convergence summary."""
    sampler, convergence = metrics["sampler"], metrics["convergence"]
    lines = [
        f"{sampler['method']}: {sampler['num_chains']} chains x {sampler['num_draws']} draws "
        f"(step size {sampler['step_size']:g}, burn-in {sampler['burn_in']}, thin {sampler['thin']}, "
        f"{sampler['steps_per_chain']} steps per chain) in {metrics['sample_time_s']:.1f} s",
    ]
    shown = [k for k in ("accuracy", "nll", "ece", "rmse", "coverage") if k in metrics]
    lines.append("test: " + ", ".join(f"{k} {metrics[k]:.4f}" for k in shown))
    shown = [k for k in ("rhat_max", "rhat_median", "ess_bulk_min") if convergence.get(k) is not None]
    lines.append("convergence: " + ", ".join(f"{k} {convergence[k]:.3g}" for k in shown))
    lines.append(f"wrote {out}/config.json, checkpoint.pt (the draws), metrics.json")
    return "\n".join(lines)


__all__ = ["TRAINING_ONLY", "SamplerOptions", "format_sample_summary", "sample_config", "sample_run"]
