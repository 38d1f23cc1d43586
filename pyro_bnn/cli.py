"""The ``pyro-bnn`` command: ``train``, ``evaluate``, ``demo``, ``diagnose``, ``reproduce``, ``ensemble``,
``laplace``, ``sample``, ``list`` and ``plugins``. Installed plugins (:mod:`pyro_bnn.plugins`) are loaded before the
arguments are read, so their guides, objectives and papers are names the command accepts."""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import sys
from collections.abc import Sequence
from contextlib import contextmanager

from pyro_bnn import __version__
from pyro_bnn.data import DatasetName, Task
from pyro_bnn.errors import GridBusyError, UserError
from pyro_bnn.evaluation import TemperatureMode
from pyro_bnn.infer import NonFiniteLossError
from pyro_bnn.plugins import DISABLE_ENV, GROUPS, discovered_plugins, load_plugins, plugins_disabled
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.runs.conformal import add_conformal_arguments
from pyro_bnn.spec import catalogue

_DEFAULTS = RunConfig()


def _add_train_arguments(parser: argparse.ArgumentParser) -> None:
    d = _DEFAULTS
    add = parser.add_argument

    def add_spec(flag: str) -> None:
        # Help text and choices come from the option's family (pyro_bnn.spec.catalogue), never written here.
        option = catalogue.option(flag)
        default = getattr(d, option.field)
        add(flag, default=default, choices=option.family.names() if option.choices else None, help=option.help(default))

    add_spec("--dataset")
    add_spec("--model")
    add_spec("--activation")
    add_spec("--prior")
    add(
        "--noise-scale",
        type=float,
        default=d.noise_scale,
        help="regression: fixed standard deviation of the Gaussian likelihood, > 0 (default %(default)s)",
    )
    add_spec("--guide")
    add_spec("--elbo")
    add(
        "--node-noise",
        action="store_true",
        help="implicit BNN: latent noise N(1, s^2) on every Linear/Conv input, deterministic weights",
    )
    add("--bias-noise", action="store_true", help="with --node-noise: one noise scalar per layer on its bias")
    add(
        "--samples-per-example",
        type=int,
        default=d.samples_per_example,
        help="mixture guide: copies of each example per step, on different components (default %(default)s)",
    )
    add("--epochs", type=int, default=d.epochs)
    add("--batch-size", type=int, default=d.batch_size)
    add_spec("--optimizer")
    add("--lr", type=float, default=None, help="learning rate (default 1e-3 with adam, 0.05 per example with sgd)")
    add(
        "--lr-variational",
        type=float,
        default=None,
        help="learning rate of the guide's parameters (default: --lr, or 0.3 per example with sgd and --node-noise)",
    )
    add(
        "--weight-decay",
        type=float,
        default=None,
        help="weight decay of the model's deterministic parameters (default 0, or 5e-4 with --node-noise)",
    )
    add_spec("--lr-schedule")
    add(
        "--lr-variational-schedule",
        default=d.lr_variational_schedule,
        help="learning-rate schedule of the guide's parameters, the forms of --lr-schedule (default %(default)s)",
    )
    add("--num-particles", type=int, default=d.num_particles)
    add_spec("--kl-anneal")
    add_spec("--kl-weighting")
    add_spec("--kl-scale")
    add("--seed", type=int, default=d.seed)
    add("--data-seed", type=int, default=None, help="seed of the validation split and training subset (default --seed)")
    add("--data-noise", type=float, default=None, help="moons, circles: the generator's noise sd (default 0.2)")
    add("--data-samples", type=int, default=None, help="moons, circles: points generated, test part included (1000)")
    add("--device", default=d.device, help="cpu, cuda, cuda:N or auto (default %(default)s)")
    add("--train-subset", type=int, default=None, help="train on this many examples")
    add(
        "--test-subset",
        type=int,
        default=None,
        help="score on this many test examples (a fixed subset, the same for every seed; default all)",
    )
    add("--val-size", type=float, default=None, help="validation examples (count, or a fraction < 1)")
    add_spec("--normalization")
    add("--data-dir", default=None, help="the data's folder (MNIST / Fashion-MNIST IDX files, or a torchvision root)")
    add("--num-samples", type=int, default=d.num_samples, help="posterior samples for the test metrics")
    add("--num-val-samples", type=int, default=d.num_val_samples)
    add("--n-bins", type=int, default=d.n_bins, help="calibration bins (default %(default)s)")
    add(
        "--patience",
        type=int,
        default=d.patience,
        help="early stopping on validation accuracy (regression: NLL) (0: off)",
    )


