"""Step runners (:mod:`pyro_bnn.infer.steps`): the eager step, the CUDA-graph runner's fallback and NaN rules (with a
stand-in graph, so on any machine), the default choice, and a runner passed to the trainer."""

import contextlib
import math

import pyro
import pytest
import torch
from pyro.infer.autoguide import AutoNormal
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import init_to_network
from pyro_bnn.infer import NonFiniteLossError, ObjectiveTerms, TraceELBO, Trainer
from pyro_bnn.infer.steps import (
    EagerStep,
    GraphedStepRunner,
    NonFiniteStep,
    StepParts,
    StepRunner,
    default_step_runner,
)
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.priors import NormalPrior


def _data(n=90):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 2, generator=g), torch.arange(n) % 3


def _bnn(n=90):
    torch.manual_seed(0)
    return BNN(nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 3)), NormalPrior(0.0, 1.0), Categorical(n))


def _guide(bnn):
    return AutoNormal(bnn, init_loc_fn=init_to_network(bnn), init_scale=0.05)


def _parts(lr=0.05):
    bnn = _bnn()
    guide = _guide(bnn)
    x, y = _data()
    with torch.no_grad():
        guide(x[:30], y[:30])
    params = list(guide.parameters())
    return StepParts(TraceELBO(), bnn, guide, torch.optim.Adam(params, lr=lr), params), x[:30], y[:30]


def _trainer(**kwargs):
    kwargs.setdefault("optim", pyro.optim.Adam({"lr": 0.05}))
    return Trainer(_bnn(), _guide, seed=0, progress=False, **kwargs)


def _strip(history):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in history]


def test_eager_step_updates_and_returns_detached_terms():
    parts, x, y = _parts()
    before = [p.detach().clone() for p in parts.params]
    terms = EagerStep(parts).step(x, y, 0.5, check=True)
    assert isinstance(terms, ObjectiveTerms) and not terms.loss.requires_grad
    assert math.isclose(float(terms.loss), float(terms.data_term + terms.kl_term), rel_tol=1e-6)
    assert any(not torch.equal(p, q) for p, q in zip(parts.params, before, strict=True))
    assert isinstance(EagerStep(parts), StepRunner)


def test_eager_step_stops_before_the_update_on_a_non_finite_loss():
    parts, x, y = _parts()
    before = [p.detach().clone() for p in parts.params]
    with pytest.raises(NonFiniteStep) as info:
        EagerStep(parts).step(x * float("nan"), y, 1.0, check=True)
    assert math.isnan(info.value.loss) and not info.value.applied
    assert all(torch.equal(p, q) for p, q in zip(parts.params, before, strict=True))


class _StandInGraph:
    """Stands in for a GraphedStep: hands out the given results (None: run eagerly) and counts eager streams."""

    def __init__(self, results):
        self.results, self.eager_streams, self.fits = list(results), 0, 0

    def step(self, x, y, kl_weight):
        return self.results.pop(0)

    @contextlib.contextmanager
    def eager_stream(self):
        self.eager_streams += 1
        yield

    def new_fit(self):
        self.fits += 1


def test_graphed_runner_falls_back_to_the_eager_step_and_checks_replays_after_the_update():
    parts, x, y = _parts()
    runner = GraphedStepRunner(parts)
    nan = ObjectiveTerms(torch.tensor(float("nan")), torch.tensor(0.0), torch.tensor(0.0))
    replayed = ObjectiveTerms(torch.tensor(2.0), torch.tensor(1.5), torch.tensor(0.5))
    runner.graphed = _StandInGraph([None, replayed, nan, nan])
    eager = runner.step(x, y, 1.0, check=True)  # warm-up: eager, on the graph's stream
    assert runner.graphed.eager_streams == 1 and math.isfinite(float(eager.loss))
    assert runner.step(x, y, 1.0, check=True) is replayed
    assert runner.step(x, y, 1.0, check=False) is nan  # unchecked steps are not read back
    with pytest.raises(NonFiniteStep) as info:
        runner.step(x, y, 1.0, check=True)
    assert math.isnan(info.value.loss) and info.value.applied
    runner.new_fit()
    assert runner.graphed.fits == 1


def test_default_runner_is_eager_off_cuda_and_says_why():
    parts, _, _ = _parts()
    runner, reason = default_step_runner(parts, torch.device("cpu"), per_step_scheduler=False)
    assert isinstance(runner, EagerStep) and reason == "the device is cpu, not CUDA"
    runner, reason = default_step_runner(parts, torch.device("cpu"), per_step_scheduler=False, cuda_graph=False)
    assert isinstance(runner, EagerStep) and reason == "turned off (cuda_graph=False)"


class _CountingRunner:
    """A runner of one's own: the eager step, recording what the trainer asks of it."""

    def __init__(self, parts):
        self.inner, self.calls, self.fits = EagerStep(parts), [], 0

    def new_fit(self):
        self.fits += 1

    def step(self, x, y, kl_weight, check):
        self.calls.append((len(x), kl_weight, check))
        return self.inner.step(x, y, kl_weight, check)


def test_a_step_runner_passed_in_takes_every_step_and_trains_as_the_default():
    x, y = _data()
    trainer = _trainer(step_runner=_CountingRunner, nan_check_every=2)
    history = trainer.fit(BatchLoader(x, y, 30, shuffle=True, seed=1), 2)
    runner = trainer.step_runner
    assert isinstance(runner, _CountingRunner)
    assert runner.calls == [(30, 1.0, False), (30, 1.0, True), (30, 1.0, True)] * 2  # checks: every 2nd, and last
    assert trainer.graph_reason == "the step runner passed in is a _CountingRunner"
    reference = _trainer(nan_check_every=2).fit(BatchLoader(x, y, 30, shuffle=True, seed=1), 2)
    assert _strip(history) == _strip(reference)
    trainer.fit(BatchLoader(x, y, 30, shuffle=True, seed=1), 3)  # a second fit keeps the runner
    assert trainer.step_runner is runner and runner.fits == 1 and len(runner.calls) == 9


def test_the_eager_runner_passed_in_gives_the_defaults_run_on_a_cpu():
    x, y = _data()
    trainers = [_trainer(**kwargs) for kwargs in ({}, {"step_runner": EagerStep})]
    runs = [trainer.fit(BatchLoader(x, y, 30, shuffle=True, seed=1), 2) for trainer in trainers]
    assert _strip(runs[0]) == _strip(runs[1])
    assert all(type(trainer.step_runner) is EagerStep for trainer in trainers)
    first = trainers[1].step_runner
    trainers[1].fit(BatchLoader(x, y, 30, shuffle=True, seed=1), 3)
    assert trainers[1].step_runner is not first  # a runner without new_fit() is built anew for each fit


class _DivergedAfterUpdate:
    def __init__(self, parts):
        pass

    def step(self, x, y, kl_weight, check):
        raise NonFiniteStep(float("inf"), applied=True)


def test_a_runners_non_finite_step_is_the_trainers_error():
    x, y = _data()
    trainer = _trainer(step_runner=_DivergedAfterUpdate)
    with pytest.raises(NonFiniteLossError, match=r"loss became inf at epoch 1, step 1; .* after the optimiser step"):
        trainer.fit(BatchLoader(x, y, 30), 1)
    assert trainer.global_step == 0 and trainer.epoch == 0
