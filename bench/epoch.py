"""Training seconds of one full Fashion-MNIST epoch of the 3FC network: pyro_bnn's default BNN and the deterministic
network, in one process.

Both read the 60 000 training images (pixels / 255, as ``pyro-bnn train`` does by default: ``--normalization
unit``; the scaling does not change a step's time) through the loaders ``pyro-bnn train`` builds
(``DatasetSplits.loaders``: batches of 128, shuffled, moved to the device), the last batch of 96 included.
pyro_bnn's figure is the wall time of a ``Trainer.fit`` call that trains the second epoch (the first includes the
set-up and, on CUDA, the graph capture), so it counts what a fit does once besides its steps (its set-up checks;
after the epoch, the finiteness check of the parameters and the unmoved-posterior check), which the per-step rows
of ``bench/run.py`` leave out; the epoch's ``time_s`` (its loop of steps alone) is reported too. The deterministic
figure is the wall time of its second pass of plain steps (mean cross-entropy, fused Adam).

Run alone: ``python bench/epoch.py --device cuda``.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from pyro_bnn import BNN
from pyro_bnn.data import load_dataset
from pyro_bnn.guides import DEFAULT_GUIDE, parse_guide
from pyro_bnn.infer import RuntimeOptions, Trainer
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.priors import NormalPrior

BATCH = 128
NORMALIZATION = "unit"
"""The pixels' scaling: ``pyro-bnn train``'s default (/ 255)."""


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def epoch_times(device: torch.device) -> dict:
    """``{"num_train", "normalization", "bnn_s", "bnn_steps_s", "deterministic_s", "ratio", "cuda_graph"}`` for one
    epoch (the second) of each; ``bnn_steps_s``: the epoch's ``time_s`` (its loop of steps, without the fit's
    once-per-fit checks).

    Raises:
        FileNotFoundError: Fashion-MNIST is not installed (the benchmark then leaves this part out).
    """
    data = load_dataset("fashion-mnist", normalization=NORMALIZATION, val_size=0, seed=0)
    train, _, _ = data.loaders(BATCH, seed=0, device=device)
    num_train = len(data.train)

    torch.manual_seed(0)
    net = build_model("3fc", input_shape=(1, 28, 28), num_classes=10).to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3, fused=True)
    seconds = []
    for _ in range(2):
        _sync(device)
        start = time.perf_counter()
        for x, y in train:
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(net(x), y).backward()
            optimizer.step()
        _sync(device)
        seconds.append(time.perf_counter() - start)

    torch.manual_seed(0)
    net = build_model("3fc", input_shape=(1, 28, 28), num_classes=10).to(device)
    bnn = BNN(net, NormalPrior(0.0, 1.0).to(device), Categorical(num_train))
    trainer = Trainer(bnn, parse_guide(DEFAULT_GUIDE).build, runtime=RuntimeOptions(seed=0, progress=False))
    trainer.fit(train, 1)
    _sync(device)
    start = time.perf_counter()
    history = trainer.fit(train, 2)  # the second epoch, as a fit of one epoch more: its once-per-fit checks counted
    _sync(device)
    bnn_s = time.perf_counter() - start
    return {
        "num_train": num_train,
        "normalization": NORMALIZATION,
        "bnn_s": bnn_s,
        "bnn_steps_s": history[-1]["time_s"],
        "deterministic_s": seconds[-1],
        "ratio": bnn_s / seconds[-1],
        "cuda_graph": trainer.graph_reason is None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    print(json.dumps(epoch_times(torch.device(args.device))))


if __name__ == "__main__":
    main()
