"""Exceptions shared by the command-line front ends (``pyro_bnn.cli`` and ``pyro_bnn.reproduce.cli``)."""


class UserError(Exception):
    """A problem the user fixes (a bad option, missing data, an occupied output folder): one line, exit code 2."""
