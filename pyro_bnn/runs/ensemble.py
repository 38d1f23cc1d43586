"""Deep ensembles from run folders: :func:`load_ensemble` reads M ``pyro-bnn train`` runs as one
:class:`~pyro_bnn.predict.Ensemble`.

It lives in the run engine (:mod:`pyro_bnn.runs`) because it reads run folders and configs; the ensemble itself
(:mod:`pyro_bnn.predict.ensemble`) knows nothing of files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from pyro_bnn.bnn import BNN
from pyro_bnn.data import DatasetName
from pyro_bnn.guides.spec import GuideKind, parse_guide
from pyro_bnn.predict.ensemble import Ensemble
from pyro_bnn.runs import runs
from pyro_bnn.runs.config import resolve_device
from pyro_bnn.runs.evaluate import DataDirs, check_data_dirs, check_data_dirs_used, read_run, with_data_dir
from pyro_bnn.runs.run_folder import CHECKPOINT

# Config keys in which the runs of one ensemble may differ: the seed is what makes them members, the rest says
# only where and on what they ran.
ENSEMBLE_MAY_DIFFER = ("seed", "out", "data_dir", "device")


def load_ensemble(
    run_dirs: Sequence[str | os.PathLike],
    *,
    device: str | None = None,
    data_dirs: DataDirs | None = None,
) -> tuple[BNN, Ensemble]:
    """The ensemble of M run folders written by ``pyro-bnn train``, trained with point guides (``mle``, ``map``).

    Every run is rebuilt from the config stored in its checkpoint (as ``pyro-bnn evaluate`` does); the runs must
    share that config in everything but :data:`ENSEMBLE_MAY_DIFFER` (the seed, and where they ran).

    Args:
        run_dirs: M >= 1 run folders.
        device: ``cpu``, ``cuda``, ``auto``; None: the first run's recorded device.
        data_dirs: ``{"mnist": path}``, where a data set lies (as ``pyro-bnn evaluate --data-dir``).

    Returns:
        ``(bnn, ensemble)``: predict with ``predict(bnn, ensemble, data)``; ``bnn is ensemble.bnn``.

    Raises:
        ValueError: no run folder; configs that differ (one line naming the first key); a run whose guide is not a
            point network (``mle`` or ``map``); and whatever reading a run raises.
        FileNotFoundError: a folder without config or checkpoint, or data that cannot be found.
    """
    if isinstance(run_dirs, (str, os.PathLike)):
        run_dirs = [run_dirs]
    run_dirs = list(run_dirs)
    if not run_dirs:
        raise ValueError("an ensemble needs at least one run folder, got none")
    dirs = check_data_dirs(data_dirs)
    read = [read_run(run_dir, num_samples=None, device=device) for run_dir in run_dirs]
    first = _config_dict(read[0][1])
    for run, config, _ in read:
        spec = parse_guide(config.guide) if config.guide is not None else None
        if spec is None or spec.kind not in (GuideKind.MLE, GuideKind.MAP):
            raise ValueError(f"{run} was trained with guide {config.guide!r}: an ensemble member must be mle or map")
        other = _config_dict(config)
        for key in sorted(set(first) | set(other)):
            if key not in ENSEMBLE_MAY_DIFFER and first.get(key) != other.get(key):
                raise ValueError(
                    f"{run} differs from {read[0][0]} in {key}: {other.get(key)!r} vs {first.get(key)!r}; "
                    f"ensemble members may differ only in {', '.join(ENSEMBLE_MAY_DIFFER)}"
                )
    check_data_dirs_used(dirs, {read[0][1].dataset})
    members = []
    for run, config, state in read:
        config = with_data_dir(config, dirs)
        data = runs.load_data(config)
        bnn, guide = runs.restore(config, data, Path(run) / CHECKPOINT, resolve_device(config.device), state)
        members.append(bnn if not bnn.sites else (bnn, guide))
    ensemble = Ensemble.from_networks(members)
    return ensemble.bnn, ensemble


def _config_dict(config) -> dict:
    """A run config as plain JSON values, ``{key: value}``, its data set named canonically (``fmnist`` and
    ``fashion-mnist`` are one data set)."""
    values = json.loads(config.to_json())
    values["dataset"] = DatasetName(values["dataset"]).value
    return values


__all__ = ["ENSEMBLE_MAY_DIFFER", "load_ensemble"]
