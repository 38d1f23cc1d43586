"""The per-run file writes of training, timed (bench/TRAINING_IO.md).

Runs one training run in this process with the pyro_bnn that ``PYTHONPATH`` names (so one script times two
checkouts) and writes a JSON file: the wall time, the seconds spent in the Checkpoint, HistoryLogger and
WeightStatsRecorder callbacks (their ``on_epoch_end`` and ``on_train_end``), and the run's numbers without its times
(metrics, history, a hash of the final checkpoint's model and guide, a hash of weight_stats.json), for ``compare``.

    PYTHONPATH=<tree> python bench/training_io.py priors <run id prefix> <epochs> <out.json>
    PYTHONPATH=<tree> python bench/training_io.py train <out.json> <pyro-bnn train arguments, --out included>
    python bench/training_io.py compare <a.json> <b.json>
    python bench/training_io.py jsontext [<records>]

``jsontext`` times one rewrite of a history of ``<records>`` (default 1 000) six-field records by
:class:`pyro_bnn._io.JsonListText`, the last record new (the others encoded by an earlier rewrite), against
``json.dumps(indent=2)`` of the whole list, and checks that the two texts are equal.

``priors`` trains one run of the priors experiment's paper profile with its epochs replaced (as ``execute_run``
does, into a fresh temporary folder); ``train`` runs ``pyro-bnn train``. torch uses one thread. With
``TRAINING_IO_INTERVAL=<seconds>`` in the environment, ``pyro_bnn.runs.runs.MIN_WRITE_INTERVAL_S`` is set to it
(a checkout that has it): 0 times the other changes without the interval.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

SPENT: dict[str, float] = {}


def _time_callbacks() -> None:
    from pyro_bnn.diagnostics.weight_stats import WeightStatsRecorder
    from pyro_bnn.infer.callbacks import Checkpoint, HistoryLogger

    def timed(cls: type, name: str) -> None:
        original = getattr(cls, name)

        def wrapper(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                SPENT[cls.__name__] = SPENT.get(cls.__name__, 0.0) + time.perf_counter() - start

        setattr(cls, name, wrapper)

    for cls in (Checkpoint, HistoryLogger, WeightStatsRecorder):
        timed(cls, "on_epoch_end")
        timed(cls, "on_train_end")


def _untimed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if "time" not in k}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _numbers(run: Path) -> dict[str, Any]:
    """What the run produced, without its times."""
    checkpoint = torch.load(run / "checkpoint.pt", weights_only=True)
    digest = hashlib.sha256()
    for part in ("model", "guide"):
        for key, tensor in sorted(checkpoint[part].items()):
            digest.update(key.encode())
            digest.update(tensor.cpu().numpy().tobytes())
    stats = run / "weight_stats.json"
    return {
        "metrics": _untimed(json.loads((run / "metrics.json").read_text())),
        "history": _untimed(json.loads((run / "history.json").read_text())),
        "params_sha256": digest.hexdigest(),
        "weight_stats_sha256": hashlib.sha256(stats.read_bytes()).hexdigest() if stats.exists() else None,
    }


def _priors(prefix: str, epochs: int) -> Path:
    from pyro_bnn.reproduce import get_experiment
    from pyro_bnn.reproduce.records import execute_run

    experiment = get_experiment("priors")
    profile = experiment.profiles["paper"]
    specs = experiment.plan(profile, profile.seeds, {"mnist": "../shared/datasets/mnist"})
    spec = next(s for s in specs if s.run_id.startswith(prefix))
    spec = dataclasses.replace(spec, config=dataclasses.replace(spec.config, epochs=epochs))
    folder = Path(tempfile.mkdtemp(prefix="training-io-"))
    execute_run(spec, folder)
    return folder / spec.run_id


def _train(args: list[str]) -> Path:
    from pyro_bnn.cli import main

    assert not main(["train", *args])
    return Path(args[args.index("--out") + 1])


def _jsontext(records: int, repeats: int = 50) -> None:
    from pyro_bnn._io import JsonListText

    def record(epoch: int) -> dict[str, Any]:
        return {
            "epoch": epoch,
            "loss": 1.0 / (epoch + 1),
            "val_accuracy": 0.5 + epoch * 1e-4,
            "val_ece": 0.031,
            "time_s": epoch * 0.37,
            "lr": 1e-3,
        }

    cached, dumped = [], []
    for _ in range(repeats):
        history = [record(i) for i in range(records - 1)]
        encoder = JsonListText(indent=2)
        encoder.text(history)  # encoded as the epochs before wrote it
        history.append(record(records - 1))
        start = time.perf_counter()
        text = encoder.text(history)
        cached.append(time.perf_counter() - start)
        start = time.perf_counter()
        reference = json.dumps(history, indent=2)
        dumped.append(time.perf_counter() - start)
        if text != reference:
            sys.exit(f"JsonListText's text differs from json.dumps's after {len(history)} records")
    print(
        f"{records} records, median of {repeats} rewrites: JsonListText {statistics.median(cached) * 1e3:.2f} ms, "
        f"json.dumps(indent=2) {statistics.median(dumped) * 1e3:.2f} ms (texts equal)"
    )


def main() -> None:
    command, rest = sys.argv[1], sys.argv[2:]
    if command == "jsontext":
        _jsontext(int(rest[0]) if rest else 1000)
        return
    if command == "compare":
        a, b = (json.loads(Path(p).read_text()) for p in rest)
        same = {key: a[key] == b[key] for key in ("metrics", "history", "params_sha256", "weight_stats_sha256")}
        print(same)
        sys.exit(0 if all(same.values()) else 1)
    import pyro_bnn

    torch.set_num_threads(1)
    if "TRAINING_IO_INTERVAL" in os.environ:
        from pyro_bnn.runs import runs

        runs.MIN_WRITE_INTERVAL_S = float(os.environ["TRAINING_IO_INTERVAL"])
    _time_callbacks()
    start = time.perf_counter()
    if command == "priors":
        run, out = _priors(rest[0], int(rest[1])), rest[2]
    else:
        run, out = _train(rest[1:]), rest[0]
    wall = time.perf_counter() - start
    result = {"tree": str(Path(pyro_bnn.__file__).parents[1]), "wall_s": wall, "callbacks_s": SPENT, **_numbers(run)}
    Path(out).write_text(json.dumps(result))
    print(out, f"{wall:.2f} s", {k: round(v, 2) for k, v in SPENT.items()}, result["params_sha256"][:12])


if __name__ == "__main__":
    main()
