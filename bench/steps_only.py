"""The training-step table of bench/run.py alone (no predictive, profile or epoch timings): for comparing two code
states on one machine in a few minutes.

    cd CHECKOUT && PYTHONPATH=. python /path/to/bench/steps_only.py OUT.json ROUNDS BATCH_SIZE [BATCH_SIZE ...]

runs CHECKOUT's own bench/run.py and bench/steps.py (so an older checkout is timed by its own benchmark code) and
writes OUT.json; each row's ratio is its step time over the deterministic step's in the same round (median over
rounds). bench/ARCH_V4.md holds the before/after table of issue 42 made with it.
"""

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, "bench")
import competitors  # noqa: E402
import flags
import run
import steps

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("out", type=Path)
parser.add_argument("rounds", type=flags.positive_int)
parser.add_argument("sizes", type=flags.positive_int, nargs="+", metavar="BATCH_SIZE")
args = parser.parse_args()
out, rounds, sizes = args.out, args.rounds, args.sizes
torch.set_num_threads(2)
builders = dict(steps.OURS)
for name, build_step in competitors.AVAILABLE.items():
    builders[name] = lambda x, y, n, build_step=build_step: steps.from_step(build_step(x, y, n))
result = {"rounds": rounds, "training": {}}
for batch_size in sizes:
    batches, _ = run.load_batches(batch_size, 10, torch.device("cpu"))
    torch.manual_seed(0)
    result["training"][batch_size] = run.time_variants(builders, batches, rounds, torch.device("cpu"))
    for name, row in result["training"][batch_size].items():
        print(f"{batch_size} {name:<45} {row['ms_per_step']:8.1f} ms  {row['ratio']:.2f}x", flush=True)
out.write_text(json.dumps(result, indent=2) + "\n")
