"""The ``pyro-bnn`` command: ``train``, ``evaluate``, ``demo``, ``diagnose``, ``reproduce``, ``ensemble``,
``laplace``, ``sample``, ``list`` and ``plugins``. Installed plugins (:mod:`pyro_bnn.plugins`) are loaded before the
arguments are read, so their guides, objectives and papers are names the command accepts.

Each verb is one :class:`~pyro_bnn.commands.verb.Verb` defined beside the code it drives (:mod:`pyro_bnn.commands`,
:mod:`pyro_bnn.reproduce.cli`, :mod:`pyro_bnn.plugins`); :data:`VERBS` lists them and :func:`build_parser` adds
them in one loop."""

from __future__ import annotations

import argparse
import errno
import functools
import os
import select
import sys
import warnings
from collections.abc import Sequence

from pyro_bnn import __version__
from pyro_bnn.commands.demo import DEMO
from pyro_bnn.commands.diagnose import DIAGNOSE
from pyro_bnn.commands.evaluate import EVALUATE
from pyro_bnn.commands.listing import LIST
from pyro_bnn.commands.posteriors import LAPLACE, SAMPLE
from pyro_bnn.commands.train import TRAIN
from pyro_bnn.commands.verb import ArgumentParser, Verb
from pyro_bnn.errors import GridBusyError, UserError
from pyro_bnn.infer import NonFiniteLossError
from pyro_bnn.infer.checkpoint import CheckpointMismatchError
from pyro_bnn.plugins import DISABLE_ENV, PLUGINS_VERB, load_plugins
from pyro_bnn.reproduce.cli import ENSEMBLE, REPRODUCE

VERBS: dict[str, Verb] = {
    verb.name: verb
    for verb in (TRAIN, EVALUATE, DEMO, DIAGNOSE, LIST, PLUGINS_VERB, REPRODUCE, ENSEMBLE, LAPLACE, SAMPLE)
}
"""Every verb of the command, by name, in the order ``pyro-bnn --help`` lists them."""


_REFUSED_WRITES = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EFBIG}
)
"""The errors of a file system that refuses a write during the work (a disk filled, a mount turned read-only,
permissions changed): not bugs, so :func:`main` reports them in one line naming the file. Other errors keep their
traceback."""


def _load_plugins(quiet: bool) -> None:
    """Loads the installed plugins; each that fails is one warning line on stderr (none when ``quiet``: ``pyro-bnn
    plugins`` lists it), and the command goes on without it."""
    for plugin in load_plugins(on_error="record"):
        if plugin.error and not quiet:
            print(f"pyro-bnn: warning: {plugin.message}; skipped ({DISABLE_ENV}=1 loads no plugin)", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    """The ``pyro-bnn`` argument parser with every verb of :data:`VERBS`; the docs' CLI page is generated from it.
    It offers the names registered when it is built: :func:`main` loads the plugins first."""
    # One-line errors; add_subparsers gives every verb's parser this class too.
    parser = ArgumentParser(prog="pyro-bnn", description="Bayesian neural networks with Pyro.")
    parser.add_argument("--version", action="version", version=f"pyro-bnn {__version__}")
    # Not required here: main names the verbs when none is given (argparse's line says only "required: command").
    commands = parser.add_subparsers(dest="command")
    for verb in VERBS.values():
        verb.add_to(commands)
    return parser


def _show_warning(command, default, message, category, filename, lineno, file=None, line=None) -> None:
    """pyro_bnn's own warnings as one ``pyro-bnn COMMAND: warning: ...`` line (their text says what to do; the
    library line that raised them does not help); other libraries' warnings as Python shows them."""
    if category.__module__.split(".")[0] == "pyro_bnn":
        text = " ".join(str(message).split())
        print(f"pyro-bnn {command}: warning: {text}", file=sys.stderr if file is None else file)
    else:
        default(message, category, filename, lineno, file, line)


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll reports an error on its end): a broken pipe that is
    stdout's rather than a socket's (a Ray cluster's, reported as an error)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll on this system, or stdout is no file
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one verb and returns its exit status.

    What reaches the user is decided by type, here only: a :class:`UserError` (an argument or path problem, found by
    the verb's checks before any work) is one line and status 2; a file system refusing a write during the work
    (:data:`_REFUSED_WRITES`) one line naming the file and status 1, as is a diverged training; an interruption
    status 130, with what the verb keeps of its work and how to take it up again (its ``on_interrupt``); a reader
    that closed stdout (``pyro-bnn list | head``) nothing, status 1. Any other exception keeps its traceback: it is a
    bug to report.

    Installed plugins are loaded first (:func:`~pyro_bnn.plugins.load_plugins`); one that fails is a warning line and
    the command goes on without it.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    _load_plugins(quiet=argv[:1] == ["plugins"])
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if args.command is None:
        parser.error(f"name a verb, one of: {', '.join(VERBS)} (pyro-bnn --help says what each does)")
    verb = VERBS[args.command]
    if unknown:  # said by the verb's own parser, so the usage line and the prefix are the verb's
        verb.parser().error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        with warnings.catch_warnings():  # restores showwarning afterwards
            warnings.showwarning = functools.partial(_show_warning, args.command, warnings.showwarning)
            status = verb.run(args)
            sys.stdout.flush()  # a reader gone (``pyro-bnn list | head``) is found here, not at exit
            return status
    except UserError as err:
        # One line, whatever the message: some errors from the libraries underneath span several.
        text = "; ".join(line.strip() for line in str(err).splitlines() if line.strip())
        print(f"pyro-bnn {args.command}: error: {verb.spell_flags(text)}", file=sys.stderr)
        return 2
    except NonFiniteLossError as err:
        print(f"pyro-bnn {args.command}: training stopped: {err}", file=sys.stderr)
        return 1
    except (GridBusyError, ConnectionError, CheckpointMismatchError) as err:
        if isinstance(err, BrokenPipeError) and _stdout_closed():
            # The reader of stdout closed it: nothing to report to anyone. Later writes (the interpreter's flush
            # at exit) go nowhere rather than raise again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        # Found after the checks, by whatever writes a grid (another process took the folder since), a Ray
        # cluster gone since, or a resumed checkpoint that does not fit the trainer set up for it: not bugs; one
        # line naming the holder, the address or the file.
        print(f"pyro-bnn {args.command}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        if err.errno not in _REFUSED_WRITES or err.filename is None:
            raise
        print(f"pyro-bnn {args.command}: error: {err.filename}: {err.strerror}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"pyro-bnn {args.command}: {verb.interrupted(args)}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
