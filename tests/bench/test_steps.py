"""bench/steps.py: a variant's ``run(batches)`` reports the seconds of its steps; pyro_bnn's rows report the
epoch's loop of steps, not the checks ``Trainer.fit`` makes once per call."""

import time
import warnings

import pytest
import steps as bench_steps
import torch
from torch import nn

import pyro_bnn.infer.trainer as trainer_module
from pyro_bnn import BNN
from pyro_bnn.guides.movement import UnmovedPosteriorWarning
from pyro_bnn.infer import RuntimeOptions, Trainer
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.priors import NormalPrior

NUM_DATA = 60
SLOW_CHECK_S = 0.3


def _batches(count: int, size: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(count * size, 3, generator=generator)
    y = torch.randint(0, 2, (count * size,), generator=generator)
    return list(zip(x.split(size), y.split(size), strict=True))


def _trainer(batches) -> Trainer:
    bnn = BNN(nn.Linear(3, 2), NormalPrior(0.0, 1.0), Categorical(NUM_DATA))
    trainer = Trainer(bnn, "flat:rel=1", runtime=RuntimeOptions(seed=0, progress=False))
    trainer.setup(*batches[0])
    return trainer


def test_from_step_takes_a_step_per_batch_and_returns_their_seconds():
    seen = []

    def step(x, y):
        seen.append(int(x.shape[0]))
        time.sleep(0.01)

    seconds = bench_steps.from_step(step)(_batches(3))
    assert seen == [4, 4, 4]
    assert 0.03 <= seconds < 1.0


def test_a_trainer_row_reports_its_epochs_steps_without_the_fits_once_per_fit_checks(monkeypatch):
    # The unmoved-posterior check after fit() made 0.3 s slower: a per-step figure must not see it (on the 3FC it
    # and the parameters' finiteness check took 170 ms per fit, a third of a 10-step round).
    unmoved = trainer_module.warn_if_unmoved

    def slow_warn_if_unmoved(guide, start):
        time.sleep(SLOW_CHECK_S)
        unmoved(guide, start)

    monkeypatch.setattr(trainer_module, "warn_if_unmoved", slow_warn_if_unmoved)
    batches = _batches(2)
    trainer = _trainer(batches)
    run = bench_steps.fit_run(trainer, NUM_DATA)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        seconds = run(batches)
        wall = time.perf_counter() - start
    assert trainer.epoch == 1 and trainer.global_step == 2
    assert seconds == trainer.history[-1]["time_s"]
    assert seconds < SLOW_CHECK_S <= wall
    # Two steps leave the posterior at its start: expected in a timing round, so not printed every round ...
    assert not [w for w in caught if issubclass(w.category, UnmovedPosteriorWarning)]
    # ... while the same fit outside the benchmark still warns.
    with pytest.warns(UnmovedPosteriorWarning, match="barely left its start"):
        trainer.fit(bench_steps._Loader(batches, NUM_DATA), trainer.epoch + 1)