def _config_from(args: argparse.Namespace) -> RunConfig:
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig)}
    if values["val_size"] is not None and float(values["val_size"]).is_integer() and values["val_size"] >= 1:
        values["val_size"] = int(values["val_size"])
    return RunConfig(**values)


def _print_metrics(metrics: dict) -> None:
    print(json.dumps({k: v for k, v in metrics.items() if k != "history"}, indent=2))


@contextmanager
def _user_errors():
    """Turns the errors of checking options and paths and of loading data into :class:`UserError`; errors raised
    later (while training or scoring) keep their traceback, since they are bugs to report rather than typos to fix.

    The rule every verb keeps: everything an argument or a path can get wrong is checked inside this block, before
    any data is read, any folder made or any training started (paths by
    :func:`~pyro_bnn.runs.run_folder.check_writable`), so that no exception from them reaches the user.
    """
    try:
        yield
    except (ValueError, TypeError, OSError) as err:
        raise UserError(str(err)) from err


_REFUSED_WRITES = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EFBIG}
)
"""The errors of a file system that refuses a write during the work (a disk filled, a mount turned read-only,
permissions changed): not bugs, so :func:`main` reports them in one line naming the file. Other errors keep their
traceback."""


_GRID_RESUMES = "finished runs are kept; running the same command again resumes the grid"

_INTERRUPTED = {
    "train": "completed epochs are in the checkpoint (use --resume)",
    "reproduce": _GRID_RESUMES,
    "ensemble": _GRID_RESUMES,
}
"""What an interruption leaves, per verb that can take up its work again; the others say only that they were
interrupted (they have no --resume to point to)."""


def _warn(command: str, warnings: list[str]) -> None:
    for warning in warnings:
        print(f"pyro-bnn {command}: warning: {warning}", file=sys.stderr)


def _cmd_train(args: argparse.Namespace) -> int:
    from pyro_bnn.runs.runs import load_data, prepare_run_dir, train_run

    with _user_errors():
        config = _config_from(args).validate()
        resuming = prepare_run_dir(config, args.out, resume=args.resume, overwrite=args.overwrite)
        if args.resume and not resuming:
            print(f"pyro-bnn train: no checkpoint in {args.out}; starting a fresh run", file=sys.stderr)
        _warn("train", config.unused_options())
        data = load_data(config)
    result = train_run(
        config,
        args.out,
        data=data,
        resume=args.resume,
        overwrite=args.overwrite,
        progress=not args.quiet,
        cuda_graph=not args.no_cuda_graph,
    )
    _print_metrics(result.metrics)
    print(f"wrote {result.out_dir}/config.json, metrics.json, checkpoint.pt, history.json, {result.figure.name}")
    return 0


