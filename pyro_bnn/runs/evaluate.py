"""Re-scoring a saved run: what ``pyro-bnn evaluate`` does (with ``--ood``: :mod:`pyro_bnn.runs.ood_scoring`).

The model is rebuilt from the config stored *in the checkpoint*, never from the editable ``config.json`` next to
it; a ``config.json`` that differs is refused, naming the keys. The checkpoint is read (and vetted) before any data
is loaded.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from pyro_bnn._io import write_json_atomically
from pyro_bnn.bnn import BNN
from pyro_bnn.data import (
    DatasetName,
    DatasetSplits,
    TensorSplit,
    parse_corruption,
)
from pyro_bnn.data.corruptions import canonical_corruption
from pyro_bnn.infer import load_checkpoint
from pyro_bnn.infer.checkpoint import config_differences
from pyro_bnn.runs import runs
from pyro_bnn.runs.config import RunConfig, check_corruption, resolve_device
from pyro_bnn.runs.config_compare import normalized_config, same_setting
from pyro_bnn.runs.conformal import (
    ConformalOptions,
    calibration_part_size,
    check_conformal_run,
    conformal_options,
    conformal_record,
)
from pyro_bnn.runs.run_folder import CHECKPOINT, STOPPED, check_not_busy, check_writable
from pyro_bnn.runs.selective_scoring import selective_record


class UnfinishedRunWarning(UserWarning):
    """A run folder whose training did not finish (a checkpoint, no ``metrics.json``) is being scored."""


@dataclass
class Evaluation:
    """A saved run made ready for re-scoring: its config, data, restored model and (corrupted) test inputs."""

    run_dir: Path
    config: RunConfig
    bnn: BNN
    guide: Any
    x: torch.Tensor
    y: torch.Tensor
    corruption: str | None
    """The corruption of ``x`` in its canonical spelling (:func:`~pyro_bnn.data.corruptions.canonical_corruption`),
    which names the files written; None: none."""
    data: DatasetSplits | None = None
    conformal: ConformalOptions | None = None


def check_run_folder(run_dir: str | os.PathLike) -> Path:
    """Checks, before anything is loaded, that ``run_dir`` is a run folder that ``evaluate`` and ``diagnose`` can
    write their results into; returns it as a path.

    Raises:
        FileNotFoundError: ``run_dir`` holds no ``config.json`` (it is not a run folder, or does not exist).
        ValueError: ``run_dir`` is empty, cannot be looked at (a name too long) or cannot be written.
        RunFolderBusyError: a run is training in ``run_dir`` now.
    """
    if os.fspath(run_dir) == "":
        raise ValueError("the run folder is empty; name the --out folder of a 'pyro-bnn train' run")
    run = Path(run_dir)
    try:
        found = (run / "config.json").is_file()
    except OSError as err:  # is_file() is False for a missing path, but a name too long raises
        raise ValueError(f"run folder {run} cannot be used: {err.strerror or err}") from None
    if not found and not run.exists():
        raise FileNotFoundError(f"run folder {run} does not exist")
    if not found:
        raise FileNotFoundError(f"{run} has no config.json: is it a folder written by 'pyro-bnn train'?")
    check_not_busy(run)  # a run still training there: its checkpoint changes under us
    check_writable(run, option="run folder")
    return run


def read_run(
    run_dir: str | os.PathLike, *, num_samples: int | None, device: str | None
) -> tuple[Path, RunConfig, dict[str, Any]]:
    """The run folder, the config its checkpoint was trained with (``num_samples`` and ``device`` replaced where
    given, validated) and the checkpoint itself; reads no data.

    Raises:
        FileNotFoundError: ``run_dir`` is not a run folder or has no checkpoint.
        ValueError: ``config.json`` differs from the checkpoint's config, or a bad option.
    """
    run = check_run_folder(run_dir)
    shown = RunConfig.load(run / "config.json")
    # The checkpoint, not the editable config.json, says what was trained; read (and vet) it before any data.
    state = load_checkpoint(run / CHECKPOINT)
    trained = normalized_config(json.loads(state["config"]), run / CHECKPOINT)
    differing = config_differences(
        trained, json.loads(shown.to_json()), ignore=runs.RESUME_MAY_CHANGE, same=same_setting
    )  # "TANH" in one and "tanh" in the other is the same setting: the parsers ignore case
    if differing:
        raise ValueError(
            f"{run / 'config.json'} does not match the config stored in {run / CHECKPOINT} ({differing}); "
            "restore config.json or retrain"
        )
    changes: dict[str, Any] = {"data_dir": shown.data_dir}
    if num_samples is not None:
        changes["num_samples"] = num_samples
    if device is not None:
        changes["device"] = device
    config = replace(RunConfig.from_dict(trained), **changes).resolved()
    resolve_device(config.device)
    epoch = state.get("epoch")
    if isinstance(epoch, int) and epoch < config.epochs and not _scored_at(run, epoch):  # stopped while training
        stopped = _stop_reason(run)
        warnings.warn(
            f"{run} has no metrics.json of its checkpoint: its training did not finish (the checkpoint holds epoch "
            f"{epoch} of {config.epochs}{stopped}); scoring the weights it has",
            UnfinishedRunWarning,
            stacklevel=2,
        )
    return run, config, state


def _stop_reason(run: Path) -> str:
    """``"; it stopped: <reason>"`` from the run folder's :data:`STOPPED` record of a divergence, or ""."""
    try:
        message = json.loads((run / STOPPED).read_text())["message"]
    except (OSError, ValueError, TypeError, KeyError):
        return ""
    return f"; it stopped: {' '.join(str(message).split())}"


