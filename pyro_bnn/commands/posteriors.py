"""``pyro-bnn laplace`` and ``pyro-bnn sample``: the posterior families that are not guides, from the command line.

Each verb is one :class:`~pyro_bnn.commands.verb.Verb` (:data:`LAPLACE`, :data:`SAMPLE`); the work is in
:mod:`pyro_bnn.runs.laplace_run` and :mod:`pyro_bnn.runs.sgmcmc_run`. Both keep the CLI's rule: every
option and path is checked before any data is read, and a problem there is one line
(:class:`~pyro_bnn.errors.UserError`).
"""

from __future__ import annotations

import argparse
import sys

from pyro_bnn.commands.train import add_train_arguments, config_from
from pyro_bnn.commands.verb import Verb, options_from_args
from pyro_bnn.errors import UserError
from pyro_bnn.laplace import Link, Predictive, Structure, Subset
from pyro_bnn.sgmcmc import Method, SGMCMCDivergenceError
from pyro_bnn.sgmcmc.samplers import as_method, check_method_options

_CHECK_ERRORS = (ValueError, TypeError, OSError, ImportError)
"""What a verb's checks raise for a bad option, path or missing extra: turned into one line."""


_LAPLACE_DESCRIPTION = (
    "Fits a Laplace approximation (laplace-torch: the GGN in the chosen structure, the prior "
    "precision tuned by the marginal likelihood) around the weights of a run trained with --guide map, scores "
    "the run's test split with the metrics of 'pyro-bnn evaluate' and writes RUN/laplace-SUBSET-STRUCTURE.json "
    "(metrics, the MAP's metrics, the prior precision, the log marginal likelihood, wall times, options). There "
    "is one file per --subset and --structure: a second fit of the same two is refused unless --overwrite "
    "replaces the first (its other options are recorded in the file, not in its name). An option that does "
    "not apply to the run or the predictive (--link for a regression run or with --predictive mc, "
    "--num-samples for a classifier's probit GLM predictive, which draws nothing) is refused."
)


def _add_laplace_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="a folder written by 'pyro-bnn train ... --guide map'")
    parser.add_argument("--subset", default=Subset.LAST_LAYER.value, help=_choices(Subset, "the weights made random"))
    parser.add_argument(
        "--structure", default=Structure.KRON.value, help=_choices(Structure, "the Hessian's structure")
    )
    parser.add_argument(
        "--predictive",
        default=Predictive.GLM.value,
        help=_choices(Predictive, "glm: the linearised network; mc: weight draws through the network"),
    )
    parser.add_argument(
        "--link",
        default=None,
        help=f"the GLM predictive's link, classifiers only: {', '.join(link.value for link in Link)} (default "
        f"{Link.PROBIT.value})",
    )
    parser.add_argument(
        "--prior-precision",
        type=float,
        default=None,
        help="the prior precision to start the tuning from (with --no-tune: the one used); default 1 / scale^2 of "
        "the run's Normal prior",
    )
    parser.add_argument("--no-tune", action="store_true", help="keep the prior precision instead of tuning it")
    parser.add_argument(
        "--num-samples",
        type=int,
        default=None,
        help="draws of the predictive: weight draws (--predictive mc), output draws (the GLM of a regression run or "
        "with --link mc); default: the run's --num-samples",
    )
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto (default: the run's)")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the RUN/laplace-SUBSET-STRUCTURE.json of an earlier fit (without it, a second fit of the "
        "same --subset and --structure is refused)",
    )


def _choices(enum, text: str) -> str:
    return f"{text}: {', '.join(member.value for member in enum)} (default %(default)s)"


def _cmd_laplace(args: argparse.Namespace) -> int:
    from pyro_bnn.laplace import LaplaceOptions
    from pyro_bnn.runs.laplace_run import check_laplace_run, format_laplace_summary, laplace_run

    try:
        options = options_from_args(LaplaceOptions, args, tune_prior=lambda args: not args.no_tune)
        run = check_laplace_run(
            args.run_dir,
            options,
            predictive=args.predictive,
            link=args.link,
            num_samples=args.num_samples,
            device=args.device,
            overwrite=args.overwrite,
        )
        data = _load_data(run.config)
    except _CHECK_ERRORS as err:
        raise UserError(str(err)) from err
    record = laplace_run(run, data=data)
    print(format_laplace_summary(record, run.out_file))
    return 0


def _load_data(config):
    """The run's data, read inside the checks so that missing files are one line (as ``train`` does)."""
    from pyro_bnn.runs.runs import load_data

    return load_data(config)


