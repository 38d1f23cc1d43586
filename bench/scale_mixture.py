"""The scale-mixture prior's log density, composed from torch ops (the expression before the fused one) against
:class:`pyro_bnn.priors.ScaleMixtureNormal`'s hand-written forward and backward; writes ``bench/SCALE_MIXTURE.md``.

Two measurements, interleaved in one process (median of the repetitions):

- the log density with its gradient over the weights of Bayes by Backprop's 784-400-400-10 MLP, two weight samples
  (478 410 weights each);
- a whole training step of that MLP on a batch of 100 MNIST-shaped inputs (the Bayes-by-Backprop guide, 2 samples,
  ``Trace_ELBO``, Adam), with the composed expression patched in as the prior's ``log_prob`` for the comparison.

Run: ``python bench/scale_mixture.py [--threads T] [--repeats R]``.
"""

from __future__ import annotations

import argparse
import datetime
import math
import statistics
import time
from pathlib import Path

import flags  # bench/flags.py: this script's folder is on sys.path
import torch

HERE = Path(__file__).resolve().parent
WEIGHTS = 784 * 400 + 400 + 400 * 400 + 400 + 400 * 10 + 10


def composed_log_prob(self, value: torch.Tensor) -> torch.Tensor:
    """The composed expression of ``ScaleMixtureNormal.log_prob`` before the fused one, on expanded parameters."""
    half_log_2pi = 0.5 * math.log(2 * math.pi)
    log_n1 = -0.5 * (value / self.sigma1) ** 2 - self.sigma1.log() - half_log_2pi
    log_n2 = -0.5 * (value / self.sigma2) ** 2 - self.sigma2.log() - half_log_2pi
    return torch.logaddexp(self.pi.log() + log_n1, torch.log1p(-self.pi) + log_n2)


def _median_ms(times: list[float]) -> float:
    return 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=flags.positive_int, default=1)
    parser.add_argument("--repeats", type=flags.positive_int, default=15)
    parser.add_argument("--out", default=str(HERE / "SCALE_MIXTURE.md"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    import pyro

    from pyro_bnn import BNN
    from pyro_bnn.guides import parse_guide
    from pyro_bnn.infer import ObjectiveOptions, RuntimeOptions, Trainer
    from pyro_bnn.likelihoods import Categorical
    from pyro_bnn.models import build_model
    from pyro_bnn.priors import ScaleMixtureNormal, parse_prior

    fused_log_prob = ScaleMixtureNormal.log_prob
    prior_args = (torch.tensor(0.5), torch.tensor(1.0), torch.tensor(math.exp(-6)))
    density = ScaleMixtureNormal(*prior_args).expand((WEIGHTS,))
    w = (0.1 * torch.randn(2, WEIGHTS, generator=torch.Generator().manual_seed(0))).requires_grad_()
    torch.testing.assert_close(composed_log_prob(density, w), fused_log_prob(density, w))

    def density_step(log_prob) -> float:
        start = time.perf_counter()
        log_prob(density, w).sum().backward()
        return time.perf_counter() - start

    pyro.set_rng_seed(0)
    net = build_model("bbb-mlp", input_shape=(1, 28, 28), num_classes=10)
    bnn = BNN(net, parse_prior(f"mixture:0.5,1,{math.exp(-6)}"), Categorical(dataset_size=100))
    x, y = torch.rand(100, 1, 28, 28), torch.randint(0, 10, (100,))
    trainer = Trainer(
        bnn,
        parse_guide("bbb"),
        objective=ObjectiveOptions("trace", num_particles=2),
        runtime=RuntimeOptions(seed=0, progress=False),
    )
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=100)
    trainer.fit(loader, 1)  # sets the guide up and warms the allocator

    def train_step(log_prob) -> float:
        ScaleMixtureNormal.log_prob = log_prob
        try:
            start = time.perf_counter()
            trainer.fit(loader, trainer.epoch + 1)
            return time.perf_counter() - start
        finally:
            ScaleMixtureNormal.log_prob = fused_log_prob

    keys = ("density_composed", "density_fused", "step_composed", "step_fused")
    times: dict[str, list[float]] = {k: [] for k in keys}
    for _ in range(args.repeats):
        times["density_composed"].append(density_step(composed_log_prob))
        times["density_fused"].append(density_step(fused_log_prob))
        times["step_composed"].append(train_step(composed_log_prob))
        times["step_fused"].append(train_step(fused_log_prob))
    ms = {k: _median_ms(v) for k, v in times.items()}
    lines = [
        "# Scale-mixture prior: composed log density against the fused one",
        "",
        f"Command: `python bench/scale_mixture.py --threads {args.threads} --repeats {args.repeats}`, "
        f"{datetime.date.today()}, torch {torch.__version__}, {args.threads} thread(s); median of {args.repeats} "
        "interleaved repetitions in one process.",
        "",
        "| what | composed (ms) | fused (ms) | composed / fused |",
        "|---|---:|---:|---:|",
        f"| log density + gradient, 2 x {WEIGHTS:,} weights | {ms['density_composed']:.1f} | "
        f"{ms['density_fused']:.1f} | {ms['density_composed'] / ms['density_fused']:.2f} |",
        f"| training step, bbb-mlp, batch 100, 2 samples, `Trace_ELBO` | {ms['step_composed']:.1f} | "
        f"{ms['step_fused']:.1f} | {ms['step_composed'] / ms['step_fused']:.2f} |",
        "",
    ]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
