"""A run's record on disk: ``OUT/runs/<run id>/result.json`` written and read back, and the forms a record keeps
(its spec as JSON with portable paths, a binned history, one-line reasons with paths relative to the grid).

Nothing here trains or measures (that is :mod:`pyro_bnn.reproduce.records`); a report, a merge or a re-score reads
records through :func:`read_record` alone.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyro_bnn._io import write_json_atomically
from pyro_bnn.reproduce.planned import RunRecord, RunSpec, Status

RESULT = "result.json"
RUNS = "runs"


def one_line(err: BaseException) -> str:
    """``Type: message`` on one line (some library messages span several)."""
    text = "; ".join(line.strip() for line in str(err).splitlines() if line.strip())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


RECORD_HISTORY_ROWS = 100
"""Most rows of the history a record keeps: a longer history (the full-batch runs of thousands of steps) is binned
by :func:`binned_history`, so that ``result.json`` stays small enough to commit. The run's own ``history.json``
keeps every epoch."""


def binned_history(history: Sequence[dict[str, Any]], rows: int = RECORD_HISTORY_ROWS) -> list[dict[str, Any]]:
    """``history`` as at most ``rows`` rows: consecutive epochs in equal-as-possible bins, each row holding the mean
    of every number over the bin's epochs that have it (a loss curve smoothed over the bin), the last value of
    anything else, ``epoch`` the bin's last epoch and ``epochs`` how many epochs it holds. A history of ``rows``
    epochs or fewer is returned as it is."""
    history = list(history)
    if len(history) <= rows:
        return history
    binned = []
    edges = [round(i * len(history) / rows) for i in range(rows + 1)]
    for start, stop in itertools.pairwise(edges):
        chunk = history[start:stop]
        row: dict[str, Any] = {}
        for key in dict.fromkeys(k for entry in chunk for k in entry):
            values = [entry[key] for entry in chunk if key in entry]
            numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
            row[key] = statistics.fmean(values) if numeric and key != "epoch" else values[-1]
        row["epochs"] = len(chunk)
        binned.append(row)
    return binned


def portable_path(path: str | None) -> str | None:
    """``path`` as a record keeps it: an absolute path relative to the working folder of the command (where the
    command line's own relative paths point), so that committed records name no machine's layout; a relative path
    as it is. The data folder is not part of a run's id, so a grid resumes wherever its data lies."""
    if path is None or not os.path.isabs(path):
        return path
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows): no relative path exists
        return path


def spec_to_dict(spec: RunSpec) -> dict[str, Any]:
    """The JSON form of a spec (``grid.json``, ``result.json``): its id, label, measures, tags and full config
    (its data folders as :func:`portable_path` gives them), and for an ensemble its members' ids."""
    config = json.loads(spec.config.to_json())
    config["data_dir"] = portable_path(config.get("data_dir"))
    values = {
        "run_id": spec.run_id,
        "label": spec.label,
        "measures": list(spec.measures),
        "tags": dict(spec.tags),
        "config": config,
    }
    if spec.other_data:
        values["other_data"] = {name: portable_path(folder) for name, folder in spec.other_data}
    if spec.members:
        values["members"] = [member.run_id for member in spec.members]
    if spec.runner:
        values["runner"] = spec.runner
        values["options"] = dict(spec.options)
    return values


def write_record(folder: Path, record: RunRecord, **extra: Any) -> None:
    """Writes ``folder/result.json`` atomically: the record, its spec, and ``extra`` keys (e.g. a traceback)."""
    folder.mkdir(parents=True, exist_ok=True)
    values = {
        "status": record.status.value,
        "reason": record.reason,
        "seconds": record.seconds,
        "code": record.code,
        **({"threads": record.threads} if record.threads else {}),
        **({"retried": record.retried} if record.retried else {}),
        **({"training_code": record.training_code} if record.training_code else {}),
        "spec": spec_to_dict(record.spec),
        "metrics": record.metrics,
        "history": record.history,
        **extra,
    }
    write_json_atomically(folder / RESULT, values)


_FIELD_TYPES = {
    "metrics": (dict,),
    "history": (list,),
    "seconds": (int, float),
    "threads": (int,),
    "reason": (str,),
    "code": (str,),
    "retried": (str,),
    "training_code": (str,),
}
"""The type each field of a record must have where it is present."""


