"""What :mod:`~pyro_bnn.reproduce.studies.guide_table` measures: the guide table's rows and setting, the default
guide's yardsticks and candidates, one guide trained and scored on each (:func:`measure`,
:func:`measure_yardstick`), and the rule that picks the default (:func:`choose_default`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import pyro
import torch
from pyro.infer.autoguide import AutoDiagonalNormal, AutoLowRankMultivariateNormal, AutoNormal

from pyro_bnn.bnn import BNN
from pyro_bnn.data import parse_corruption
from pyro_bnn.evaluation import entropy_decomposition
from pyro_bnn.guides import init_to_network, mean_posterior_scale, parse_guide
from pyro_bnn.infer import RuntimeOptions, Trainer
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.node_noise import NodeNoisePrior, add_node_noise
from pyro_bnn.predict import predict
from pyro_bnn.priors import NormalPrior, nothing


@dataclass(frozen=True)
class Row:
    """One guide of the table.

    Attributes:
        label: What the table calls it.
        guide: A spec string (the CLI grammar) or a builder ``bnn -> AutoGuide``.
        model: ``"weight-space"`` or ``"node noise"``.
        caveat: What a user should know, one clause.
    """

    label: str
    guide: str | Callable
    model: str = "weight-space"
    caveat: str = ""


ROWS = (
    Row(
        "flat:0.01 (default)",
        "flat:0.01",
        caveat="fused fast path; σ starts at 0.01, locations at the network's weights (chosen on the yardstick suite: "
        "results/guide-suite/suite.md)",
    ),
    Row(
        "flat:rel=1 (the old default)",
        "flat:rel=1",
        caveat="starts at σ = each tensor's weight spread, which a run this short does not shrink (warns)",
    ),
    Row("autonormal:0.01", "autonormal:0.01", caveat="Pyro's AutoNormal started at the network's weights"),
    Row("bbb", "bbb", caveat="sigma = softplus(rho), analytic KL with `--elbo meanfield`"),
    Row("map", "map", caveat="point estimate: no weight uncertainty"),
    Row("mle", "mle", caveat="deterministic network, no prior"),
    Row("mc-dropout:0.1", "mc-dropout:0.1", caveat="MAP with dropout kept on at prediction"),
    Row(
        "Pyro AutoNormal, init_to_network",
        lambda bnn: AutoNormal(bnn, init_loc_fn=init_to_network(bnn), init_scale=0.01),
        caveat="any Pyro AutoGuide works; start it at the network's weights",
    ),
    Row(
        "Pyro AutoNormal, its defaults",
        partial(AutoNormal, init_scale=0.01),
        caveat="every weight starts at 0: slow to leave chance (warns)",
    ),
    Row("Pyro AutoDiagonalNormal", AutoDiagonalNormal, caveat="prior-median start; one flat Normal"),
    Row(
        "Pyro AutoLowRankMultivariateNormal",
        partial(AutoLowRankMultivariateNormal, rank=10),
        caveat="correlations (rank 10); small nets only",
    ),
    Row("mixture:4", "mixture:4", model="node noise", caveat="node-noise BNNs only (`--node-noise`)"),
)


@dataclass(frozen=True)
class Setting:
    """Sizes of the measurement."""

    epochs: int = 5
    seeds: tuple[int, ...] = (0, 1, 2)
    width: int = 50
    lr: float = 3e-3
    batch_size: int = 128
    num_samples: int = 32


def _train(net, prior, guide, data, batch_size: int, lr: float, epochs: int, seed: int) -> tuple[BNN, Trainer, float]:
    """``net`` under ``prior`` as a BNN of ``data``'s training set, trained with ``guide`` and Adam at ``lr`` for
    ``epochs``, as a notebook user writes it; returns the BNN, its trainer and the training seconds."""
    bnn = BNN(net, prior, Categorical(len(data.train)))
    train, _, _ = data.loaders(batch_size, seed=seed)
    trainer = Trainer(bnn, guide, optim=pyro.optim.Adam({"lr": lr}), runtime=RuntimeOptions(seed=seed, progress=False))
    start = time.perf_counter()
    trainer.fit(train, epochs)
    return bnn, trainer, time.perf_counter() - start


def measure(row: Row, seed: int, setting: Setting, data) -> dict[str, float]:
    """Trains one guide for one seed; returns test accuracy, ECE, NLL, mean posterior sigma and seconds."""
    pyro.set_rng_seed(seed)
    spec = parse_guide(row.guide) if isinstance(row.guide, str) else None
    dropout = spec.dropout if spec is not None else 0.0
    widths = ",".join([str(setting.width)] * 3)
    net = build_model(f"mlp:{widths}", input_shape=data.input_shape, num_classes=data.num_classes, dropout=dropout)
    if row.model == "node noise":
        add_node_noise(net)
        prior = NodeNoisePrior(0.1)
    else:
        prior = NormalPrior(0.0, 1.0, select=None if spec is None or spec.random_weights else nothing)
    bnn, trainer, seconds = _train(net, prior, row.guide, data, setting.batch_size, setting.lr, setting.epochs, seed)
    metrics = predict(bnn, trainer.guide, (data.test.x, data.test.y), num_samples=setting.num_samples).metrics()
    try:
        sigma = mean_posterior_scale(trainer.guide, bnn)[0] if bnn.sites else 0.0
    except ValueError:  # a Pyro AutoContinuous guide keeps no per-weight scale that this reads
        sigma = float("nan")
    return {
        "accuracy": metrics["accuracy"],
        "ece": metrics["ece"],
        "nll": metrics["nll"],
        "sigma": sigma,
        "seconds": seconds,
    }


@dataclass(frozen=True)
class Yardstick:
    """One setting a default guide must work in: a network, its data and a short run, as a user would write it.

    Attributes:
        name: What the suite's table calls it.
        dataset: A :func:`~pyro_bnn.data.load_dataset` name.
        model: A :func:`~pyro_bnn.models.build_model` name.
        epochs: Training epochs.
        batch_size: Examples per step.
        lr: Adam's learning rate.
        train_subset: Training examples (None: the data set's training split).
        test_subset: Test examples scored (None: all).
        num_samples: Posterior samples of the test predictions.
    """

    name: str
    dataset: str
    model: str
    epochs: int
    batch_size: int
    lr: float
    train_subset: int | None = None
    test_subset: int | None = None
    num_samples: int = 32


YARDSTICKS = (
    Yardstick("digits MLP, 45 steps", "digits", "mlp:50,50,50", epochs=5, batch_size=128, lr=3e-3),
    Yardstick("digits MLP, 450 steps", "digits", "mlp:50,50,50", epochs=50, batch_size=128, lr=3e-3),
    Yardstick("two moons, 2-5-5-2 tanh", "moons", "tanh-small", epochs=30, batch_size=64, lr=1e-2),
    Yardstick(
        "3FC, Fashion-MNIST 10 000, 3 epochs", "fashion-mnist", "3fc", epochs=3, batch_size=128, lr=1e-3,
        train_subset=10_000, test_subset=5_000, num_samples=20,
    ),
    Yardstick(
        "LeNet, Fashion-MNIST 10 000, 3 epochs", "fashion-mnist", "lenet:1", epochs=3, batch_size=128, lr=1e-3,
        train_subset=10_000, test_subset=5_000, num_samples=20,
    ),
)  # fmt: skip
"""Where the default guide is measured (issue 41): where users start, and the papers' 3FC setting."""

CANDIDATES = (
    "flat:rel=1",
    "flat:rel=0.5",
    "flat:rel=0.2",
    "flat:0.01",
    "autonormal:0.01",
    "autonormal:0.001",
    "bbb",
)
"""The weight-space guides the default is chosen among (``map`` is measured beside them as the point-estimate
reference; it carries no weight uncertainty and cannot be the default)."""

POINT_ESTIMATES = ("map", "mle")
"""Guides measured beside the candidates as references, never chosen: they carry no weight uncertainty."""

REFERENCE = "autonormal:0.001"
"""The guide whose blended-input mutual information the default must double on the 3FC yardstick: a posterior that
barely leaves its point start."""

BLEND = "gaussian:0.5"
"""The corruption of the blended inputs the mutual information is measured on (as ``guide_defaults``)."""


def measure_yardstick(guide: str, yardstick: Yardstick, seed: int, data) -> dict[str, float]:
    """Trains ``guide`` on one yardstick for one seed, from the public API; returns test accuracy, ECE, NLL, mean
    posterior sigma, the mutual information on blended test inputs (nats, mean over inputs) and seconds."""
    pyro.set_rng_seed(seed)
    spec = parse_guide(guide)
    net = build_model(yardstick.model, input_shape=data.input_shape, num_classes=data.num_classes)
    prior = NormalPrior(0.0, 1.0, select=None if spec.random_weights else nothing)
    bnn, trainer, seconds = _train(net, prior, guide, data, yardstick.batch_size, yardstick.lr, yardstick.epochs, seed)
    x, y = data.test.x, data.test.y
    if yardstick.test_subset is not None:
        x, y = x[: yardstick.test_subset], y[: yardstick.test_subset]
    metrics = predict(bnn, trainer.guide, (x, y), num_samples=yardstick.num_samples).metrics()
    blended = parse_corruption(BLEND, generator=torch.Generator().manual_seed(seed))(x)
    blended_probs = predict(bnn, trainer.guide, blended, num_samples=yardstick.num_samples).probs
    sigma = mean_posterior_scale(trainer.guide, bnn)[0] if spec.random_weights else 0.0
    return {
        "accuracy": metrics["accuracy"],
        "ece": metrics["ece"],
        "nll": metrics["nll"],
        "sigma": sigma,
        "mutual_information": float(entropy_decomposition(blended_probs).epistemic.mean()),
        "seconds": seconds,
    }


def choose_default(means: dict[str, dict[str, dict[str, float]]], yardsticks: list[str], reference_stick: str) -> dict:
    """Applies issue 41's rule to per-guide, per-yardstick mean metrics.

    A candidate passes a yardstick when its accuracy is within 0.02 of the best candidate's there and its ECE within
    0.02 of the best (lowest); on ``reference_stick`` it must also keep a mean sigma of at least 0.01 and a mutual
    information on blended inputs at least twice :data:`REFERENCE`'s (it must carry epistemic uncertainty). The
    default is the candidate that passes every check (several: the smallest worst accuracy gap). When none does, the
    sigma and mutual-information checks stay hard (fewest of them failed first), and among the rest the candidate that
    misses the accuracy and ECE tolerances by the least in total wins (the sum, over yardsticks, of how far each gap
    exceeds 0.02): how far a guide misses, not how often, since three seeds put a gap of 0.0206 and one of 0.065 on
    the same side of a 0.02 line. Ties: the smallest worst accuracy gap.

    Args:
        means: ``means[guide][yardstick]`` with keys ``accuracy``, ``ece``, ``sigma``, ``mutual_information``;
            ``guide`` runs over the candidates only.
        yardsticks: The yardstick names, in order.
        reference_stick: The yardstick of the sigma and mutual-information checks.

    Returns:
        ``{"default": guide, "failures": {guide: [reason, ...]}, "all_pass": bool}``.
    """
    failures: dict[str, list[str]] = {guide: [] for guide in means}
    worst_gap: dict[str, float] = {guide: 0.0 for guide in means}
    excess: dict[str, float] = {guide: 0.0 for guide in means}
    hard: dict[str, int] = {guide: 0 for guide in means}
    for stick in yardsticks:
        best_accuracy = max(means[g][stick]["accuracy"] for g in means)
        best_ece = min(means[g][stick]["ece"] for g in means)
        for guide in means:
            cell = means[guide][stick]
            gap = best_accuracy - cell["accuracy"]
            worst_gap[guide] = max(worst_gap[guide], gap)
            ece_gap = cell["ece"] - best_ece
            if gap > 0.02:
                failures[guide].append(f"{stick}: accuracy {gap:.4f} below the best")
            if ece_gap > 0.02:
                failures[guide].append(f"{stick}: ECE {ece_gap:.4f} above the best")
            excess[guide] += max(0.0, gap - 0.02) + max(0.0, ece_gap - 0.02)
    if REFERENCE not in means:
        raise ValueError(f"the mutual-information check needs {REFERENCE} among the candidates")
    reference_mi = means[REFERENCE][reference_stick]["mutual_information"]
    for guide in means:
        cell = means[guide][reference_stick]
        if cell["sigma"] < 0.01:
            hard[guide] += 1
            failures[guide].append(f"{reference_stick}: mean sigma {cell['sigma']:.4f} < 0.01")
        if cell["mutual_information"] < 2 * reference_mi:
            hard[guide] += 1
            failures[guide].append(
                f"{reference_stick}: mutual information {cell['mutual_information']:.4f} < twice {REFERENCE}'s "
                f"{reference_mi:.4f}"
            )
    chosen = min(means, key=lambda g: (hard[g], bool(failures[g]), round(excess[g], 12), worst_gap[g]))
    return {
        "default": chosen,
        "failures": failures,
        "excess": {guide: round(value, 4) for guide, value in excess.items()},
        "all_pass": not failures[chosen],
    }
