"""A Laplace approximation around a saved MAP run: what ``pyro-bnn laplace`` does.

The run folder is read as ``pyro-bnn evaluate`` reads it (the model from the config stored in its checkpoint,
:func:`~pyro_bnn.runs.evaluate.read_run`); :func:`check_laplace_run` refuses, before any data is loaded, a
run whose guide is not a point estimate and a model the approximation cannot take. :func:`laplace_run` then fits
:func:`pyro_bnn.laplace.fit_laplace` on the run's training split, scores its test split with the metrics
``evaluate`` reports, and writes ``RUN/laplace-<subset>-<structure>.json``: one file per subset and structure, which
a second fit replaces only when asked to (``overwrite``).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pyro_bnn._io import write_json_atomically
from pyro_bnn.data import DatasetName, DatasetSplits, Task
from pyro_bnn.evaluation import regression_metrics
from pyro_bnn.guides import GuideKind, parse_guide
from pyro_bnn.infer.annealing import parse_kl_schedule, step_progress
from pyro_bnn.laplace import LaplaceOptions, Link, Predictive, fit_laplace, import_laplace, predict_laplace
from pyro_bnn.laplace.fit import prior_start
from pyro_bnn.likelihoods import KLScale
from pyro_bnn.predict import Prediction
from pyro_bnn.priors import NormalPrior
from pyro_bnn.runs import runs
from pyro_bnn.runs.config import RunConfig, resolve_device
from pyro_bnn.runs.evaluate import read_run
from pyro_bnn.runs.run_folder import CHECKPOINT
from pyro_bnn.spec.values import enum_member


@dataclass(frozen=True)
class LaplaceRun:
    """A run folder made ready for :func:`laplace_run`, checked and read without its data.

    Attributes:
        run_dir: The run folder.
        config: The config its checkpoint was trained with (``num_samples`` and ``device`` as asked).
        state: The checkpoint.
        options: The approximation's choices.
        predictive: ``glm`` or ``mc``.
        link: The GLM's link for a classifier, ``probit`` or ``mc`` (``probit``, unused, where it does not apply).
    """

    run_dir: Path
    config: RunConfig
    state: dict[str, Any]
    options: LaplaceOptions
    predictive: Predictive
    link: Link

    @property
    def out_file(self) -> Path:
        """``RUN/laplace-<subset>-<structure>.json``."""
        return self.run_dir / f"laplace-{self.options.subset.value}-{self.options.structure.value}.json"


def check_laplace_run(
    run_dir: str | os.PathLike,
    options: LaplaceOptions,
    *,
    predictive: Predictive | str = Predictive.GLM,
    link: Link | str | None = None,
    num_samples: int | None = None,
    device: str | None = None,
    overwrite: bool = False,
) -> LaplaceRun:
    """Reads and checks a run folder for a Laplace approximation; loads no data.

    Args:
        run_dir: The run folder.
        options: The approximation's choices.
        predictive: ``glm`` or ``mc``.
        link: The GLM predictive's link for a classifier (None: ``probit``); refused where it does not apply (a
            regression run, the ``mc`` predictive).
        num_samples: Draws of the predictive (None: the run's); refused where nothing is drawn (a classifier's
            GLM predictive with the ``probit`` link).
        device: Where to fit (None: the run's device).
        overwrite: Replace the file of an earlier fit of the same subset and structure
            (:attr:`LaplaceRun.out_file`); without it such a file is refused.

    Raises:
        FileNotFoundError: not a run folder, or no checkpoint.
        FileExistsError: :attr:`LaplaceRun.out_file` exists and ``overwrite`` is not set.
        ValueError: the run's guide is not a point estimate with random weights (``map``); its model has node noise,
            a hyperprior, the ``paper`` KL scale, a temperature other than 1, a KL schedule (``kl_anneal``) whose
            weight is not 1 throughout the epoch its weights come from, or a prior other than a Normal without
            ``prior_precision``; a bad option, or one that does not apply to the run or the predictive (one line
            each).
        ImportError: laplace-torch is not installed (naming the extra).
    """
    predictive = enum_member(Predictive, predictive, "Laplace predictive")
    if link is not None:
        link = enum_member(Link, link, "GLM link")
    run, config, state = read_run(run_dir, num_samples=num_samples, device=device)
    _check_applies(run, config, predictive, link, num_samples)
    guide = parse_guide(config.guide)
    if runs.DRAWS in state:
        raise ValueError(f"{run} holds SG-MCMC draws ('pyro-bnn sample'); Laplace is fitted around a MAP run")
    if guide.kind is not GuideKind.MAP:  # the curvature is the log joint's, at its mode
        raise ValueError(
            f"{run} was trained with guide {config.guide!r}: a Laplace approximation is fitted around the MAP "
            "(the mode of the posterior, prior included); train the run with --guide map"
        )
    if config.node_noise:
        raise ValueError(f"{run} is a node-noise run; Laplace covers weight-space models only")
    if config.kl_scale != KLScale.DATASET.value:
        raise ValueError(f"{run} was trained with kl_scale {config.kl_scale!r}; Laplace needs the full-data objective")
    if config.temperature != 1.0:
        raise ValueError(
            f"{run} was trained at temperature {config.temperature:g}; Laplace fits the curvature of the untempered "
            "posterior, so its MAP must be untempered too (temperature 1)"
        )
    _check_final_kl_weight(run, config, state)
    bnn = runs.meta_bnn(config)
    if bnn.hyper_site_names:
        raise ValueError(f"{run} has the hierarchical prior {config.prior!r}; Laplace needs a fixed prior")
    if options.prior_precision is None and not isinstance(bnn.prior, NormalPrior):
        raise ValueError(
            f"{run} has the prior {config.prior!r}: the prior precision is read from a Normal prior; pass "
            "--prior-precision"
        )
    import_laplace()
    laplace = LaplaceRun(run, config, state, options, predictive, Link.PROBIT if link is None else link)
    if laplace.out_file.exists() and not overwrite:
        raise FileExistsError(
            f"{laplace.out_file} already holds a Laplace fit of this run (subset {options.subset.value}, structure "
            f"{options.structure.value}); pass --overwrite to replace it, or another --subset or --structure"
        )
    return laplace


def _check_final_kl_weight(run: Path, config: RunConfig, state: dict[str, Any]) -> None:
    """Refuses a run whose KL schedule (``--kl-anneal``) weighted the prior by other than 1 at a step of the epoch its
    checkpoint's weights come from: the last one, or with early stopping (``--patience``, whose best epoch is
    restored) any from the best one on. A KL weight w is the tempered posterior at T = w (the trainer's KL weight is
    schedule x T), whose mode is not the posterior's; a warm-up that ended before that epoch is fine.

    The steps are the trainer's (:func:`~pyro_bnn.infer.annealing.step_progress`), their number per epoch the
    checkpoint's ``global_step / epoch``."""
    epochs, steps = state.get("epoch"), state.get("global_step")
    if not (isinstance(epochs, int) and epochs > 0 and isinstance(steps, int) and steps > 0):
        epochs, steps = config.epochs, config.epochs  # no step count: one weight per epoch, at its start
    num_steps = max(1, round(steps / epochs))
    first = epochs
    if config.patience:  # EarlyStopping(restore_best=True) keeps its best epoch's weights in its state
        best = [e.get("best_epoch") for e in state.get("callbacks", {}).values() if isinstance(e, dict)]
        first = min([epochs, *(b for b in best if isinstance(b, int) and b > 0)])
    schedule = parse_kl_schedule(config.kl_anneal)
    for epoch in range(first - 1, epochs):
        for step in range(1, num_steps + 1):
            weight = schedule(step_progress(epoch, step, num_steps))
            if not math.isclose(weight, 1.0, rel_tol=1e-9):
                best = f" (its best, restored epoch: {first})" if first < epochs else ""
                raise ValueError(
                    f"{run} was trained with --kl-anneal {config.kl_anneal}: its KL weight at step {step}/{num_steps} "
                    f"of epoch {epoch + 1}/{epochs}{best} is {weight:.6g}, not 1; a KL weight w trains the posterior "
                    "tempered at T = w, and Laplace fits the curvature of the untempered one: train the MAP with a "
                    "warm-up that ends before its final epoch, or with --kl-anneal constant (weight 1)"
                )


