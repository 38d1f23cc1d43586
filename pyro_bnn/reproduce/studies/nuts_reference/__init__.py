"""NUTS as a reference posterior for a small BNN, against variational inference:
``python -m pyro_bnn.reproduce.studies.nuts_reference`` (:mod:`.reference`: the study and its command line;
:mod:`.comparison`: how the two posteriors compare; :mod:`.report`: the Markdown report)."""

from pyro_bnn.reproduce.studies.nuts_reference.reference import Settings, main, run

__all__ = ["Settings", "main", "run"]
