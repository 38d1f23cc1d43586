"""``pyro-bnn reproduce`` and ``pyro-bnn ensemble``: the command-line faces of :func:`pyro_bnn.reproduce.reproduce`
and :func:`pyro_bnn.reproduce.ensembles.train_ensemble`, one :class:`~pyro_bnn.commands.verb.Verb` each
(:data:`REPRODUCE`, :data:`ENSEMBLE`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from pyro_bnn.commands.train import add_train_arguments, config_from
from pyro_bnn.commands.verb import Verb, dataset_dir, warn
from pyro_bnn.errors import UserError

_GRID_RESUMES = "finished runs are kept; running the same command again resumes the grid"
"""What an interruption of a grid leaves."""


def _add_reproduce_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="the experiment (see --list)")
    parser.add_argument("--list", action="store_true", help="list the experiments, one line each, and exit")
    parser.add_argument(
        "--profile",
        default=None,
        help="quick (about a minute), cpu (hours on 2 cores), paper (GPU); default: the one OUT holds, else quick",
    )
    parser.add_argument("--seeds", type=int, default=None, help="seeds per cell (default: the profile's)")
    parser.add_argument("--out", default=None, help="the grid's folder (required unless --list)")
    parser.add_argument("--executor", default="local", help="local (default) or ray (pip install 'pyro-bnn[ray]')")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="runs at once (local: a process pool when > 1, at most one per core and as many as the memory holds; "
        "ray: tasks in flight)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads of each run (default %(default)s; local and ray alike): a run's numbers depend on its "
        "thread count, never on how many runs train beside it",
    )
    parser.add_argument(
        "--batch-runs",
        default=None,
        metavar="R|auto",
        help="train compatible runs together, up to R per batch (auto: as many as fit in memory; 1: one by one); "
        "default: the experiment's (auto for priors and leaky-calibration)",
    )
    parser.add_argument("--report-only", action="store_true", help="rebuild the report from OUT's run folders")
    parser.add_argument("--retry-failed", action="store_true", help="run failed runs again")
    parser.add_argument(
        "--retrain-stale",
        action="store_true",
        help="train again, from the start, every run whose training code differs from this checkout's (other "
        "training code, an uncommitted tree, or an unknown commit); the old record and checkpoint are kept as *.stale*",
    )
    parser.add_argument(
        "--rescore",
        action="store_true",
        help="train nothing: restore every done classifier run of OUT that still has its checkpoint, add the "
        "conformal coverage and mean set size at alpha 0.1 (THR, half the test set calibrating) to its result.json, "
        "leaving every other value as it is, and rewrite the report",
    )
    parser.add_argument(
        "--data-dir",
        type=dataset_dir,
        action="append",
        default=[],
        metavar="DATASET=PATH",
        help="data folder of one data set (repeatable), e.g. mnist=/data/mnist",
    )
    parser.add_argument("--device", default=None, help="device of every run (default auto)")
    parser.add_argument(
        "--gpus-per-run",
        type=float,
        default=None,
        help="ray: GPUs each run's task asks for (default 1 where this machine sees a GPU, else 0)",
    )
    parser.add_argument(
        "--merge",
        metavar="SOURCE",
        default=None,
        help="train nothing: copy the done runs of SOURCE (a grid's folder copied back from another machine, e.g. "
        "by bench/device_grid.sh) that OUT lacks into OUT, then rewrite the report",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


RESCORE_ALONE = (
    "--report-only",
    "--retry-failed",
    "--retrain-stale",
    "--seeds",
    "--executor",
    "--workers",
    "--batch-runs",
    "--gpus-per-run",
    "--threads",
)
"""Options that do not combine with ``--rescore``, which re-scores the runs OUT holds, in this process."""


def _check_rescore_alone(args: argparse.Namespace) -> None:
    given = {
        "--report-only": args.report_only,
        "--retry-failed": args.retry_failed,
        "--retrain-stale": args.retrain_stale,
        "--seeds": args.seeds is not None,
        "--executor": args.executor != "local",
        "--workers": args.workers is not None,
        "--batch-runs": args.batch_runs is not None,
        "--gpus-per-run": args.gpus_per_run is not None,
        "--threads": args.threads != 1,
    }
    for flag in RESCORE_ALONE:
        if given[flag]:
            raise ValueError(
                f"--rescore re-scores the runs OUT holds, in this process, and trains nothing: leave out {flag}"
            )


def _cmd_rescore(args: argparse.Namespace) -> int:
    from pyro_bnn.reproduce.api import check_request, rescore

    request = dict(profile=args.profile, out=args.out, data_dirs=args.data_dir, device=args.device)
    try:
        _check_rescore_alone(args)
        check_request(args.name, seeds=None, **request, rescore=True)
    except (ValueError, ImportError, OSError) as err:
        raise UserError(str(err)) from err
    summary, report = rescore(args.name, **request, progress=not args.quiet)
    print("\n".join(summary.lines()))
    print(f"wrote {report}")
    return 0


def _cmd_merge(args: argparse.Namespace) -> int:
    from pyro_bnn.reproduce.api import merge

    given = [flag for flag in (*RESCORE_ALONE, "--rescore") if _given(args, flag)]
    try:
        if given:
            raise ValueError(f"--merge copies finished runs and trains nothing: leave out {given[0]}")
        summary, report = merge(args.name, args.merge, out=args.out, profile=args.profile, data_dirs=args.data_dir)
    except (ValueError, OSError) as err:
        raise UserError(str(err)) from err
    print(summary.describe())
    print(f"wrote {report}")
    return 0


def _given(args: argparse.Namespace, flag: str) -> bool:
    """Whether ``flag`` (one of :data:`RESCORE_ALONE` or ``--rescore``) was given."""
    defaults = {"--executor": "local", "--threads": 1}
    value = getattr(args, flag.removeprefix("--").replace("-", "_"))
    return value is not None and value is not False and value != defaults.get(flag)


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from pyro_bnn.reproduce.api import check_request, listing, reproduce

    if args.list:
        print(listing())
        return 0
    if args.merge is not None and args.name and args.out is not None:
        return _cmd_merge(args)
    if args.rescore and args.name and args.out is not None:
        return _cmd_rescore(args)
    request = dict(
        profile=args.profile,
        seeds=args.seeds,
        out=args.out,
        executor=args.executor,
        workers=args.workers,
        report_only=args.report_only,
        device=args.device,
        gpus_per_run=args.gpus_per_run,
        batch_runs=args.batch_runs,
        threads=args.threads,
    )
    try:
        if not args.name:
            raise ValueError("name an experiment (pyro-bnn reproduce --list shows them)")
        if args.out is None:
            raise ValueError("--out is required: the folder the grid's runs and report go to")
        if args.report_only:
            for flag, given in (("--retry-failed", args.retry_failed), ("--retrain-stale", args.retrain_stale)):
                if given:
                    raise ValueError(f"--report-only runs nothing: leave out {flag}")
        check_request(args.name, **request, data_dirs=args.data_dir, retrain_stale=args.retrain_stale)
    except (ValueError, ImportError, OSError) as err:
        raise UserError(str(err)) from err
    # Past the checks, a failing run is recorded in the report and the grid goes on; anything raised here is a bug
    # and keeps its traceback, bar another process taking the folder since the check, or the Ray cluster going
    # (both one line, in pyro_bnn.cli.main).
    report = reproduce(
        args.name,
        **request,
        data_dirs=args.data_dir,
        retry_failed=args.retry_failed,
        retrain_stale=args.retrain_stale,
        progress=not args.quiet,
    )
    print(f"wrote {report}")
    return 0


ENSEMBLE_HELPS = {
    "--guide": "the members' point network: map or mle (default map)",
    "--num-samples": "unused: the ensemble's test metrics take each member's network once",
}
"""``train``'s flags that ``ensemble`` reads otherwise: the members are point networks (``train``'s default guide,
``flat:0.01``, is refused), and the mixture's test metrics have one sample per member."""


