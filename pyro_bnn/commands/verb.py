"""What a verb of the ``pyro-bnn`` command is (:class:`Verb`), the one way from parsed arguments to an options object
(:func:`options_from_args`), the checks block every verb keeps (:func:`user_errors`) and the argparse ``type=``
checks of counts, scales and folders (:data:`positive_int_arg`, :data:`positive_float_arg`,
:func:`existing_dir_arg`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

from pyro_bnn.checks import dataclass_from_args, non_negative_int, positive_float, positive_int
from pyro_bnn.errors import UserError

T = TypeVar("T")


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose errors (a value of the wrong type, a choice it does not offer, a missing argument) are
    one line on stderr, ``PROG: error: MESSAGE``, exit status 2: without the usage block argparse prints first, as
    every other bad input of ``pyro-bnn`` is one line (``--help`` still shows the usage). The parser of every verb,
    :func:`pyro_bnn.cli.build_parser`'s and, through ``add_subparsers``, its verbs'."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")

    @contextmanager
    def refusing(self) -> Iterator[None]:
        """A ValueError raised inside this block (a check of the parsed arguments) ends as :meth:`error` does: one
        line, exit status 2."""
        try:
            yield
        except ValueError as err:
            self.error(str(err))


@dataclasses.dataclass(frozen=True)
class Verb:
    """One verb of the ``pyro-bnn`` command, registered in :data:`pyro_bnn.cli.VERBS`.

    Attributes:
        name: The word on the command line (``pyro-bnn NAME ...``).
        help: Its line in ``pyro-bnn --help``.
        add_arguments: Adds its arguments to its parser.
        run: Does its work from the parsed arguments and returns the exit status.
        description: The text above its arguments in ``pyro-bnn NAME --help`` (None: none).
        on_interrupt: What an interruption leaves and how to take the work up again, for a verb that can: a text,
            or a function of the parsed arguments that looks at what is on disk (None: the verb says only that it
            was interrupted).
        flag_names: The flag of each option field whose name is not the flag's (``{"num_draws": "--draws"}``), so
            that an error about the field names the flag the user typed (:meth:`spell_flags`).
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None
    on_interrupt: str | Callable[[argparse.Namespace], str] | None = None
    flag_names: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def parser(self) -> argparse.ArgumentParser:
        """A parser of this verb's arguments alone (``prog`` ``pyro-bnn NAME``)."""
        parser = ArgumentParser(prog=f"pyro-bnn {self.name}")
        self.add_arguments(parser)
        return parser

    def spell_flags(self, message: str) -> str:
        """``message`` with the option field it starts with (``"num_draws must be ..."``, ``"val_size as a fraction
        must ..."``, from the options' own checks) replaced by the flag that sets it (``"--draws must be ..."``),
        where this verb has that flag. Names further in stay as they are: there they are often prose (``"the
        validation part val_size=0.0 of the rest"``)."""
        usage = self.parser().format_usage()

        def flag_of(match: re.Match) -> str:
            field = match[1]
            flag = self.flag_names.get(field, "--" + field.replace("_", "-"))
            known = re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", usage) is not None
            return flag if known else field

        # The field is the subject: directly before "must" / "=", or before plain words and then "must" ("val_size
        # as a fraction must lie in [0, 1)"); a quote or a comma first means it is prose ("model 'lenet' cannot").
        return re.sub(r"^([a-z][a-z0-9_]*)(?= must | = |=| [a-z0-9 ]*? must )", flag_of, message)

    def interrupted(self, args: argparse.Namespace) -> str:
        """The line printed when the verb is interrupted (without the ``pyro-bnn NAME:`` prefix)."""
        kept = self.on_interrupt(args) if callable(self.on_interrupt) else self.on_interrupt
        return "interrupted" + (f"; {kept}" if kept else "")

    def add_to(self, commands: Any) -> argparse.ArgumentParser:
        """Adds this verb's parser to ``commands`` (the parser's subparsers) and returns it."""
        extra = {} if self.description is None else {"description": self.description}
        parser = commands.add_parser(self.name, help=self.help, **extra)
        self.add_arguments(parser)
        return parser


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``add_arguments`` of a verb that takes none."""


def dataset_dir(text: str) -> tuple[str, str]:
    """Reads one ``--data-dir DATASET=PATH`` (of ``evaluate`` and ``reproduce``)."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected DATASET=PATH (e.g. mnist=/data/mnist), got {text!r}")
    return name, path


def _argument_type(name: str, parse: Callable[[str], Any], check: Callable[[Any, str], T], what: str):
    """An argparse ``type=`` that parses the text with ``parse`` and checks it with ``check`` (a
    :mod:`pyro_bnn.checks` function), refusing anything else as ``expected WHAT, got '0'`` (argparse names the
    option): the one-line error and exit status 2 of a bad value, before any data is read."""

    def convert(text: str) -> T:
        try:
            return check(parse(text), name)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None

    convert.__name__ = name  # what argparse's own messages call the type
    return convert


positive_int_arg = _argument_type("positive_int", int, positive_int, "an int >= 1")
"""A count option's ``type=``: an int >= 1 (``--epochs 0``: ``expected an int >= 1, got '0'``)."""

non_negative_int_arg = _argument_type("non_negative_int", int, non_negative_int, "an int >= 0")
"""A seed's or an optional count's ``type=``: an int >= 0 (``--seed -1``: ``expected an int >= 0, got '-1'``)."""

positive_float_arg = _argument_type("positive_float", float, positive_float, "a finite number > 0")
"""A scale or temperature option's ``type=``: a finite number > 0 (``inf``, ``nan``, ``0`` refused)."""


def existing_dir_arg(text: str) -> str:
    """A data folder option's ``type=``: the path of an existing folder, as given (``expected an existing folder,
    got '/nonexistent'``)."""
    if not os.path.isdir(os.path.expanduser(text)):
        raise argparse.ArgumentTypeError(f"expected an existing folder, got {text!r}")
    return text


def options_from_args(base: type[T] | T, args: argparse.Namespace, **renames: str | Callable[[Any], Any]) -> T:
    """The options object (a dataclass) a verb's parsed ``args`` ask for: the one way from argparse to options,
    :func:`pyro_bnn.checks.dataclass_from_args` (which :meth:`pyro_bnn.checks.Settings.from_args` also uses).

    Each field takes the argument of its own name, or the one ``renames`` names for it (a string), or the value
    ``renames`` computes from ``args`` (a function). A field with no such argument, or whose argument is None (an
    option not given), keeps its default: the dataclass's own when ``base`` is the class, ``base``'s value when it is
    an instance (then the result is a copy of ``base`` with the values given).
    """
    return dataclass_from_args(base, args, **renames)


@contextmanager
def user_errors():
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


def print_metrics(metrics: dict) -> None:
    """Prints a run's metrics as JSON, without the training history."""
    print(json.dumps({k: v for k, v in metrics.items() if k != "history"}, indent=2))


def warn(command: str, warnings: list[str]) -> None:
    """One ``pyro-bnn COMMAND: warning: ...`` line on stderr per warning."""
    for warning in warnings:
        print(f"pyro-bnn {command}: warning: {warning}", file=sys.stderr)
