"""Conformal prediction on a saved run's test set: what ``pyro-bnn evaluate RUN --conformal ALPHA`` adds.

The test split is cut in two with a fixed seed (:data:`SPLIT_SEED`): a calibration part of ``--calibration-size``
inputs (default half of them) and the scored part, the rest; the two never overlap. A classifier is calibrated on
the first (:func:`pyro_bnn.evaluation.calibrate_classifier`, THR, APS or RAPS) and its prediction sets are scored on
the second; a regression run gets intervals from both scores of
:func:`pyro_bnn.evaluation.calibrate_regressor`. The record goes into ``evaluation.json`` under ``"conformal"``.
Every option is checked before any data is read, except a calibration size that needs the test set's size.
"""

from __future__ import annotations

import argparse
import numbers
from dataclasses import dataclass
from typing import Any

import torch

from pyro_bnn.checks import Settings
from pyro_bnn.data import DatasetName, Task
from pyro_bnn.evaluation import (
    ConformalMethod,
    RegressionScore,
    calibrate_classifier,
    calibrate_regressor,
    has_finite_sd,
    interval_metrics,
    min_calibration_size,
    prediction_set_metrics,
)
from pyro_bnn.evaluation.conformal import check_alpha
from pyro_bnn.predict import Prediction
from pyro_bnn.runs.config import RunConfig

SPLIT_SEED = 0
"""Seed of the calibration / scored split of the test set, and of the randomised APS / RAPS draws."""


@dataclass(frozen=True)
class ConformalOptions(Settings):
    """What ``--conformal ALPHA [--conformal-method M] [--calibration-size N]`` asks for; checked when made.

    Attributes:
        alpha: Miscoverage level in ``(0, 1)``.
        method: The classifier's score (:class:`~pyro_bnn.evaluation.ConformalMethod`); a regression run takes
            ``thr`` only and reports both regression scores.
        calibration_size: Test inputs set aside for calibration, or None for half the test set.
    """

    alpha: float
    method: ConformalMethod = ConformalMethod.THR
    calibration_size: int | None = None

    def check(self) -> ConformalOptions:
        """Checks the options on their own (no run, no data), when they are made, and turns ``method`` into the
        enum; returns them (the same object: ``ConformalOptions(...).check()`` of older callers still works).

        Raises:
            ValueError: ``alpha`` not in ``(0, 1)``, an unknown method, or a calibration size that is not an int
                >= 1 or too small for ``alpha``; one line.
        """
        try:
            alpha = check_alpha(self.alpha)
        except ValueError:
            raise ValueError(f"--conformal must be a number in (0, 1), got {self.alpha!r}") from None
        try:
            method = ConformalMethod(self.method)
        except ValueError:
            known = ", ".join(m.value for m in ConformalMethod)
            raise ValueError(f"--conformal-method must be one of {known}; got {self.method!r}") from None
        size = self.calibration_size
        if size is not None:
            if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
                raise ValueError(f"--calibration-size must be an int >= 1, got {size!r}")
            _check_enough(int(size), alpha)
        self._set("alpha", alpha)
        self._set("method", method)
        return self


def _check_enough(size: int, alpha: float, default_of: int | None = None) -> None:
    """``default_of``: the test set's size when ``size`` is the default half of it (the message then says so)."""
    needed = min_calibration_size(alpha)
    if size < needed:
        what = f"--calibration-size {size}" if default_of is None else (
            f"the default calibration part (half of the {default_of} test inputs, {size})"
        )  # fmt: skip
        raise ValueError(
            f"{what} is too small for --conformal {alpha:g}: a finite threshold needs at least {needed} calibration "
            "inputs, ceil((1 - alpha) / alpha)" + ("; pass --calibration-size" if default_of is not None else "")
        )


def conformal_options(
    alpha: float | None,
    method: str | None = None,
    calibration_size: int | None = None,
    *,
    ood: str | None = None,
    temperature: bool = False,
) -> ConformalOptions | None:
    """Reads ``evaluate``'s conformal flags: None without ``--conformal``, else the checked options.

    Raises:
        ValueError: ``--conformal-method`` or ``--calibration-size`` without ``--conformal``, ``--conformal`` with
            ``--ood`` or ``--temperature``, or a bad value (:meth:`ConformalOptions.check`); one line.
    """
    if alpha is None:
        for flag, value in (("--conformal-method", method), ("--calibration-size", calibration_size)):
            if value is not None:
                raise ValueError(f"{flag} only applies with --conformal ALPHA")
        return None
    for flag, value in (("--ood", ood), ("--temperature", temperature or None)):
        if value is not None:
            raise ValueError(f"--conformal and {flag} do not combine; run them as two evaluations")
    return ConformalOptions(alpha, method or ConformalMethod.THR, calibration_size)


def check_conformal_run(options: ConformalOptions, config: RunConfig) -> None:
    """Checks, before any data is loaded, that the run can take ``options``: APS and RAPS need a classifier.

    Raises:
        ValueError: APS or RAPS asked of a regression run; one line.
    """
    dataset = DatasetName(config.dataset)
    if dataset.task is not Task.CLASSIFICATION and options.method is not ConformalMethod.THR:
        raise ValueError(
            f"--conformal-method {options.method.value} needs class probabilities, but {dataset.value!r} is a "
            "regression run; leave the method out (a regression run gets intervals from |y - mean| and "
            "|y - mean| / sd)"
        )


