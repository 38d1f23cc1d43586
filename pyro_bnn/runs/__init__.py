"""The run engine: one run described by a :class:`RunConfig`, trained by :func:`train_run` into a run folder and
re-scored by :func:`evaluate_run`; what every command of ``pyro-bnn`` and every paper reproduction runs.

- :mod:`~pyro_bnn.runs.config`: :class:`RunConfig`, the validated description of a run, and the device it asks for.
- :mod:`~pyro_bnn.runs.runs`: :func:`train_run` (data, model, guide, trainer, scoring, the folder's files), and the
  steps it is made of (:func:`~pyro_bnn.runs.runs.load_data`, :func:`~pyro_bnn.runs.runs.restore`, ...).
- :mod:`~pyro_bnn.runs.optimisation`: a run's optimiser, learning-rate schedule and objective.
- :mod:`~pyro_bnn.runs.scoring`: a run's test metrics and figure; :mod:`~pyro_bnn.runs.conformal` and
  :mod:`~pyro_bnn.runs.selective`, the conformal and selective-prediction records it adds.
- :mod:`~pyro_bnn.runs.run_folder`: the folder's lock, writability probe and staging.
- :mod:`~pyro_bnn.runs.evaluate`: :func:`evaluate_run`, re-scoring a saved run (``pyro-bnn evaluate``).
- :mod:`~pyro_bnn.runs.batched_runs`: compatible runs trained as one vectorised batch.
- :mod:`~pyro_bnn.runs.ensemble`: :func:`load_ensemble`, a deep ensemble read from run folders.

Studies and analyses built on these runs (OOD detection, temperature scaling, diagnostics, the demo) are
:mod:`pyro_bnn.experiments`; the paper reproductions are :mod:`pyro_bnn.reproduce`. This package imports neither.
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
