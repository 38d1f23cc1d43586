"""Time of one training step of the 3FC network (784-1000-1000-1000-10) at batch 128, in one process:

- ``deterministic``: plain torch, cross-entropy, Adam (the baseline every ratio is relative to);
- ``bayesian-torch``: the competitor, its ``dnn_to_bnn`` mean-field reparameterisation layers plus its KL;
- ``pyro_bnn autonormal`` and ``pyro_bnn bbb``: a :class:`pyro_bnn.BNN` with a N(0, 1) prior on every weight, Pyro's
  ``Trace_ELBO`` with Pyro's AutoNormal or our Bayes-by-Backprop guide;
- ``pyro_bnn flat + fast``: the same model with the flat guide and the fast objective (one draw over all weights,
  closed-form KL), also with local reparameterisation.

Each variant is warmed up, then timed over ``--steps`` steps; the median of ``--repeats`` such runs is reported.
Writes ``results/bench/step_time.json`` and ``step_time.md``. Run with ``make bench``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import pyro
import torch
import torch.nn.functional as F
from pyro.infer.autoguide import AutoNormal

from pyro_bnn import BNN
from pyro_bnn.guides import BayesByBackprop, FlatMeanField, init_to_network
from pyro_bnn.infer import FastMeanFieldELBO, TraceELBO
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.priors import NormalPrior


def _net(device):
    return build_model("3fc", input_shape=(1, 28, 28), num_classes=10).to(device)


def deterministic(x, y):
    net = _net(x.device)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step():
        optimizer.zero_grad()
        F.cross_entropy(net(x), y).backward()
        optimizer.step()

    return step


def bayesian_torch(x, y):
    from bayesian_torch.models.dnn_to_bnn import dnn_to_bnn, get_kl_loss

    net = _net("cpu")
    prior = {
        "prior_mu": 0.0,
        "prior_sigma": 1.0,
        "posterior_mu_init": 0.0,
        "posterior_rho_init": -3.0,
        "type": "Reparameterization",
        "moped_enable": False,
    }
    dnn_to_bnn(net, prior)
    net.to(x.device)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step():
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y) + get_kl_loss(net) / len(x)
        loss.backward()
        optimizer.step()

    return step


def _pyro_bnn(x, y, make_guide):
    bnn = BNN(_net(x.device), NormalPrior(0.0, 1.0).to(x.device), Categorical(60_000))
    guide = make_guide(bnn)
    guide(x, y)
    optimizer = torch.optim.Adam(guide.parameters(), lr=1e-3)
    objective = TraceELBO()

    def step():
        optimizer.zero_grad()
        objective(bnn, guide, x, y, 1.0).loss.backward()
        optimizer.step()

    return step


def pyro_bnn_autonormal(x, y):
    return _pyro_bnn(x, y, lambda bnn: AutoNormal(bnn, init_loc_fn=init_to_network(bnn), init_scale=1e-3))


def pyro_bnn_bbb(x, y):
    return _pyro_bnn(x, y, BayesByBackprop)


def pyro_bnn_flat_fast(x, y, local_reparameterization=False):
    bnn = BNN(_net(x.device), NormalPrior(0.0, 1.0).to(x.device), Categorical(60_000))
    guide = FlatMeanField(bnn, init_scale=1e-3)
    guide(x, y)
    optimizer = torch.optim.Adam(guide.parameters(), lr=1e-3)
    objective = FastMeanFieldELBO(local_reparameterization=local_reparameterization)

    def step():
        optimizer.zero_grad()
        objective(bnn, guide, x, y, 1.0).loss.backward()
        optimizer.step()

    return step


VARIANTS = {
    "deterministic": deterministic,
    "bayesian-torch": bayesian_torch,
    "pyro_bnn autonormal": pyro_bnn_autonormal,
    "pyro_bnn bbb": pyro_bnn_bbb,
    "pyro_bnn flat + fast": pyro_bnn_flat_fast,
    "pyro_bnn flat + fast, local reparam.": lambda x, y: pyro_bnn_flat_fast(x, y, local_reparameterization=True),
}


def time_step(step, steps: int, repeats: int, device: torch.device) -> float:
    """Median seconds per step over ``repeats`` runs of ``steps`` steps, after a warm-up."""
    for _ in range(5):
        step()
    runs = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        runs.append((time.perf_counter() - start) / steps)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="results/bench")
    args = parser.parse_args()
    device = torch.device(args.device)
    pyro.set_rng_seed(0)
    x = torch.rand(args.batch_size, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (args.batch_size,), device=device)

    seconds = {}
    for name, build in VARIANTS.items():
        seconds[name] = time_step(build(x, y), args.steps, args.repeats, device)
        print(f"{name:<22} {1000 * seconds[name]:8.1f} ms/step", flush=True)
    base = seconds["deterministic"]
    result = {
        "device": str(device),
        "cpu": platform.processor() or platform.machine(),
        "torch_threads": torch.get_num_threads(),
        "batch_size": args.batch_size,
        "ms_per_step": {k: 1000 * v for k, v in seconds.items()},
        "ratio_to_deterministic": {k: v / base for k, v in seconds.items()},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "step_time.json").write_text(json.dumps(result, indent=2))
    lines = [
        f"3FC training step, batch {args.batch_size}, {device} ({result['torch_threads']} threads), "
        f"median of {args.repeats} runs of {args.steps} steps",
        "",
        "| variant | ms / step | × deterministic |",
        "|---|---:|---:|",
    ]
    lines += [f"| {k} | {1000 * v:.1f} | {v / base:.2f} |" for k, v in seconds.items()]
    (out / "step_time.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
