"""Time and peak memory of posterior predictive sampling against the floor of S plain forward passes.

- floor: the deterministic 3FC net run S times over the N inputs (batches of 1000, ``torch.no_grad``);
- ours: ``pyro_bnn.predict(bnn, guide, x, num_samples=S)`` with the default (flat) guide: S weight draws, every
  input scored by every draw, probabilities ``(S, N, C)`` returned.

Peak memory is measured in a fresh process: on a CPU the peak resident set size during ``predict`` (Linux's VmHWM,
reset just before the call) minus the resident size before it; on CUDA ``torch.cuda.max_memory_allocated`` minus
the allocation before. The returned ``(S, N, C)`` tensor is subtracted, so the figure is what prediction needs on
top of its result.

Run alone: ``python bench/predictive.py --memory --samples 50 --inputs 2000`` prints the memory figure as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import flags  # bench/flags.py: this script's folder is on sys.path
import torch

from pyro_bnn import BNN
from pyro_bnn.guides import DEFAULT_GUIDE, parse_guide
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.predict import predict
from pyro_bnn.priors import NormalPrior

BATCH = 1000


def _setup(device: torch.device, num_inputs: int):
    torch.manual_seed(0)
    net = build_model("3fc", input_shape=(1, 28, 28), num_classes=10).to(device)
    bnn = BNN(net, NormalPrior(0.0, 1.0).to(device), Categorical(60_000))
    x = torch.rand(num_inputs, 1, 28, 28, device=device)
    guide = parse_guide(DEFAULT_GUIDE).build(bnn).to(device)
    with torch.no_grad():
        guide(x[:2], torch.zeros(2, dtype=torch.long, device=device))
    return bnn, guide, x


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timings(device: torch.device, num_samples: int, num_inputs: int, repeats: int = 3) -> dict:
    """Median seconds of the floor and of ``predict``, measured alternately, and their ratio."""
    bnn, guide, x = _setup(device, num_inputs)
    net = bnn.net

    def floor() -> None:
        with torch.no_grad():
            for _ in range(num_samples):
                for batch in x.split(BATCH):
                    net(batch)

    def ours() -> None:
        predict(bnn, guide, x, num_samples=num_samples, batch_size=BATCH)

    floor(), ours()  # warm-up
    runs: dict[str, list[float]] = {"floor": [], "predict": []}
    for _ in range(repeats):
        for name, fn in (("floor", floor), ("predict", ours)):
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            runs[name].append(time.perf_counter() - start)
    floor_s, ours_s = statistics.median(runs["floor"]), statistics.median(runs["predict"])
    return {
        "samples": num_samples,
        "inputs": num_inputs,
        "floor_s": floor_s,
        "predict_s": ours_s,
        "ratio": ours_s / floor_s,
    }


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_memory_here(device: torch.device, num_samples: int, num_inputs: int) -> dict:
    """Peak bytes ``predict`` needs beyond its ``(S, N, C)`` result (call in a fresh process)."""
    bnn, guide, x = _setup(device, num_inputs)
    predict(bnn, guide, x[:BATCH], num_samples=2, batch_size=BATCH)  # allocator and kernels warm
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    else:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM, the peak resident set size, to VmRSS
        before = _rss_kib("VmRSS") * 1024
    prediction = predict(bnn, guide, x, num_samples=num_samples, batch_size=BATCH)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
    else:
        peak = _rss_kib("VmHWM") * 1024
    result_bytes = prediction.probs.numel() * prediction.probs.element_size()
    return {
        "samples": num_samples,
        "inputs": num_inputs,
        "result_bytes": result_bytes,
        "peak_beyond_result_bytes": peak - before - result_bytes,
    }


def _fresh(mode: str, device: torch.device, num_samples: int, num_inputs: int) -> dict:
    command = [
        sys.executable,
        __file__,
        mode,
        "--device",
        str(device),
        "--samples",
        str(num_samples),
        "--inputs",
        str(num_inputs),
    ]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def peak_memory(device: torch.device, num_samples: int, num_inputs: int) -> dict:
    """:func:`peak_memory_here` in a fresh Python process (so earlier allocations do not hide the peak)."""
    return _fresh("--memory", device, num_samples, num_inputs)


def timings_fresh(device: torch.device, num_samples: int, num_inputs: int) -> dict:
    """:func:`timings` in a fresh Python process, as the memory figure: on an H100, ``predict`` (S = 100,
    N = 10 000) took 0.31 s after the training benchmark in the same process and 0.20 s alone."""
    return _fresh("--timings", device, num_samples, num_inputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memory", action="store_true", help="print the peak-memory figure as JSON")
    parser.add_argument("--timings", action="store_true", help="print the timings as JSON")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--samples", type=flags.positive_int, default=50)
    parser.add_argument("--inputs", type=flags.positive_int, default=2000)
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.memory:
        print(json.dumps(peak_memory_here(device, args.samples, args.inputs)))
    else:
        print(json.dumps(timings(device, args.samples, args.inputs)))


if __name__ == "__main__":
    main()
