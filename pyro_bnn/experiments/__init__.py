"""Deprecated: every module of ``pyro_bnn.experiments`` moved, and each old path is a shim that warns once on import
(``DeprecationWarning``) and forwards to the new module (the list: ``pyro_bnn.experiments._moved.MOVED``).

Where things are now:

- the run engine, :mod:`pyro_bnn.runs`: a :class:`RunConfig` trained, scored and re-scored in a run folder, and the
  run-level analyses behind the verbs: OOD detection (:mod:`pyro_bnn.runs.ood_scoring`, ``pyro-bnn evaluate
  --ood``), temperature scaling (:mod:`pyro_bnn.runs.temperature_scaling`, ``evaluate --temperature``), diagnostics
  (:mod:`pyro_bnn.runs.diagnose`), Laplace fits and SG-MCMC sampling (:mod:`pyro_bnn.runs.laplace_run`,
  :mod:`pyro_bnn.runs.sgmcmc_run`);
- the verbs of ``pyro-bnn``, :mod:`pyro_bnn.commands` (the demo's body is :mod:`pyro_bnn.commands.demo`);
- the paper reproductions, :mod:`pyro_bnn.reproduce.papers`, and our own studies, :mod:`pyro_bnn.reproduce.studies`
  (``python -m pyro_bnn.experiments.guide_table`` and the other studies' old paths still run them).

The package itself still re-exports, without a warning, :class:`RunConfig`, :class:`RunResult`, :func:`train_run`,
:func:`evaluate_run`, :func:`load_ensemble` (:mod:`pyro_bnn.runs`), :func:`evaluate_ood` and
:func:`fit_run_temperature`.
"""

from pyro_bnn.runs import RunConfig, RunResult, evaluate_run, load_ensemble, train_run
from pyro_bnn.runs.ood_scoring import evaluate_ood
from pyro_bnn.runs.temperature_scaling import fit_run_temperature

__all__ = [
    "RunConfig",
    "RunResult",
    "evaluate_ood",
    "evaluate_run",
    "fit_run_temperature",
    "load_ensemble",
    "train_run",
]
