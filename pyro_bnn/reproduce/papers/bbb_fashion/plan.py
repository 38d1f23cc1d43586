"""``bbb-fashion``: paper 004, the Bayes-by-Backprop tutorial (*Weight Uncertainty in Neural Networks*, a PyTorch
walk-through of Blundell et al. 2015) on Fashion-MNIST.

The method, at every profile (from the tutorial and its notebook):

- the 784-400-400-10 ReLU MLP (``bbb-mlp``) with the Bayes-by-Backprop guide (``sigma = softplus(rho)``,
  ``mu ~ U(-0.2, 0.2)``, ``rho ~ U(-5, -4)``) and the scale-mixture prior ``pi = 0.5, sigma1 = 1, sigma2 = e^-6``;
- 2 weight samples per step, batch 100, Adam 1e-3, the KL spread uniformly over the minibatches, pixels /255;
  trained on all 60 000 training images (the tutorial keeps no validation set) and scored after the last epoch;
- the accuracy of each of 10 posterior samples alone, of the posterior-mean network and of the 10-sample ensemble
  (the mean of the samples' probabilities; the tutorial averages log-softmax over the 10 samples and the mean
  network: :data:`ENSEMBLE_DEFINITION`);
- MNIST digits as out-of-domain inputs: the sampled predicted classes of five test images of each domain, and the
  predictive entropy and mutual information on both test sets, with detection metrics
  (:func:`pyro_bnn.evaluation.ood_metrics`) from 100 posterior samples.

A run is judged only when it trained the tutorial's 20 epochs and reached its accuracy (:data:`COMPARABLE`).

The tutorial's own code has the reference implementation's slip of summing layer 2's variational log-density twice
and skipping layer 3 (``shared/papers/REFERENCE_NOTES.md``); this reproduction uses the correct ELBO. The analysis is
in :mod:`.analysis`.
"""

from __future__ import annotations

import math

from pyro_bnn.reproduce.comparability import ComparabilityRule
from pyro_bnn.reproduce.planned import Profile

PRIOR = f"mixture:0.5,1,{math.exp(-6):.10g}"
OOD_DATA = "mnist"

PUBLISHED = {"samples": (0.8472, 0.8555), "posterior_mean": 0.8691, "ensemble": 0.8765}
"""The tutorial's accuracies: the range of its 10 single samples, the posterior-mean network and the ensemble."""

ENSEMBLE_DEFINITION = (
    "*Ensemble definition.* Ours is the mean of the 10 samples' probabilities, then argmax "
    "(`Prediction.accuracies`); the tutorial's `test_ensemble` averages 11 log-softmax outputs, the 10 samples' and "
    "the mean network's, then takes the argmax. On a retrained copy of the `paper` profile's seed 0 (100 draws of 10 "
    "weight sets) the tutorial's ensemble accuracy minus ours is -0.003 points on average (sd 0.074, from -0.19 to "
    "+0.18), and both stayed above the posterior-mean network in every draw. The committed `paper` grid's *holds* "
    "rests on seed 0's margin of 0.08 points (ensemble 88.21 % against posterior mean 88.13 %; the other seeds' are "
    "0.72-1.03), about one sd of that difference: by the tutorial's definition seed 0's order would fail about one "
    "time in seven, and the verdict would then read *inconclusive* (4 of 5 seeds)."
)
"""How the ensemble accuracy departs from the tutorial's, with its measured size (the committed grids keep ours;
their records cannot be recomputed without the checkpoints)."""

PAPER_EPOCHS = 20
"""The tutorial's training: 20 epochs on all 60 000 images, no validation set, no early stopping, scored after the last
epoch (its notebook's ``TRAIN_EPOCHS``)."""

COMPARABLE = ComparabilityRule(
    accuracy_tolerance=0.01,
    paper_epochs=PAPER_EPOCHS,
    why="the tutorial's accuracies are one run's (no seeds), and its ten posterior samples alone spread over 0.83 "
    "points, so its ensemble's 87.65 % is known to about a point; a network more than a point away is farther from the "
    "tutorial's than the gaps of the order the claim is about (0.74 points between ensemble and posterior mean)",
)
"""When the runs can be judged (:mod:`pyro_bnn.reproduce.comparability`), their mean test accuracy (the 10-sample
ensemble's) against the tutorial's ensemble. The tutorial keeps no validation set, so a run is converged only when it
trained the tutorial's :data:`PAPER_EPOCHS` epochs: a shorter run (the ``cpu`` profile's 10) has no validation history
to show it flat, and is not comparable."""

_COMMON = {"batch_size": 100, "num_particles": 2, "lr": 1e-3, "num_samples": 10}

PROFILES = {
    "quick": Profile(
        "quick",
        "smoke run, about a minute on 2 CPU cores; its numbers mean nothing",
        seeds=1,
        settings={**_COMMON, "train_images": 1_000, "epochs": 1, "test_subset": 1_000, "ood_samples": 20},
    ),
    "cpu": Profile(
        "cpu",
        "all 60 000 training images for 10 epochs instead of 20: about 7 minutes a run on one CPU core",
        seeds=3,
        settings={**_COMMON, "train_images": None, "epochs": 10, "test_subset": None, "ood_samples": 100},
    ),
    "gpu": Profile(
        "gpu",
        "the paper profile on a GPU: the tutorial's scale (20 epochs on all 60 000 images, batch 100, 10 posterior "
        "samples, the full Fashion-MNIST and MNIST test sets for the out-of-domain scores), 5 seeds, the paper "
        "profile's runs (a device changes no run id, so either grid's runs complete the other's). For one GPU "
        "(bench/device_grid.sh), resuming across slots",
        seeds=5,
        settings={**_COMMON, "train_images": None, "epochs": PAPER_EPOCHS, "test_subset": None, "ood_samples": 100},
    ),
    "paper": Profile(
        "paper",
        "the tutorial's scale (20 epochs on all 60 000 images), 5 seeds: about 15 minutes a run on one CPU core",
        seeds=5,
        settings={**_COMMON, "train_images": None, "epochs": 20, "test_subset": None, "ood_samples": 100},
    ),
}