def _add_ensemble_arguments(parser: argparse.ArgumentParser) -> None:
    """``train``'s options (read back by :func:`~pyro_bnn.commands.train.config_from`) plus the member count and the
    executor; ``--guide`` and ``--num-samples`` with help of their own (:data:`ENSEMBLE_HELPS`)."""
    add_train_arguments(parser, helps=ENSEMBLE_HELPS)
    parser.add_argument("--members", type=int, default=5, help="networks in the ensemble (default %(default)s)")
    parser.add_argument("--out", required=True, help="the ensemble's folder")
    parser.add_argument("--executor", default="local", help="local (default) or ray (pip install 'pyro-bnn[ray]')")
    parser.add_argument("--workers", type=int, default=None, help="members trained at once")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each member (default %(default)s)")
    parser.add_argument("--retry-failed", action="store_true", help="train failed members (and the ensemble) again")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def _cmd_ensemble(args: argparse.Namespace) -> int:
    import json

    from pyro_bnn.reproduce.ensembles import check_same_ensemble, ensemble_specs, train_ensemble
    from pyro_bnn.reproduce.executors import make_executor
    from pyro_bnn.reproduce.planned import Status
    from pyro_bnn.runs.run_folder import check_not_a_run, check_writable
    from pyro_bnn.runs.runs import load_data

    try:
        config = config_from(args)
        specs = ensemble_specs(config, args.members)  # the member count, the guide and the config
        check_writable(args.out)
        check_not_a_run(Path(args.out))
        check_same_ensemble(args.out, specs)
        executor = make_executor(args.executor, args.workers, threads=args.threads)
        if args.num_samples is not None:
            unused = f"--num-samples {args.num_samples} is unused: the ensemble's test metrics take each member once"
            warn("ensemble", [unused])
        load_data(specs[0].config)  # the data, found once here rather than failing every member

    except (ValueError, ImportError, OSError) as err:
        raise UserError(str(err)) from err
    *members, ensemble = train_ensemble(
        config, args.out, args.members, executor=executor, retry_failed=args.retry_failed, progress=not args.quiet
    )
    failed = [r for r in (*members, ensemble) if r.status is not Status.DONE]
    if failed:
        raise UserError(
            f"run {failed[0].spec.run_id} {failed[0].status.value}: {failed[0].reason} (--retry-failed runs it again)"
        )
    print(json.dumps({k: v for k, v in ensemble.metrics.items() if k != "history"}, indent=2))
    print(f"wrote {args.out}/runs/{ensemble.spec.run_id}/metrics.json and {len(members)} member runs")
    return 0


REPRODUCE = Verb(
    "reproduce",
    help="run a paper's experiment grid (resuming what is done) and write its report",
    description="Runs a paper's grid of runs into OUT (a finished run is never trained again, so an interrupted "
    "grid resumes) and writes OUT/report.md with tables over seeds, figures and a verdict per headline.",
    add_arguments=_add_reproduce_arguments,
    run=_cmd_reproduce,
    on_interrupt=_GRID_RESUMES,
)
ENSEMBLE = Verb(
    "ensemble",
    help="train a deep ensemble of point networks (as a grid: local or on Ray) and score its mixture",
    description="Trains --members point networks (guide map or mle, seeds SEED .. SEED+M-1, the same training "
    "examples) into OUT/runs as one grid, resuming what is done, then scores their equally weighted mixture on "
    "the test set. Read it back with pyro_bnn.runs.load_ensemble.",
    add_arguments=_add_ensemble_arguments,
    run=_cmd_ensemble,
    on_interrupt=_GRID_RESUMES,
)
