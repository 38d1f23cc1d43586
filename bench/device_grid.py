"""Runs reproduction grids (parts of ``gpu`` profiles) on a GPU machine inside one time limit, and packs what finished.

Usage (on the device machine, through ``bench/device_grid.sh``, which installs the carried wheels first)::

    python3 bench/device_grid.py --limit-s 420 leaky-calibration:gpu:8 implicit-bnn:gpu:8

Each part ``EXPERIMENT:PROFILE[:WORKERS]`` runs in turn as ``pyro-bnn reproduce`` into a work folder, seeded with the
committed grid ``results/<EXPERIMENT>-<PROFILE>/`` when the tree holds one (its done runs are not trained again, so
the profile resumes across slots). A part still running when the limit nears is stopped (its finished runs are
kept; a run cut off part-way is trained again next time). Then, per part, the run folders without checkpoints go
to ``$OUT/<EXPERIMENT>-<PROFILE>.tar.gz``, the command's log to ``$OUT/<EXPERIMENT>-<PROFILE>.log``, and every run's
wall time is printed, so that the next part can be sized from measurements. Back on the development machine::

    tar -xzf <EXPERIMENT>-<PROFILE>.tar.gz -C /tmp/back
    pyro-bnn reproduce EXPERIMENT --out results/<EXPERIMENT>-<PROFILE> --merge /tmp/back/<EXPERIMENT>-<PROFILE>

Data: ``--data DIR`` holds one folder per data set (``DIR/mnist``, ``DIR/fashion-mnist``: the IDX files, ``.gz``
or not), passed as ``--data-dir`` to the grids that read that set; other sets are found the usual ways.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACK_MARGIN_S = 25
"""Seconds kept back from the limit for stopping a part, packing it and the transfer back."""
LEFT_BEHIND = (".pt", ".lock", ".png", "weight_stats.json")
"""Files not packed: checkpoints (large, and the merge needs none), lock files, and the figures and weight
statistics that a commit leaves out too (the report's figures are drawn again by the merge)."""


def parse_part(text: str) -> tuple[str, str, int]:
    """``EXPERIMENT:PROFILE[:WORKERS]`` as ``(experiment, profile, workers)`` (workers default 1)."""
    pieces = text.split(":")
    if len(pieces) not in (2, 3) or not all(pieces):
        raise argparse.ArgumentTypeError(f"part {text!r}: expected EXPERIMENT:PROFILE[:WORKERS]")
    try:
        workers = int(pieces[2]) if len(pieces) == 3 else 1
    except ValueError:
        raise argparse.ArgumentTypeError(f"part {text!r}: WORKERS must be an int, got {pieces[2]!r}") from None
    if workers < 1:
        raise argparse.ArgumentTypeError(f"part {text!r}: WORKERS must be >= 1")
    return pieces[0], pieces[1], workers


def data_dirs_for(experiment: str, profile: str, data: Path | None) -> list[str]:
    """The ``--data-dir`` arguments for the data sets the grid reads that ``data`` holds a folder of."""
    if data is None or not data.is_dir():
        return []
    from pyro_bnn.reproduce.api import get_experiment, grid_datasets

    found = get_experiment(experiment)
    args = []
    for dataset in sorted(grid_datasets(found, found.profiles[profile])):
        if (data / dataset).is_dir():
            args += ["--data-dir", f"{dataset}={data / dataset}"]
    return args


def _cut_off(folder: Path) -> tuple[str, str, float, object, object]:
    """A run folder without ``result.json`` (stopped part-way): its epochs so far and their training seconds, from
    ``history.json`` (one record per finished epoch, ``time_s`` each); both unknown when it has none."""
    label = folder.name.rsplit("-", 1)[0]  # the run id less its hash: the label (config.json names none)
    try:
        history = json.loads((folder / "history.json").read_text())
        epochs = [record for record in history if isinstance(record, dict)]
    except (OSError, ValueError, TypeError):
        return (label, "cut off", 0.0, None, None)
    return (label, "cut off", float(sum(record.get("time_s") or 0.0 for record in epochs)), len(epochs), None)


def data_folder(given: str | None) -> Path | None:
    """``--data`` as the grids (which run from the repository's root) are given it: relative to the root where it lies
    inside it, so that the runs' configs record ``.devdata/mnist`` rather than one machine's absolute path."""
    if not given:
        return None
    folder = Path(given).resolve()
    return folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder


def run_times(grid: Path) -> list[tuple[str, str, float, object, object]]:
    """Per run folder of ``grid``: label, status, seconds, epochs run and test accuracy. A run with a record gives its
    status and wall seconds; one stopped part-way (no record yet) reads "cut off", with the epochs it finished and
    their training seconds, so that the next slot can be sized from how far it got."""
    rows = []
    for folder in sorted(path for path in (grid / "runs").glob("*") if path.is_dir()):
        result = folder / "result.json"
        if not result.exists():
            rows.append(_cut_off(folder))
            continue
        try:
            data = json.loads(result.read_text())
        except (OSError, ValueError):
            rows.append((folder.name, "unreadable", 0.0, None, None))
            continue
        metrics = data.get("metrics") or {}
        rows.append(
            (
                (data.get("spec") or {}).get("label", folder.name),
                data.get("status", "?"),
                float(data.get("seconds") or 0.0),
                metrics.get("epochs_run"),
                metrics.get("accuracy"),
            )
        )
    return rows


def pack(grid: Path, archive: Path) -> int:
    """Writes ``grid`` (its state, report and run folders, without :data:`LEFT_BEHIND`) to ``archive``; returns the
    number of files packed."""
    count = 0
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(grid.rglob("*")):
            if path.is_file() and not path.name.endswith(LEFT_BEHIND) and ".stale" not in path.name:
                tar.add(path, arcname=str(Path(grid.name) / path.relative_to(grid)))
                count += 1
    return count


def _signal_group(pid: int, signal_number: int) -> None:
    """Sends ``signal_number`` to the process group ``pid`` leads, if any of it is still there."""
    try:
        os.killpg(pid, signal_number)
    except ProcessLookupError:
        pass


def run_part(
    experiment: str,
    profile: str,
    workers: int,
    *,
    seconds: float,
    work: Path,
    out: Path,
    data: Path | None,
    device: str,
    batch_runs: str | None,
    suffix: str = "",
) -> None:
    """Runs one part for at most ``seconds``, then packs and reports it (see the module docstring)."""
    name = f"{experiment}-{profile}{suffix}"
    grid = work / name
    committed = ROOT / "results" / name
    if committed.is_dir() and not grid.exists():
        shutil.copytree(committed, grid, ignore=shutil.ignore_patterns("*.lock"))
    command = [
        sys.executable, "-m", "pyro_bnn.cli", "reproduce", experiment, "--profile", profile, "--out", str(grid),
        "--workers", str(workers), "--device", device, "--quiet",
        *(["--batch-runs", batch_runs] if batch_runs is not None else []),
        *data_dirs_for(experiment, profile, data),
    ]  # fmt: skip
    print(f"== {name}: {' '.join(command[2:])} (at most {seconds:.0f} s)", flush=True)
    started = time.monotonic()
    with open(out / f"{name}.log", "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
        try:
            code = process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGTERM)  # the pool's workers too
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            code = "stopped at the time limit"
        _signal_group(process.pid, signal.SIGKILL)  # whatever is left of the group: nothing writes while we pack
        process.wait()
    elapsed = time.monotonic() - started
    rows = run_times(grid)
    done = sum(1 for row in rows if row[1] == "done")
    cut = sum(1 for row in rows if row[1] == "cut off")
    cut_text = f", {cut} cut off (their seconds: the epochs they finished)" if cut else ""
    print(f"== {name}: exit {code}, {elapsed:.0f} s wall; {done} of {len(rows)} run folders done{cut_text}", flush=True)
    for label, status, wall, epochs, accuracy in rows:
        accuracy_text = f"{accuracy:.4f}" if isinstance(accuracy, (int, float)) else "-"
        print(f"   {label:<44} {status:<8} {wall:7.1f} s  epochs {epochs if epochs is not None else '-':<3} "
              f"accuracy {accuracy_text}")  # fmt: skip
    if grid.exists():
        files = pack(grid, out / f"{name}.tar.gz")
        print(f"== {name}: packed {files} files into {name}.tar.gz", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("parts", nargs="+", type=parse_part, help="EXPERIMENT:PROFILE[:WORKERS], run in turn")
    parser.add_argument("--limit-s", type=float, required=True, help="wall time for all parts, packing included")
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/device-out"), help="where archives go ($OUT)")
    parser.add_argument("--work", default="/tmp/device-grids", help="where the grids run")
    parser.add_argument("--data", default=".devdata", help="folder of data-set folders (default %(default)s)")
    parser.add_argument("--device", default="cuda", help="device of every run (default %(default)s)")
    parser.add_argument(
        "--batch-runs",
        default=None,
        help="reproduce's --batch-runs (default: the experiment's own, auto for leaky-calibration and priors)",
    )
    parser.add_argument(
        "--suffix",
        default="",
        help="added to each grid's folder name, e.g. -batched: a second grid of the same profile (the same run ids, "
        "trained another way) kept apart from the first",
    )
    parser.add_argument(
        "--started",
        type=float,
        default=float(os.environ.get("DEVICE_GRID_STARTED", "0")) or None,
        help="when the slot's command began (seconds since the epoch; default $DEVICE_GRID_STARTED, else now): the "
        "limit counts from it, so set-up before this script (installing wheels, a probe) is inside it",
    )
    args = parser.parse_args(argv)
    if args.limit_s <= PACK_MARGIN_S:
        parser.error(f"--limit-s must exceed {PACK_MARGIN_S} (the time kept for packing), got {args.limit_s:g}")
    spent = max(0.0, time.time() - args.started) if args.started else 0.0
    deadline = time.monotonic() + args.limit_s - spent - PACK_MARGIN_S
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    data = data_folder(args.data)
    for experiment, profile, workers in args.parts:
        left = deadline - time.monotonic()
        if left < 30:
            print(f"== {experiment}-{profile}: not started, {left:.0f} s left", flush=True)
            continue
        run_part(
            experiment,
            profile,
            workers,
            seconds=left,
            work=work,
            out=out,
            data=data,
            device=args.device,
            batch_runs=args.batch_runs,
            suffix=args.suffix,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
