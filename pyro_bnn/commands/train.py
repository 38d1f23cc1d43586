"""``pyro-bnn train``: one run trained into a folder; and the model, data and training options
(:func:`add_train_arguments`, read back by :func:`config_from`) that ``ensemble`` and ``sample`` take too."""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyro_bnn.commands.verb import Verb, options_from_args, print_metrics, user_errors, warn
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.runs.run_folder import CHECKPOINT
from pyro_bnn.spec import catalogue

_DEFAULTS = RunConfig()


def add_train_arguments(parser: argparse.ArgumentParser, *, helps: Mapping[str, str] | None = None) -> None:
    """``train``'s model, data and training options, their defaults those of :class:`RunConfig`; ``helps``
    replaces the help text of the flags it names, for a verb that reads them otherwise (``ensemble``'s
    ``--guide``)."""
    d = _DEFAULTS
    helps = dict(helps or {})
    added: list[str] = []

    def add(flag: str, **kwargs: Any) -> None:
        if flag in helps:
            kwargs["help"] = helps[flag]
        parser.add_argument(flag, **kwargs)
        added.append(flag)

    def add_spec(flag: str) -> None:
        # Help text and choices come from the option's family (pyro_bnn.spec.catalogue), never written here.
        option = catalogue.option(flag)
        default = getattr(d, option.field)
        # A plain enum option's names ignore case, as every other option string's do (pyro-bnn list says so).
        choices = option.family.names() if option.choices else None
        add(flag, default=default, choices=choices, type=str.lower if choices else None, help=option.help(default))

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
    add(
        "--temperature",
        type=float,
        default=d.temperature,
        help="likelihood temperature T of a tempered posterior p(D|w)^(1/T) p(w); T < 1: a cold posterior "
        "(VI: T times the KL weight; sgmcmc: the likelihood over T) (default %(default)s)",
    )
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
    add(
        "--clip-norm",
        type=float,
        default=None,
        help="clip the gradient of all trained parameters to this norm before each step (default: no clipping)",
    )
    if unknown := sorted(set(helps) - set(added)):
        raise ValueError(f"helps names flags that add_train_arguments does not add: {unknown}")


def _count_or_fraction(args: argparse.Namespace) -> int | float | None:
    """``--val-size``: a whole number >= 1 is a count of examples, anything else a fraction. A negative whole
    number is passed on as an int too, so that the refusal is the API's for a count ("must be a count >= 0 or a
    fraction in [0, 1), got -1"), not a fraction's of ``-1.0``; 0 stays the float ``argparse`` gave, as it always
    has (a run's config, and so its id, keeps ``0.0``)."""
    value = args.val_size
    if value is not None and float(value).is_integer() and (value >= 1 or value < 0):
        return int(value)
    return value


def config_from(args: argparse.Namespace) -> RunConfig:
    """The :class:`RunConfig` of the options :func:`add_train_arguments` added."""
    return options_from_args(RunConfig, args, val_size=_count_or_fraction)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_train_arguments(parser)
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run in OUT")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument(
        "--no-cuda-graph",
        action="store_true",
        help="on CUDA, launch each training step op by op instead of replaying a captured CUDA graph",
    )


def _run(args: argparse.Namespace) -> int:
    from pyro_bnn.infer import NonFiniteLossError
    from pyro_bnn.runs.runs import check_validation_split, load_data, prepare_run_dir, train_run

    with user_errors():
        if args.resume and args.overwrite:  # one continues the run in --out, the other replaces it
            raise ValueError(
                "--resume and --overwrite exclude each other: --resume continues the run in --out, --overwrite "
                "replaces it; pass one"
            )
        config = config_from(args).validate()
        resuming = prepare_run_dir(config, args.out, resume=args.resume, overwrite=args.overwrite)
        # An overwrite of a run trains in a staging folder that an interruption removes (what _kept reports).
        args.replacing = args.overwrite and not resuming and (Path(args.out) / CHECKPOINT).is_file()
        if args.resume and not resuming:
            print(f"pyro-bnn train: no checkpoint in {args.out}; starting a fresh run", file=sys.stderr)
        warn("train", config.unused_options())
        data = load_data(config)
        check_validation_split(config, data)  # what the config cannot count before loading
    start = time.time()
    try:
        result = train_run(
            config,
            args.out,
            data=data,
            resume=args.resume,
            overwrite=args.overwrite,
            progress=not args.quiet,
            cuda_graph=not args.no_cuda_graph,
        )
    except NonFiniteLossError as err:
        if not args.replacing:
            raise
        # The new run trained in a staging folder, removed when it failed: its checkpoint, named by the message,
        # is gone, and the run being replaced is what is kept.
        where = f"{_kept(args).split(';')[0]} (the new run was discarded with its checkpoints)"
        pattern = rf"the last good checkpoint is .*?{re.escape(CHECKPOINT)}|no checkpoint had been written"
        text = re.sub(pattern, where, str(err))
        raise NonFiniteLossError(text) from err
    print_metrics(result.metrics)
    # What this run wrote (a resumed run's folder also holds files of earlier commands, evaluate's among them).
    files = sorted(p.name for p in Path(result.out_dir).iterdir() if p.is_file() and p.stat().st_mtime >= start - 1)
    print(f"wrote {result.out_dir}/{', '.join(files)}")
    return 0


def _kept(args: argparse.Namespace) -> str:
    """What an interrupted ``train`` left in ``--out``: an overwrite of a run trains in a staging folder, removed on
    interruption (``args.replacing``, set once the folder is checked); any other run trains in ``--out`` itself."""
    checkpoint = Path(args.out) / CHECKPOINT
    if getattr(args, "replacing", False):
        return f"the run already in {args.out} is unchanged; the new one kept nothing"
    if checkpoint.is_file():
        return f"completed epochs are in {checkpoint} (run the same command with --resume)"
    return "no epoch had finished, so nothing was kept"


TRAIN = Verb(
    "train",
    help="train a BNN and write its metrics, checkpoint and figures",
    add_arguments=_add_arguments,
    run=_run,
    on_interrupt=_kept,
)
