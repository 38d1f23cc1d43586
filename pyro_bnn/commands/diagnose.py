"""``pyro-bnn diagnose``: likelihood slices, pruning, posterior shape and a NUTS reference of a saved run
(:mod:`pyro_bnn.runs.diagnose`)."""

from __future__ import annotations

import argparse
import json

from pyro_bnn.commands.verb import Verb, options_from_args, user_errors


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="a folder written by 'pyro-bnn train' or 'pyro-bnn sample'")
    parser.add_argument(
        "--slices", type=int, default=None, metavar="N", help="likelihood slices of N sampled weights per layer"
    )
    parser.add_argument(
        "--slice-images", type=int, default=6000, help="training images the slices sum over (default %(default)s)"
    )
    parser.add_argument("--pruning", action="store_true", help="test error after SNR / magnitude pruning")
    parser.add_argument("--shape", action="store_true", help="ArviZ export, normality scores, PSIS-LOO")
    parser.add_argument("--nuts", action="store_true", help="NUTS reference (small classifiers only)")
    parser.add_argument(
        "--num-samples",
        type=int,
        default=None,
        help="posterior samples (default 100, a multiple of a mixture's K; a sampled run's: all its draws)",
    )
    parser.add_argument("--nuts-chains", type=int, default=4, help="NUTS chains (default %(default)s)")
    parser.add_argument("--nuts-samples", type=int, default=300, help="NUTS draws per chain (default %(default)s)")
    parser.add_argument("--nuts-warmup", type=int, default=300, help="NUTS warm-up per chain (default %(default)s)")
    parser.add_argument(
        "--seed", type=int, default=0, help="seeds the sliced weights and the posterior draws (default %(default)s)"
    )
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto (default: the run's)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def _run(args: argparse.Namespace) -> int:
    from pyro_bnn.runs.diagnose import DiagnoseOptions, diagnose_run

    with user_errors():
        options = options_from_args(DiagnoseOptions, args).check()
        report = diagnose_run(args.run_dir, options, device=args.device, progress=not args.quiet)
    print(json.dumps({k: v for k, v in report.items()}, indent=2, default=str))
    print(f"wrote {args.run_dir}/diagnostics.json and its figures")
    return 0


_DESCRIPTION = (
    "Runs the chosen diagnostics on a saved run (at least one of --slices N, --pruning, --shape, --nuts) and writes "
    "their figures and RUN_DIR/diagnostics.json, keeping the parts an earlier call wrote there: likelihood slices of N "
    "sampled weights per weight tensor and the fraction with a flat plateau; the test error with the lowest "
    "|mu|/sigma or |mu| weights pruned; the posterior draws exported to ArviZ with normality scores and PSIS-LOO "
    "(the only part a sampled run takes); a NUTS reference against the run's guide for small networks. Weight "
    "statistics recorded during training are always plotted."
)

DIAGNOSE = Verb(
    "diagnose",
    help="likelihood slices and plateaus, pruning, posterior shape (ArviZ) and a NUTS reference",
    description=_DESCRIPTION,
    add_arguments=_add_arguments,
    run=_run,
)
