"""The node-noise LeNet's default learning rates: ``python -m pyro_bnn.reproduce.studies.node_noise_lenet``.

``--sweep`` (the default) trains the node-noise LeNet (10 000 Fashion-MNIST images, 10 epochs, batch 128,
``mixture:4``, SGD with the authors' two learning rates and schedules) at each :data:`SWEEP` setting for three seeds
and writes ``results/node-noise/sweep-table.md``, the table behind ``--node-noise``'s 0.3 variational rate.
``--latents`` writes ``results/node-noise/latents.md``: the latent and weight counts of the large networks the paper
uses (VGG16, ResNet-50, WRN-28x10, plus ResNet-18), with and without bias scalars. The comparison of node noise
with weight-space VI and the baselines is ``pyro-bnn reproduce implicit-bnn`` (``results/implicit-bnn/``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pyro_bnn.commands.verb import ArgumentParser, positive_int_arg
from pyro_bnn.models import build_model
from pyro_bnn.node_noise import add_node_noise, count_latents
from pyro_bnn.runs import RunConfig, train_run
from pyro_bnn.runs.run_folder import check_writable
from pyro_bnn.runs.runs import load_data

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

NODE_NOISE = replace(
    BASE, node_noise=True, guide="mixture:4", lr_schedule="decay:0.01", lr_variational_schedule="constant"
)
"""The node-noise LeNet of the sweep (the learning rates vary)."""

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
            config = replace(NODE_NOISE, num_samples=8, seed=seed, **change)
            folder = out / "sweep-runs" / f"lr{change['lr']}-var{change['lr_variational']}-seed{seed}"
            try:
                result = train_run(config, folder, data=load_data(config), overwrite=True, progress=progress)
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


def latents_report(rows: list[dict]) -> str:
    """``latents.md``: the rows of :func:`latent_counts` as a Markdown table."""
    lines = [
        "# Latent variables of the large networks (32x32x3 inputs, 10 classes, every conv and linear layer noisy)",
        "",
        "Command: `python -m pyro_bnn.reproduce.studies.node_noise_lenet --latents` (writes this file).",
        "",
        "| model | input nodes | with bias scalars | weights |",
        "|---|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(f"| {row['model']} | {row['input_nodes']:,} | {row['with_bias_scalars']:,} | {row['weights']:,} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/node-noise")
    parser.add_argument("--seeds", type=positive_int_arg, default=3)  # 0 wrote a table without a seed column
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--sweep", action="store_true", help="the learning-rate sweep (sweep-table.md; the default)")
    parser.add_argument("--latents", action="store_true", help="the large networks' latent counts (latents.md)")
    args = parser.parse_args(argv)
    with parser.refusing():  # one line and exit status 2 before the sweep trains
        check_writable(args.out)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.latents:
        text = latents_report(latent_counts())
        (out / "latents.md").write_text(text)
        print(text)
        return
    table = sweep(out, tuple(range(args.seeds)), progress=not args.quiet)
    (out / "sweep-table.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