def _scored_at(run: Path, epoch: int) -> bool:
    """Whether ``train`` finished (scored) the run at ``epoch``: it writes ``metrics.json`` last, with the epochs it
    ran (an early-stopped run's are fewer than its config's; an extension interrupted leaves the shorter run's)."""
    try:
        ran = json.loads((run / "metrics.json").read_text()).get("epochs_run", epoch)  # a runner that omits it
    except (OSError, ValueError, AttributeError):
        return False
    return ran == epoch


DataDirs = Mapping[str, str | os.PathLike] | Iterable[tuple[str, str | os.PathLike]]
"""``--data-dir DATASET=PATH`` entries: a mapping (``{"mnist": path}``) or ``(name, path)`` pairs as given on the
command line (where a name given twice can be told)."""


def check_data_dirs(data_dirs: DataDirs | None) -> dict[str, str | os.PathLike]:
    """Validates ``--data-dir DATASET=PATH`` entries before anything is read; returns them keyed by canonical data
    set name (``"fmnist"`` becomes ``"fashion-mnist"``).

    Raises:
        ValueError: ``data_dirs`` is neither a mapping nor pairs, a name is not a data set, names one that is not read
            from files (only MNIST, Fashion-MNIST and CIFAR are), or names one given another folder already (in
            the same or another spelling: ``mnist=A`` and ``MNIST=B``); one line naming both entries.
    """
    if isinstance(data_dirs, (str, bytes, os.PathLike)):
        raise ValueError(f"data_dirs must map data set names to folders ({{'mnist': PATH}}); got {data_dirs!r}")
    entries = data_dirs.items() if isinstance(data_dirs, Mapping) else (data_dirs or ())
    checked: dict[str, str | os.PathLike] = {}
    given: dict[str, str] = {}
    for entry in entries:
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            raise ValueError(
                f"data_dirs entries must be (DATASET, PATH) pairs, e.g. ('mnist', '/data/mnist'); got {entry!r}"
            )
        name, path = entry
        try:
            dataset = DatasetName(name)
        except ValueError as err:
            raise ValueError(f"--data-dir {name}={path}: {err}") from None
        if not dataset.reads_data_dir:
            raise ValueError(
                f"--data-dir {name}={path}: dataset {dataset.value!r} is not read from files "
                "(only mnist, fashion-mnist, cifar10 and cifar100 are)"
            )
        known = checked.get(dataset.value)
        if known is not None and os.path.realpath(known) != os.path.realpath(path):  # one folder written two ways
            raise ValueError(
                f"--data-dir {given[dataset.value]}={known} and --data-dir {name}={path} both name {dataset.value}'s "
                "folder; give it one"
            )
        checked[dataset.value] = path
        given.setdefault(dataset.value, name)
    return checked


def check_data_dirs_used(dirs: Mapping[str, Any], read: set[str]) -> None:
    """Refuses a ``--data-dir`` entry (``dirs`` as :func:`check_data_dirs` returns them) for a data set this
    evaluation does not read (``read``: their names, in any spelling :class:`DatasetName` takes, such as a run's
    ``"fmnist"``), which is a typo, most likely.

    Raises:
        ValueError: one line naming the unused entry and the data sets read.
    """
    read = {DatasetName(name).value for name in read}
    unused = sorted(set(dirs) - read)
    if unused:
        raise ValueError(
            f"--data-dir {unused[0]}={dirs[unused[0]]} is unused: this evaluation reads {', '.join(sorted(read))}"
        )


def with_data_dir(config: RunConfig, dirs: Mapping[str, str | os.PathLike]) -> RunConfig:
    """``config`` reading its data set from the ``--data-dir`` entry for it (``dirs`` as :func:`check_data_dirs`
    returns them, keyed by canonical name), where there is one; ``config.dataset`` is as typed at training, which may
    be an alias (``"fmnist"``)."""
    return replace(config, data_dir=dirs.get(DatasetName(config.dataset).value, config.data_dir))