_SAMPLE_DESCRIPTION = (
    "Builds the model and training data a 'train' run of the same options would, runs SG-MCMC chains on the "
    "model's minibatch log joint and writes OUT/config.json, OUT/checkpoint.pt (the draws), OUT/metrics.json (test "
    "metrics over every draw, r-hat and ESS) and the test figure; 'pyro-bnn evaluate OUT' re-scores it. train's "
    "training-only options (guide, optimiser, epochs, ...) are unused."
)


def _add_sample_arguments(parser: argparse.ArgumentParser) -> None:
    """``train``'s model and data options plus the sampler's."""
    from pyro_bnn.runs.sgmcmc_run import SamplerOptions

    add_train_arguments(parser)
    add = parser.add_argument
    add("--method", default=Method.SGLD.value, help=_choices(Method, "the sampler"))
    add("--step-size", type=float, required=True, help="the step size (cyclical methods: its peak), > 0")
    add("--draws", type=int, default=100, help="draws kept per chain (default %(default)s)")
    add("--burn-in", type=int, default=0, help="steps (cyclical: cycles) discarded first (default %(default)s)")
    add("--thin", type=int, default=1, help="keep every THIN-th step (default %(default)s)")
    add("--chains", type=int, default=4, help="chains, run side by side (default %(default)s)")
    defaults = SamplerOptions()
    add("--cycles", type=int, default=None, help=f"csgld, csghmc only: kept cycles (default {defaults.num_cycles})")
    add(
        "--friction",
        type=float,
        default=None,
        help=f"sghmc, csghmc only: the friction in (0, 1] (default {defaults.friction})",
    )
    add(
        "--exploration",
        type=float,
        default=None,
        help=f"csgld, csghmc only: noise-free share of a cycle (default {defaults.exploration})",
    )
    add("--init", default="prior", help="chain starts: prior (a draw each) or network (default %(default)s)")
    add("--out", required=True, help="the run folder")
    add("--overwrite", action="store_true", help="replace an earlier run in OUT")
    add("--quiet", action="store_true", help="no progress bar")


def _cmd_sample(args: argparse.Namespace) -> int:
    from pyro_bnn.runs.runs import prepare_run_dir
    from pyro_bnn.runs.sgmcmc_run import SamplerOptions, format_sample_summary, sample_config, sample_run

    try:
        method = as_method(args.method)
        _check_method_flags(args, method)
        options = options_from_args(
            SamplerOptions,
            args,
            method=lambda _: method,
            num_draws="draws",
            num_chains="chains",
            num_cycles="cycles",
        ).check()
        config, warnings = sample_config(config_from(args), options)
        prepare_run_dir(config, args.out, resume=False, overwrite=args.overwrite, resumable=False)
        for warning in warnings + config.unused_options():
            print(f"pyro-bnn sample: warning: {warning}", file=sys.stderr)
        data = _load_data(config)
    except _CHECK_ERRORS as err:
        raise UserError(str(err)) from err
    try:
        metrics = sample_run(config, options, args.out, data=data, overwrite=args.overwrite, progress=not args.quiet)
    except SGMCMCDivergenceError as err:  # a step size too large: nothing was written
        print(f"pyro-bnn sample: sampling stopped: {err}", file=sys.stderr)
        return 1
    print(format_sample_summary(metrics, args.out))
    return 0


def _check_method_flags(args: argparse.Namespace, method: Method) -> None:
    """Refuses a sampler flag the method does not read (one line naming the flag, its value and the methods it
    applies to)."""
    flags = {"friction": "--friction", "num_cycles": "--cycles", "exploration": "--exploration"}
    check_method_options(
        method, flags.__getitem__, friction=args.friction, num_cycles=args.cycles, exploration=args.exploration
    )


LAPLACE = Verb(
    "laplace",
    help="fit a Laplace approximation around a saved MAP run and score its test split",
    description=_LAPLACE_DESCRIPTION,
    add_arguments=_add_laplace_arguments,
    run=_cmd_laplace,
)
SAMPLE = Verb(
    "sample",
    help="sample a BNN's posterior with SG-MCMC (SGLD, SGHMC, cyclical) and write a run folder",
    description=_SAMPLE_DESCRIPTION,
    add_arguments=_add_sample_arguments,
    run=_cmd_sample,
    flag_names={"num_draws": "--draws", "num_chains": "--chains", "num_cycles": "--cycles"},
)

__all__ = ["LAPLACE", "SAMPLE"]
