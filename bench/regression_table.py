"""Homoscedastic against heteroscedastic Gaussian likelihood on three regression sets: accuracy, calibration, noise.

A 1-10-10-out tanh MLP with a N(0, 1) prior on every weight and the default flat mean-field guide
(``flat:0.01``), trained full batch with Adam (lr 0.01) for ``--steps`` steps on standardised inputs and targets.
``homoscedastic``: ``Gaussian`` with a learned noise scale (one output); ``heteroscedastic``:
``HeteroscedasticGaussian`` (two outputs, softplus scale, floor 1e-3). Scored on the test part with 200 posterior
samples, in the data's own target units: RMSE, mixture NLL, central-interval coverage at 50 / 90 / 95 %, the
quantile calibration error (levels 0.05..0.95), CRPS, sharpness (mean predictive sd), and the noise-sd error: the
mean over the test inputs of ``|sqrt(aleatoric variance) - true noise sd|`` where the truth is known.

Sets: ``cubic`` (400 points, true noise sd 2; its test grid holds the noiseless ``x^3``, so this script adds
N(0, 2^2) noise drawn with seed ``1000 + seed`` to score calibration, and the noise-sd error is taken on the
training intervals ``|x| in [1, 3)``), ``heteroscedastic`` (400 points, sd ``0.1 + 0.2 |x|``, noisy test grid)
and ``diabetes`` (354 / 88 patients, standardised; noise unknown).

Run: ``python bench/regression_table.py`` (writes ``results/regression/table.md`` and ``table.json``).
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
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader, diabetes_regression, heteroscedastic_noise_sd, load_dataset
from pyro_bnn.data.seeding import seeded_generator
from pyro_bnn.evaluation import regression_calibration, regression_metrics
from pyro_bnn.guides import parse_guide
from pyro_bnn.infer import RuntimeOptions, Trainer
from pyro_bnn.likelihoods import Gaussian, HeteroscedasticGaussian
from pyro_bnn.predict import predict
from pyro_bnn.priors import NormalPrior

DATASETS = ("cubic", "heteroscedastic", "diabetes")
LIKELIHOODS = ("homoscedastic", "heteroscedastic")
CUBIC_NOISE_SD = 2.0
COLUMNS = (
    ("rmse", "RMSE"),
    ("nll", "NLL"),
    ("coverage_50", "cov 50 %"),
    ("coverage_90", "cov 90 %"),
    ("coverage_95", "cov 95 %"),
    ("qce", "QCE"),
    ("crps", "CRPS"),
    ("sharpness", "sharpness"),
    ("noise_sd_error", "noise-sd MAE"),
)
COMMAND = "python bench/regression_table.py"


def _network(inputs: int, outputs: int, hidden: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, outputs)
    )


def _data(name: str, seed: int):
    """Train and test tensors, the test inputs' true noise sd (or None) and a mask of where it is compared."""
    if name == "diabetes":
        data = diabetes_regression(seed=seed)
        return data.x_train, data.y_train, data.x_test, data.y_test, None, None
    splits = load_dataset(name, seed=seed)
    x_test, y_test = splits.test.x, splits.test.y
    true_sd, mask = None, None
    if name == "cubic":
        generator = seeded_generator(1000 + seed)
        y_test = y_test + CUBIC_NOISE_SD * torch.randn(y_test.shape, generator=generator)
        true_sd = torch.full_like(y_test, CUBIC_NOISE_SD)
        mask = ((x_test.abs() >= 1) & (x_test.abs() < 3)).squeeze(1)
    elif name == "heteroscedastic":
        true_sd = heteroscedastic_noise_sd(x_test.double()).float()
        mask = torch.ones(len(x_test), dtype=torch.bool)
    return splits.train.x, splits.train.y, x_test, y_test, true_sd, mask


