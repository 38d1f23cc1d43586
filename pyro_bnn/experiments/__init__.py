"""Experiments: studies and analyses built on the run engine (:mod:`pyro_bnn.runs`, where a :class:`RunConfig` is
trained, scored and re-scored in a run folder).

What lives here:

- analyses of a saved run, each a ``pyro-bnn`` command: OOD detection (``ood``, :func:`evaluate_ood`), temperature
  scaling (``temperature``, :func:`fit_run_temperature`), diagnostics (``diagnose``), Laplace fits and SG-MCMC
  sampling from a run (``laplace_run``, ``sgmcmc_run``; their verbs are in :mod:`pyro_bnn.commands.posteriors`);
- the demo (``demo``) and the studies behind the results, run with ``python -m``: ``guide_table``,
  ``guide_defaults``, ``node_noise_lenet`` and ``nuts_reference`` (with ``nuts_comparison`` and ``nuts_report``).

The paper reproductions are :mod:`pyro_bnn.reproduce`. :class:`RunConfig`, :class:`RunResult`, :func:`train_run`,
:func:`evaluate_run` and :func:`load_ensemble` are :mod:`pyro_bnn.runs`'s, importable from here as before. The
engine's old module paths (``pyro_bnn.experiments.config``, ``.runs``, ``.run_folder``, ``.scoring``,
``.optimisation``, ``.batched_runs``, ``.ensemble``, ``.evaluate``, ``.conformal``, ``.selective``) are deprecated
shims of ``pyro_bnn.runs.<name>``: they warn once on import.
"""

from pyro_bnn.experiments.ood import evaluate_ood
from pyro_bnn.experiments.temperature import fit_run_temperature
from pyro_bnn.runs import RunConfig, RunResult, evaluate_run, load_ensemble, train_run

__all__ = [
    "RunConfig",
    "RunResult",
    "evaluate_ood",
    "evaluate_run",
    "fit_run_temperature",
    "load_ensemble",
    "train_run",
]
