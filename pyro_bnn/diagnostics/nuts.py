"""A NUTS reference posterior for small BNNs.

* :func:`run_nuts` runs Pyro's ``MCMC(NUTS(...))`` on the full training set, one chain after another (or in
  ``workers`` processes), each chain started from its own prior draw.
* The tools to compare it with a variational posterior (:func:`align_hidden_units`, :func:`predictive_distance`,
  :func:`wasserstein_1d`, ...) live in :mod:`pyro_bnn.diagnostics.alignment` and are re-exported here.

Samples use the layout of :mod:`pyro_bnn.diagnostics.arviz_export`: ``{site: (chain, draw, *site_shape)}``.
"""

from __future__ import annotations

import math
import multiprocessing
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import pyro
import pyro.distributions as dist
import torch
from pyro.infer import MCMC, NUTS
from pyro.infer.mcmc.util import initialize_model

from pyro_bnn.bnn import BNN
from pyro_bnn.checks import non_negative_int, open_unit, positive_int
from pyro_bnn.diagnostics.alignment import (
    ODD_ACTIVATIONS,
    HiddenLayer,
    align_hidden_units,
    hidden_layers,
    linear_assignment,
    predictive_distance,
    wasserstein_1d,
)
from pyro_bnn.diagnostics.nuts_starts import chain_init, check_init_values, prior_draw
from pyro_bnn.sites import unflatten

FLAT_SITE = "_weights"
"""The one site of the flat potential: every weight of the network, concatenated in site order."""

CHAIN_SEED_STRIDE = 1000
"""Chain ``c`` of a run with seed ``s`` seeds Pyro (and torch) with ``s * CHAIN_SEED_STRIDE + c``."""


