"""The low-rank guide's learning rate and initial scale on the posterior-families cpu profile's Fashion-MNIST subset
(seed 0): ``python results/posterior-families/lowrank-init/sweep.py NAME ...`` prints one JSON line per variant."""

import json
import sys
import time
from dataclasses import replace

from pyro_bnn.experiments import RunConfig, train_run

base = RunConfig(
    dataset="fashion-mnist",
    model="mlp:400,400,400",
    prior="normal:0,1",
    epochs=10,
    batch_size=128,
    optimizer="adam",
    lr=1e-3,
    train_subset=5000,
    val_size=1000,
    test_subset=2000,
    seed=0,
    data_seed=0,
    device="cpu",
    guide="lowrank:0.05,rank=10",
    num_samples=48,
)
variants = {
    "lr1e-3": {},
    "lr3e-3": {"lr": 3e-3},
    "lr1e-2": {"lr": 1e-2},
    "lr3e-3-init0.01": {"lr": 3e-3, "guide": "lowrank:0.01,rank=10"},
    "meanfield-lr1e-3": {"guide": "flat:rel=1"},
    "lr1e-3-init0.01": {"guide": "lowrank:0.01,rank=10"},
    "lr3e-3-init0.003": {"lr": 3e-3, "guide": "lowrank:0.003,rank=10"},
    "lr1e-3-init0.003": {"guide": "lowrank:0.003,rank=10"},
}
for name in sys.argv[1:]:
    start = time.time()
    result = train_run(replace(base, **variants[name]), f"runs/lowrank-init/{name}", progress=False)
    m = result.metrics
    print(
        json.dumps(
            {"name": name, "accuracy": m["accuracy"], "nll": m["nll"], "ece": m["ece"], "seconds": time.time() - start}
        ),
        flush=True,
    )
