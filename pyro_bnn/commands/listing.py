"""``pyro-bnn list``: the option strings (models, priors, ...) and their grammar (:mod:`pyro_bnn.spec.catalogue`)."""

from __future__ import annotations

import argparse

from pyro_bnn.commands.verb import Verb, user_errors
from pyro_bnn.spec import catalogue


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    names = ", ".join(entry.flag.removeprefix("--") for entry in catalogue.OPTIONS)
    parser.add_argument(
        "option",
        nargs="?",
        help=f"one option, its descriptions printed whole: {names} (default: all, each description cut to a line)",
    )


def _run(args: argparse.Namespace) -> int:
    with user_errors():
        text = catalogue.listing(args.option)
    print(text)
    return 0


LIST = Verb(
    "list",
    help="list the option strings (models, priors, ...) and their grammar",
    add_arguments=_add_arguments,
    run=_run,
)