# ----------------------------------------------------------------------------------------------- potential
class BNNPotential:
    """The negative log joint density of a BNN without hyperparameters, ``-log p(w) - sum_n log p(y_n | x_n, w)``,
    as a function of one flat weight vector: what Pyro's NUTS would compute from the model, without tracing it.

    Pyro's potential of the model costs about 3.4 ms per gradient on the tanh-small moons net (2 CPU cores) and
    NUTS spends 200+ gradients per iteration, so the trace dominates; this potential runs the network once with
    ``torch.func.functional_call`` (:meth:`BNN.run_network`) and scores the prior in closed form when every weight
    has a Normal prior (otherwise each site's prior distribution, built once). The test suite checks it against
    Pyro's potential of the model at random points.

    Args:
        bnn: A model with no hyperparameter sites and no per-example latents.
        x: All training inputs ``(N, *input_shape)``.
        y: All training targets ``(N,)`` or ``(N, D)``.

    Attributes:
        calls: Number of evaluations so far (one per leapfrog step, plus the initial ones).
    """

    def __init__(self, bnn: BNN, x: torch.Tensor, y: torch.Tensor) -> None:
        if bnn.hyper_site_names or bnn.local_latents:
            raise ValueError("BNNPotential covers models without hyperparameters or per-example latents")
        self.bnn, self.x, self.y = bnn, x, y
        self.names = bnn.site_names
        self.shapes = [site.shape for site in bnn.sites]
        self.sizes = [math.prod(shape) for shape in self.shapes]
        self.priors = [bnn.prior.distribution(site, {}) for site in bnn.sites]
        self.normal = self._flat_normal()
        self.calls = 0

    def _flat_normal(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """One flat ``(loc, scale)`` when every site's prior is a Normal (possibly made an event), else None."""
        locs, scales = [], []
        for prior, shape in zip(self.priors, self.shapes, strict=True):
            base = prior.base_dist if isinstance(prior, torch.distributions.Independent) else prior
            if type(base) not in (dist.Normal, torch.distributions.Normal):
                return None
            locs.append(base.loc.expand(shape).reshape(-1))
            scales.append(base.scale.expand(shape).reshape(-1))
        return torch.cat(locs).detach(), torch.cat(scales).detach()

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{site: (*lead, *site_shape)}`` views of ``(*lead, D)`` flat weights."""
        return unflatten(self.names, self.shapes, flat)

    def flatten(self, values: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The flat ``(D,)`` vector of one set of site values."""
        return torch.cat([values[name].reshape(-1) for name in self.names])

    def log_prior(self, flat: torch.Tensor) -> torch.Tensor:
        if self.normal is not None:
            loc, scale = self.normal
            z = (flat - loc) / scale
            return -(0.5 * z.square() + scale.log()).sum() - 0.5 * math.log(2 * math.pi) * flat.numel()
        values = self.unflatten(flat)
        return sum(prior.log_prob(values[name]).sum() for prior, name in zip(self.priors, self.names, strict=True))

    def __call__(self, params: Mapping[str, torch.Tensor]) -> torch.Tensor:
        self.calls += 1
        flat = params[FLAT_SITE]
        output = self.bnn.run_network(self.x, self.unflatten(flat))
        return -(self.log_prior(flat) + self.bnn.likelihood.log_likelihood(output, self.y).sum())


# ----------------------------------------------------------------------------------------------- run_nuts
@dataclass
class ChainStats:
    """What one chain did.

    Attributes:
        chain: Its index.
        seed: The seed it ran under (``seed * CHAIN_SEED_STRIDE + chain``).
        seconds: Wall time of warm-up plus sampling.
        divergences: Divergent transitions after warm-up.
        mean_accept_prob: Mean over the draws of the tree's average acceptance probability (what step-size
            adaptation targets).
        acceptance_rate: Pyro's "acceptance rate": the share of draws that moved (close to 1 for NUTS).
        step_size: The adapted step size.
        potential_evals: Gradient evaluations in all (the flat potential only; None for the model's own).
        iterations: Warm-up plus sampling iterations.
    """

    chain: int
    seed: int
    seconds: float
    divergences: int
    mean_accept_prob: float
    acceptance_rate: float
    step_size: float
    potential_evals: int | None
    iterations: int

    @property
    def evals_per_iteration(self) -> float | None:
        """Mean leapfrog steps per iteration (2^depth - 1 at the maximum tree depth)."""
        return None if self.potential_evals is None else self.potential_evals / self.iterations


class NutsSamples(dict):
    """``{site: (chain, draw, *site_shape)}`` with the run's per-chain statistics in :attr:`stats`."""

    stats: list[ChainStats]
    potential: str

    def __init__(self, samples: Mapping[str, torch.Tensor], stats: list[ChainStats], potential: str) -> None:
        super().__init__(samples)
        self.stats = stats
        self.potential = potential


@dataclass
class _ChainJob:
    bnn: BNN
    x: torch.Tensor
    y: torch.Tensor
    chain: int
    seed: int
    init: dict[str, torch.Tensor] | None
    num_samples: int
    warmup: int
    potential: str
    max_tree_depth: int
    target_accept_prob: float
    num_threads: int | None
    progress: bool = field(default=False)


def _run_chain(job: _ChainJob) -> tuple[dict[str, torch.Tensor], ChainStats]:
    """One chain: seeds, draws the start from the prior (unless given), warms up and samples."""
    threads = torch.get_num_threads()
    if job.num_threads is not None:
        torch.set_num_threads(job.num_threads)
    try:
        pyro.set_rng_seed(job.seed)
        bnn = job.bnn
        bnn.eval()
        init = dict(job.init or {})
        if set(bnn.hyper_site_names + bnn.site_names) - set(init):
            try:
                init = {**prior_draw(bnn), **init}
            except NotImplementedError as err:
                raise ValueError(
                    "the prior cannot be sampled (an improper prior?): pass init_values to start the chains"
                ) from err
        start = time.perf_counter()
        if job.potential == "flat":
            potential = BNNPotential(bnn, job.x, job.y)
            kernel = NUTS(
                potential_fn=potential, max_tree_depth=job.max_tree_depth, target_accept_prob=job.target_accept_prob
            )
            initial = {FLAT_SITE: potential.flatten(init)}
        else:
            potential = None
            kernel = NUTS(
                bnn, max_tree_depth=job.max_tree_depth, target_accept_prob=job.target_accept_prob, jit_compile=False
            )
            _, _, transforms, _ = initialize_model(bnn, model_args=(job.x, job.y))
            initial = {name: transforms[name](value) if name in transforms else value for name, value in init.items()}
        record: dict = {}

        def keep_diagnostics(kernel_, params, stage, iteration):
            # The kernel's divergences and acceptance rate, read while it still holds them (they are reset when
            # the run ends, and MCMC.diagnostics() also computes r-hat, which fails on fewer than 4 draws).
            if stage.startswith("Sample"):
                record.update(kernel_.diagnostics())
                record["mean accept prob"] = float(kernel_.logging()["acc. prob"])

        mcmc = MCMC(
            kernel,
            num_samples=job.num_samples,
            warmup_steps=job.warmup,
            initial_params=initial,
            disable_progbar=not job.progress,
            hook_fn=keep_diagnostics,
        )
        if potential is None:
            mcmc.run(job.x, job.y)
        else:
            mcmc.run()
        seconds = time.perf_counter() - start
        draws = mcmc.get_samples()
        if potential is not None:
            draws = potential.unflatten(draws[FLAT_SITE])
        stats = ChainStats(
            chain=job.chain,
            seed=job.seed,
            seconds=seconds,
            divergences=len(record["divergences"]),
            mean_accept_prob=record["mean accept prob"],
            acceptance_rate=float(record["acceptance rate"]),
            step_size=float(kernel.step_size),
            potential_evals=None if potential is None else potential.calls,
            iterations=job.num_samples + job.warmup,
        )
        return {name: value.detach().clone() for name, value in draws.items()}, stats
    finally:
        torch.set_num_threads(threads)


def run_nuts(
    bnn: BNN,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    num_chains: int = 4,
    num_samples: int = 500,
    warmup: int = 500,
    seed: int = 0,
    init_values: Mapping[str, torch.Tensor] | None = None,
    potential: str = "auto",
    max_tree_depth: int = 10,
    target_accept_prob: float = 0.8,
    workers: int = 1,
    num_threads: int | None = None,
    progress: bool = False,
) -> NutsSamples:
    """Runs NUTS (Pyro's ``MCMC(NUTS(...))``, diagonal mass matrix adapted in warm-up) on the full data set.

    Chains are independent runs of one chain each: chain ``c`` seeds Pyro with ``seed * 1000 + c``, starts from
    its own draw from the prior (every hyperparameter and weight site; ``init_values`` replaces it) and adapts its
    own step size and mass matrix. So the chains start in different places and, for a BNN, often settle in
    different (permuted or genuinely different) modes: r-hat on the weights measures that, not a bug.

    Args:
        bnn: The model; its likelihood's ``dataset_size`` must equal ``len(x)`` (the full-batch likelihood, no
            N/B scaling). It runs in eval mode (dropout off); deterministic parameters stay at their values.
        x: All training inputs ``(N, *input_shape)``.
        y: All training targets.
        num_chains: Chains to run.
        num_samples: Draws kept per chain.
        warmup: Warm-up (adaptation) iterations per chain, discarded.
        seed: Base seed of the chains.
        init_values: Starting values ``{site: site_shape}`` (all chains) or ``{site: (num_chains, *site_shape)}``;
            sites it leaves out start from the prior draw.
        potential: ``"flat"``: NUTS on one flat weight vector with :class:`BNNPotential` (several times faster;
            models without hyperparameters or per-example latents); ``"model"``: NUTS on the Pyro model itself;
            ``"auto"``: flat where it applies.
        max_tree_depth: NUTS's maximum tree depth (at most ``2^depth - 1`` leapfrog steps per iteration), >= 1.
        target_accept_prob: Step-size adaptation target, in (0, 1).
        workers: Run chains in this many processes (``spawn``); 1 runs them one after another in this process.
            The results do not depend on it (each chain has its own seed). On a shared 2-core machine two workers
            made each gradient 2.3x slower than one process did, so measure before using it.
        num_threads: torch threads while a chain runs (restored afterwards); None leaves the setting alone.
        progress: Show Pyro's progress bar.

    Returns:
        :class:`NutsSamples`: ``{site: (num_chains, num_samples, *site_shape)}`` (hyperparameter sites in their
        constrained space) with per-chain :class:`ChainStats` in ``.stats``.

    Raises:
        ValueError: a likelihood whose dataset_size is not ``len(x)``, bad counts, ``max_tree_depth < 1``,
            ``target_accept_prob`` outside (0, 1), an unknown ``potential``, or ``init_values`` naming a site the
            model lacks or giving a value of another shape.
    """
    for name, value in (
        ("num_chains", num_chains),
        ("num_samples", num_samples),
        ("workers", workers),
        ("max_tree_depth", max_tree_depth),
    ):
        positive_int(value, name)
    warmup = non_negative_int(warmup, "warmup")
    target_accept_prob = open_unit(target_accept_prob, "target_accept_prob")
    if len(x) != bnn.likelihood.dataset_size:
        raise ValueError(
            f"NUTS uses the full-batch likelihood: len(x) = {len(x)} but the likelihood's dataset_size is "
            f"{bnn.likelihood.dataset_size}; build the likelihood with dataset_size=len(x)"
        )
    if potential not in ("auto", "flat", "model"):
        raise ValueError(f"potential must be 'auto', 'flat' or 'model', got {potential!r}")
    flat_ok = not (bnn.hyper_site_names or bnn.local_latents)
    if potential == "flat" and not flat_ok:
        raise ValueError("the flat potential needs a model without hyperparameters or per-example latents")
    if potential == "auto":
        potential = "flat" if flat_ok else "model"
    bnn.validate_batch(x, y)
    init_values, shapes = check_init_values(init_values, bnn, num_chains)
    jobs = [
        _ChainJob(
            bnn,
            x,
            y,
            chain,
            seed * CHAIN_SEED_STRIDE + chain,
            chain_init(init_values, shapes, chain, num_chains),
            num_samples,
            warmup,
            potential,
            max_tree_depth,
            target_accept_prob,
            num_threads,
            progress,
        )
        for chain in range(num_chains)
    ]
    was_training = bnn.training
    try:
        if workers == 1:
            results = [_run_chain(job) for job in jobs]
        else:
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=min(workers, num_chains), mp_context=context) as pool:
                results = list(pool.map(_run_chain, jobs))
    finally:
        bnn.train(was_training)
    names = list(results[0][0])
    samples = {name: torch.stack([draws[name] for draws, _ in results]) for name in names}
    return NutsSamples(samples, [stats for _, stats in results], potential)


__all__ = [
    "ODD_ACTIVATIONS",
    "BNNPotential",
    "ChainStats",
    "HiddenLayer",
    "NutsSamples",
    "align_hidden_units",
    "hidden_layers",
    "linear_assignment",
    "predictive_distance",
    "run_nuts",
    "wasserstein_1d",
]