def run_cell(
    name: str,
    likelihood_name: str,
    seed: int,
    *,
    steps: int,
    hidden: int,
    num_samples: int,
    lr: float = 0.01,
    prior_scale: float = 1.0,
) -> dict:
    """Trains one model and scores it; returns the metrics (floats) and the training time."""
    x_train, y_train, x_test, y_test, true_sd, mask = _data(name, seed)
    x_mean, x_sd = x_train.mean(0), x_train.std(0)
    y_mean, y_sd = y_train.mean(0), y_train.std(0)
    xs, ys = (x_train - x_mean) / x_sd, (y_train - y_mean) / y_sd
    pyro.clear_param_store()
    torch.manual_seed(seed)
    n = len(xs)
    if likelihood_name == "homoscedastic":
        likelihood, outputs = Gaussian(n, scale=0.5, learn_scale=True), 1
    else:
        likelihood, outputs = HeteroscedasticGaussian(n), 2
    bnn = BNN(_network(xs.shape[1], outputs, hidden), NormalPrior(0.0, prior_scale), likelihood)
    trainer = Trainer(
        bnn,
        parse_guide("flat:0.01").build,
        optim=pyro.optim.Adam({"lr": lr}),
        runtime=RuntimeOptions(seed=seed, progress=False, device="cpu"),
    )
    start = time.perf_counter()
    trainer.fit(BatchLoader(xs, ys, batch_size=n, shuffle=False), epochs=steps)
    train_s = time.perf_counter() - start
    prediction = predict(bnn, trainer.guide, (x_test - x_mean) / x_sd, num_samples=num_samples)
    # back to the data's units: y = mean + sd * y_standardised
    means = prediction.means.double() * float(y_sd) + float(y_mean)
    scale = prediction.noise_scale.double() * float(y_sd)
    targets = y_test.double()
    row = regression_metrics(means, scale, targets)
    del row["coverage"]
    row.update(regression_calibration(means, scale, targets))
    if true_sd is not None:
        aleatoric_sd = prediction.variance_split().aleatoric_sd * float(y_sd)
        row["noise_sd_error"] = float((aleatoric_sd - true_sd.double())[mask].abs().mean())
    row["train_s"] = train_s
    return row


def _format(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def table(results: dict, seeds: list[int]) -> str:
    header = "| data | likelihood | " + " | ".join(title for _, title in COLUMNS) + " |"
    lines = [header, "|" + "---|" * (len(COLUMNS) + 2)]
    for name in DATASETS:
        for likelihood_name in LIKELIHOODS:
            rows = results[name][likelihood_name]
            cells = []
            for key, _ in COLUMNS:
                values = [row[key] for row in rows if key in row]
                cells.append(_format(values) if values else "–")
            lines.append(f"| {name} | {likelihood_name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=flags.non_negative_int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=flags.positive_int, default=3000)
    parser.add_argument("--hidden", type=flags.positive_int, default=10)
    parser.add_argument("--num-samples", type=flags.positive_int, default=200)
    parser.add_argument("--out", type=Path, default=Path("results/regression"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict = {name: {lik: [] for lik in LIKELIHOODS} for name in DATASETS}
    for name in DATASETS:
        for likelihood_name in LIKELIHOODS:
            for seed in args.seeds:
                row = run_cell(
                    name, likelihood_name, seed, steps=args.steps, hidden=args.hidden, num_samples=args.num_samples
                )
                results[name][likelihood_name].append({"seed": seed, **row})
                print(name, likelihood_name, seed, {k: round(v, 4) for k, v in row.items()}, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    settings = {
        "seeds": args.seeds,
        "steps": args.steps,
        "hidden": args.hidden,
        "num_samples": args.num_samples,
        "torch": torch.__version__,
        "pyro": pyro.__version__,
    }
    (args.out / "table.json").write_text(json.dumps({"settings": settings, "results": results}, indent=2) + "\n")
    seeds = ", ".join(map(str, args.seeds))
    text = (
        "# Homoscedastic against heteroscedastic Gaussian likelihood\n\n"
        f"Command: `{COMMAND}`"
        + (
            ""
            if (args.seeds, args.steps, args.hidden, args.num_samples) == ([0, 1, 2], 3000, 10, 200)
            else f" `--seeds {' '.join(map(str, args.seeds))} --steps {args.steps} --hidden {args.hidden} "
            f"--num-samples {args.num_samples}`"
        )
        + "\n\n"
        f"1-{args.hidden}-{args.hidden}-out tanh MLP, N(0, 1) prior, flat mean-field guide (`flat:0.01`), Adam 0.01, "
        f"{args.steps} full-batch steps on standardised data, {args.num_samples} posterior samples; mean ± sd over "
        f"seeds {seeds} (torch {torch.__version__}, pyro {pyro.__version__}, CPU). Metrics in the data's target "
        "units (diabetes: standardised). Coverage: share of test targets in the central interval of the mixture "
        "predictive; QCE: mean |observed - expected| frequency of PIT <= p over p = 0.05..0.95; sharpness: mean "
        "predictive sd; noise-sd MAE: mean |predicted aleatoric sd - true noise sd| over the test inputs "
        "(cubic: sd 2 on |x| in [1, 3); heteroscedastic: 0.1 + 0.2|x| on [-4, 4]). Cubic's test targets are its "
        "noiseless grid plus N(0, 2²) noise (seed 1000 + seed), so calibration is scored on noisy targets; "
        "its grid includes the gap (-1, 1) and the extrapolation to ±4.\n\n" + table(results, args.seeds) + "\n"
    )
    (args.out / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
