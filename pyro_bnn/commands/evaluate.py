"""``pyro-bnn evaluate``: a saved run re-scored, on clean or corrupted inputs, with conformal prediction sets, as
an OOD detector (:mod:`pyro_bnn.runs.ood_scoring`) or with a fitted temperature
(:mod:`pyro_bnn.runs.temperature_scaling`)."""

from __future__ import annotations

import argparse

from pyro_bnn.commands.verb import Verb, dataset_dir, print_metrics, user_errors
from pyro_bnn.data import DatasetName, Task
from pyro_bnn.evaluation import TemperatureMode
from pyro_bnn.runs.conformal import add_conformal_arguments
from pyro_bnn.spec import catalogue


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir")
    parser.add_argument("--num-samples", type=int, default=None)
    parser.add_argument("--corruption", default=None, help=catalogue.option("--corruption").help())
    parser.add_argument(
        "--ood",
        default=None,
        metavar="NAME",
        help="out-of-distribution detection of the run's test set against NAME: a data set with the run's input "
        "shape (" + ", ".join(d.value for d in DatasetName if d.task is Task.CLASSIFICATION) + ", e.g. mnist for a "
        "fashion-mnist run), or a corruption of the test set, NAME:VALUE as for --corruption (gaussian:0.5); "
        "writes RUN/ood-NAME.json and .png (classification runs only)",
    )
    parser.add_argument(
        "--data-dir",
        type=dataset_dir,
        action="append",
        default=[],
        metavar="DATASET=PATH",
        help="data folder of one data set (repeatable), e.g. mnist=/data/mnist; default: the run's own folder and "
        "the usual places",
    )
    parser.add_argument(
        "--temperature",
        action="store_true",
        help="post-hoc temperature scaling: fit one temperature T on the run's validation split (minimising its "
        "NLL), score the test split with and without it and write RUN/temperature.json (classification runs with "
        "validation examples only)",
    )
    parser.add_argument(
        "--temperature-mode",
        default=None,
        choices=[mode.value for mode in TemperatureMode],
        help="with --temperature: temper the posterior predictive (mean, the default; the one to report) or each "
        "posterior sample (samples)",
    )
    parser.add_argument("--device", default=None)
    add_conformal_arguments(parser)


def _run(args: argparse.Namespace) -> int:
    from pyro_bnn.runs.conformal import conformal_options, format_conformal_table
    from pyro_bnn.runs.evaluate import load_evaluation, score_evaluation
    from pyro_bnn.runs.ood_scoring import format_ood_table, load_ood_evaluation, score_ood_evaluation

    data_dirs = list(args.data_dir)  # as given: a data set named twice with two folders is refused, not dropped
    with user_errors():
        conformal = conformal_options(
            args.conformal, args.conformal_method, args.calibration_size, ood=args.ood, temperature=args.temperature
        )
    if args.temperature:
        return _evaluate_temperature(args, data_dirs)
    if args.temperature_mode is not None:
        with user_errors():
            raise ValueError("--temperature-mode only applies with --temperature")
    if args.ood is not None:
        with user_errors():
            if args.corruption is not None:
                raise ValueError(
                    f"--ood and --corruption do not combine; to detect corrupted inputs as OOD, pass the corruption "
                    f"to --ood (--ood {args.corruption})"
                )
            evaluation = load_ood_evaluation(
                args.run_dir, args.ood, num_samples=args.num_samples, device=args.device, data_dirs=data_dirs
            )
        record = score_ood_evaluation(evaluation)
        print(format_ood_table(record))
        stem = evaluation.run_dir / evaluation.source.file_stem
        print(f"wrote {stem}.json, {stem.name}.png")
        return 0
    with user_errors():
        evaluation = load_evaluation(
            args.run_dir,
            num_samples=args.num_samples,
            corruption=args.corruption,
            device=args.device,
            data_dirs=data_dirs,
            conformal=conformal,
        )
    metrics = score_evaluation(evaluation)
    print_metrics(metrics)
    if conformal is not None:
        print(format_conformal_table(metrics["conformal"]))
    return 0


def _evaluate_temperature(args: argparse.Namespace, data_dirs: list[tuple[str, str]]) -> int:
    """``evaluate RUN --temperature``: fits T on the run's validation split, scores the test split with and without."""
    from pyro_bnn.runs.temperature_scaling import (
        TEMPERATURE_FILE,
        format_temperature_table,
        load_temperature_evaluation,
        score_temperature_evaluation,
    )

    with user_errors():
        for option, value in (("--ood", args.ood), ("--corruption", args.corruption)):
            if value is not None:
                raise ValueError(f"--temperature and {option} do not combine; run them as two evaluations")
        evaluation = load_temperature_evaluation(
            args.run_dir,
            mode=args.temperature_mode or "mean",
            num_samples=args.num_samples,
            device=args.device,
            data_dirs=data_dirs,
        )
    record = score_temperature_evaluation(evaluation)
    print(format_temperature_table(record))
    print(f"wrote {evaluation.run_dir / TEMPERATURE_FILE}")
    return 0


EVALUATE = Verb(
    "evaluate",
    help="re-score a saved run, optionally on corrupted inputs or with conformal prediction sets, detect OOD "
    "inputs with it or fit a temperature",
    add_arguments=_add_arguments,
    run=_run,
)
