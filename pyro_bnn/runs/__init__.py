"""The run engine: one run described by a :class:`RunConfig`, trained by :func:`train_run` into a run folder and
re-scored by :func:`evaluate_run`; what every command of ``pyro-bnn`` and every paper reproduction runs.

- :mod:`~pyro_bnn.runs.config`: :class:`RunConfig`, the validated description of a run, and the device it asks for.
- :mod:`~pyro_bnn.runs.runs`: :func:`train_run` (data, model, guide, trainer, scoring, the folder's files), and the
  steps it is made of (:func:`~pyro_bnn.runs.runs.load_data`, :func:`~pyro_bnn.runs.runs.restore`, ...).
- :mod:`~pyro_bnn.runs.optimisation`: a run's optimiser, learning-rate schedule and objective.
- :mod:`~pyro_bnn.runs.scoring`: a run's test metrics and figure; :mod:`~pyro_bnn.runs.conformal` and
  :mod:`~pyro_bnn.runs.selective_scoring`, the conformal and selective-prediction records it adds
  (``pyro_bnn.runs.selective`` is a deprecated shim of the latter).
- :mod:`~pyro_bnn.runs.run_folder`: the folder's lock, writability probe and staging.
- :mod:`~pyro_bnn.runs.evaluate`: :func:`evaluate_run`, re-scoring a saved run (``pyro-bnn evaluate``).
- :mod:`~pyro_bnn.runs.batched_runs`: compatible runs trained as one vectorised batch.
- :mod:`~pyro_bnn.runs.ensemble`: :func:`load_ensemble`, a deep ensemble read from run folders.
- analyses of a saved run, each behind a verb: :mod:`~pyro_bnn.runs.ood_scoring` (OOD detection, ``pyro-bnn evaluate
  --ood``), :mod:`~pyro_bnn.runs.temperature_scaling` (``evaluate --temperature``), :mod:`~pyro_bnn.runs.diagnose`
  (``diagnose``), :mod:`~pyro_bnn.runs.laplace_run` (``laplace``) and :mod:`~pyro_bnn.runs.sgmcmc_run` (``sample``).

The verbs themselves are :mod:`pyro_bnn.commands`; the paper reproductions and our own studies are
:mod:`pyro_bnn.reproduce`. This package imports none of the front ends.
"""

from pyro_bnn.runs.config import RunConfig
from pyro_bnn.runs.ensemble import load_ensemble
from pyro_bnn.runs.evaluate import evaluate_run
from pyro_bnn.runs.runs import RunResult, train_run

__all__ = [
    "RunConfig",
    "RunResult",
    "evaluate_run",
    "load_ensemble",
    "train_run",
]