def _dataset_dir(text: str) -> tuple[str, str]:
    """Reads one ``--data-dir DATASET=PATH`` of ``evaluate`` (the form ``reproduce`` takes)."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected DATASET=PATH (e.g. mnist=/data/mnist), got {text!r}")
    return name, path


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from pyro_bnn.experiments.ood import format_ood_table, load_ood_evaluation, score_ood_evaluation
    from pyro_bnn.runs.conformal import conformal_options, format_conformal_table
    from pyro_bnn.runs.evaluate import load_evaluation, score_evaluation

    data_dirs = dict(args.data_dir)
    with _user_errors():
        conformal = conformal_options(
            args.conformal, args.conformal_method, args.calibration_size, ood=args.ood, temperature=args.temperature
        )
    if args.temperature:
        return _evaluate_temperature(args, data_dirs)
    if args.temperature_mode is not None:
        with _user_errors():
            raise ValueError("--temperature-mode only applies with --temperature")
    if args.ood is not None:
        with _user_errors():
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
    with _user_errors():
        evaluation = load_evaluation(
            args.run_dir,
            num_samples=args.num_samples,
            corruption=args.corruption,
            device=args.device,
            data_dirs=data_dirs,
            conformal=conformal,
        )
    metrics = score_evaluation(evaluation)
    _print_metrics(metrics)
    if conformal is not None:
        print(format_conformal_table(metrics["conformal"]))
    return 0


def _evaluate_temperature(args: argparse.Namespace, data_dirs: dict[str, str]) -> int:
    """``evaluate RUN --temperature``: fits T on the run's validation split, scores the test split with and without."""
    from pyro_bnn.experiments.temperature import (
        TEMPERATURE_FILE,
        format_temperature_table,
        load_temperature_evaluation,
        score_temperature_evaluation,
    )

    with _user_errors():
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


def _cmd_demo(args: argparse.Namespace) -> int:
    from pyro_bnn.experiments.demo import DEMO_CONFIG, DEMO_SEEDS, format_table, run_demo
    from pyro_bnn.runs.run_folder import check_writable
    from pyro_bnn.runs.runs import load_data

    with _user_errors():
        seeds = tuple(range(args.seeds)) if args.seeds is not None else DEMO_SEEDS
        if not seeds:
            raise ValueError(f"--seeds must be an int >= 1, got {args.seeds}")
        config = dataclasses.replace(
            DEMO_CONFIG,
            epochs=args.epochs if args.epochs is not None else DEMO_CONFIG.epochs,
            train_subset=args.train_subset if args.train_subset is not None else DEMO_CONFIG.train_subset,
            data_dir=args.data_dir,
            device=args.device,
            seed=seeds[0],
        ).validate()
        check_writable(args.out)
        data = load_data(config)
    results = run_demo(args.out, config=config, seeds=seeds, data=data, progress=not args.quiet)
    print()
    print(format_table(results, config))
    print(f"\nfigures: {args.out}/reliability.png, {args.out}/training.png; per-run folders under {args.out}/")
    return 0


def _cmd_diagnose(args: argparse.Namespace) -> int:
    from pyro_bnn.experiments.diagnose import DiagnoseOptions, diagnose_run

    with _user_errors():
        options = DiagnoseOptions(
            slices=args.slices,
            slice_images=args.slice_images,
            pruning=args.pruning,
            shape=args.shape,
            nuts=args.nuts,
            num_samples=args.num_samples,
            nuts_chains=args.nuts_chains,
            nuts_samples=args.nuts_samples,
            nuts_warmup=args.nuts_warmup,
            seed=args.seed,
        ).check()
        report = diagnose_run(args.run_dir, options, device=args.device, progress=not args.quiet)
    print(json.dumps({k: v for k, v in report.items()}, indent=2, default=str))
    print(f"wrote {args.run_dir}/diagnostics.json and its figures")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    print(catalogue.listing())
    return 0


def _cmd_plugins(args: argparse.Namespace) -> int:
    if plugins_disabled():
        print(f"plugin loading is off ({DISABLE_ENV} is set): no plugin was loaded")
        return 0
    plugins = discovered_plugins()
    if not plugins:
        print(f"no plugins installed (entry-point groups {', '.join(GROUPS)})")
        return 0
    for plugin in plugins:
        print(plugin.describe())
    return 1 if any(not plugin.loaded for plugin in plugins) else 0


