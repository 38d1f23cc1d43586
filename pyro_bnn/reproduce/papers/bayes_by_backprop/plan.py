"""``bayes-by-backprop``: paper 001, Singh's reproduction of Blundell et al. (2015), *Weight Uncertainty in Neural
Networks*, on MNIST.

The method, at every profile (facts from the reference code, ``shared/papers/REFERENCE_NOTES.md``):

- the 784-400-400-10 ReLU MLP (``bbb-mlp``) with the Bayes-by-Backprop guide: ``sigma = softplus(rho)``,
  ``mu ~ U(-0.2, 0.2)``, ``rho ~ U(-5, -4)`` for weights and biases (``--guide bbb``);
- the ELBO with a Monte Carlo KL (``log q - log p`` of the drawn weights, Pyro's ``Trace_ELBO``), 2 weight samples
  per step, batch 100, Adam 1e-3; the minibatch likelihood scaled by N/B, the KL weighted uniformly (1/M per
  minibatch) or by Blundell's ``2^(M-i) / (2^M - 1)``;
- the official training set split into 50 000 training and 10 000 validation images, the best epoch by validation
  accuracy kept (training never stops early, so the curves show the whole run);
- test error from 10 posterior samples (the ensemble of their probabilities) and from the posterior-mean network;
- the pruning table on the best network: weights removed by ``|mu| / sigma`` and by ``|mu|``, pooled over layers,
  biases kept (:mod:`pyro_bnn.diagnostics.pruning`).

The grid: the prior (a N(0, 1) Gaussian; the scale mixture ``pi N(0, 1) + (1 - pi) N(0, e^-12)`` with ``pi = 0.5``
and ``pi = 0.25``) times the KL weighting (uniform, Blundell), all on the paper's /126 inputs, and the input
scaling (/255, standardised, /126) for the first scale mixture with uniform weighting. The profiles change sizes
only (:data:`PROFILES`). A cell is judged only when it is comparable with the papers' (:data:`COMPARABLE`, against
:data:`PUBLISHED_ACCURACY`). The analysis is in :mod:`.analysis`.
"""

from __future__ import annotations

import math

from pyro_bnn.reproduce.comparability import ComparabilityRule
from pyro_bnn.reproduce.planned import Profile, RunSpec
from pyro_bnn.runs.config import RunConfig

PRIORS = {
    "gaussian": "normal:0,1",
    "mixture-0.5": f"mixture:0.5,1,{math.exp(-6):.10g}",
    "mixture-0.25": f"mixture:0.25,1,{math.exp(-6):.10g}",
}
"""Prior name in the report -> ``--prior`` string. Both mixtures take sigma2 = e^-6, as Singh's Fig. 1 caption prints
every scale mixture he ran; his code (``shared/papers/REFERENCE_NOTES.md``) tried pi = 0.25 with sigma2 = e^-8, not
e^-6. The committed grid keeps e^-6 (its run ids fix it): :data:`SIGMA2_NOTE` gives the measured effect."""

SIGMA2_NOTE = (
    "The π = 0.25 mixture's σ2 is e⁻⁶, as Singh's Fig. 1 caption prints it; his code tried π = 0.25 with σ2 = e⁻⁸ "
    "(REFERENCE_NOTES.md). Measured at the `cpu` scale (seed 0, 10 epochs, uniform weighting, both trained again "
    "under the current code): test error 2.26 % with e⁻⁸ against 2.30 % with e⁻⁶, a difference within the committed "
    "cell's seed sd (0.10 points). No published number rests on this prior: it is reported beside the prior verdict "
    "and is one of the three priors of the KL-weighting verdict, whose cells the committed grid does not judge (runs "
    "still improving at the cap)."
)
"""The π = 0.25 mixture's sigma2 against Singh's code, as the report says it."""

