"""``pyro-bnn demo``: 3FC ReLU against Leaky ReLU on a Fashion-MNIST subset (:mod:`pyro_bnn.experiments.demo`)."""

from __future__ import annotations

import argparse

from pyro_bnn.commands.verb import Verb, options_from_args, user_errors


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="results/demo")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--train-subset", type=int, default=None)
    parser.add_argument("--seeds", type=int, default=None, help="seeds per activation (default 2)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--quiet", action="store_true")


def _run(args: argparse.Namespace) -> int:
    from pyro_bnn.experiments.demo import DEMO_CONFIG, DEMO_SEEDS, format_table, run_demo
    from pyro_bnn.runs.run_folder import check_writable
    from pyro_bnn.runs.runs import load_data

    with user_errors():
        seeds = tuple(range(args.seeds)) if args.seeds is not None else DEMO_SEEDS
        if not seeds:
            raise ValueError(f"--seeds must be an int >= 1, got {args.seeds}")
        config = options_from_args(DEMO_CONFIG, args, seed=lambda _: seeds[0]).validate()
        check_writable(args.out)
        data = load_data(config)
    results = run_demo(args.out, config=config, seeds=seeds, data=data, progress=not args.quiet)
    print()
    print(format_table(results, config))
    print(f"\nfigures: {args.out}/reliability.png, {args.out}/training.png; per-run folders under {args.out}/")
    return 0


DEMO = Verb("demo", help="3FC ReLU vs Leaky ReLU on a Fashion-MNIST subset", add_arguments=_add_arguments, run=_run)