def _load_plugins(quiet: bool) -> None:
    """Loads the installed plugins; each that fails is one warning line on stderr (none when ``quiet``: ``pyro-bnn
    plugins`` lists it), and the command goes on without it."""
    for plugin in load_plugins(on_error="record"):
        if plugin.error and not quiet:
            print(f"pyro-bnn: warning: {plugin.message}; skipped ({DISABLE_ENV}=1 loads no plugin)", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    """The ``pyro-bnn`` argument parser with every verb (``train``, ``evaluate``, ``diagnose``, ``demo``, ``list``,
    ``plugins``, ``reproduce``, ``ensemble``, ``laplace``, ``sample``); the docs' CLI page is generated from it.
    It offers the names registered when it is built: :func:`main` loads the plugins first."""
    parser = argparse.ArgumentParser(prog="pyro-bnn", description="Bayesian neural networks with Pyro.")
    parser.add_argument("--version", action="version", version=f"pyro-bnn {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train a BNN and write its metrics, checkpoint and figures")
    _add_train_arguments(train)
    train.add_argument("--out", required=True, help="output folder")
    train.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    train.add_argument("--overwrite", action="store_true", help="replace an earlier run in OUT")
    train.add_argument("--quiet", action="store_true", help="no progress bars")
    train.add_argument(
        "--no-cuda-graph",
        action="store_true",
        help="on CUDA, launch each training step op by op instead of replaying a captured CUDA graph",
    )
    train.set_defaults(func=_cmd_train)

    evaluate = commands.add_parser(
        "evaluate",
        help="re-score a saved run, optionally on corrupted inputs or with conformal prediction sets, detect OOD "
        "inputs with it or fit a temperature",
    )
    evaluate.add_argument("run_dir")
    evaluate.add_argument("--num-samples", type=int, default=None)
    evaluate.add_argument("--corruption", default=None, help=catalogue.option("--corruption").help())
    evaluate.add_argument(
        "--ood",
        default=None,
        metavar="NAME",
        help="out-of-distribution detection of the run's test set against NAME: a data set with the run's input "
        "shape (" + ", ".join(d.value for d in DatasetName if d.task is Task.CLASSIFICATION) + ", e.g. mnist for a "
        "fashion-mnist run), or a corruption of the test set, NAME:VALUE as for --corruption (gaussian:0.5); "
        "writes RUN/ood-NAME.json and .png (classification runs only)",
    )
    evaluate.add_argument(
        "--data-dir",
        type=_dataset_dir,
        action="append",
        default=[],
        metavar="DATASET=PATH",
        help="data folder of one data set (repeatable), e.g. mnist=/data/mnist; default: the run's own folder and "
        "the usual places",
    )
    evaluate.add_argument(
        "--temperature",
        action="store_true",
        help="post-hoc temperature scaling: fit one temperature T on the run's validation split (minimising its "
        "NLL), score the test split with and without it and write RUN/temperature.json (classification runs with "
        "validation examples only)",
    )
    evaluate.add_argument(
        "--temperature-mode",
        default=None,
        choices=[mode.value for mode in TemperatureMode],
        help="with --temperature: temper the posterior predictive (mean, the default; the one to report) or each "
        "posterior sample (samples)",
    )
    evaluate.add_argument("--device", default=None)
    add_conformal_arguments(evaluate)
    evaluate.set_defaults(func=_cmd_evaluate)

    demo = commands.add_parser("demo", help="3FC ReLU vs Leaky ReLU on a Fashion-MNIST subset")
    demo.add_argument("--out", default="results/demo")
    demo.add_argument("--epochs", type=int, default=None)
    demo.add_argument("--train-subset", type=int, default=None)
    demo.add_argument("--seeds", type=int, default=None, help="seeds per activation (default 2)")
    demo.add_argument("--data-dir", default=None)
    demo.add_argument("--device", default="auto")
    demo.add_argument("--quiet", action="store_true")
    demo.set_defaults(func=_cmd_demo)

    diagnose = commands.add_parser(
        "diagnose", help="likelihood slices and plateaus, pruning, posterior shape (ArviZ) and a NUTS reference"
    )
    diagnose.add_argument("run_dir")
    diagnose.add_argument(
        "--slices", type=int, default=None, metavar="N", help="likelihood slices of N sampled weights per layer"
    )
    diagnose.add_argument("--slice-images", type=int, default=6000, help="training images the slices sum over")
    diagnose.add_argument("--pruning", action="store_true", help="test error after SNR / magnitude pruning")
    diagnose.add_argument("--shape", action="store_true", help="ArviZ export, normality scores, PSIS-LOO")
    diagnose.add_argument("--nuts", action="store_true", help="NUTS reference (small networks only)")
    diagnose.add_argument("--num-samples", type=int, default=100, help="posterior samples (default %(default)s)")
    diagnose.add_argument("--nuts-chains", type=int, default=4, help="NUTS chains (default %(default)s)")
    diagnose.add_argument("--nuts-samples", type=int, default=300, help="NUTS draws per chain (default %(default)s)")
    diagnose.add_argument("--nuts-warmup", type=int, default=300, help="NUTS warm-up per chain (default %(default)s)")
    diagnose.add_argument("--seed", type=int, default=0)
    diagnose.add_argument("--device", default=None)
    diagnose.add_argument("--quiet", action="store_true")
    diagnose.set_defaults(func=_cmd_diagnose)

    listing = commands.add_parser("list", help="list the option strings (models, priors, ...) and their grammar")
    listing.set_defaults(func=_cmd_list)

    plugins = commands.add_parser(
        "plugins",
        help="list the installed plugins (guides, objectives, papers of other packages), loaded or failed",
        description="Lists every entry point of the groups "
        + ", ".join(GROUPS)
        + " as loaded (with what it registered) or failed (with the cause); exits with status 1 when one failed. "
        f"Plugins load before every command reads its arguments; {DISABLE_ENV}=1 loads none.",
    )
    plugins.set_defaults(func=_cmd_plugins)

    from pyro_bnn.experiments.posteriors import add_laplace_parser, add_sample_parser
    from pyro_bnn.reproduce.cli import add_ensemble_parser, add_reproduce_parser

    add_reproduce_parser(commands)
    add_ensemble_parser(commands, _add_train_arguments, _config_from)
    add_laplace_parser(commands)
    add_sample_parser(commands, _add_train_arguments, _config_from)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one verb and returns its exit status.

    What reaches the user is decided by type, here only: a :class:`UserError` (an argument or path problem, found by
    the verb's checks before any work) is one line and status 2; a file system refusing a write during the work
    (:data:`_REFUSED_WRITES`) one line naming the file and status 1, as is a diverged training; an interruption
    status 130, with what the verb keeps of its work and how to take it up again (:data:`_INTERRUPTED`). Any other
    exception keeps its traceback: it is a bug to report.

    Installed plugins are loaded first (:func:`~pyro_bnn.plugins.load_plugins`); one that fails is a warning line and
    the command goes on without it.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    _load_plugins(quiet=argv[:1] == ["plugins"])
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UserError as err:
        # One line, whatever the message: some errors from the libraries underneath span several.
        text = "; ".join(line.strip() for line in str(err).splitlines() if line.strip())
        print(f"pyro-bnn {args.command}: error: {text}", file=sys.stderr)
        return 2
    except NonFiniteLossError as err:
        print(f"pyro-bnn {args.command}: training stopped: {err}", file=sys.stderr)
        return 1
    except (GridBusyError, ConnectionError) as err:
        # Found after the checks, by whatever writes a grid (another process took the folder since), or a Ray
        # cluster gone since: not bugs; one line naming the holder or the address.
        print(f"pyro-bnn {args.command}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        if err.errno not in _REFUSED_WRITES or err.filename is None:
            raise
        print(f"pyro-bnn {args.command}: error: {err.filename}: {err.strerror}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        kept = _INTERRUPTED.get(args.command)
        print(f"pyro-bnn {args.command}: interrupted" + (f"; {kept}" if kept else ""), file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
