"""Node noise against weight space on LeNet: ``python -m pyro_bnn.experiments.node_noise_lenet``.

The node-noise issue's fixed-up-front comparison: LeNet on a 10 000-image Fashion-MNIST subset, 10 epochs, batch
128, three seeds; the implicit BNN (node noise on every layer's inputs, ``mixture:4``, SGD with the authors' two
learning rates and schedules) against the weight-space LeNet with the library's default guide and objective under
the same budget. It writes ``results/node-noise/lenet.md`` (and ``lenet.json``) with test accuracy and ECE as mean
± sd over seeds, the seconds per training epoch of both, and the latent/weight counts of the large networks the
paper uses (VGG16, ResNet-50, WRN-28x10, plus ResNet-18), with and without bias scalars. Every number is what the
run produces.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

from pyro_bnn._io import write_json_atomically
from pyro_bnn.experiments.config import RunConfig
from pyro_bnn.experiments.runs import load_data, train_run
from pyro_bnn.models import build_model
from pyro_bnn.node_noise import add_node_noise, count_latents

BASE = RunConfig(
    dataset="fashion-mnist",
    model="lenet",
    epochs=10,
    batch_size=128,
    train_subset=10_000,
    val_size=0,
    num_samples=20,
    n_bins=15,
)
"""The shared budget. ``num_samples = 20``: five per mixture component, the authors' n = 5."""

VARIANTS = {
    "node noise, mixture:4": replace(
        BASE, node_noise=True, guide="mixture:4", lr_schedule="decay:0.01", lr_variational_schedule="constant"
    ),
    "weight space, default guide": BASE,
}

LARGE_MODELS = ("vgg16", "resnet18", "resnet50", "wrn28x10")

SWEEP = (
    {"lr": 0.05, "lr_variational": 1.2},
    {"lr": 0.02, "lr_variational": 1.2},
    {"lr": 0.05, "lr_variational": 0.3},
    {"lr": 0.02, "lr_variational": 0.3},
)
"""``--sweep``: the learning rates behind the node-noise defaults (the authors' VGG16 setting is 0.05 / 1.2)."""


def sweep(out: Path, seeds: tuple[int, ...], progress: bool) -> str:
    """Trains the node-noise LeNet at each :data:`SWEEP` setting (8 posterior samples) and returns a Markdown table;
    a run that diverges is reported as such."""
    from pyro_bnn.infer import NonFiniteLossError

    rows = []
    for change in SWEEP:
        cells = []
        for seed in seeds:
            config = replace(VARIANTS["node noise, mixture:4"], num_samples=8, seed=seed, **change)
            folder = out / "sweep-runs" / f"lr{change['lr']}-var{change['lr_variational']}-seed{seed}"
            try:
                result = train_run(config, folder, data=load_data(config.validate()), overwrite=True, progress=progress)
                cells.append(f"{result.metrics['accuracy']:.4f} / {result.metrics['ece']:.4f}")
            except NonFiniteLossError as err:
                cells.append(f"**diverged** ({str(err).split(';')[0]})")
        rows.append(f"| {change['lr']} | {change['lr_variational']} | " + " | ".join(cells) + " |")
    header = "| lr (weights) | lr_variational | " + " | ".join(f"seed {s}: accuracy / ECE" for s in seeds) + " |"
    return "\n".join([header, "|---:|---:|" + "---|" * len(seeds), *rows]) + "\n"


def latent_counts() -> list[dict]:
    """Input-node and bias-scalar counts of the large networks for 32x32x3 inputs and 10 classes."""
    rows = []
    for name in LARGE_MODELS:
        net = add_node_noise(build_model(name, input_shape=(3, 32, 32), num_classes=10), bias_noise=True)
        counts = count_latents(net)
        rows.append(
            {
                "model": name,
                "input_nodes": counts.input_nodes,
                "with_bias_scalars": counts.latents,
                "weights": counts.weights,
            }
        )
    return rows


def run(out: Path, seeds: tuple[int, ...], progress: bool) -> dict:
    results: dict[str, list[dict]] = {}
    for label, config in VARIANTS.items():
        for seed in seeds:
            seeded = replace(config, seed=seed)
            data = load_data(seeded.validate())
            start = time.perf_counter()
            result = train_run(
                seeded,
                out / "runs" / f"{label.split(',')[0].replace(' ', '-')}-seed{seed}",
                data=data,
                overwrite=True,
                progress=progress,
            )
            history = result.metrics["history"]
            results.setdefault(label, []).append(
                {
                    "seed": seed,
                    "accuracy": result.metrics["accuracy"],
                    "ece": result.metrics["ece"],
                    "nll": result.metrics["nll"],
                    "seconds_per_epoch": statistics.mean(r["time_s"] for r in history),
                    "wall_s": time.perf_counter() - start,
                }
            )
    return {
        "runs": results,
        "latent_counts": latent_counts(),
        "config": {k: json.loads(v.to_json()) for k, v in VARIANTS.items()},
    }


def _mean_sd(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4f} ± {sd:.4f}"


def report(summary: dict) -> str:
    lines = [
        "# Node noise (implicit BNN) against weight space: LeNet on Fashion-MNIST",
        "",
        "Command: `python -m pyro_bnn.experiments.node_noise_lenet` (writes this file and `lenet.json`).",
        "",
        "10 000 training images, 10 epochs, batch 128, test set of 10 000 images, 20 posterior samples (node noise:",
        "5 per component). Node noise: every conv/linear input, prior N(1, 0.1²), `mixture:4`, S = 2 copies per",
        "example, SGD (Nesterov 0.9) at 0.05 per example with weight decay 5e-4 and `decay:0.01` for the weights, 0.3",
        "constant for the variational parameters (the defaults of `--node-noise`; `sweep.md` says why 0.3).",
        "Weight space: the default `flat:rel=1` guide, N(0, 1) prior, Adam 1e-3, `--elbo auto`. Seconds per epoch:",
        "training only, mean over epochs.",
        "",
        "| variant | seeds | test accuracy | ECE (15 bins) | NLL | s / epoch |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, rows in summary["runs"].items():
        accuracy, ece, nll = (_mean_sd([r[key] for r in rows]) for key in ("accuracy", "ece", "nll"))
        seconds = statistics.mean(r["seconds_per_epoch"] for r in rows)
        lines.append(f"| {label} | {len(rows)} | {accuracy} | {ece} | {nll} | {seconds:.1f} |")
    lines += [
        "",
        "## Latent variables of the large networks (32x32x3 inputs, 10 classes, every conv and linear layer noisy)",
        "",
        "| model | input nodes | with bias scalars | weights |",
        "|---|---:|---:|---:|",
    ]
    for row in summary["latent_counts"]:
        lines.append(f"| {row['model']} | {row['input_nodes']:,} | {row['with_bias_scalars']:,} | {row['weights']:,} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/node-noise")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--sweep", action="store_true", help="the learning-rate sweep instead (sweep-table.md)")
    args = parser.parse_args()
    out = Path(args.out)
    if args.sweep:
        table = sweep(out, tuple(range(args.seeds)), progress=not args.quiet)
        (out / "sweep-table.md").write_text(table)
        print(table)
        return
    summary = run(out, tuple(range(args.seeds)), progress=not args.quiet)
    write_json_atomically(out / "lenet.json", summary)
    (out / "lenet.md").write_text(report(summary))
    print(report(summary))


if __name__ == "__main__":
    main()
