"""The warning after fit() when a posterior is still at its start: the rule on hand-moved guides, and the trainer's
warning on a run too short for its starting scale (the old default on digits) but not on one that trained."""

from __future__ import annotations

import math
import re
import warnings

import pyro
import pytest
import torch

from pyro_bnn.bnn import BNN
from pyro_bnn.data import load_dataset
from pyro_bnn.guides import FlatMeanField, init_to_network
from pyro_bnn.guides.movement import (
    LOCATION_TOLERANCE,
    SCALE_TOLERANCE,
    UnmovedPosteriorWarning,
    start_of,
    unmoved_reason,
)
from pyro_bnn.infer import Trainer
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.priors import NormalPrior


def _bnn(data, model="tanh-small"):
    pyro.set_rng_seed(0)
    net = build_model(model, input_shape=data.input_shape, num_classes=data.num_classes)
    return BNN(net, NormalPrior(0.0, 1.0), Categorical(len(data.train)))


@pytest.fixture(scope="module")
def moons():
    return load_dataset("moons", seed=0)


def _flat_guide(bnn, data):
    guide = FlatMeanField(bnn, init_loc_fn=init_to_network(bnn), init_scale=0.1)
    guide(data.train.x[:4], data.train.y[:4])
    return guide


def test_the_rule_on_hand_moved_posteriors(moons):
    bnn = _bnn(moons)
    guide = _flat_guide(bnn, moons)
    start = start_of(guide)
    assert unmoved_reason(guide, start) is not None  # not moved at all
    with torch.no_grad():
        guide.log_scale += 0.9 * SCALE_TOLERANCE  # every sigma moved, but by less than the tolerance
        guide.loc += 0.9 * LOCATION_TOLERANCE * 0.1  # every location, by 0.9 starting sigma
    reason = unmoved_reason(guide, start)
    assert reason is not None and f"factor {math.exp(0.9 * SCALE_TOLERANCE):.2f}" in reason and "0.90" in reason
    with torch.no_grad():
        guide.loc += 0.2 * 0.1  # now 1.1 starting sigma: the locations moved
    assert unmoved_reason(guide, start) is None
    with torch.no_grad():
        guide.loc -= 0.2 * 0.1
        guide.log_scale += 0.2 * SCALE_TOLERANCE  # now 1.1 tolerances: the scales moved
    assert unmoved_reason(guide, start) is None
    assert unmoved_reason(guide, None) is None


def test_the_rule_reads_medians_not_means(moons):
    bnn = _bnn(moons)
    guide = _flat_guide(bnn, moons)
    start = start_of(guide)
    with torch.no_grad():
        few = guide.loc.numel() * 2 // 5  # 40 % of the weights move 100 starting sigmas, the rest half of one
        guide.loc[:few] += 100 * 0.1
        guide.loc[few:] += 0.5 * 0.1
    assert unmoved_reason(guide, start) is not None  # a mean of 40.3 sigmas would call this moved


def test_a_guide_passed_in_built_or_a_fit_of_no_epoch_is_not_judged():
    digits = load_dataset("digits", seed=0)
    bnn = _bnn(digits, "mlp:50,50,50")
    guide = FlatMeanField(bnn, init_loc_fn=init_to_network(bnn), relative_scale=1.0)
    trainer = Trainer(bnn, guide, optim=pyro.optim.Adam({"lr": 3e-3}), seed=0, progress=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(digits.loaders(128, seed=0)[0], 5)  # the run that warns when the trainer builds this guide
    assert not [w for w in caught if issubclass(w.category, UnmovedPosteriorWarning)]
    assert _fit(digits, "flat:rel=1", 0) == []


def _fit(data, guide: str, epochs: int, lr: float = 3e-3):
    bnn = _bnn(data, "mlp:50,50,50")
    trainer = Trainer(bnn, guide, optim=pyro.optim.Adam({"lr": lr}), seed=0, progress=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(data.loaders(128, seed=0)[0], epochs)
    return [w for w in caught if issubclass(w.category, UnmovedPosteriorWarning)]


def test_the_trainer_warns_after_a_run_too_short_for_its_start_and_only_then():
    digits = load_dataset("digits", seed=0)
    short = _fit(digits, "flat:rel=1", 5)  # 45 steps from sigma = each tensor's weight spread
    assert len(short) == 1 and "train longer (more epochs or a larger learning rate)" in str(short[0].message)
    # the hint names the starting sigma and a guide a tenth of it, not a fixed spec the run may already use
    start, hint = re.search(r"starting sigma \(([0-9.e-]+)\).*'flat:([0-9.e-]+)'", str(short[0].message)).groups()
    assert float(hint) == pytest.approx(float(start) / 10, rel=0.05)
    assert _fit(digits, "flat:rel=1", 5, lr=3e-2) == []  # ten times the rate: the posterior moved
    assert _fit(digits, "flat:0.01", 5) == []  # a small start: the locations move many sigmas
    assert _fit(digits, "map", 5) == []  # a point estimate has no scales to judge