def _wrong_field(values: dict, status: Status) -> str | None:
    """What makes a parsed record unusable, or None: a field of the wrong type (``"metrics": null``, ``"seconds":
    "abc"``), a history entry that is no record, or a done run without metrics. A report reads these fields of every
    done run, so such a record would stop every later command."""
    for name, types in _FIELD_TYPES.items():
        value = values.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, types)):
            return f"its {name!r} is {type(value).__name__}, not {' or '.join(t.__name__ for t in types)}"
        if name in values and value is None:
            return f"its {name!r} is null"
    if not all(isinstance(entry, dict) for entry in values.get("history", [])):
        return "its 'history' holds an entry that is no epoch record"
    if status is Status.DONE and not values.get("metrics"):
        return "a done run without metrics"
    return None


def read_record(runs_dir: Path, spec: RunSpec) -> RunRecord:
    """The record of ``spec`` in ``runs_dir``: done, failed, missing (no ``result.json``) or damaged (a
    ``result.json`` that cannot be read, the reason naming the file and what is wrong; a grid runs it again)."""
    path = Path(runs_dir) / spec.run_id / RESULT
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return RunRecord(spec, Status.MISSING)
    except OSError as err:
        return RunRecord(spec, Status.DAMAGED, reason=f"{path} cannot be read: {err.strerror or one_line(err)}")
    text = data.decode("utf-8", errors="replace")
    try:
        values = json.loads(data)  # invalid UTF-8 is a ValueError here, as any other damage
        status = Status(values["status"])
        if status in (Status.MISSING, Status.DAMAGED, Status.UNCOUNTED):
            raise ValueError(f"a record cannot be {status.value!r}")
    except ValueError as err:
        what = "is empty" if not text.strip() else f"is not a run record ({one_line(err)})"
        return RunRecord(spec, Status.DAMAGED, reason=f"{path} {what}")
    except (KeyError, TypeError):
        return RunRecord(spec, Status.DAMAGED, reason=f"{path} is not a run record (no status)")
    wrong = _wrong_field(values, status)
    if wrong is not None:
        return RunRecord(spec, Status.DAMAGED, reason=f"{path} is not a run record ({wrong})")
    return RunRecord(
        spec,
        status,
        metrics=values.get("metrics", {}),
        history=values.get("history", []),
        reason=portable_reason(values.get("reason", "")),
        seconds=values.get("seconds", 0.0),
        code=values.get("code", ""),
        threads=values.get("threads", 0),
        retried=values.get("retried", ""),
        training_code=values.get("training_code", ""),
    )


ABSOLUTE_RUN_PATH = re.compile(r"(?<![\w./-])/(?:[^\s/]+/)*?" + re.escape(RUNS) + r"/(?=[^\s/]+-[0-9a-f]{10}(?:/|\b))")
"""An absolute path up to a grid's ``runs/`` folder, followed by a run id (``<label>-<10 hex digits>``); a path
with a space in a folder name is not recognised (the reason keeps it)."""


def portable_reason(text: str) -> str:
    """A stored reason with every absolute path into a grid's run folder cut to ``runs/<run id>/...``: records
    written before :func:`grid_relative` named the machine's folder (``/home/.../runs/ID/checkpoint.pt``), and a
    report must name neither it nor the machine. The record on disk is left as it is."""
    return ABSOLUTE_RUN_PATH.sub(RUNS + "/", text)


def grid_relative(text: str, root: Path) -> str:
    """``text`` with every path under the grid's folder ``root`` written relative to it (``runs/ID/...``)."""
    for prefix in {str(root.resolve()), str(root.absolute())}:
        text = text.replace(prefix + "/", "")
    return text


SOURCE_FILE = re.compile(r'^(  File ")(.+?)(", line \d+)', re.MULTILINE)
"""A traceback's frame line (``  File "/path/to/x.py", line 3, in f``): its path is the second group."""

SOURCE_ANCHOR = re.compile(r"^.*[/\\]((?:pyro_bnn|site-packages|dist-packages|python3\.\d+)[/\\].*)$")
"""Where a source file's path is cut: at its last ``pyro_bnn``, ``site-packages``, ``dist-packages`` or standard
library folder (``python3.11``), whatever lies above it (the machine's checkout or environment); a file under none
of them keeps its name alone."""


def portable_traceback(text: str, root: Path) -> str:
    """A traceback as a record keeps it: paths under the grid's folder ``root`` relative to it
    (:func:`grid_relative`), and each frame's source file from its package down (``File
    "pyro_bnn/infer/trainer.py"``, ``File "site-packages/pyro/infer/svi.py"``) rather than from the machine's
    checkout or environment. The exception's own message is left as :func:`grid_relative` gives it."""

    def source(match: re.Match[str]) -> str:
        path = match.group(2)
        anchored = SOURCE_ANCHOR.match(path)
        short = anchored.group(1) if anchored else re.split(r"[/\\]", path)[-1]
        return match.group(1) + short + match.group(3)

    return SOURCE_FILE.sub(source, grid_relative(text, root))
