"""The Trainer's option groups (:mod:`pyro_bnn.infer.trainer_options`): each checked once when built, and the
keywords they replaced still taken, with one DeprecationWarning, giving the same training."""

import dataclasses
import warnings

import pyro
import pytest
import torch
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.infer import (
    LRSchedulerOptions,
    ObjectiveOptions,
    ResumeOptions,
    RuntimeOptions,
    SchedulerInterval,
    Trainer,
    ValidationOptions,
    linear_warmup,
)
from pyro_bnn.infer.kl_weighting import KLWeighting
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.priors import NormalPrior


def _bnn():
    torch.manual_seed(0)
    return BNN(nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 3)), NormalPrior(0.0, 1.0), Categorical(60))


def _loaders():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(90, 2, generator=g), torch.arange(90) % 3
    return BatchLoader(x[:60], y[:60], 20, shuffle=True, seed=1), BatchLoader(x[60:], y[60:], 30)


def _scheduler(optimizer):
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)


def _fit(trainer):
    train, val = _loaders()
    history = [{k: v for k, v in r.items() if k != "time_s"} for r in trainer.fit(train, 2, val_loader=val)]
    return history, {k: v.clone() for k, v in trainer.guide.state_dict().items()}


@pytest.mark.filterwarnings("ignore::pyro_bnn.guides.movement.UnmovedPosteriorWarning")  # two short epochs
def test_the_old_keywords_train_exactly_as_the_groups_and_warn_once():
    old = dict(
        objective="trace",
        num_particles=2,
        kl_schedule=linear_warmup(2),
        kl_weighting="blundell",
        lr_scheduler=_scheduler,
        lr_scheduler_interval="step",
        num_val_samples=4,
        n_bins=5,
        seed=3,
        progress=False,
        config={"a": 1},
        resume_may_change=["a"],
    )
    with pytest.warns(DeprecationWarning) as caught:
        by_keywords = Trainer(_bnn(), "autonormal:0.05", optim=pyro.optim.Adam({"lr": 0.05}), **old)
    assert len(caught) == 1
    message = str(caught[0].message)
    for advice in (
        "objective=ObjectiveOptions('trace', num_particles=..., kl_schedule=..., kl_weighting=...)",
        "lr_scheduler=LRSchedulerOptions(<factory>, interval=...)",
        "validation=ValidationOptions(num_val_samples=..., n_bins=...)",
        "runtime=RuntimeOptions(seed=..., progress=...)",
        "resume=ResumeOptions(config=..., resume_may_change=...)",
    ):
        assert advice in message
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        by_groups = Trainer(
            _bnn(),
            "autonormal:0.05",
            optim=pyro.optim.Adam({"lr": 0.05}),
            objective=ObjectiveOptions("trace", 2, kl_schedule=linear_warmup(2), kl_weighting="blundell"),
            lr_scheduler=LRSchedulerOptions(_scheduler, interval="step"),
            validation=ValidationOptions(4, 5),
            runtime=RuntimeOptions(seed=3, progress=False),
            resume=ResumeOptions({"a": 1}, ["a"]),
        )
    (history, params), (history_2, params_2) = _fit(by_keywords), _fit(by_groups)
    assert history == history_2
    assert params.keys() == params_2.keys() and all(torch.equal(params[k], params_2[k]) for k in params)
    for name in ("kl_weighting", "lr_scheduler_interval", "seed", "progress", "config", "resume_may_change"):
        assert getattr(by_keywords, name) == getattr(by_groups, name)
    assert by_groups.kl_weighting is KLWeighting.BLUNDELL
    assert by_groups.lr_scheduler_interval is SchedulerInterval.STEP
    assert by_groups.resume_may_change == frozenset({"a"})
    assert (by_groups.num_val_samples, by_groups.n_bins) == (4, 5)


def test_a_bare_objective_or_scheduler_is_its_groups_first_field():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer = Trainer(_bnn(), "flat", objective="trace", lr_scheduler=_scheduler)
    assert trainer.lr_scheduler_factory is _scheduler
    assert trainer.lr_scheduler_interval is SchedulerInterval.EPOCH
    assert type(trainer.objective).__name__ == "TraceELBO"


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: ObjectiveOptions("nope"), "unknown ELBO 'nope'"),
        (lambda: ObjectiveOptions(3), r"objective must be an ElboKind name .* or an Objective, got 3"),
        (lambda: ObjectiveOptions(num_particles=0), "num_particles must be an int >= 1, got 0"),
        (lambda: ObjectiveOptions(vectorize_particles="yes"), "vectorize_particles must be a bool or None, got 'yes'"),
        (lambda: ObjectiveOptions(kl_schedule=2.0), "kl_schedule must be a function of progress in epochs or None"),
        (lambda: ObjectiveOptions(kl_weighting="x"), "unknown KL weighting 'x'; expected one of 'uniform', 'blundell'"),
        (lambda: ValidationOptions(num_val_samples=0), "num_val_samples must be an int >= 1, got 0"),
        (lambda: ValidationOptions(n_bins=True), "n_bins must be an int >= 1, got True"),
        (lambda: LRSchedulerOptions(3), "the lr_scheduler factory must be a function optimizer -> scheduler or None"),
        (lambda: LRSchedulerOptions(interval="batch"), "unknown scheduler interval 'batch'"),
        (lambda: RuntimeOptions(seed=1.5), "seed must be an int or None, got 1.5"),
        (lambda: RuntimeOptions(progress=None), "progress must be a bool, got None"),
        (lambda: RuntimeOptions(cuda_graph=1), "cuda_graph must be a bool, got 1"),
        (lambda: RuntimeOptions(nan_check_every=0), "nan_check_every must be an int >= 1, got 0"),
        (lambda: RuntimeOptions(step_runner="eager"), "step_runner must be a factory StepParts -> StepRunner or None"),
        (lambda: ResumeOptions(config=[1]), r"config must be a dict of JSON values or None, got \[1\]"),
        (lambda: ResumeOptions(resume_may_change="epochs"), "resume_may_change must be a sequence of config keys"),
    ],
)
def test_each_group_refuses_a_bad_value_in_one_line(build, message):
    with pytest.raises(ValueError, match=message) as caught:
        build()
    assert "\n" not in str(caught.value)


def test_the_groups_are_frozen_and_normalised():
    runtime = RuntimeOptions(device="cpu")
    assert runtime.device == torch.device("cpu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        runtime.seed = 1
    assert ObjectiveOptions(kl_weighting="blundell").kl_weighting is KLWeighting.BLUNDELL
    assert ResumeOptions(resume_may_change=("a", "b")).resume_may_change == frozenset({"a", "b"})


def test_an_option_inside_and_beside_its_group_or_an_unknown_keyword_is_refused():
    with pytest.raises(ValueError, match=r"give seed inside runtime=RuntimeOptions\(...\), not beside it"):
        Trainer(_bnn(), "flat", runtime=RuntimeOptions(), seed=0)
    with pytest.raises(ValueError, match=r"give num_particles inside objective=ObjectiveOptions\(...\)"):
        Trainer(_bnn(), "flat", objective=ObjectiveOptions("trace"), num_particles=2)
    with pytest.raises(TypeError, match="Trainer.. got an unexpected keyword argument 'sead'"):
        Trainer(_bnn(), "flat", sead=0)
    with pytest.raises(ValueError, match="runtime must be a RuntimeOptions or None, got 3"):
        Trainer(_bnn(), "flat", runtime=3)
