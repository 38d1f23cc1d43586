"""Node-noise LeNet step against the deterministic LeNet step, in one process: ``python bench/node_noise.py``.

Rows (each one pass of ``Trainer.fit``, timed by its epoch's ``time_s`` without the fit's once-per-fit checks, or
a plain torch loop over the same Fashion-MNIST batches; ratios to the deterministic step in the same round, median
over rounds):

- ``deterministic LeNet``: plain torch, cross-entropy, SGD (Nesterov 0.9);
- ``node noise, mixture:4``: what ``pyro-bnn train --model lenet --node-noise`` runs: every conv/linear input noisy,
  the ``mixture:4`` guide, :class:`~pyro_bnn.infer.MixtureMeanKL` with S = 2 copies of each example (so the network
  runs on 2 B rows), SGD with two parameter groups;
- ``weight space, default guide``: the LeNet with random weights, ``flat:rel=1`` and ``--elbo auto``.

Writes ``bench/NODE_NOISE.md`` and ``bench/node_noise.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import flags  # noqa: E402
import run as bench_run  # noqa: E402  (bench/run.py: batches, timing, machine)
import steps  # noqa: E402

from pyro_bnn import BNN  # noqa: E402
from pyro_bnn.guides import DEFAULT_GUIDE, NodeNoiseMixture, parse_guide  # noqa: E402
from pyro_bnn.infer import ParamGroups, RuntimeOptions, Trainer  # noqa: E402
from pyro_bnn.infer.mixture_kl import MixtureMeanKL  # noqa: E402
from pyro_bnn.likelihoods import Categorical  # noqa: E402
from pyro_bnn.models import build_model  # noqa: E402
from pyro_bnn.node_noise import NodeNoisePrior, add_node_noise  # noqa: E402
from pyro_bnn.priors import NormalPrior  # noqa: E402

DETERMINISTIC = "deterministic LeNet"


def _lenet(device):
    return build_model("lenet", input_shape=(1, 28, 28), num_classes=10).to(device)


def deterministic(x, y, num_data):
    net = _lenet(x.device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, nesterov=True)

    def step(x, y):
        optimizer.zero_grad()
        F.cross_entropy(net(x), y).backward()
        optimizer.step()

    return steps.from_step(step)


def _trainer_run(trainer, x, y, num_data):
    trainer.setup(x, y)
    return steps.fit_run(trainer, num_data)  # the epoch's steps, not the fit's once-per-fit checks


def node_noise(x, y, num_data):
    bnn = BNN(add_node_noise(_lenet(x.device)), NodeNoisePrior(0.1).to(x.device), Categorical(num_data))
    sgd = {"momentum": 0.9, "nesterov": True}
    optim = ParamGroups(
        model={"lr": 0.05 / num_data, "weight_decay": 5e-4 * num_data, **sgd}, guide={"lr": 0.3 / num_data, **sgd}
    )
    trainer = Trainer(
        bnn,
        lambda m: NodeNoiseMixture(m, 4),
        objective=MixtureMeanKL(2),
        optim=optim,
        runtime=RuntimeOptions(seed=0, progress=False),
    )
    return _trainer_run(trainer, x, y, num_data)


def weight_space(x, y, num_data):
    bnn = BNN(_lenet(x.device), NormalPrior(0.0, 1.0).to(x.device), Categorical(num_data))
    trainer = Trainer(bnn, parse_guide(DEFAULT_GUIDE).build, runtime=RuntimeOptions(seed=0, progress=False))
    return _trainer_run(trainer, x, y, num_data)


BUILDERS = {
    DETERMINISTIC: deterministic,
    "node noise, mixture:4 (S = 2)": node_noise,
    "weight space, default guide": weight_space,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", type=flags.positive_int, nargs="+", default=[128, 512])
    parser.add_argument("--steps", type=flags.positive_int, default=20)
    parser.add_argument("--rounds", type=flags.positive_int, default=5)
    args = parser.parse_args()
    device = torch.device("cpu")
    result = {
        "command": "python " + " ".join(["bench/node_noise.py", *sys.argv[1:]]),
        "date": datetime.date.today().isoformat(),
        "commit": bench_run._git_commit(),
        "machine": bench_run.machine(),
        "training": {},
    }
    try:  # every batch size's batches before any timing: --steps beyond the data is refused at once
        loaded = {b: bench_run.load_batches(b, args.steps, device) for b in args.batch_sizes}
    except ValueError as err:
        parser.error(str(err))
    steps_deterministic, steps.DETERMINISTIC = steps.DETERMINISTIC, DETERMINISTIC  # the ratios' base row
    try:
        for batch_size, (batches, result["data"]) in loaded.items():
            torch.manual_seed(0)
            result["training"][batch_size] = bench_run.time_variants(BUILDERS, batches, args.rounds, device)
    finally:
        steps.DETERMINISTIC = steps_deterministic
    lines = [
        "# Node-noise LeNet: training step against the deterministic LeNet",
        "",
        f"Command: `{result['command']}` (`make bench`), {result['date']}, commit {result['commit']}.",
        f"Machine: {result['machine']}; device `cpu`. Batches: {result['data']}; {args.steps} steps per round, "
        f"{args.rounds} rounds; median over rounds of the ratio to the deterministic step in the same round "
        "(range in brackets).",
        "",
        "| variant | " + " | ".join(f"ms/step @{b} | × det. @{b}" for b in args.batch_sizes) + " |",
        "|---|" + "---:|---:|" * len(args.batch_sizes),
    ]
    for name in BUILDERS:
        cells = []
        for b in args.batch_sizes:
            row = result["training"][b][name]
            lo, hi = row["ratio_range"]
            cells += [f"{row['ms_per_step']:.1f}", f"**{row['ratio']:.2f}** ({lo:.2f}–{hi:.2f})"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    (HERE / "node_noise.json").write_text(json.dumps(result, indent=2) + "\n")
    report = "\n".join(lines) + "\n"
    (HERE / "NODE_NOISE.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
