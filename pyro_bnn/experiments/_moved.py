"""The deprecation of ``pyro_bnn.experiments``' old module paths: every module that was here moved, and the old path
is a shim of a few lines that star-imports the new module (its public names) and calls
:func:`~pyro_bnn.runs._moved.moved`, which warns once (on the shim's first import) and forwards any other attribute
(a private name an old caller reached for) to the new module. A study's shim also runs the study under ``python -m``
with the old path. Nothing in pyro_bnn imports a shim (tests/experiments/test_moved.py checks).
"""

from __future__ import annotations

from pyro_bnn.runs._moved import moved

MOVED = {
    # the run engine
    "batched_runs": "pyro_bnn.runs.batched_runs",
    "config": "pyro_bnn.runs.config",
    "conformal": "pyro_bnn.runs.conformal",
    "ensemble": "pyro_bnn.runs.ensemble",
    "evaluate": "pyro_bnn.runs.evaluate",
    "optimisation": "pyro_bnn.runs.optimisation",
    "run_folder": "pyro_bnn.runs.run_folder",
    "runs": "pyro_bnn.runs.runs",
    "scoring": "pyro_bnn.runs.scoring",
    "selective": "pyro_bnn.runs.selective_scoring",
    # the run-level analyses behind the verbs (evaluate --ood / --temperature, diagnose, laplace, sample)
    "ood": "pyro_bnn.runs.ood_scoring",
    "temperature": "pyro_bnn.runs.temperature_scaling",
    "diagnose": "pyro_bnn.runs.diagnose",
    "laplace_run": "pyro_bnn.runs.laplace_run",
    "sgmcmc_run": "pyro_bnn.runs.sgmcmc_run",
    # a verb's body, beside its verb
    "demo": "pyro_bnn.commands.demo",
    # our own studies, beside the papers
    "guide_table": "pyro_bnn.reproduce.studies.guide_table",
    "guide_defaults": "pyro_bnn.reproduce.studies.guide_defaults",
    "node_noise_lenet": "pyro_bnn.reproduce.studies.node_noise_lenet",
    "nuts_reference": "pyro_bnn.reproduce.studies.nuts_reference.reference",
    "nuts_comparison": "pyro_bnn.reproduce.studies.nuts_reference.comparison",
    "nuts_report": "pyro_bnn.reproduce.studies.nuts_reference.report",
}
"""``{old module name in pyro_bnn.experiments: the module it moved to}``; each old path is a deprecated shim."""

RUNNABLE = ("guide_table", "guide_defaults", "node_noise_lenet", "nuts_reference")
"""The shims that still run their study with ``python -m pyro_bnn.experiments.<name>``."""

__all__ = ["MOVED", "RUNNABLE", "moved"]