def load_evaluation(
    run_dir: str | os.PathLike,
    *,
    num_samples: int | None = None,
    corruption: str | None = None,
    device: str | None = None,
    data_dirs: DataDirs | None = None,
    conformal: ConformalOptions | None = None,
) -> Evaluation:
    """Reads a run folder written by :func:`train_run`, restores its model and prepares the test inputs.

    ``data_dirs`` (``{"mnist": path}`` or ``(name, path)`` pairs) names where a data set lies (each once, see
    :func:`check_data_dirs`); an entry for the run's own data set replaces
    the folder its config recorded. ``conformal`` (:mod:`pyro_bnn.runs.conformal`) is checked against the
    run before any data is loaded, and its calibration size against the test set right after.

    Raises:
        FileNotFoundError: no ``config.json`` or checkpoint in ``run_dir``, or the data cannot be found.
        ValueError: ``run_dir`` cannot be written (:func:`check_run_folder`), a bad option or corruption string,
            a corruption for a regression run, or conformal options the run or its test set cannot take.
    """
    dirs = check_data_dirs(data_dirs)
    conformal = None if conformal is None else conformal.check()
    run, config, state = read_run(run_dir, num_samples=num_samples, device=device)
    corruption = None if corruption is None else canonical_corruption(corruption)
    check_corruption(corruption, config)
    if conformal is not None:
        check_conformal_run(conformal, config)
    check_data_dirs_used(dirs, {config.dataset})
    config = with_data_dir(config, dirs)
    resolved = resolve_device(config.device)
    data = runs.load_data(config)
    if conformal is not None:
        calibration_part_size(conformal, len(data.test))
    bnn, guide = runs.restore(config, data, run / CHECKPOINT, resolved, state)
    x = data.test.x
    if corruption is not None:
        x = parse_corruption(corruption, generator=torch.Generator().manual_seed(config.seed))(x)
    return Evaluation(run, config, bnn, guide, x.to(resolved), data.test.y.to(resolved), corruption, data, conformal)


def score_evaluation(evaluation: Evaluation) -> dict[str, Any]:
    """Scores a :func:`load_evaluation` result; writes ``evaluation[-<corruption>].json`` and a reliability
    diagram (regression: ``predictive.png``) into the run folder and returns the metrics; with conformal options,
    the metrics hold their record under ``"conformal"`` (:func:`~pyro_bnn.runs.conformal.conformal_record`,
    on the same test prediction). A classifier's also hold its selective-prediction record under ``"selective"``
    (:func:`~pyro_bnn.runs.selective_scoring.selective_record`), and its risk-coverage figure is written as
    ``risk_coverage[-<corruption>].png``."""
    e, config = evaluation, evaluation.config
    metrics, prediction = runs.score(e.bnn, e.guide, e.x, e.y, config)
    metrics.update(corruption=e.corruption or "none", num_samples=config.num_samples)
    if e.conformal is not None:
        metrics["conformal"] = conformal_record(prediction, e.conformal)
    suffix = "" if e.corruption is None else "-" + e.corruption.replace(":", "_")
    title = f"{config.model} {config.activation}, corruption {e.corruption or 'none'}"
    if prediction.is_classification:
        metrics["selective"] = selective_record(prediction, e.run_dir / f"risk_coverage{suffix}.png", title)
    write_json_atomically(e.run_dir / f"evaluation{suffix}.json", metrics)
    if not prediction.is_classification:
        title = f"{config.model} {config.activation} on {config.dataset}, noise scale {config.noise_scale:g}"
    train = e.data.train if e.data is not None else None
    test = TensorSplit(e.x.cpu(), e.y.cpu())
    runs.save_prediction_figure(prediction, config, e.run_dir, suffix=suffix, title=title, train=train, test=test)
    return metrics


def evaluate_run(
    run_dir: str | os.PathLike,
    *,
    num_samples: int | None = None,
    corruption: str | None = None,
    device: str | None = None,
    conformal: float | None = None,
    conformal_method: str | None = None,
    calibration_size: int | None = None,
) -> dict[str, Any]:
    """Re-scores a saved run on its test split, optionally with corrupted inputs (``"gaussian:0.5"``; not for
    regression runs).

    Writes ``evaluation[-<corruption>].json`` and a matching reliability diagram (regression: ``predictive.png``)
    into the run folder. ``conformal=alpha`` adds split conformal prediction, calibrated on ``calibration_size``
    test inputs (default half) and scored on the rest, with ``conformal_method`` ``"thr"`` (default), ``"aps"`` or
    ``"raps"``; the record is under ``"conformal"`` (:mod:`pyro_bnn.runs.conformal`).
    """
    options = conformal_options(conformal, conformal_method, calibration_size)
    loaded = load_evaluation(run_dir, num_samples=num_samples, corruption=corruption, device=device, conformal=options)
    return score_evaluation(loaded)


# ------------------------------------------------------------------------------------------------ OOD detection
