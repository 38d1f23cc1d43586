"""Where the wall time of one reproduction run goes: a run of a grid, trained alone for a few epochs under cProfile.

Usage (on a GPU machine through ``PROBE=... bash bench/device_grid.sh ...``, or here)::

    python bench/run_probe.py leaky-calibration gpu 3fc-mnist-relu-paper-s0 --epochs 2 --device cuda

Prints each epoch's wall time (from the run's history) and the functions with the most cumulative time. On CUDA a
function that waits for the device (``.item()``, a copy to the host) carries the device time queued before it, so
read the table with the per-epoch times beside it. A grid's run took 14 s an epoch on an H200 with 8 runs sharing
the card (3FC, ``Trace_ELBO``, 83 steps of 512 images); this says how much of that one run alone needs.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import flags  # noqa: E402  (bench/flags.py: this script's folder is on sys.path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment")
    parser.add_argument("profile")
    parser.add_argument("label", help="the run's label (e.g. 3fc-mnist-relu-paper-s0)")
    parser.add_argument("--epochs", type=flags.positive_int, default=2)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--data", default=".devdata", help="folder of data-set folders (default %(default)s)")
    parser.add_argument("--top", type=flags.positive_int, default=30, help="functions shown (default %(default)s)")
    args = parser.parse_args(argv)

    import torch

    from pyro_bnn.reproduce.api import get_experiment
    from pyro_bnn.runs.runs import train_run

    torch.set_num_threads(1)  # as a grid's run trains
    experiment = get_experiment(args.experiment)
    data = Path(args.data)
    dirs = {name: str(data / name) for name in ("mnist", "fashion-mnist") if (data / name).is_dir()}
    specs = experiment.plan(experiment.profiles[args.profile], 1, dirs)
    chosen = [s for s in specs if s.label == args.label]
    if not chosen:
        parser.error(f"no run labelled {args.label!r} in {args.experiment} ({args.profile}); e.g. {specs[0].label}")
    config = replace(chosen[0].config, device=args.device, epochs=args.epochs, patience=0)
    profiler = cProfile.Profile()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        profiler.enable()
        result = train_run(config, out, progress=False)
        profiler.disable()
    wall = time.perf_counter() - started
    epochs = [round(row["time_s"], 2) for row in result.metrics["history"]]
    print(f"{args.label} on {args.device}: {wall:.1f} s in all; epochs (training and validation) {epochs} s")
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(args.top)
    print("\n".join(line for line in text.getvalue().splitlines() if line.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
