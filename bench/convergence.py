"""Test accuracy after the convergence test's budget, over seeds, for the training paths the benchmark times.

The setting of ``tests/convergence/test_default_guide.py``: 3FC ReLU, N(0, 1) prior, 10 000 Fashion-MNIST training
images, batch 128, Adam 1e-3, 3 epochs, accuracy on the 10 000 test images with 20 posterior samples; the default
guide's initialisation (``rel=1``). One row per path, mean and standard deviation over ``--seeds``. Writes
``bench/CONVERGENCE.md`` and ``bench/convergence.json``.

Run: ``python bench/convergence.py`` (about 10 minutes on a 2-core CPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import flags  # bench/flags.py: this script's folder is on sys.path
import pyro
import torch

from pyro_bnn import BNN
from pyro_bnn.data import load_dataset
from pyro_bnn.guides import mean_posterior_scale, parse_guide
from pyro_bnn.infer import RuntimeOptions, Trainer
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.predict import predict
from pyro_bnn.priors import NormalPrior

HERE = Path(__file__).resolve().parent

PATHS = {
    "default: flat:rel=1, fast (antithetic pair)": ("flat:rel=1", "fast", None),
    "flat:rel=1, fast-single (one shared draw)": ("flat:rel=1", "fast-single", None),
    "before #9: autonormal:rel=1, trace, torch Adam": (
        "autonormal:rel=1",
        "trace",
        lambda params: torch.optim.Adam(params, lr=1e-3),
    ),
}


def run(guide: str, elbo: str, optim, seed: int) -> dict:
    data = load_dataset("fashion-mnist", train_subset=10_000, val_size=0, seed=0)
    train, _, _ = data.loaders(128, seed=seed)
    pyro.set_rng_seed(seed)
    net = build_model("3fc", input_shape=data.input_shape, num_classes=10)
    bnn = BNN(net, NormalPrior(0.0, 1.0), Categorical(len(data.train)))
    optim = optim or pyro.optim.Adam({"lr": 1e-3})
    trainer = Trainer(
        bnn,
        parse_guide(guide).build,
        optim=optim,
        objective=elbo,
        runtime=RuntimeOptions(seed=seed, progress=False),
    )
    start = time.perf_counter()
    history = trainer.fit(train, 3)
    seconds = time.perf_counter() - start
    accuracy = predict(bnn, trainer.guide, (data.test.x, data.test.y), num_samples=20).metrics()["accuracy"]
    sigma, _ = mean_posterior_scale(trainer.guide, bnn)
    return {"seed": seed, "accuracy": accuracy, "sigma": sigma, "final_loss": history[-1]["loss"], "fit_s": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=flags.non_negative_int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", default=str(HERE))
    args = parser.parse_args()
    results = {}
    for name, (guide, elbo, optim) in PATHS.items():
        results[name] = [run(guide, elbo, optim, seed) for seed in args.seeds]
        for row in results[name]:
            print(f"{name}: {row}", flush=True)
    lines = [
        f"Command: `python bench/convergence.py --seeds {' '.join(map(str, args.seeds))}`",
        "",
        "3FC ReLU, N(0, 1) prior, 10 000 Fashion-MNIST training images, batch 128, Adam 1e-3, 3 epochs (the "
        "convergence test's setting, which asks for accuracy > 0.80 at seed 0); test accuracy on the 10 000 test "
        "images with 20 posterior samples.",
        "",
        "| path | accuracy per seed | mean ± sd | > 0.80 | mean σ | final loss | fit s (mean) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, rows in results.items():
        accuracies = [r["accuracy"] for r in rows]
        lines.append(
            f"| {name} | {', '.join(f'{a:.4f}' for a in accuracies)} | {statistics.mean(accuracies):.4f} ± "
            f"{statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0:.4f} | "
            f"{sum(a > 0.80 for a in accuracies)}/{len(accuracies)} | "
            f"{statistics.mean(r['sigma'] for r in rows):.4f} | {statistics.mean(r['final_loss'] for r in rows):.0f} | "
            f"{statistics.mean(r['fit_s'] for r in rows):.1f} |"
        )
    out = Path(args.out)
    (out / "convergence.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "CONVERGENCE.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
