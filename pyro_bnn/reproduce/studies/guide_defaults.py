"""The measurement behind the default guide: AutoNormal's location init x init scale x activation on a 3FC.

``python -m pyro_bnn.reproduce.studies.guide_defaults --out results/guide-defaults`` trains every combination on a
10 000-image Fashion-MNIST subset (batch 128, Adam 1e-3, N(0, 1) prior on every weight and bias, full-data ELBO)
and records, after epochs 1 and 5: test accuracy and ECE (15 bins), the mean posterior sigma (overall and per
layer), and the mutual information between label and weights (the epistemic part of the predictive entropy) on
test inputs blended with Gaussian noise (gamma = 0.5). It writes ``table.md`` and ``table.json``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyro
import torch

from pyro_bnn.bnn import BNN
from pyro_bnn.commands.verb import ArgumentParser, existing_dir_arg
from pyro_bnn.data import load_dataset, parse_corruption
from pyro_bnn.evaluation import entropy_decomposition, summarize
from pyro_bnn.guides import mean_posterior_scale, parse_guide
from pyro_bnn.infer import Callback, RuntimeOptions, Trainer
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.nn.activations import parse_activation
from pyro_bnn.predict import predict
from pyro_bnn.priors import NormalPrior
from pyro_bnn.runs.run_folder import check_writable

GUIDES = (
    "autonormal:0.1",
    "autonormal:0.01",
    "autonormal:0.1,loc=median",
    "autonormal:0.01,loc=median",
    "autonormal:rel=0.1",
    "autonormal:rel=1",
    "autonormal:0.1,loc=map",
    "autonormal:0.01,loc=map",
)
ACTIVATIONS = ("relu", "leaky:-0.5")


@dataclass
class Setting:
    """The fixed part of the measurement."""

    train_subset: int | None = 10_000
    test_subset: int = 5_000
    batch_size: int = 128
    lr: float = 1e-3
    epochs: tuple[int, ...] = (1, 5)
    num_samples: int = 20
    seed: int = 0
    width: int = 1000


def score_guide(bnn: BNN, guide, x: torch.Tensor, y: torch.Tensor, x_blend: torch.Tensor, num_samples: int) -> dict:
    """Accuracy and ECE on ``(x, y)``, mean sigma (overall and per layer), mutual information on ``x_blend``."""
    metrics = summarize(predict(bnn, guide, (x, y), num_samples=num_samples).probs, y)
    blended = predict(bnn, guide, x_blend, num_samples=num_samples)
    sigma, per_layer = mean_posterior_scale(guide, bnn)
    return {
        "accuracy": metrics["accuracy"],
        "ece": metrics["ece"],
        "mean_sigma": sigma,
        "sigma_per_layer": per_layer,
        "mutual_information": float(entropy_decomposition(blended.probs).epistemic.mean()),
    }


class _ScoreAt(Callback):
    def __init__(self, epochs, score):
        self.epochs, self.score, self.records = set(epochs), score, {}

    def on_epoch_end(self, trainer, record):
        if trainer.epoch in self.epochs:
            self.records[trainer.epoch] = self.score(trainer.guide)


def measure(guide_spec: str, activation: str, data, setting: Setting) -> dict:
    """Trains one combination and returns its scores by epoch."""
    spec = parse_guide(guide_spec)
    pyro.set_rng_seed(setting.seed)
    net = build_model(
        "3fc", input_shape=data.input_shape, num_classes=data.num_classes, activation=activation, width=setting.width
    )
    bnn = BNN(net, NormalPrior(0.0, 1.0), Categorical(len(data.train)))
    train, _, _ = data.loaders(setting.batch_size, seed=setting.seed)
    x, y = data.test.x[: setting.test_subset], data.test.y[: setting.test_subset]
    x_blend = parse_corruption("gaussian:0.5", generator=torch.Generator().manual_seed(setting.seed))(x)
    start = time.perf_counter()
    optim = pyro.optim.Adam({"lr": setting.lr})
    scorer = _ScoreAt(setting.epochs, lambda guide: score_guide(bnn, guide, x, y, x_blend, setting.num_samples))
    # the spec's MAP warm start (loc=map) runs inside fit(), with the same optimiser settings, before the guide
    runtime = RuntimeOptions(seed=setting.seed, progress=False)
    trainer = Trainer(bnn, spec, optim=optim, runtime=runtime, callbacks=[scorer])
    trainer.fit(train, max(setting.epochs))
    return {
        "guide": guide_spec,
        "activation": activation,
        "by_epoch": scorer.records,
        "seconds": time.perf_counter() - start,
    }


def format_table(rows: list[dict], epochs: tuple[int, ...]) -> str:
    """A Markdown table: one line per guide and activation, the scores after each epoch side by side."""
    head = (
        "| guide | activation |"
        + "".join(f" acc@{e} | ECE@{e} | mean σ@{e} | MI(γ=0.5)@{e} |" for e in epochs)
        + " σ per layer (last) | s |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        cells = []
        for e in epochs:
            r = row["by_epoch"][e]
            cells.append(
                f" {r['accuracy']:.4f} | {r['ece']:.4f} | {r['mean_sigma']:.4f} | {r['mutual_information']:.4f} |"
            )
        last = row["by_epoch"][epochs[-1]]["sigma_per_layer"]
        layers = ", ".join(f"{k} {v:.3g}" for k, v in last.items())
        lines.append(
            f"| `{row['guide']}` | {row['activation']} |" + "".join(cells) + f" {layers} | {row['seconds']:.0f} |"
        )
    return "\n".join(lines)


def full_comparison(guides: list[str], out: Path, data_dir: str | None, epochs: int = 10) -> None:
    """The acceptance check of a default: full Fashion-MNIST with the default split (50 000 / 10 000 held out),
    3FC ReLU, batch 128, ``epochs`` epochs; test metrics on all 10 000 test images. Writes ``full.md``/``full.json``.
    """
    setting = Setting(train_subset=None, test_subset=10_000, epochs=(epochs,), num_samples=50)
    data = load_dataset("fashion-mnist", data_dir=data_dir, seed=setting.seed)
    rows = []
    for guide_spec in guides:
        rows.append(measure(guide_spec, "relu", data, setting))
        print(format_table(rows[-1:], setting.epochs).splitlines()[-1], flush=True)
        (out / "full.json").write_text(json.dumps({"setting": setting.__dict__, "rows": rows}, indent=2))
    (out / "full.md").write_text(
        f"Command: `python -m pyro_bnn.reproduce.studies.guide_defaults --full {' '.join(guides)}`\n\n"
        f"3FC ReLU, N(0, 1) prior, full Fashion-MNIST ({len(data.train)} training images, {len(data.val)} held out), "
        f"batch {setting.batch_size}, Adam {setting.lr}, {epochs} epochs; test metrics on all {len(data.test)} test "
        f"images with {setting.num_samples} posterior samples; MI on them blended with Gaussian noise (γ = 0.5).\n\n"
        + format_table(rows, setting.epochs)
        + "\n"
    )


def merge_full(folders: list[Path], out: Path) -> None:
    """Writes ``out/full.md``: the rows of several ``--full`` runs (each folder's ``full.json``) in one table, with
    the command behind each (runs of separate processes, so they could go in parallel)."""
    rows, commands = [], []
    for folder in folders:
        part = json.loads((folder / "full.json").read_text())
        for row in part["rows"]:
            row["by_epoch"] = {int(epoch): scores for epoch, scores in row["by_epoch"].items()}  # JSON keys are str
        rows.extend(part["rows"])
        guides = " ".join(row["guide"] for row in part["rows"])
        commands.append(f"python -m pyro_bnn.reproduce.studies.guide_defaults --out {folder} --full {guides}")
    epochs = tuple(part["setting"]["epochs"])
    (out / "full.md").write_text(
        "Commands:\n\n" + "\n".join(f"- `{c}`" for c in commands) + "\n\n3FC ReLU, N(0, 1) prior, full "
        "Fashion-MNIST (50 000 training images, 10 000 held out), batch 128, Adam 0.001, "
        f"{epochs[-1]} epochs; test metrics on all 10 000 test images with 50 posterior samples; MI on them blended "
        "with Gaussian noise (γ = 0.5).\n\n" + format_table(rows, epochs) + "\n"
    )


def _check_arguments(args: argparse.Namespace) -> None:
    """Refuses what the measurement would fail on after minutes of work (``ValueError``, one line): a guide or an
    activation spec it cannot parse, a ``--merge`` folder without a ``full.json``, an ``--out`` it cannot write."""
    for spec in args.full or args.guides:
        parse_guide(spec)
    for activation in args.activations:
        parse_activation(activation)
    for folder in args.merge or ():
        if not (Path(folder) / "full.json").is_file():
            raise ValueError(f"--merge {folder}: expected a folder holding a --full run's full.json, found none")
    check_writable(args.out)


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/guide-defaults")
    parser.add_argument("--guides", nargs="*", default=list(GUIDES))
    parser.add_argument("--activations", nargs="*", default=list(ACTIVATIONS))
    parser.add_argument("--data-dir", type=existing_dir_arg, default=None)
    parser.add_argument(
        "--full", nargs="+", metavar="GUIDE", help="instead: the 10-epoch full-data check of these guides"
    )
    parser.add_argument("--merge", nargs="+", metavar="DIR", help="instead: merge the full.json of --full runs")
    args = parser.parse_args(argv)
    with parser.refusing():  # one line and exit status 2, before any data is read
        _check_arguments(args)
    if args.merge:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        merge_full([Path(d) for d in args.merge], out)
        return
    if args.full:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        full_comparison(args.full, out, args.data_dir)
        return
    setting = Setting()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = load_dataset(
        "fashion-mnist", data_dir=args.data_dir, train_subset=setting.train_subset, val_size=0, seed=setting.seed
    )
    rows = []
    partial = out / "table.json"
    for guide_spec in args.guides:
        for activation in args.activations:
            row = measure(guide_spec, activation, data, setting)
            rows.append(row)
            print(format_table([row], setting.epochs).splitlines()[-1], flush=True)
            partial.write_text(json.dumps({"setting": setting.__dict__, "rows": rows}, indent=2))
    # the arguments given, from the shell (argv None) as from Python, quoted so that the line can be pasted back
    command = "python -m pyro_bnn.reproduce.studies.guide_defaults " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    (out / "table.md").write_text(
        f"Command: `{command.strip()}`\n\n3FC, N(0, 1) prior on every weight and bias, Fashion-MNIST "
        f"{setting.train_subset} training images, batch {setting.batch_size}, Adam {setting.lr}, full-data ELBO; "
        f"test metrics on the first {setting.test_subset} test images with {setting.num_samples} posterior samples; "
        "MI on the same images blended with Gaussian noise (γ = 0.5); `loc=map` rows first train 1 epoch of MAP.\n\n"
        + format_table(rows, setting.epochs)
        + "\n"
    )


if __name__ == "__main__":
    main()