PRIOR_LABELS = {
    "gaussian": "Gaussian N(0, 1)",
    "mixture-0.5": "scale mixture π = 0.5, σ1 = 1, σ2 = e⁻⁶",
    "mixture-0.25": "scale mixture π = 0.25, σ1 = 1, σ2 = e⁻⁶",
}
WEIGHTINGS = {"uniform": "uniform (1/M)", "blundell": "Blundell (2^(M-i) / (2^M - 1))"}
NORMALIZATIONS = {"bbb": "/126 (the paper's)", "unit": "/255", "standard": "standardised"}
BASE_PRIOR, BASE_WEIGHTING, BASE_NORMALIZATION = "mixture-0.5", "uniform", "bbb"
"""The cell the normalisation comparison varies from (Singh's normalisation and pruning runs)."""

PUBLISHED = {
    "gaussian_error": 0.0169,
    "blundell_error": 0.0182,
    "pruning": {  # fraction: (naive, signal-to-noise) test error, Singh's Table 1 (scale mixture pi = 0.5, /126)
        0.0: (0.0203, 0.0203),
        0.25: (0.0241, 0.0259),
        0.5: (0.0533, 0.0589),
        0.75: (0.3067, 0.4105),
        0.95: (0.6311, 0.8250),
    },
}
"""The published numbers the report puts beside ours: Singh's Gaussian-prior test error, Blundell et al.'s
(1.82 %, their best 400-unit network) and Singh's pruning table."""

PUBLISHED_ACCURACY = {
    ("gaussian", "uniform", "bbb"): 1 - PUBLISHED["gaussian_error"],
    ("mixture-0.5", "uniform", "bbb"): 1 - PUBLISHED["pruning"][0.0][0],
}
"""The published test accuracy (10-sample predictive, best epoch of 600) of a cell ``(prior, KL weighting, inputs)``,
where the papers give one: Singh's Gaussian-prior network (1.69 % error; Blundell et al.'s 1.82 % is 0.13 points from
it) and his scale mixture pi = 0.5 network unpruned (2.03 %, his Table 1). Singh gives no number for the other cells
(the pi = 0.25 mixture is a curve in his Fig. 1a; the Blundell weighting's "0.3 % below" is the claim under test, not
a reference), so they are checked for convergence alone."""

COMPARABLE = ComparabilityRule(
    accuracy_tolerance=0.002,
    paper_epochs=600,
    why="Singh gives test errors to 0.01 points but reruns of his varied by up to 0.1 point, and his and Blundell et "
    "al.'s errors for the same Gaussian 400-unit network differ by 0.13 points, so the published accuracies are known "
    "to about 0.1-0.15 points; 0.2 points is that, and less than the effects the claims are about (0.3 points for the "
    "KL weighting, 0.34 between Singh's priors); a cell without a published accuracy is checked for convergence alone",
    flat=0.002,
)
"""When a cell can be judged (:mod:`pyro_bnn.reproduce.comparability`): Singh trained a fixed 600 epochs without early
stopping, keeping the best epoch by validation error, which is what the ``paper`` profile does (a patience of the
whole run). "Flat" at the cap is 0.2 points here, not the default half point: the effects judged are 0.3 points."""

PRIOR_ERROR_BAND = (
    min(PUBLISHED["gaussian_error"], PUBLISHED["pruning"][0.0][0]) - COMPARABLE.accuracy_tolerance,
    max(PUBLISHED["gaussian_error"], PUBLISHED["pruning"][0.0][0]) + COMPARABLE.accuracy_tolerance,
)
"""The test errors (1.49 % to 2.23 %) at which both arms of the prior comparison (the pi = 0.5 mixture against the
Gaussian, uniform weighting, /126) count as the papers' networks: from Singh's Gaussian 1.69 % to his mixture 2.03 %,
each widened by :data:`COMPARABLE`'s 0.2 points. Checking each arm against its own published error instead (Gaussian
within [1.49, 1.89] %, mixture within [1.83, 2.23] %) left Blundell et al.'s ordering, the mixture below the Gaussian,
only the 0.06 points [1.83, 1.89] % to happen in: the gate built Singh's opposite result in. The band admits either
ordering and still refuses networks far from both papers."""

NO_EFFECT_WITHIN = 0.002
"""When an inconclusive comparison at a comparable scale reads *no effect*: the 95 % interval of the test-error gap
(Welch) lies within ±0.2 points of zero. That excludes the smallest effect the claims name (Singh's 0.3 points for
the KL weighting) by more than his reruns' variation (0.1 point); a wider interval stays *inconclusive*."""

