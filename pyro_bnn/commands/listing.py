"""``pyro-bnn list``: the option strings (models, priors, ...) and their grammar (:mod:`pyro_bnn.spec.catalogue`)."""

from __future__ import annotations

import argparse

from pyro_bnn.commands.verb import Verb, no_arguments
from pyro_bnn.spec import catalogue


def _run(args: argparse.Namespace) -> int:
    print(catalogue.listing())
    return 0


LIST = Verb(
    "list",
    help="list the option strings (models, priors, ...) and their grammar",
    add_arguments=no_arguments,
    run=_run,
)
