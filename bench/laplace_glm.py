"""The GLM predictive of a KFAC Laplace approximation over all weights of a 3FC, two routes in one process
(bench/LAPLACE_GLM.md):

- laplace-torch: ``la(x, pred_type="glm", link_approx="probit")`` on batches sized by the full Jacobian's memory
  (``glm_batch_size``, what ``predict_laplace`` used before the rank-one route);
- ours: ``predict_laplace(posterior, x)``, which computes the same output moments from each layer's rank-one
  Jacobians (``pyro_bnn.laplace.kron_glm``) on batches of 1 000, after its once-per-posterior check (a 2-input
  probe's moments computed both ways), timed apart.

The MAP is a 3FC of 400 units trained for 2 epochs on 5 000 Fashion-MNIST images; the approximation is fitted on
them with the prior precision tuned by the marginal likelihood, as the posterior-families experiment does. Prints
the seconds per input of each route, their ratio and the largest difference of their probabilities, and writes
them as JSON.

    python bench/laplace_glm.py [--inputs 2000] [--reference-inputs 56] [--out bench/laplace_glm.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import flags  # bench/flags.py: this script's folder is on sys.path
import torch

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader, load_dataset
from pyro_bnn.infer import RuntimeOptions, Trainer
from pyro_bnn.laplace import fit_laplace, predict_laplace
from pyro_bnn.laplace.predictive import glm_batch_size
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.priors import NormalPrior


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--inputs", type=flags.positive_int, default=2000, help="test inputs scored by the rank-one route"
    )
    parser.add_argument(
        "--reference-inputs", type=flags.positive_int, default=56, help="of them, scored by laplace-torch's too"
    )
    parser.add_argument("--out", default="bench/laplace_glm.json")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = load_dataset("fashion-mnist", train_subset=5000, val_size=0, download=False)
    train = BatchLoader(data.train.x, data.train.y, 128, shuffle=True, seed=0)
    net = build_model("mlp:400,400,400", input_shape=(1, 28, 28), num_classes=10, activation="relu")
    bnn = BNN(net, NormalPrior(0.0, 1.0), Categorical(len(data.train.y)))
    optim = lambda params: torch.optim.Adam(params, lr=1e-3)  # noqa: E731
    trainer = Trainer(bnn, "map", optim=optim, runtime=RuntimeOptions(seed=0, progress=False))
    trainer.fit(train, 2)
    start = time.perf_counter()
    posterior = fit_laplace(
        bnn, trainer.guide, BatchLoader(data.train.x, data.train.y, 500), subset="all", structure="kron"
    )
    fit_s = time.perf_counter() - start
    x, y = data.test.x[: args.inputs], data.test.y[: args.inputs]
    start = time.perf_counter()
    assert posterior.rank_one_layers(x[:2]) is not None  # the once-per-posterior check, timed apart
    check_s = time.perf_counter() - start
    start = time.perf_counter()
    ours = predict_laplace(posterior, (x, y)).probs[0]
    ours_s = (time.perf_counter() - start) / len(x)
    la, size = posterior.laplace, glm_batch_size(posterior)
    reference, start = [], time.perf_counter()
    for batch in x[: args.reference_inputs].split(size):
        reference.append(la(batch, pred_type="glm", link_approx="probit").detach())
    reference_s = (time.perf_counter() - start) / args.reference_inputs
    difference = (torch.cat(reference) - ours[: args.reference_inputs]).abs().max().item()
    result = {
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch thread, torch {torch.__version__}",
        "weights": int(la.n_params),
        "fit_s": round(fit_s, 2),
        "laplace_torch_ms_per_input": round(reference_s * 1e3, 2),
        "laplace_torch_batch": size,
        "rank_one_ms_per_input": round(ours_s * 1e3, 3),
        "rank_one_check_s": round(check_s, 2),
        "ratio": round(reference_s / ours_s, 1),
        "max_probability_difference": difference,
        "inputs": len(x),
        "reference_inputs": args.reference_inputs,
        "accuracy": float((ours.argmax(-1) == y).float().mean()),
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
