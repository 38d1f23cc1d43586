"""Node-noise training steps of torchvision-size networks against their deterministic steps, in one process:
``python bench/node_noise_large.py --device cuda``.

For each model (``resnet18`` and ``vgg16`` of the zoo, CIFAR-10 shape: 3x32x32 inputs, 10 classes):

- ``deterministic``: plain torch, cross-entropy, SGD (Nesterov 0.9);
- ``node noise, mixture:4 (S = 2)``: what ``pyro-bnn train --model MODEL --node-noise`` runs: every conv/linear
  input noisy, the ``mixture:4`` guide, :class:`~pyro_bnn.infer.MixtureMeanKL` with S = 2 copies of each example (so
  the network runs on 2 B rows), SGD with two parameter groups.

The batches are random images (CIFAR-10 is not installed here; a step's cost does not depend on the pixel values).
Figures: ms per step (median over rounds), the ratio to the deterministic step in the same round, and the training
seconds of a 50 000-image epoch at that rate. Writes ``bench/NODE_NOISE_LARGE.md`` and
``bench/node_noise_large-<device type>.json``.
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
import run as bench_run  # noqa: E402  (bench/run.py: timing, machine)
import steps  # noqa: E402

from pyro_bnn import BNN  # noqa: E402
from pyro_bnn.guides import NodeNoiseMixture  # noqa: E402
from pyro_bnn.infer import ParamGroups, RuntimeOptions, Trainer  # noqa: E402
from pyro_bnn.infer.mixture_kl import MixtureMeanKL  # noqa: E402
from pyro_bnn.likelihoods import Categorical  # noqa: E402
from pyro_bnn.models import build_model  # noqa: E402
from pyro_bnn.node_noise import NodeNoisePrior, add_node_noise, count_latents  # noqa: E402

NUM_DATA = 50_000
SHAPE = (3, 32, 32)


def _builders(model: str) -> dict:
    def net(device):
        torch.manual_seed(0)
        return build_model(model, input_shape=SHAPE, num_classes=10).to(device)

    def deterministic(x, y, num_data):
        network = net(x.device)
        optimizer = torch.optim.SGD(network.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)

        def step(x, y):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(network(x), y).backward()
            optimizer.step()

        return steps.from_step(step)

    def node_noise(x, y, num_data):
        bnn = BNN(add_node_noise(net(x.device)), NodeNoisePrior(0.1).to(x.device), Categorical(num_data))
        sgd = {"momentum": 0.9, "nesterov": True}
        optim = ParamGroups(
            model={"lr": 0.05 / num_data, "weight_decay": 5e-4 * num_data, **sgd},
            guide={"lr": 0.3 / num_data, **sgd},
        )
        trainer = Trainer(
            bnn,
            lambda m: NodeNoiseMixture(m, 4),
            objective=MixtureMeanKL(2),
            optim=optim,
            runtime=RuntimeOptions(seed=0, progress=False),
        )
        trainer.setup(x, y)
        return steps.fit_run(trainer, num_data)  # the epoch's steps, not the fit's once-per-fit checks

    return {steps.DETERMINISTIC: deterministic, "node noise, mixture:4 (S = 2)": node_noise}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", nargs="+", default=["resnet18", "vgg16"])
    parser.add_argument("--batch-size", type=flags.positive_int, default=128)
    parser.add_argument("--steps", type=flags.positive_int, default=10)
    parser.add_argument("--rounds", type=flags.positive_int, default=3)
    args = parser.parse_args()
    device = torch.device(args.device)
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(args.batch_size * args.steps, *SHAPE, generator=generator)
    y = torch.randint(0, 10, (len(x),), generator=generator)
    batches = list(zip(x.to(device).split(args.batch_size), y.to(device).split(args.batch_size), strict=True))
    result = {
        "command": "python " + " ".join(["bench/node_noise_large.py", *sys.argv[1:]]),
        "date": datetime.date.today().isoformat(),
        "commit": bench_run._git_commit(),
        "machine": bench_run.machine(),
        "device": str(device),
        "batch_size": args.batch_size,
        "models": {},
    }
    for model in args.models:
        latents = count_latents(add_node_noise(build_model(model, input_shape=SHAPE, num_classes=10))).input_nodes
        rows = bench_run.time_variants(_builders(model), batches, args.rounds, device)
        result["models"][model] = {"latents": latents, "rows": rows}
        for name, row in rows.items():
            print(f"{model} {name:<32} {row['ms_per_step']:8.1f} ms  {row['ratio']:.2f}x", flush=True)

    steps_per_epoch = -(-NUM_DATA // args.batch_size)
    lines = [
        "# Node-noise steps of torchvision-size networks",
        "",
        f"Command: `{result['command']}`, {result['date']}, commit {result['commit']}.",
        f"Machine: {result['machine']}; device `{result['device']}`. Random 3x32x32 images (CIFAR-10 shape), "
        f"batches of {args.batch_size}, {args.steps} steps per round, {args.rounds} rounds; epoch = "
        f"{steps_per_epoch} steps (50 000 images).",
        "",
        "| model | latents (noisy inputs) | variant | ms/step | × det. | s per epoch |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for model, entry in result["models"].items():
        for name, row in entry["rows"].items():
            lo, hi = row["ratio_range"]
            lines.append(
                f"| {model} | {entry['latents']} | {name} | {row['ms_per_step']:.1f} | **{row['ratio']:.2f}** "
                f"({lo:.2f}–{hi:.2f}) | {row['ms_per_step'] * steps_per_epoch / 1000:.1f} |"
            )
    (HERE / f"node_noise_large-{device.type}.json").write_text(json.dumps(result, indent=2) + "\n")
    (HERE / "NODE_NOISE_LARGE.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