def calibration_part_size(options: ConformalOptions, num_test: int) -> int:
    """The calibration part's size for a test set of ``num_test`` inputs, checked against it and against alpha.

    Raises:
        ValueError: a calibration size that leaves no input to score, or (by default, half the test set) too few
            for alpha; one line.
    """
    size = options.calibration_size if options.calibration_size is not None else num_test // 2
    if size >= num_test:
        raise ValueError(
            f"--calibration-size {size} leaves nothing to score: the test set has {num_test} inputs; pass fewer"
        )
    _check_enough(size, options.alpha, default_of=num_test if options.calibration_size is None else None)
    return size


def _part(prediction: Prediction, index: torch.Tensor) -> Prediction:
    index = index.to((prediction.probs if prediction.is_classification else prediction.means).device)
    targets = prediction.targets[index.to(prediction.targets.device)]
    if prediction.is_classification:
        return Prediction(probs=prediction.probs[:, index], targets=targets)
    scale = prediction.noise_scale
    if isinstance(scale, torch.Tensor) and scale.dim() == 3:  # (S, N, D): a network that predicts its noise
        scale = scale[:, index.to(scale.device)]
    return Prediction(
        means=prediction.means[:, index], noise_scale=scale, noise_df=prediction.noise_df, targets=targets
    )


def conformal_record(prediction: Prediction, options: ConformalOptions) -> dict[str, Any]:
    """Calibrates on one part of a test prediction and scores the other.

    Args:
        prediction: The test prediction, with targets.
        options: Checked options (:meth:`ConformalOptions.check`).

    Returns:
        ``{"alpha", "calibration_size", "scored_size", "split_seed", ...}``. Classification adds
        ``method, quantile, coverage, mean_set_size, empty_share, coverage_by_size`` (of the scored part,
        :meth:`~pyro_bnn.evaluation.PredictionSetMetrics.to_dict`); regression adds ``absolute`` and
        ``normalized``, each ``{"quantile", "coverage", "mean_width"}`` (``normalized`` is ``{"skipped": why}``
        where the predictive sd is infinite: Student-t noise with ``df <= 2``).

    Raises:
        ValueError: a calibration size the test set cannot give (:func:`calibration_part_size`).
    """
    if prediction.targets is None:
        raise ValueError("conformal scoring needs a test prediction with targets")
    num_test = prediction.targets.shape[0]
    size = calibration_part_size(options, num_test)
    generator = torch.Generator().manual_seed(SPLIT_SEED)
    order = torch.randperm(num_test, generator=generator)
    calibration, scored = _part(prediction, order[:size]), _part(prediction, order[size:])
    record: dict[str, Any] = {
        "alpha": options.alpha,
        "calibration_size": size,
        "scored_size": num_test - size,
        "split_seed": SPLIT_SEED,
    }
    if prediction.is_classification:
        classifier = calibrate_classifier(calibration, options.alpha, method=options.method, generator=generator)
        sets = classifier.prediction_sets(scored, generator=generator)
        metrics = prediction_set_metrics(sets, scored.targets).to_dict()
        return {**record, "method": options.method.value, "quantile": classifier.quantile, **metrics}
    for score in RegressionScore:
        if score is RegressionScore.NORMALIZED and not has_finite_sd(calibration):
            record[score.value] = {"skipped": "the predictive sd is infinite (Student-t noise with df <= 2)"}
            continue
        regressor = calibrate_regressor(calibration, options.alpha, score=score)
        metrics = interval_metrics(*regressor.intervals(scored), scored.targets)
        record[score.value] = {"quantile": regressor.quantile, **metrics.to_dict()}
    return record


def format_conformal_table(record: dict[str, Any]) -> str:
    """A few lines of a :func:`conformal_record`: coverage against its target and the set size or width."""
    head = (
        f"conformal alpha={record['alpha']:g} (target coverage >= {1 - record['alpha']:.3f}), calibrated on "
        f"{record['calibration_size']} test inputs, scored on the other {record['scored_size']} (split seed "
        f"{record['split_seed']})"
    )
    if "coverage" in record:
        return (
            f"{head}\n{record['method']}: coverage {record['coverage']:.4f}, mean set size "
            f"{record['mean_set_size']:.3f}, empty sets {record['empty_share']:.4f}"
        )
    rows = [
        f"{score.value}: skipped, {record[score.value]['skipped']}"
        if "skipped" in record[score.value]
        else f"{score.value}: coverage {record[score.value]['coverage']:.4f}, mean width "
        f"{record[score.value]['mean_width']:.4f}"
        for score in RegressionScore
    ]
    return "\n".join([head, *rows])


def add_conformal_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``--conformal``, ``--conformal-method`` and ``--calibration-size`` to ``evaluate``'s parser."""
    parser.add_argument(
        "--conformal",
        type=float,
        default=None,
        metavar="ALPHA",
        help="split conformal prediction at miscoverage ALPHA in (0, 1): calibrate on a part of the test set "
        "(fixed seed) and report the coverage and mean set size (regression: interval width) on the rest, in "
        "evaluation.json under 'conformal'",
    )
    parser.add_argument(
        "--conformal-method",
        default=None,
        choices=[method.value for method in ConformalMethod],
        help="with --conformal: the classifier's score, thr (1 - p_y, the default), aps or raps (both randomised; "
        "raps with lambda 0.01, k_reg 1)",
    )
    parser.add_argument(
        "--calibration-size",
        type=int,
        default=None,
        metavar="N",
        help="with --conformal: test inputs set aside for calibration (default half the test set)",
    )
