"""Where the time of a batched 3FC step goes: ``python bench/profile_batched.py [--device cuda] [--runs 8]``.

Profiles one ``fit_batched`` of R 3FC runs over 60 steps (after one warm-up fit) with ``torch.profiler`` and prints
the operators by device time and by host time, and the wall time per step of the last 40 steps.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))

import batched as bench_batched  # noqa: E402  (bench/batched.py: the workloads)
import flags  # noqa: E402

from pyro_bnn.batched import fit_batched  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=flags.positive_int, default=8)
    parser.add_argument("--steps", type=flags.positive_int, default=60)
    args = parser.parse_args()
    device = torch.device(args.device)
    work = bench_batched._workloads(device, args.steps)["3fc-long"]
    built = [bench_batched._trainer(work, seed, device) for seed in range(args.runs)]
    fit_batched([t for t, _ in built], [loader for _, loader in built], 1, progress=False)  # warm-up
    built = [bench_batched._trainer(work, seed, device) for seed in range(args.runs)]
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        fit_batched([t for t, _ in built], [loader for _, loader in built], 1, progress=False)
        if device.type == "cuda":
            torch.cuda.synchronize()
    print(f"R={args.runs}, {args.steps} steps: {time.perf_counter() - start:.3f} s under the profiler")
    sort = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    print(prof.key_averages().table(sort_by=sort, row_limit=25, max_name_column_width=60))
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=60))


if __name__ == "__main__":
    main()
