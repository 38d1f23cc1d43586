"""The ``pyro-bnn`` command: ``train``, ``evaluate``, ``demo`` and ``list``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from contextlib import contextmanager

from pyro_bnn.experiments.config import RunConfig
from pyro_bnn.infer import NonFiniteLossError
from pyro_bnn.likelihoods import KLScale

_DEFAULTS = RunConfig()


def _add_train_arguments(parser: argparse.ArgumentParser) -> None:
    d = _DEFAULTS
    add = parser.add_argument
    add(
        "--dataset",
        default=d.dataset,
        help="mnist, fashion-mnist, digits, moons, circles, or cubic for regression (default %(default)s)",
    )
    add(
        "--model",
        default=d.model,
        help="a model from 'pyro-bnn list', e.g. mlp:256,256 for hidden widths (default %(default)s)",
    )
    add(
        "--activation",
        default=d.activation,
        help="relu, leaky:SLOPE, tanh, sigmoid, abs, linear (default %(default)s)",
    )
    add(
        "--prior",
        default=d.prior,
        help="normal:LOC,SCALE, laplace, cauchy, flat, mixture:PI,S1,S2, "
        "hierarchical:FAMILY,HYPER,ARGS (default %(default)s)",
    )
    add(
        "--noise-scale",
        type=float,
        default=d.noise_scale,
        help="regression: fixed standard deviation of the Gaussian likelihood, > 0 (default %(default)s)",
    )
    add(
        "--guide",
        default=d.guide,
        help="autonormal:INIT_SCALE, bbb, map, mle, mc-dropout:P (default %(default)s)",
    )
    add("--elbo", default=d.elbo, choices=["trace", "meanfield"], help="ELBO estimator (default %(default)s)")
    add("--epochs", type=int, default=d.epochs)
    add("--batch-size", type=int, default=d.batch_size)
    add("--lr", type=float, default=d.lr, help="Adam learning rate (default %(default)s)")
    add("--num-particles", type=int, default=d.num_particles)
    add("--kl-anneal", default=d.kl_anneal, help="constant[:W], linear:EPOCHS, cyclical:PERIOD[,RAMP]")
    add("--kl-weighting", default=d.kl_weighting, choices=["uniform", "blundell"])
    add(
        "--kl-scale",
        default=d.kl_scale,
        choices=[k.value for k in KLScale],
        help="dataset: full-data ELBO (minibatch likelihood x N/B); paper: One Simple Trick's unscaled minibatch "
        "likelihood + KL per step (default %(default)s)",
    )
    add("--seed", type=int, default=d.seed)
    add("--device", default=d.device, help="cpu, cuda, cuda:N or auto (default %(default)s)")
    add("--train-subset", type=int, default=None, help="train on this many examples")
    add("--val-size", type=float, default=None, help="validation examples (count, or a fraction < 1)")
    add("--normalization", default=d.normalization, choices=["unit", "standard", "bbb"])
    add("--data-dir", default=None, help="folder with the MNIST / Fashion-MNIST IDX files")
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


class UserError(Exception):
    """A problem the user fixes (a bad option, missing data, an occupied output folder): one line, exit code 2."""


@contextmanager
def _user_errors():
    """Turns the errors of checking options and loading data into :class:`UserError`; errors raised later (while
    training or scoring) keep their traceback, since they are bugs to report rather than typos to fix."""
    try:
        yield
    except (ValueError, FileNotFoundError, FileExistsError, TypeError) as err:
        raise UserError(str(err)) from err


def _cmd_train(args: argparse.Namespace) -> int:
    from pyro_bnn.experiments.runs import load_data, prepare_run_dir, train_run

    with _user_errors():
        config = _config_from(args).validate()
        prepare_run_dir(config, args.out, resume=args.resume, overwrite=args.overwrite)
        data = load_data(config)
    result = train_run(config, args.out, data=data, resume=args.resume, overwrite=True, progress=not args.quiet)
    _print_metrics(result.metrics)
    print(f"wrote {result.out_dir}/config.json, metrics.json, checkpoint.pt, history.json, {result.figure.name}")
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from pyro_bnn.experiments.runs import load_evaluation, score_evaluation

    with _user_errors():
        evaluation = load_evaluation(
            args.run_dir, num_samples=args.num_samples, corruption=args.corruption, device=args.device
        )
    metrics = score_evaluation(evaluation)
    _print_metrics(metrics)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from pyro_bnn.experiments.demo import DEMO_CONFIG, DEMO_SEEDS, format_table, run_demo
    from pyro_bnn.experiments.runs import load_data

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
        data = load_data(config)
    results = run_demo(args.out, config=config, seeds=seeds, data=data, progress=not args.quiet)
    print()
    print(format_table(results))
    print(f"\nfigures: {args.out}/reliability.png, {args.out}/training.png; per-run folders under {args.out}/")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from pyro_bnn.data import DatasetName, Task
    from pyro_bnn.guides import GuideKind
    from pyro_bnn.infer import ScheduleKind
    from pyro_bnn.models import available_models, model_usage
    from pyro_bnn.nn import Activation
    from pyro_bnn.priors import PriorKind

    print("models:      " + ", ".join(model_usage(name) for name in available_models()))
    print("activations: " + ", ".join(a.value for a in Activation))
    print("priors:      " + ", ".join(p.value for p in PriorKind))
    print("guides:      " + ", ".join(g.value for g in GuideKind))
    datasets = [f"{d.value} (regression)" if d.task is Task.REGRESSION else d.value for d in DatasetName]
    print("datasets:    " + ", ".join(datasets))
    print("KL anneal:   " + ", ".join(k.value for k in ScheduleKind))
    print("corruptions: none, gaussian:GAMMA, salt-pepper:P")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyro-bnn", description="Bayesian neural networks with Pyro.")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train a BNN and write its metrics, checkpoint and figures")
    _add_train_arguments(train)
    train.add_argument("--out", required=True, help="output folder")
    train.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    train.add_argument("--overwrite", action="store_true", help="replace an earlier run in OUT")
    train.add_argument("--quiet", action="store_true", help="no progress bars")
    train.set_defaults(func=_cmd_train)

    evaluate = commands.add_parser("evaluate", help="re-score a saved run, optionally on corrupted inputs")
    evaluate.add_argument("run_dir")
    evaluate.add_argument("--num-samples", type=int, default=None)
    evaluate.add_argument(
        "--corruption", default=None, help="gaussian:GAMMA or salt-pepper:P (classification runs only)"
    )
    evaluate.add_argument("--device", default=None)
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

    listing = commands.add_parser("list", help="list models, activations, priors, guides and data sets")
    listing.set_defaults(func=_cmd_list)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UserError as err:
        print(f"pyro-bnn {args.command}: error: {err}", file=sys.stderr)
        return 2
    except NonFiniteLossError as err:
        print(f"pyro-bnn {args.command}: training stopped: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            f"pyro-bnn {args.command}: interrupted; completed epochs are in the checkpoint (use --resume)",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
