"""Which guide for which model: one short run per guide on the same network and data, from Python as a notebook user
would write it (``python -m pyro_bnn.experiments.guide_table --out results/guide-table``).

The setting is the one the guide-swapping report measured: an MLP of three hidden layers of 50 units (N(0, 1) prior
on every weight) on scikit-learn's digits, Adam 3e-3, batch 128, a few epochs, the guide the only change; the
node-noise row puts the mixture guide on the same network with latent noise on each layer's inputs. Every row is
passed to :class:`~pyro_bnn.infer.Trainer` as a user would pass it: a spec string, or a Pyro ``AutoGuide`` builder.
Writes ``table.md`` and ``table.json`` (per-seed values too).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pyro
from pyro.infer.autoguide import AutoDiagonalNormal, AutoLowRankMultivariateNormal, AutoNormal

from pyro_bnn.bnn import BNN
from pyro_bnn.data import load_dataset
from pyro_bnn.experiments.run_folder import check_writable
from pyro_bnn.guides import init_to_network, mean_posterior_scale, parse_guide
from pyro_bnn.infer import Trainer
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.node_noise import NodeNoisePrior, add_node_noise
from pyro_bnn.predict import predict
from pyro_bnn.priors import NormalPrior, nothing


@dataclass(frozen=True)
class Row:
    """One guide of the table.

    Attributes:
        label: What the table calls it.
        guide: A spec string (the CLI grammar) or a builder ``bnn -> AutoGuide``.
        model: ``"weight-space"`` or ``"node noise"``.
        caveat: What a user should know, one clause.
    """

    label: str
    guide: str | Callable
    model: str = "weight-space"
    caveat: str = ""


ROWS = (
    Row(
        "flat:rel=1 (default)",
        "flat:rel=1",
        caveat="fused fast path; starts at σ = each tensor's weight spread, which a run this short does not shrink "
        "(chosen on Fashion-MNIST: docs/results.md)",
    ),
    Row("autonormal:0.01", "autonormal:0.01", caveat="Pyro's AutoNormal started at the network's weights"),
    Row("bbb", "bbb", caveat="sigma = softplus(rho), analytic KL with `--elbo meanfield`"),
    Row("map", "map", caveat="point estimate: no weight uncertainty"),
    Row("mle", "mle", caveat="deterministic network, no prior"),
    Row("mc-dropout:0.1", "mc-dropout:0.1", caveat="MAP with dropout kept on at prediction"),
    Row(
        "Pyro AutoNormal, init_to_network",
        lambda bnn: AutoNormal(bnn, init_loc_fn=init_to_network(bnn), init_scale=0.01),
        caveat="any Pyro AutoGuide works; start it at the network's weights",
    ),
    Row(
        "Pyro AutoNormal, its defaults",
        partial(AutoNormal, init_scale=0.01),
        caveat="every weight starts at 0: slow to leave chance (warns)",
    ),
    Row("Pyro AutoDiagonalNormal", AutoDiagonalNormal, caveat="prior-median start; one flat Normal"),
    Row(
        "Pyro AutoLowRankMultivariateNormal",
        partial(AutoLowRankMultivariateNormal, rank=10),
        caveat="correlations (rank 10); small nets only",
    ),
    Row("mixture:4", "mixture:4", model="node noise", caveat="node-noise BNNs only (`--node-noise`)"),
)


@dataclass(frozen=True)
class Setting:
    """Sizes of the measurement."""

    epochs: int = 5
    seeds: tuple[int, ...] = (0, 1, 2)
    width: int = 50
    lr: float = 3e-3
    batch_size: int = 128
    num_samples: int = 32


def measure(row: Row, seed: int, setting: Setting, data) -> dict[str, float]:
    """Trains one guide for one seed; returns test accuracy, ECE, NLL, mean posterior sigma and seconds."""
    pyro.set_rng_seed(seed)
    spec = parse_guide(row.guide) if isinstance(row.guide, str) else None
    dropout = spec.dropout if spec is not None else 0.0
    widths = ",".join([str(setting.width)] * 3)
    net = build_model(f"mlp:{widths}", input_shape=data.input_shape, num_classes=data.num_classes, dropout=dropout)
    if row.model == "node noise":
        add_node_noise(net)
        prior = NodeNoisePrior(0.1)
    else:
        prior = NormalPrior(0.0, 1.0, select=None if spec is None or spec.random_weights else nothing)
    bnn = BNN(net, prior, Categorical(len(data.train)))
    train, _, _ = data.loaders(setting.batch_size, seed=seed)
    trainer = Trainer(bnn, row.guide, optim=pyro.optim.Adam({"lr": setting.lr}), seed=seed, progress=False)
    start = time.perf_counter()
    trainer.fit(train, setting.epochs)
    seconds = time.perf_counter() - start
    metrics = predict(bnn, trainer.guide, (data.test.x, data.test.y), num_samples=setting.num_samples).metrics()
    try:
        sigma = mean_posterior_scale(trainer.guide, bnn)[0] if bnn.sites else 0.0
    except ValueError:  # a Pyro AutoContinuous guide keeps no per-weight scale that this reads
        sigma = float("nan")
    return {
        "accuracy": metrics["accuracy"],
        "ece": metrics["ece"],
        "nll": metrics["nll"],
        "sigma": sigma,
        "seconds": seconds,
    }


def _cell(values: list[float], digits: int = 3) -> str:
    if any(v != v for v in values):
        return "n/a"
    mean = statistics.fmean(values)
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.{digits}f} ± {spread:.{digits}f}"


def run(out: Path, setting: Setting = Setting()) -> list[dict]:
    """Measures every row over the seeds and writes ``table.md`` and ``table.json`` to ``out``."""
    check_writable(out)  # before the runs: a bad --out is one line, not a lost measurement
    data = load_dataset("digits", seed=0)
    steps = len(data.loaders(setting.batch_size, seed=0)[0])
    results = []
    for row in ROWS:
        per_seed = [measure(row, seed, setting, data) for seed in setting.seeds]
        results.append({"guide": row.label, "model": row.model, "caveat": row.caveat, "per_seed": per_seed})
        print(f"{row.label}: accuracy {_cell([r['accuracy'] for r in per_seed])}", flush=True)
    command = f"python -m pyro_bnn.experiments.guide_table --out {out}"
    lines = [
        "# Which guide for which model",
        "",
        f"Command: `{command}`. Digits (scikit-learn, {len(data.train)} training images), an MLP of three hidden",
        f"layers of {setting.width} units, N(0, 1) prior, Adam {setting.lr:g}, batch {setting.batch_size},",
        f"{setting.epochs} epochs ({setting.epochs * steps} steps), {setting.num_samples} posterior samples; "
        "mean ± sd over seeds "
        f"{list(setting.seeds)}. A short run: it says how a guide behaves out of the box, not how good it gets.",
        "",
        "| model | guide | test accuracy | ECE | mean σ | seconds | caveat |",
        "|---|---|---|---|---|---|---|",
    ]
    for result in results:
        rows = result["per_seed"]
        cells = [_cell([r[key] for r in rows]) for key in ("accuracy", "ece", "sigma")]
        seconds = statistics.fmean(r["seconds"] for r in rows)
        lines.append(
            f"| {result['model']} | {result['guide']} | {' | '.join(cells)} | {seconds:.1f} | {result['caveat']} |"
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "table.json").write_text(
        json.dumps({"command": command, "setting": vars(setting), "rows": results}, indent=2)
    )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/guide-table")
    parser.add_argument("--epochs", type=int, default=Setting.epochs)
    args = parser.parse_args(argv)
    run(Path(args.out), Setting(epochs=args.epochs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
