"""Exceptions shared by the command-line front ends (``pyro_bnn.cli`` and ``pyro_bnn.reproduce.cli``)."""


class UserError(Exception):
    """A problem the user fixes (a bad option, missing data, an occupied output folder): one line, exit code 2."""


class GridBusyError(FileExistsError):
    """Another process writes this grid folder now (:mod:`pyro_bnn.reproduce.lock`); one line naming it."""