PRUNE_FRACTIONS = (0.0, 0.25, 0.5, 0.75, 0.95, 0.98)

_COMMON = {"batch_size": 100, "num_particles": 2, "lr": 1e-3, "num_samples": 10, "prune_fractions": PRUNE_FRACTIONS}

PROFILES = {
    "quick": Profile(
        "quick",
        "smoke run, about a minute on 2 CPU cores; its numbers mean nothing",
        seeds=1,
        settings={
            **_COMMON,
            "train_images": 1_000,
            "val_images": 500,
            "epochs": 1,
            "test_subset": 1_000,
            "num_val_samples": 2,
            "priors": ["gaussian", "mixture-0.5"],
            "weightings": ["uniform", "blundell"],
            "normalizations": ["bbb", "unit"],
        },
    ),
    "cpu": Profile(
        "cpu",
        "the full data at 10 epochs instead of 600: about 6 minutes a run on one CPU core (24 runs at 3 seeds)",
        seeds=3,
        settings={
            **_COMMON,
            "train_images": 50_000,
            "val_images": 10_000,
            "epochs": 10,
            "test_subset": None,
            "num_val_samples": 10,
            "priors": list(PRIORS),
            "weightings": list(WEIGHTINGS),
            "normalizations": list(NORMALIZATIONS),
        },
    ),
    "gpu": Profile(
        "gpu",
        "the prior and KL-weighting contrasts (3 priors x 2 weightings on /126 inputs, the pruning network among them) "
        "on the full data (50 000 training, 10 000 validation, all test images), batch 100, 10 posterior samples, 3 "
        "seeds, for 20 of the paper's 600 epochs: a run must finish inside one slot (a run cut off at a slot's end "
        "is trained again), and the bbb guide's eager Trace_ELBO step takes about 24 ms on a GPU (bench/RESULTS.md), "
        "so 20 epochs of 500 steps are about 4-5 minutes a run alone, as bbb-fashion's gpu runs; no input-scaling "
        "cells. For one GPU (bench/device_grid.sh), resuming across slots",
        seeds=3,
        settings={
            **_COMMON,
            "train_images": 50_000,
            "val_images": 10_000,
            "epochs": 20,
            "test_subset": None,
            "num_val_samples": 10,
            "priors": list(PRIORS),
            "weightings": list(WEIGHTINGS),
            "normalizations": [BASE_NORMALIZATION],
        },
    ),
    "paper": Profile(
        "paper",
        "the published scale (600 epochs), for a GPU",
        seeds=3,
        settings={
            **_COMMON,
            "train_images": 50_000,
            "val_images": 10_000,
            "epochs": 600,
            "test_subset": None,
            "num_val_samples": 10,
            "priors": list(PRIORS),
            "weightings": list(WEIGHTINGS),
            "normalizations": list(NORMALIZATIONS),
        },
    ),
}


def _spec(profile: Profile, prior: str, weighting: str, normalization: str, seed: int, data_dirs) -> RunSpec:
    epochs = profile["epochs"]
    config = RunConfig(
        dataset="mnist",
        model="bbb-mlp",
        activation="relu",
        prior=PRIORS[prior],
        guide="bbb",
        epochs=epochs,
        batch_size=profile["batch_size"],
        num_particles=profile["num_particles"],
        lr=profile["lr"],
        kl_weighting=weighting,
        seed=seed,
        train_subset=profile["train_images"],
        val_size=profile["val_images"],
        test_subset=profile["test_subset"],
        normalization=normalization,
        data_dir=data_dirs.get("mnist"),
        num_samples=profile["num_samples"],
        num_val_samples=profile["num_val_samples"],
        # Patience of the whole run: never stops early, and the best epoch by validation accuracy is restored.
        patience=epochs,
    )
    fractions = ",".join(f"{f:g}" for f in profile["prune_fractions"])
    return RunSpec(
        config,
        label=f"bbb-{prior}-{weighting}-{normalization}-s{seed}",
        measures=("accuracies", f"pruning:{fractions}"),
        tags=(("normalization", normalization), ("prior", prior), ("weighting", weighting)),
    )