def _check_applies(
    run: Path, config: RunConfig, predictive: Predictive, link: Link | None, num_samples: int | None
) -> None:
    """Refuses a ``link`` or ``num_samples`` that the run's task and the predictive would ignore (one line naming the
    option, its value and where it applies)."""
    regression = DatasetName(config.dataset).task is Task.REGRESSION
    if link is not None and regression:
        raise ValueError(
            f"--link {link.value} applies to classifiers only: {run} is a regression run (dataset "
            f"{config.dataset!r}), whose GLM predictive draws Gaussian outputs with no link"
        )
    if link is not None and predictive is Predictive.MC:
        raise ValueError(
            f"--link {link.value} applies to the GLM predictive only (--predictive glm); --predictive mc runs weight "
            "draws through the network"
        )
    probit = not regression and predictive is Predictive.GLM and link in (None, Link.PROBIT)
    if num_samples is not None and probit:
        raise ValueError(
            f"--num-samples {num_samples} does not apply to a classifier's GLM predictive with the probit link, "
            "which draws nothing (one deterministic set of probabilities); it applies with --link mc or "
            "--predictive mc"
        )


def laplace_run(laplace: LaplaceRun, *, data: DatasetSplits | None = None) -> dict[str, Any]:
    """Fits the Laplace approximation of a checked run, scores its test split and writes
    :attr:`LaplaceRun.out_file`.

    Args:
        laplace: The run, as :func:`check_laplace_run` returned it.
        data: The run's data, if already loaded (``runs.load_data(laplace.config)``).

    Returns:
        The record written: ``metrics`` (classification: accuracy, NLL, Brier, ECE, MCE; regression: RMSE, NLL,
        coverage) and ``map_metrics`` (the same of the MAP network), ``prior_precision`` (a float, or one per
        parameter tensor), ``log_marginal_likelihood``, ``fit_time_s``, ``predict_time_s``, ``options`` (its
        ``link`` None where no link applies, its ``initial_prior_precision`` the one the fit started from),
        ``num_samples`` (None where nothing is drawn), ``num_train``, ``device``.
    """
    config = laplace.config
    device = resolve_device(config.device)
    data = data if data is not None else runs.load_data(config)
    bnn, guide = runs.restore(config, data, laplace.run_dir / CHECKPOINT, device, laplace.state)
    train, _, _ = data.loaders(config.batch_size, shuffle=False, device=device)
    start = time.perf_counter()
    posterior = fit_laplace(bnn, guide, train, laplace.options)
    fitted = time.perf_counter()
    test = (data.test.x.to(device), data.test.y.to(device))
    regression = DatasetName(config.dataset).task is Task.REGRESSION
    prediction = predict_laplace(
        posterior,
        test,
        predictive=laplace.predictive,
        link=None if regression or laplace.predictive is Predictive.MC else laplace.link,  # None where none applies
        num_samples=config.num_samples,
        point=True,  # batches sized by predict_laplace (the GLM's from its Jacobian's memory)
    )
    predicted = time.perf_counter()
    options = laplace.options
    glm_classifier = prediction.is_classification and laplace.predictive is Predictive.GLM
    draws = not (glm_classifier and laplace.link is Link.PROBIT)  # the probit link draws nothing
    record = {
        "run": str(laplace.run_dir),
        "metrics": _metrics(prediction, config),
        "map_metrics": _metrics(prediction.point, config),
        "prior_precision": _number(posterior.prior_precision),
        "log_marginal_likelihood": _number(posterior.log_marginal_likelihood()),
        "fit_time_s": fitted - start,
        "predict_time_s": predicted - fitted,
        "options": {
            "subset": options.subset.value,
            "structure": options.structure.value,
            "predictive": laplace.predictive.value,
            "link": laplace.link.value if glm_classifier else None,  # None: no link applies
            "tune_prior": options.tune_prior,
            "prior_structure": options.prior_structure.value,
            "initial_prior_precision": prior_start(bnn, options)[0],  # as given, or read from the Normal prior
        },
        "num_samples": config.num_samples if draws else None,  # None: nothing drawn
        "num_train": len(data.train),
        "device": str(device),
    }
    write_json_atomically(laplace.out_file, record)
    return record


