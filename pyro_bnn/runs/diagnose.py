"""Posterior diagnostics of a saved run: what ``pyro-bnn diagnose DIR`` does.

Each part is chosen by an option and writes its figures into the run folder; all numbers go to
``diagnostics.json`` there (parts already in the file from an earlier call are kept unless re-run):

- ``slices``: conditional likelihood slices of ``slices`` sampled weights per weight tensor of the point network
  (the deterministic network, or the posterior mean/median of a BNN) over the first ``slice_images`` training
  images, and the fraction with a flat plateau per layer (``plateau_fractions.png``, ``slice.png``: one slice with
  a plateau, or the first slice when none has one);
- ``pruning``: test error of the posterior predictive with the lowest |mu|/sigma or |mu| weights set to zero at
  0/25/50/75/95 % (``pruning.png``, and the Markdown table in the JSON);
- ``shape``: draws of every random tensor exported to ArviZ with the test log-likelihood, normality scores of the
  weight marginals (per site, means over its scalars: signed ``skewness`` and ``excess_kurtosis``, ``ks_distance``
  and ``mean_abs_skewness``), PSIS-LOO and ``marginals.png``;
- ``nuts``: a NUTS reference for small classifiers (at most :data:`MAX_NUTS_PARAMETERS` random scalars) against the
  run's guide: r-hat, ESS and the distance between the two predictive distributions on the test set;
- weight statistics recorded during training (``weight_stats.json``), when present, are always plotted
  (``weight_stats.png``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pyro_bnn._io import write_json_atomically
from pyro_bnn.checks import Settings, positive_int
from pyro_bnn.data import DatasetName, Task
from pyro_bnn.data.seeding import MAX_SEED, check_seed
from pyro_bnn.guides import Capability, families_with, parse_guide
from pyro_bnn.guides.mixture import samples_for_components
from pyro_bnn.runs import runs
from pyro_bnn.runs.config import DEFAULT_NUM_SAMPLES, RunConfig
from pyro_bnn.runs.evaluate import Evaluation, load_evaluation, read_run

MAX_NUTS_PARAMETERS = 5_000
"""Random scalars above which ``nuts`` is refused: NUTS on a network's full posterior is a reference for small
networks (tanh-small on moons has 57), not something that mixes on millions of weights."""


@dataclass(frozen=True)
class DiagnoseOptions(Settings):
    """What to compute (checked when made: at least one part, counts >= 1, a seed >= 0).

    Attributes:
        slices: Weights sampled per weight tensor for the likelihood slices (None: no slices).
        slice_images: Training images the slices sum the log-likelihood over (the paper: 6 000).
        pruning: Compute the pruning table.
        shape: Export to ArviZ and score the marginals' shape.
        nuts: Run the NUTS reference.
        num_samples: Posterior samples for pruning, shape and the NUTS comparison; None (the default): 100, rounded
            up to a multiple of a mixture guide's K (102 for ``mixture:3``), or every draw of a sampled run
            (``pyro-bnn sample``: chains x draws).
        nuts_chains: NUTS chains.
        nuts_samples: NUTS draws per chain after warm-up.
        nuts_warmup: NUTS warm-up iterations per chain.
        seed: Seeds the sampled weights and the draws.
    """

    slices: int | None = None
    slice_images: int = 6_000
    pruning: bool = False
    shape: bool = False
    nuts: bool = False
    num_samples: int | None = None
    nuts_chains: int = 4
    nuts_samples: int = 300
    nuts_warmup: int = 300
    seed: int = 0

    def check(self) -> DiagnoseOptions:
        """One-line errors for bad values, before anything is loaded; returns self (called when made: older
        callers' explicit ``check()`` stays harmless)."""
        for name in ("slices", "slice_images", "num_samples", "nuts_chains", "nuts_samples", "nuts_warmup"):
            value = getattr(self, name)
            if value is None and name in ("slices", "num_samples"):
                continue
            positive_int(value, name)  # the field's name, which the CLI spells as its flag (Verb.spell_flags)
        check_seed(self.seed)  # torch.manual_seed and pyro.set_rng_seed take it (at most 2**32 - 1)
        if self.nuts:
            from pyro_bnn.diagnostics.nuts import CHAIN_SEED_STRIDE  # here: NUTS's imports are slow, rarely needed

            # chain c runs under seed * CHAIN_SEED_STRIDE + c, which pyro.set_rng_seed must take too
            top = (MAX_SEED - self.nuts_chains + 1) // CHAIN_SEED_STRIDE
            if self.seed > top:
                raise ValueError(
                    f"seed={self.seed} is too large for {self.nuts_chains} NUTS chains, which run under seed * "
                    f"{CHAIN_SEED_STRIDE} + chain (at most {MAX_SEED}); pass a seed in [0, {top}]"
                )
        if not (self.slices or self.pruning or self.shape or self.nuts):
            raise ValueError("nothing to diagnose: pass --slices N, --pruning, --shape and/or --nuts")
        return self


def _check_guide(config: RunConfig, options: DiagnoseOptions, *, sampled: bool) -> None:
    """Refuses parts the run's guide or task cannot give, from its config and checkpoint (before any data is loaded);
    ``sampled``: the run holds SG-MCMC draws (``pyro-bnn sample``), not a guide."""
    if sampled and (options.pruning or options.nuts or options.slices):
        raise ValueError(
            "--pruning and --nuts need a guide with a Normal scale per weight and --slices a point network (a "
            "posterior median), but the run holds SG-MCMC draws (pyro-bnn sample); --shape takes them"
        )
    dataset = DatasetName(config.dataset)
    if options.nuts and dataset.task is not Task.CLASSIFICATION:
        # NUTS itself would run (minutes), then the comparison of class probabilities crashed on a regression run
        raise ValueError(
            f"--nuts compares class probabilities (predictive KL, W1, accuracy), so it needs a classifier, but "
            f"{dataset.value!r} is a regression run"
        )
    guide = parse_guide(config.guide)
    if (options.pruning or options.nuts) and not guide.offers(Capability.NORMAL_SCALES):
        names = ", ".join(families_with(Capability.NORMAL_SCALES))
        raise ValueError(
            f"--pruning and --nuts need a guide with a Normal scale per weight ({names}), but the run used "
            f"{config.guide!r}"
        )
    if options.shape and not guide.offers(Capability.RANDOM):
        raise ValueError(f"--shape needs posterior draws, but the run used the point-estimate guide {config.guide!r}")


def _check_size(evaluation: Evaluation, options: DiagnoseOptions) -> None:
    if options.nuts:
        size = evaluation.bnn.num_random_parameters()
        if size > MAX_NUTS_PARAMETERS:
            raise ValueError(
                f"--nuts is a reference for small Bayesian networks with a mean-field guide (at most "
                f"{MAX_NUTS_PARAMETERS} random scalars); this run has {size} with guide {evaluation.config.guide!r}"
            )


def diagnose_run(
    run_dir: str | os.PathLike, options: DiagnoseOptions, *, device: str | None = None, progress: bool = False
) -> dict[str, Any]:
    """Runs the chosen diagnostics on a saved run and writes their figures and ``diagnostics.json``.

    Returns:
        What ``diagnostics.json`` holds after this call.

    Raises:
        ValueError: a bad option, or a part the run cannot have (pruning of a deterministic run, NUTS on a large
            network or a regression run), with one line, before the expensive work.
    """
    options.check()
    _, config, state = read_run(run_dir, num_samples=options.num_samples, device=device)
    sampled = runs.DRAWS in state
    if options.num_samples is None and sampled:  # every draw the chains kept (chains x draws)
        draws = next(iter(state[runs.DRAWS].values()))
        options = dataclasses.replace(options, num_samples=int(draws.shape[0] * draws.shape[1]))
    elif options.num_samples is None:  # what a prediction of the run's guide takes by default
        multiple = parse_guide(config.guide).samples_multiple
        options = dataclasses.replace(options, num_samples=samples_for_components(DEFAULT_NUM_SAMPLES, multiple))
    _check_guide(config, options, sampled=sampled)
    del state
    evaluation = load_evaluation(run_dir, num_samples=options.num_samples, device=device)
    _check_size(evaluation, options)
    out = evaluation.run_dir
    path = out / "diagnostics.json"
    report = json.loads(path.read_text()) if path.is_file() else {}
    parts = (("slices", _slices), ("pruning", _pruning), ("shape", _shape), ("nuts", _nuts))
    for name, part in parts:
        if getattr(options, name):
            report[name] = part(evaluation, options, out)  # each part saves its figure as it ends
            write_json_atomically(path, report)  # and its numbers now: an interrupted next part leaves these whole
    stats = out / "weight_stats.json"
    if stats.is_file():
        from pyro_bnn.plots import plot_weight_statistics, save_figure

        save_figure(plot_weight_statistics(json.loads(stats.read_text())), out / "weight_stats.png")
    write_json_atomically(path, report)
    return report


def _slices(evaluation: Evaluation, options: DiagnoseOptions, out: Path) -> dict[str, Any]:
    from pyro_bnn.diagnostics.plateaus import plateau_fractions
    from pyro_bnn.diagnostics.slices import point_values
    from pyro_bnn.plots import plot_likelihood_slice, plot_plateau_fractions, save_figure

    bnn, train = evaluation.bnn, evaluation.data.train
    device = evaluation.x.device
    x, y = train.x[: options.slice_images].to(device), train.y[: options.slice_images].to(device)
    values = point_values(bnn, evaluation.guide if bnn.sites else None)
    start = time.perf_counter()
    summaries = plateau_fractions(bnn.net, bnn.likelihood, x, y, values, per_layer=options.slices, seed=options.seed)
    seconds = time.perf_counter() - start
    save_figure(plot_plateau_fractions(summaries), out / "plateau_fractions.png")
    examples = [pair for summary in summaries.values() for pair in summary.examples(1)]
    if not examples:
        examples = [pair for summary in summaries.values() for pair in summary.examples(1, flagged=False)]
    if examples:
        slice_, plateau = examples[0]
        save_figure(plot_likelihood_slice(slice_, plateau=plateau or False), out / "slice.png")
    return {
        "images": len(x),
        "weights_per_layer": options.slices,
        "seconds": seconds,
        "layers": {
            name: {
                "sampled": s.num_sampled,
                "with_plateau": s.num_flagged,
                "fraction": s.fraction,
                "open_plateaus": s.num_open,
                "median_tv_distance": float(s.tv_distances.median()) if s.num_sampled else None,
            }
            for name, s in summaries.items()
        },
        "figure_slice": None if not examples else {"name": examples[0][0].name, "index": list(examples[0][0].index)},
    }


def _pruning(evaluation: Evaluation, options: DiagnoseOptions, out: Path) -> dict[str, Any]:
    from pyro_bnn.diagnostics.pruning import format_pruning_table, pruning_table
    from pyro_bnn.plots import plot_pruning, save_figure

    rows = pruning_table(
        evaluation.bnn,
        evaluation.guide,
        (evaluation.x, evaluation.y),
        num_samples=options.num_samples,
        seed=options.seed,
    )
    save_figure(plot_pruning(rows), out / "pruning.png")
    return {"num_samples": options.num_samples, "rows": rows, "table": format_pruning_table(rows)}


def _shape(evaluation: Evaluation, options: DiagnoseOptions, out: Path) -> dict[str, Any]:
    from pyro_bnn.diagnostics import arviz_compat
    from pyro_bnn.diagnostics.arviz_export import draw_samples, normality_scores, to_inference_data
    from pyro_bnn.plots import plot_marginals, save_figure

    torch.manual_seed(options.seed)
    samples = draw_samples(evaluation.bnn, evaluation.guide, options.num_samples)
    scores = normality_scores(samples)
    # PSIS-LOO of the points the posterior was conditioned on: the training set's first 2 000 (on test points,
    # elpd_loo would estimate nothing; their log predictive density needs no leave-one-out).
    train = evaluation.data.train
    data = (train.x[:2000].to(evaluation.x.device), train.y[:2000].to(evaluation.x.device))
    inference = to_inference_data(evaluation.bnn, samples, data, max_scalars_per_site=8)
    loo = arviz_compat.loo(inference)  # either ArviZ generation
    save_figure(plot_marginals(samples), out / "marginals.png")
    return {
        "num_samples": options.num_samples,
        "normality": {site: _normality_summary(score) for site, score in scores.items()},
        "loo": {"elpd_loo": loo.elpd, "p_loo": loo.p, "train_points": len(data[0])},
    }


def _normality_summary(score: dict[str, Any]) -> dict[str, float]:
    """One site's :func:`~pyro_bnn.diagnostics.normality.normality_scores` (tensors of the site's shape) as
    means over its scalars: ``skewness`` and ``excess_kurtosis`` signed (two separated modes read near -2, heavy
    tails positive; an absolute mean read a bimodal site as +2, heavy-tailed), ``ks_distance`` (>= 0 anyway), and
    ``mean_abs_skewness`` (scalars skewed opposite ways cancel in the signed mean, not here)."""
    summary = {key: float(value.double().mean()) for key, value in score.items() if isinstance(value, torch.Tensor)}
    summary["mean_abs_skewness"] = float(score["skewness"].double().abs().mean())
    return summary


def _nuts(evaluation: Evaluation, options: DiagnoseOptions, out: Path) -> dict[str, Any]:
    from pyro_bnn.diagnostics.arviz_export import convergence_summary, to_inference_data
    from pyro_bnn.diagnostics.nuts import predictive_distance, run_nuts
    from pyro_bnn.predict import predict

    bnn, train = evaluation.bnn, evaluation.data.train
    if bnn.likelihood.dataset_size != len(train):
        raise ValueError("NUTS needs the run's whole training set as the likelihood's data")
    start = time.perf_counter()
    samples = run_nuts(
        bnn,
        train.x.to(evaluation.x.device),
        train.y.to(evaluation.x.device),
        num_chains=options.nuts_chains,
        num_samples=options.nuts_samples,
        warmup=options.nuts_warmup,
        seed=options.seed,
    )
    seconds = time.perf_counter() - start
    convergence = convergence_summary(to_inference_data(bnn, samples))
    flat = {name: value.reshape(-1, *value.shape[2:]) for name, value in samples.items()}
    test = (evaluation.x, evaluation.y)
    reference = predict(bnn, flat, test)
    ours = predict(bnn, evaluation.guide, test, num_samples=reference.probs.shape[0])
    return {
        "chains": options.nuts_chains,
        "draws_per_chain": options.nuts_samples,
        "warmup": options.nuts_warmup,
        "seconds": seconds,
        "convergence_unaligned": convergence,
        "predictive_distance": {
            kind: float(predictive_distance(reference.probs, ours.probs, kind=kind).mean()) for kind in ("kl", "w1")
        },
        "accuracy": {"nuts": reference.metrics()["accuracy"], "guide": ours.metrics()["accuracy"]},
    }
