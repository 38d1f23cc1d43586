"""``pyro-bnn demo`` (``make demo``): a 3FC Bayesian network with ReLU and with Leaky ReLU (slope -0.5) on a
Fashion-MNIST subset.

The One Simple Trick paper's question in miniature (does Leaky ReLU calibrate a mean-field BNN better than ReLU at
similar accuracy?), as a short run of the workflow; the paper's own experiment is ``pyro-bnn reproduce
leaky-calibration`` (:mod:`pyro_bnn.reproduce.papers.leaky_calibration`). Each activation trains with the default
guide for a few seeds; the table reports mean ± sd over seeds of test accuracy, ECE, the mean posterior sigma and
the mutual information (epistemic entropy) on test inputs blended with Gaussian noise (gamma = 0.5), and the verdict
says which activation came out better calibrated at this scale (or that the seeds cannot tell them apart). Every
number is what this run produces.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from dataclasses import replace
from pathlib import Path

import torch

from pyro_bnn._io import write_json_atomically
from pyro_bnn.commands.verb import Verb, options_from_args, user_errors
from pyro_bnn.data import DatasetSplits, parse_corruption
from pyro_bnn.evaluation import calibration, entropy_decomposition, mean_sd
from pyro_bnn.guides import DEFAULT_GUIDE
from pyro_bnn.predict import predict
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.runs.run_folder import check_not_a_run, check_writable
from pyro_bnn.runs.runs import RunResult, load_data, train_run

ACTIVATIONS = {"ReLU": "relu", "Leaky ReLU (-0.5)": "leaky:-0.5"}
DEMO_SEEDS = (0, 1)
BLEND = "gaussian:0.5"

DEMO_CONFIG = RunConfig(
    dataset="fashion-mnist",
    model="3fc",
    prior="normal:0,1",
    guide=DEFAULT_GUIDE,
    epochs=4,
    batch_size=128,
    lr=1e-3,
    train_subset=10_000,
    val_size=5_000,
    num_samples=30,
    num_val_samples=8,
    n_bins=15,
    seed=0,
)

COLUMNS = ("accuracy", "ece", "mean_posterior_sigma", "mutual_information")


def blended_mutual_information(result: RunResult, x: torch.Tensor, config: RunConfig) -> float:
    """Mean mutual information between label and weights on ``x`` blended with Gaussian noise (gamma = 0.5)."""
    blended = parse_corruption(BLEND, generator=torch.Generator().manual_seed(config.seed))(x)
    prediction = predict(result.bnn, result.guide, blended.to(x.device), num_samples=config.num_samples)
    return float(entropy_decomposition(prediction.probs).epistemic.mean())


def summarize_seeds(results: dict[str, list[RunResult]]) -> dict[str, dict[str, tuple[float, float]]]:
    """``{label: {column: (mean, sd over seeds)}}`` (sd 0 for a single seed; NaN, NaN where a seed's value is not
    finite, rather than the mean of fewer seeds than the table says)."""
    summary = {}
    for label, runs in results.items():
        summary[label] = {}
        for column in COLUMNS:
            values = [run.metrics[column] for run in runs]
            mean, sd, n = mean_sd(values)
            summary[label][column] = (mean, sd) if n == len(values) else (math.nan, math.nan)
    return summary


TRAINED_MARGIN = 0.1
"""A network counts as trained when its mean test accuracy beats chance (1 / 10 on Fashion-MNIST) by this much: the
ECE of a network that predicts near chance says nothing about calibration."""


def verdict(summary: dict[str, dict[str, tuple[float, float]]], num_seeds: int, chance: float = 0.1) -> str:
    """Which activation came out better calibrated (lower ECE), and whether the seeds separate them; no verdict
    where a network did not train (mean accuracy within :data:`TRAINED_MARGIN` of ``chance``)."""
    untrained = [label for label, s in summary.items() if not s["accuracy"][0] >= chance + TRAINED_MARGIN]
    if untrained:
        shown = ", ".join(f"{label} {summary[label]['accuracy'][0]:.4f}" for label in untrained)
        return (
            f"Cannot be judged: not every network trained (test accuracy {shown}, chance {chance:.2f}); "
            "run more epochs or a larger --train-subset."
        )
    (label_a, a), (label_b, b) = summary.items()
    better, worse = (label_a, label_b) if a["ece"][0] <= b["ece"][0] else (label_b, label_a)
    gap = abs(a["ece"][0] - b["ece"][0])
    spread = a["ece"][1] + b["ece"][1]
    seeds = f"{num_seeds} seed{'s' if num_seeds > 1 else ''}"
    if num_seeds > 1 and gap <= spread:
        return (
            f"{better} had the lower mean ECE ({summary[better]['ece'][0]:.4f} vs {summary[worse]['ece'][0]:.4f}), "
            f"but the gap is within the spread of the {seeds}: no clear winner at this scale."
        )
    alone = "" if num_seeds > 1 else ", no spread to judge the gap against"
    return (
        f"{better} came out better calibrated at this scale: ECE {summary[better]['ece'][0]:.4f} vs "
        f"{summary[worse]['ece'][0]:.4f} ({seeds}{alone})."
    )


SCOPE = (
    "What this demo shows: the workflow (a Bayesian 3FC trained, scored and plotted per activation) and how the two "
    "activations compare after {epochs} on {images} images with the library's default guide and the textbook "
    "ELBO. What it does not show: the paper's effect, which the authors measured with their own objective, guide and "
    "early stopping over up to 50 epochs on the full data. For that, run `pyro-bnn reproduce leaky-calibration "
    "--profile gpu` (Table 1 at full data, a GPU's job; committed report from an H200: "
    "results/leaky-calibration-gpu/report.md), or `--profile quick` for a one-minute smoke run of the grid."
)
"""The demo's closing sentences: what it does and does not show, and where the paper's experiment is."""


def format_table(results: dict[str, list[RunResult]], config: RunConfig = DEMO_CONFIG) -> str:
    """A plain-text table of mean ± sd over seeds, then the verdict and what the demo does and does not show."""
    summary = summarize_seeds(results)
    num_seeds = len(next(iter(results.values())))
    lines = [
        f"{'activation':<20}{'accuracy':>18}{'ECE':>18}{'mean sigma':>18}{'MI (γ=0.5)':>18}",
    ]
    for label, row in summary.items():
        # one seed has no spread: its sd would read as a measured 0
        cells = "".join(
            f"{f'{row[c][0]:.4f} ± {row[c][1]:.4f}' if num_seeds > 1 else f'{row[c][0]:.4f}':>18}" for c in COLUMNS
        )
        lines.append(f"{label:<20}{cells}")
    lines.append(f"(mean ± sd over {num_seeds} seeds)" if num_seeds > 1 else "(one seed: no spread over seeds)")
    lines.append(verdict(summary, num_seeds))
    lines.append(_scope(config))
    return "\n".join(lines)


def _scope(config: RunConfig) -> str:
    epochs = f"{config.epochs} epoch{'s' if config.epochs != 1 else ''}"
    return SCOPE.format(epochs=epochs, images=f"{config.train_subset or 'all'}")


def run_demo(
    out_dir: str | os.PathLike,
    *,
    config: RunConfig = DEMO_CONFIG,
    seeds: tuple[int, ...] = DEMO_SEEDS,
    data: DatasetSplits | None = None,
    progress: bool = True,
) -> dict[str, list[RunResult]]:
    """Trains both networks for every seed, writes each run's folder (``<activation>-seed<k>``) plus
    ``summary.json``, ``reliability.png`` and ``training.png`` (first seed) to ``out_dir``, and returns the results
    by label. ``data`` is ``load_data(config)`` if given; each seed draws its own split otherwise.

    Raises:
        ValueError: ``out_dir`` cannot be a run folder (:func:`~pyro_bnn.runs.run_folder.check_writable`),
            before any data is loaded.
        FileExistsError: ``out_dir`` holds a run (``train``'s, ``sample``'s), whose figures the demo's would
            replace (:func:`~pyro_bnn.runs.run_folder.check_not_a_run`).
    """
    check_writable(out_dir)  # before the first seed's data is loaded
    check_not_a_run(Path(out_dir), what="the demo")  # its figures and runs beside a run's files would spoil both
    out = Path(out_dir)
    results: dict[str, list[RunResult]] = {label: [] for label in ACTIVATIONS}
    for seed in seeds:
        seed_config = replace(config, seed=seed)
        seed_data = data if data is not None and seed == config.seed else load_data(seed_config)
        x_test = seed_data.test.x
        for label, activation in ACTIVATIONS.items():
            run_config = replace(seed_config, activation=activation)
            run_dir = out / f"{activation.replace(':', '')}-seed{seed}"
            result = train_run(run_config, run_dir, data=seed_data, overwrite=True, progress=progress)
            result.metrics["mutual_information"] = blended_mutual_information(
                result, x_test.to(result.prediction.probs.device), run_config
            )
            write_json_atomically(run_dir / "metrics.json", result.metrics)
            results[label].append(result)
    first = {label: runs[0] for label, runs in results.items()}
    calibrations = {
        label: calibration(r.prediction.probs, r.prediction.targets, n_bins=config.n_bins) for label, r in first.items()
    }
    from pyro_bnn.plots import plot_reliability_grid, plot_training_curves, save_figure  # matplotlib: when drawn

    title = f"3FC BNN on Fashion-MNIST ({config.train_subset} training images, {config.epochs} epochs, seed {seeds[0]})"
    save_figure(plot_reliability_grid(calibrations, title=title), out / "reliability.png")
    histories = {label: r.metrics["history"] for label, r in first.items()}
    save_figure(plot_training_curves(histories, title=title), out / "training.png")
    summary = summarize_seeds(results)
    write_json_atomically(
        out / "summary.json",
        {
            "config": json.loads(config.to_json()),
            "seeds": list(seeds),
            "mean_sd_over_seeds": {label: {c: list(v) for c, v in row.items()} for label, row in summary.items()},
            "verdict": verdict(summary, len(seeds)),
            "scope": _scope(config),
            "runs": {
                label: [{c: r.metrics[c] for c in (*COLUMNS, "nll", "train_time_s")} for r in runs]
                for label, runs in results.items()
            },
        },
    )
    return results


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="results/demo", help="folder of the table and runs (default: results/demo)")
    parser.add_argument("--epochs", type=int, default=None, help=f"epochs per run (default {DEMO_CONFIG.epochs})")
    parser.add_argument(
        "--train-subset",
        type=int,
        default=None,
        help=f"training images per run (default {DEMO_CONFIG.train_subset})",
    )
    parser.add_argument("--seeds", type=int, default=None, help="seeds per activation (default 2)")
    parser.add_argument("--data-dir", default=None, help="Fashion-MNIST's folder (default: the usual places)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: auto)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def _run(args: argparse.Namespace) -> int:
    with user_errors():
        seeds = tuple(range(args.seeds)) if args.seeds is not None else DEMO_SEEDS
        if not seeds:
            raise ValueError(f"--seeds must be an int >= 1, got {args.seeds}")
        config = options_from_args(DEMO_CONFIG, args, seed=lambda _: seeds[0]).validate()
        check_writable(args.out)
        check_not_a_run(Path(args.out), what="the demo")
        data = load_data(config)
    results = run_demo(args.out, config=config, seeds=seeds, data=data, progress=not args.quiet)
    print()
    print(format_table(results, config))
    print(f"\nfigures: {args.out}/reliability.png, {args.out}/training.png; per-run folders under {args.out}/")
    return 0


DEMO = Verb("demo", help="3FC ReLU vs Leaky ReLU on a Fashion-MNIST subset", add_arguments=_add_arguments, run=_run)