def _metrics(prediction: Prediction, config: RunConfig) -> dict[str, float]:
    """The test metrics ``evaluate`` reports for a prediction (:func:`~pyro_bnn.runs.scoring.score`'s)."""
    if prediction.is_classification:
        return prediction.metrics(n_bins=config.n_bins)
    return regression_metrics(prediction.means, prediction.noise_scale, prediction.targets)


def _number(value: torch.Tensor) -> float | list[float]:
    """A scalar tensor as a float, a tensor of several values as a list."""
    value = value.detach().double().cpu().reshape(-1)
    return float(value[0]) if value.numel() == 1 else value.tolist()


def format_laplace_summary(record: dict[str, Any], out_file: str | os.PathLike) -> str:
    """A one-screen summary: the options, the Laplace and MAP test metrics side by side, the prior and evidence."""
    options = record["options"]
    head = f"Laplace ({options['subset']}, {options['structure']}, {options['predictive']}"
    classifier = "accuracy" in record["metrics"]
    head += f", {options['link']} link)" if classifier and options["predictive"] == Predictive.GLM.value else ")"
    lines = [f"{head} around the MAP of {record['run']}"]
    metrics, map_metrics = record["metrics"], record["map_metrics"]
    names = [k for k in ("accuracy", "nll", "ece", "brier", "rmse", "coverage") if k in metrics]
    lines.append(f"  {'':10} {'laplace':>10} {'map':>10}")
    for name in names:
        lines.append(f"  {name:10} {metrics[name]:10.4f} {map_metrics.get(name, math.nan):10.4f}")
    precision = record["prior_precision"]
    shown = f"{precision:.4g}" if isinstance(precision, float) else ", ".join(f"{p:.3g}" for p in precision)
    lines.append(f"prior precision {shown}; log marginal likelihood {record['log_marginal_likelihood']:.4g}")
    lines.append(f"fit {record['fit_time_s']:.2f} s, predict {record['predict_time_s']:.2f} s")
    lines.append(f"wrote {out_file}")
    return "\n".join(lines)


__all__ = ["LaplaceRun", "check_laplace_run", "format_laplace_summary", "laplace_run"]
