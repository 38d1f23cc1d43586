"""Seconds per likelihood slice of the 3FC network over 6 000 Fashion-MNIST images, per layer; writes
``bench/SLICES.md``.

The network is a deterministic run written by ``pyro-bnn train`` (by default ``results/diagnostics/3fc-relu-mle``,
made with ``pyro-bnn train --dataset fashion-mnist --model 3fc --guide mle --train-subset 6000 --val-size 0
--normalization unit --epochs 10 --out results/diagnostics/3fc-relu-mle``). For 5 random weights of each layer:

- a 25-point slice on its own (``likelihood_slice(..., options=SliceOptions(max_half_width=0.1))``: the starting
  window, no search), which includes the one forward pass over the images that fills the slice cache;
- the default slice (25 points after the window search), 5 weights sharing one cache
  (``likelihood_slices``), the way ``plateau_fractions`` and ``pyro-bnn diagnose --slices`` run them.

Run: ``python bench/slice_timing.py [RUN_DIR] [--threads T]``.
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path

import flags  # bench/flags.py: this script's folder is on sys.path
import torch

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", nargs="?", default="results/diagnostics/3fc-relu-mle")
    parser.add_argument("--threads", type=flags.positive_int, default=torch.get_num_threads())
    parser.add_argument("--out", default=str(HERE / "SLICES.md"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from pyro_bnn.diagnostics.slices import SliceOptions, likelihood_slice, likelihood_slices, point_values
    from pyro_bnn.runs.evaluate import load_evaluation

    evaluation = load_evaluation(args.run_dir, num_samples=1, device="cpu")
    bnn, train = evaluation.bnn, evaluation.data.train
    x, y = train.x[:6000], train.y[:6000]
    values = point_values(bnn, None)
    generator = torch.Generator().manual_seed(0)
    window_only = SliceOptions(max_half_width=0.1)
    rows = []
    for name in [n for n in values if n.endswith("weight")]:
        shape = values[name].shape
        indices = [tuple(int(torch.randint(0, s, (1,), generator=generator)) for s in shape) for _ in range(5)]
        alone = []
        for index in indices:
            start = time.perf_counter()
            likelihood_slice(bnn.net, bnn.likelihood, x, y, values, name, index, options=window_only)
            alone.append(time.perf_counter() - start)
        start = time.perf_counter()
        likelihood_slices(bnn.net, bnn.likelihood, x, y, values, name, indices)
        shared = (time.perf_counter() - start) / len(indices)
        rows.append((name, alone, shared))
        print(f"{name}: 25 points alone {min(alone):.2f}-{max(alone):.2f} s; default slice {shared:.2f} s", flush=True)

    lines = [
        "# Likelihood slice timings",
        "",
        f"Command: `python bench/slice_timing.py {args.run_dir} --threads {args.threads}`, "
        f"{datetime.date.today().isoformat()}; {len(x)} Fashion-MNIST training images, torch {torch.__version__}, "
        f"{args.threads} thread(s).",
        "",
        "| weight tensor | 25-point slice alone (s, 5 weights) | default slice, window search, shared cache (s each) |",
        "|---|---|---:|",
    ]
    for name, alone, shared in rows:
        lines.append(f"| `{name}` | {min(alone):.2f}-{max(alone):.2f} | {shared:.2f} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
