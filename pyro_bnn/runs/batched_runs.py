"""Training several runs as one batch (:mod:`pyro_bnn.batched`), each into its own ordinary run folder.

:func:`batch_key` says which run configs may share a batch (the same architecture, data shape, batch size, epochs
and objective; seeds, priors of the batchable families, learning rates, KL schedules, leaky slopes and data noise
may differ), and :func:`train_runs_batched` trains such a group: every run gets the folder, ``config.json``,
checkpoints, history, ``metrics.json`` and figures that ``train_run`` would write, so evaluation, diagnostics and
reports do not know a run was batched, except by the ``batched_runs`` entry of its metrics and history.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from pyro_bnn.batched import fit_batched
from pyro_bnn.data import dataset_shape
from pyro_bnn.guides import Capability, parse_guide
from pyro_bnn.infer.divergence import NonFiniteLossError
from pyro_bnn.infer.objective_registry import batched_objectives
from pyro_bnn.infer.objectives import ElboKind
from pyro_bnn.models import build_model
from pyro_bnn.nn import Activation, parse_activation
from pyro_bnn.priors.spec import PRIOR_FAMILY, PriorKind
from pyro_bnn.runs.config import RunConfig, resolve_device
from pyro_bnn.runs.run_folder import RunFolder
from pyro_bnn.runs.runs import RunResult, finish_run, load_data, prepare_run_dir, prepare_trainer, record_stop

_MAY_DIFFER = frozenset(
    {
        "prior",
        "guide",
        "activation",
        "lr",
        "lr_variational",
        "weight_decay",
        "lr_schedule",
        "lr_variational_schedule",
        "kl_anneal",
        "temperature",
        "kl_weighting",
        "seed",
        "data_seed",
        "data_noise",
        "test_subset",
        "num_samples",
        "num_val_samples",
        "n_bins",
        "patience",
        "data_dir",
    }
)
"""Config fields the runs of one batch may differ in (the rest must be equal)."""


def batch_key(config: RunConfig) -> tuple | None:
    """What runs sharing a batch with this one must agree on (the number of particles among the rest), or None when
    it trains alone (a guide that does not batch, a MAP warm start, a hierarchical prior, an objective with local
    noise or gradient clipping). Node-noise runs batch with their mixture guide, under Adam or SGD.

    Two configs with equal keys can train in one batch; :func:`pyro_bnn.batched.fit_batched` still checks the
    built runs and refuses, before any step, what this static look cannot see.
    """
    config = config.resolved()
    if config.elbo not in batched_objectives() or config.clip_norm is not None:  # batches clip no gradients
        return None
    guide = parse_guide(config.guide)
    if config.node_noise and not guide.offers(Capability.NORMAL_MIXTURE):  # node noise batches with its mixture
        return None
    if guide.offers(Capability.NORMAL_MIXTURE) and (
        config.elbo not in (ElboKind.AUTO.value, ElboKind.MIXTURE.value)
        or PRIOR_FAMILY.parse(config.prior).kind is not PriorKind.NORMAL
    ):  # batched, a mixture computes the mixture-mean objective, whose KL is closed-form against Normal priors
        return None
    if not guide.offers(Capability.BATCHED) or guide.map_warm_start_epochs:
        return None
    if PRIOR_FAMILY.parse(config.prior).kind is PriorKind.HIERARCHICAL:
        return None
    activation = parse_activation(config.activation)
    values = {k: v for k, v in vars(config).items() if k not in _MAY_DIFFER}
    # Leaky slopes may differ (a per-run buffer); other activations must agree.
    kind = activation.kind.value if activation.kind is Activation.LEAKY_RELU else str(config.activation)
    # MC dropout's probability is its network's (the runs of a batch run one network), a mixture's K its stack's.
    shape = guide.num_components if guide.offers(Capability.NORMAL_MIXTURE) else None
    return (tuple(sorted(values.items())), kind, guide.family.name, guide.dropout, shape)


def train_runs_batched(
    configs: Sequence[RunConfig],
    out_dirs: Sequence[str | os.PathLike],
    *,
    progress: bool = True,
    figures: bool = True,
) -> list[RunResult | BaseException]:
    """Trains compatible runs as one batch, each into its own run folder (resuming its checkpoint there if any).

    Args:
        configs: The runs (equal :func:`batch_key`).
        out_dirs: Each run's folder.
        progress: One progress bar over the batch's epochs.
        figures: Draw each run's figures, as ``train_run`` does.

    Returns:
        Per run, its :class:`~pyro_bnn.runs.runs.RunResult` (``metrics["batched_runs"]`` says how many runs
        shared its batch; ``train_time_s`` is the batch's training time divided by them), or the exception that
        stopped it (a diverged run's ``NonFiniteLossError``, a busy folder's ``RunFolderBusyError``).

    Raises:
        ValueError: The runs cannot share a batch (nothing has trained; their folders are left as they were).
    """
    if len(configs) != len(out_dirs) or not configs:
        raise ValueError(f"train_runs_batched needs one folder per config, got {len(out_dirs)} for {len(configs)}")
    keys = {batch_key(c) for c in configs}
    if None in keys or len(keys) != 1:
        raise ValueError("these runs cannot share a batch (their batch keys differ, or one trains alone)")
    results: list[RunResult | BaseException | None] = [None] * len(configs)
    folders: list[tuple[int, RunFolder, Path]] = []
    prepared = []
    device = resolve_device(configs[0].device)
    configs = [config.resolved() for config in configs]
    try:
        for index, (config, out) in enumerate(zip(configs, out_dirs, strict=True)):
            try:
                resuming = prepare_run_dir(config, out, resume=True, overwrite=False)
                folder = RunFolder(Path(out))
                work = folder.__enter__()
            except FileExistsError as err:  # another process holds the folder: it is that process's run
                results[index] = err
                continue
            folders.append((index, folder, work))
            prepared.append(prepare_trainer(config, work, load_data(config), device, resuming, False))
        if prepared:
            start = time.perf_counter()
            outcomes = fit_batched(
                [p.trainer for p in prepared],
                [p.train for p in prepared],
                configs[0].epochs,
                val_loaders=[p.val for p in prepared],
                resume_from=[p.resume_from for p in prepared],
                progress=progress,
            )
            seconds = (time.perf_counter() - start) / len(prepared)
            for (index, _, _), run, outcome in zip(folders, prepared, outcomes, strict=True):
                if outcome.failed:
                    results[index] = outcome.error
                    if isinstance(outcome.error, NonFiniteLossError):
                        record_stop(run.out, outcome.error)
                    continue
                # score() draws the test predictions under the run's seed: they do not depend on the batch's other runs
                results[index] = finish_run(run, outcome.history, seconds, figures=figures, batched_runs=len(prepared))
    except BaseException:
        for _, folder, _ in folders:
            folder.__exit__(*sys.exc_info())
        raise
    released = []
    for index, folder, _ in folders:
        error = results[index] if isinstance(results[index], BaseException) else None
        try:  # every folder is released, whatever happens to another
            folder.__exit__(type(error) if error else None, error, None)
        except Exception as err:
            results[index] = err
            continue
        if not error:
            released.append(index)
    for index in released:
        results[index] = results[index].moved_to(Path(out_dirs[index]))
    return results


AUTO_MAX_RUNS = 32
"""The most runs ``--batch-runs auto`` puts in one batch."""

AUTO_MEMORY_SHARE = 0.25
"""The share of the free memory (the GPU's on CUDA, the machine's on a CPU) ``auto`` lets one batch use."""


CPU_MAX_WEIGHTS = 1 << 15
"""``auto`` batches runs on a CPU only below this many weights per run. Above it a step is bound by passes over the
weights (memory bandwidth), which batching does not reduce; it only saves per-step overhead, and on a 2-core CPU four
batched 3FC runs (2.8 M weights) took 1.4x as long as four separate ones, four of the zoo's ``lenet`` (the
implicit-BNN paper's LeNet, 41,806 weights) about as long, while 32 moons nets (57 weights) trained 7x faster
(``bench/BATCHED.md``)."""


@functools.cache
def _net_size(dataset: str, model: str, activation: str | None) -> tuple[int, int]:
    """``(weights, activations per example)`` of ``model`` built for ``dataset`` with ``activation`` (built once
    per triple)."""
    shape = dataset_shape(dataset)
    net = build_model(model, input_shape=shape.input_shape, num_classes=shape.num_classes or 1, activation=activation)
    weights = sum(p.numel() for p in net.parameters())
    activations = 0

    def count(module, inputs, output):
        nonlocal activations
        if not list(module.children()) and isinstance(output, torch.Tensor):
            activations += output.numel()

    hooks = [m.register_forward_hook(count) for m in net.modules()]
    try:
        with torch.no_grad():
            net(torch.zeros(1, *shape.input_shape))
    finally:
        for hook in hooks:
            hook.remove()
    return weights, activations


def run_memory_bytes(config: RunConfig) -> int:
    """About how many bytes one run of ``config`` occupies in a batch: 10 numbers per weight (location, raw scale,
    their gradients, Adam's moments and slack) and 2 per weight and particle (the noise and the drawn weight), and
    per training example and particle 4 numbers per activation of the network (the forward values, their gradients
    and the pre-activations) and its input (the particles' copies of the batch); a point estimate draws no weights,
    and with dropout 2 numbers per activation (the masks and their draws); node noise draws no weights and counts
    its S copies of every example as particles."""
    config = config.resolved()
    weights, activations = _net_size(config.dataset, config.model, config.activation)
    inputs = math.prod(dataset_shape(config.dataset).input_shape)
    guide = parse_guide(config.guide)
    particles = config.num_particles if guide.random_weights else 1
    draws = 2 * particles  # the noise and the drawn weights
    if config.node_noise:  # deterministic weights; every example repeated S times, each row its own noise
        particles, draws = config.samples_per_example, 0
    per_example = (4 + 2 * (guide.dropout > 0)) * activations + inputs
    return 4 * ((10 + draws) * weights + particles * config.batch_size * per_example)


def free_memory_bytes(device: str) -> int:
    """The free memory of ``device`` (its CUDA device's, or the machine's available RAM for a CPU)."""
    resolved = resolve_device(device)
    if resolved.type == "cuda":
        free, _ = torch.cuda.mem_get_info(resolved)
        return int(free)
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def auto_batch_runs(config: RunConfig) -> int:
    """How many runs like ``config`` ``--batch-runs auto`` puts in one batch: as many as fit in
    :data:`AUTO_MEMORY_SHARE` of the free memory by :func:`run_memory_bytes`, at most :data:`AUTO_MAX_RUNS`, at
    least 1; on a CPU, 1 for networks of :data:`CPU_MAX_WEIGHTS` weights or more (batching does not pay there)."""
    config = config.resolved()
    weights = _net_size(config.dataset, config.model, config.activation)[0]
    if resolve_device(config.device).type == "cpu" and weights >= CPU_MAX_WEIGHTS:
        return 1
    budget = AUTO_MEMORY_SHARE * free_memory_bytes(config.device)
    return max(1, min(AUTO_MAX_RUNS, int(budget // max(1, run_memory_bytes(config)))))
