"""The verbs of the ``pyro-bnn`` command that train, score or sample single runs, one module each (``train``,
``evaluate``, ``demo``, ``diagnose``, ``list``; ``laplace`` and ``sample`` in :mod:`~pyro_bnn.commands.posteriors`),
and what every verb is made of (:mod:`~pyro_bnn.commands.verb`): a :class:`Verb` (name, one-line help, its
arguments, its work) and :func:`options_from_args`, the one way from the parsed arguments to an options object.

The other verbs are registered the same way beside the code they drive: ``reproduce`` and ``ensemble`` in
:mod:`pyro_bnn.reproduce.cli`, ``plugins`` in :mod:`pyro_bnn.plugins`. :mod:`pyro_bnn.cli` lists them all, in the
order of ``pyro-bnn --help``, and builds its parser from that list.

A front end over the run engine :mod:`pyro_bnn.runs` (whose work these verbs drive) and below
:mod:`pyro_bnn.reproduce` (whose ``ensemble`` verb takes ``train``'s options); nothing below the front ends imports
it.
"""

from pyro_bnn.commands.verb import Verb, options_from_args, user_errors

__all__ = ["Verb", "options_from_args", "user_errors"]
