"""NUTS as a reference posterior for a small BNN, against variational inference with the default guide.

``python -m pyro_bnn.reproduce.studies.nuts_reference`` (classification, the default) fits the priors paper's
``tanh-small`` net (2-5-5-2, tanh, 57 weights, every weight and bias ~ N(0, 1)) to two moons (``load_dataset(
"moons", seed=0)``: 640 training, 200 test points) twice:

* NUTS (:func:`pyro_bnn.diagnostics.nuts.run_nuts`): 4 chains of 250 warm-up and 250 kept iterations, each from its
  own prior draw, full-batch likelihood, diagonal mass matrix, maximum tree depth 8, one chain after another (on the
  shared 2-core machine two worker processes made each gradient 2.3x slower, more than they gained);
* VI: the ``flat:rel=1`` guide (the default when this comparison was made) trained by
  :class:`~pyro_bnn.infer.Trainer` (batch 64, Adam 1e-2 with a cosine decay to 0 over 1000 epochs, 8 particles),
  which reaches a flat ELBO well before the end.

It writes ``results/diagnostics/nuts-moons.md`` and ``.json`` (and two figures) with: r-hat and ESS of the weights
from ArviZ, before and after aligning the chains' hidden units (:func:`~pyro_bnn.diagnostics.nuts.
align_hidden_units`), and of the test predictions (which no relabelling changes); test accuracy / NLL of both
posteriors (and of each chain); per-point KL and W1 between the two predictives, with NUTS-vs-NUTS (between
chains) and VI-vs-VI (two independent draw sets) baselines; and a per-weight comparison of the marginals after
alignment (``|mu_VI - mu_NUTS| / sd_NUTS`` and ``sd_VI / sd_NUTS``).

``--task regression`` does the same for a one-hidden-layer net (``mlp:16``, tanh, 49 weights) on a thinned cubic
set (100 training points on ``[-3, -1) ∪ [1, 3)``, targets divided by 10 so the noise sd is 0.2; 401 test points
on ``[-4, 4]``) and writes ``nuts-cubic.md`` / ``.json``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pyro
import torch

from pyro_bnn._io import write_json_atomically, write_text_atomically
from pyro_bnn.bnn import BNN
from pyro_bnn.commands.verb import ArgumentParser, non_negative_int_arg, positive_int_arg
from pyro_bnn.data import TensorSplit, load_dataset
from pyro_bnn.diagnostics.arviz_export import (
    draw_samples,
)
from pyro_bnn.diagnostics.nuts import (
    run_nuts,
)
from pyro_bnn.guides import parse_guide
from pyro_bnn.infer import ObjectiveOptions, RuntimeOptions, Trainer
from pyro_bnn.likelihoods import Categorical, Gaussian
from pyro_bnn.models import build_model
from pyro_bnn.plots import save_figure
from pyro_bnn.plots.posterior_shape import plot_marginals, plot_vi_vs_nuts
from pyro_bnn.plots.regression import plot_regression
from pyro_bnn.predict import predict
from pyro_bnn.priors import NormalPrior
from pyro_bnn.reproduce.studies.nuts_reference.comparison import (
    classification_predictive,
    flat_chains,
    regression_predictive,
    weight_space,
)
from pyro_bnn.reproduce.studies.nuts_reference.report import NOTES, markdown_report
from pyro_bnn.runs.run_folder import check_writable

REGRESSION_TARGET_SCALE = 10.0
"""The cubic set's targets are divided by this (x^3 reaches 27; the N(0, 1) prior's net would strain to)."""


@dataclass
class Settings:
    """Everything a run depends on (written to the JSON)."""

    task: str = "classification"
    seed: int = 0
    num_chains: int = 4
    num_samples: int = 250
    warmup: int = 250
    max_tree_depth: int = 8
    workers: int = 1
    vi_epochs: int = 1000
    vi_lr: float = 1e-2
    vi_batch_size: int = 64
    vi_particles: int = 8
    vi_draws: int = 1600
    guide: str = "flat:rel=1"


# ------------------------------------------------------------------------------------------------- set-up
def _scaled(part: TensorSplit) -> TensorSplit:
    return TensorSplit(part.x, part.y / REGRESSION_TARGET_SCALE)


def _problem(settings: Settings):
    """Data splits, a model builder and the model string of the task."""
    if settings.task == "classification":
        data = load_dataset("moons", seed=settings.seed)
        model, activation = "tanh-small", None

        def likelihood(n):
            return Categorical(n)
    else:
        data = load_dataset("cubic", seed=settings.seed, step=0.04, test_step=0.02)
        data = dataclasses.replace(data, **{part: _scaled(getattr(data, part)) for part in ("train", "val", "test")})
        model, activation = "mlp:16", "tanh"

        def likelihood(n):
            return Gaussian(n, scale=2.0 / REGRESSION_TARGET_SCALE)

    def build() -> BNN:
        torch.manual_seed(settings.seed)
        net = build_model(model, input_shape=data.input_shape, num_classes=data.output_dim, activation=activation)
        return BNN(net, NormalPrior(0.0, 1.0), likelihood(len(data.train)))

    return data, build, model


def _fit_vi(bnn: BNN, data, settings: Settings):
    train, _, _ = data.loaders(batch_size=settings.vi_batch_size, seed=settings.seed)
    epochs = settings.vi_epochs
    trainer = Trainer(
        bnn,
        parse_guide(settings.guide).build,
        optim=pyro.optim.Adam({"lr": settings.vi_lr}),
        lr_scheduler=lambda optimizer: torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs),
        objective=ObjectiveOptions(num_particles=settings.vi_particles),
        runtime=RuntimeOptions(seed=settings.seed, progress=False),
    )
    history = trainer.fit(train, epochs)
    losses = [record["loss"] for record in history]
    window = max(1, min(50, len(losses) // 4))
    curve = {
        "loss_first_window": sum(losses[:window]) / window,
        "loss_mid_window": sum(losses[len(losses) // 2 : len(losses) // 2 + window]) / window,
        "loss_last_window": sum(losses[-window:]) / window,
        "window_epochs": window,
    }
    return trainer.guide, curve


def _marginal_indices(bnn: BNN, per_site: int = 2) -> list[tuple[str, tuple[int, ...]]]:
    """The first ``per_site`` scalars of every weight site (row-major), as ``(site, index)`` pairs."""
    chosen = []
    for site in bnn.sites:
        for flat in range(min(per_site, math.prod(site.shape))):
            chosen.append((site.name, tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), site.shape))))
    return chosen


def _figures(task, bnn, guide, nuts_aligned, vi_aligned, data, nuts_pred, vi_pred, out: Path, stem: str) -> list[str]:
    written = []
    sites = bnn.site_names
    marginals = plot_marginals(
        {n: nuts_aligned[n] for n in sites},
        indices=_marginal_indices(bnn),
        comparison={n: vi_aligned[n] for n in sites},
        title="NUTS marginals after alignment (chains in colour) vs VI (grey)",
    )
    written.append(str(save_figure(marginals, out / f"{stem}-marginals.png")))
    if task == "classification":
        xs = torch.linspace(-2.0, 3.0, 60)
        ys = torch.linspace(-1.5, 2.0, 50)
        grid = torch.stack(torch.meshgrid(ys, xs, indexing="ij")[::-1], -1).reshape(-1, 2)
        flat = flat_chains({n: nuts_aligned[n] for n in sites})
        grid_nuts = predict(bnn, flat, grid).probs
        grid_vi = predict(bnn, guide, grid, num_samples=len(grid_nuts)).probs
        figure = plot_vi_vs_nuts(
            grid_nuts,
            grid_vi,
            inputs=grid,
            grid_shape=(50, 60),
            x_train=data.train.x,
            y_train=data.train.y,
            title="two moons: NUTS vs VI (flat:rel=1) predictive",
        )
    else:
        from matplotlib.figure import Figure

        figure = Figure(figsize=(11, 4), layout="constrained")
        axes = figure.subplots(1, 2, sharey=True)
        for ax, (name, pred) in zip(axes, (("NUTS", nuts_pred), ("VI", vi_pred)), strict=True):
            plot_regression(
                data.test.x,
                pred.predictive_mean(),
                pred.predictive_std(),
                data.train.x,
                data.train.y,
                data.test.y,
                title=name,
                ax=ax,
            )
    written.append(str(save_figure(figure, out / f"{stem}-predictive.png")))
    return written


# ------------------------------------------------------------------------------------------------- report
def run(settings: Settings, out: Path) -> dict:
    """Runs the whole comparison and writes ``nuts-<set>.md`` / ``.json`` and the figures into ``out``."""
    start = time.perf_counter()
    load_start = os.getloadavg()[0]
    data, build, model = _problem(settings)
    stem = "nuts-moons" if settings.task == "classification" else "nuts-cubic"
    x, y = data.train.x, data.train.y

    bnn_vi = build()
    vi_start = time.perf_counter()
    guide, curve = _fit_vi(bnn_vi, data, settings)
    vi_seconds = time.perf_counter() - vi_start

    bnn = build()
    nuts_start = time.perf_counter()
    nuts = run_nuts(
        bnn,
        x,
        y,
        num_chains=settings.num_chains,
        num_samples=settings.num_samples,
        warmup=settings.warmup,
        seed=settings.seed,
        max_tree_depth=settings.max_tree_depth,
        workers=settings.workers,
        num_threads=1,
    )
    nuts_seconds = time.perf_counter() - nuts_start
    print(
        f"NUTS: {nuts_seconds:.0f} s; "
        + "; ".join(
            f"chain {s.chain}: {s.seconds:.0f} s, {s.divergences} divergences, step {s.step_size:.4f}, "
            f"{s.evals_per_iteration:.0f} steps/iteration"
            for s in nuts.stats
        ),
        flush=True,
    )

    pyro.set_rng_seed(settings.seed)
    vi_draws = draw_samples(bnn_vi, guide, settings.vi_draws)
    weights, nuts_aligned, vi_aligned = weight_space(bnn, nuts, vi_draws, settings)
    # Predictions use the VI model's guide with the NUTS model: both nets are built the same way and only the
    # random sites differ, which both posteriors supply.
    if settings.task == "classification":
        predictive, nuts_pred, vi_pred = classification_predictive(bnn, guide, nuts, data, settings)
    else:
        predictive, nuts_pred, vi_pred = regression_predictive(bnn, guide, nuts, data, settings)
    figures = _figures(settings.task, bnn, guide, nuts_aligned, vi_aligned, data, nuts_pred, vi_pred, out, stem)
    result = {
        "problem": "tanh-small on two moons" if settings.task == "classification" else "mlp:16 (tanh) on cubic / 10",
        "settings": asdict(settings),
        "model": model,
        "num_weights": bnn.num_random_parameters(),
        "num_train": len(data.train),
        "num_test": len(data.test),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_1min": {"start": load_start, "end": os.getloadavg()[0]},
        "nuts_seconds": nuts_seconds,
        "vi_seconds": vi_seconds,
        "nuts_chains": [{**asdict(s), "evals_per_iteration": s.evals_per_iteration} for s in nuts.stats],
        "vi_curve": curve,
        "weights": weights,
        "predictive": predictive,
        "notes": NOTES,
        "figures": figures,
    }
    result["wall_seconds"] = time.perf_counter() - start
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomically(out / f"{stem}.json", result)
    write_text_atomically(out / f"{stem}.md", markdown_report(result))
    return result


def main(argv: list[str] | None = None) -> int:
    # every count is checked here, one line and exit status 2: a bad one used to fail after minutes of VI and NUTS
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=("classification", "regression"), default="classification")
    parser.add_argument("--out", default="results/diagnostics")
    parser.add_argument("--seed", type=non_negative_int_arg, default=0)
    parser.add_argument("--num-chains", type=positive_int_arg, default=Settings.num_chains)
    parser.add_argument("--num-samples", type=positive_int_arg, default=Settings.num_samples)
    parser.add_argument("--warmup", type=non_negative_int_arg, default=Settings.warmup)
    parser.add_argument("--max-tree-depth", type=positive_int_arg, default=Settings.max_tree_depth)
    parser.add_argument("--workers", type=positive_int_arg, default=Settings.workers)
    parser.add_argument("--vi-epochs", type=positive_int_arg, default=Settings.vi_epochs)
    parser.add_argument("--vi-draws", type=positive_int_arg, default=Settings.vi_draws)
    args = parser.parse_args(argv)
    with parser.refusing():
        check_writable(args.out)
    settings = Settings(
        task=args.task,
        seed=args.seed,
        num_chains=args.num_chains,
        num_samples=args.num_samples,
        warmup=args.warmup,
        max_tree_depth=args.max_tree_depth,
        workers=args.workers,
        vi_epochs=args.vi_epochs,
        vi_draws=args.vi_draws,
    )
    # The networks are tiny: one thread per process is the fastest.
    torch.set_num_threads(1)
    start = time.perf_counter()
    result = run(settings, Path(args.out))
    print(markdown_report(result))
    print(f"wall time: {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
