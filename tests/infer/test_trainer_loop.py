"""One epoch of training (:mod:`pyro_bnn.infer.trainer_loop`): what an epoch's record says."""

import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pyro_bnn import BNN
from pyro_bnn.guides.movement import UnmovedPosteriorWarning
from pyro_bnn.infer import LRSchedulerOptions, ParamGroups, RuntimeOptions, Trainer, group_scheduler
from pyro_bnn.infer.steps import EagerStep
from pyro_bnn.likelihoods import Gaussian
from pyro_bnn.priors import NormalPrior


@pytest.mark.parametrize("interval", ["step", "epoch"])
def test_the_records_lr_is_the_rate_the_epochs_last_step_used(interval):
    """With a per-step schedule the record held the rate after the epoch's last scheduler step, which no step of the
    epoch used (and with a per-epoch one the rate used): now both hold the last step's.

    4 steps per epoch, 5 epochs; "decay:0.1" over T scheduler steps (20 steps or 5 epochs): m(t) = 1 up to
    a = T/2, 1 - 0.9 (t - a) / (0.4 T) between, 0.1 from 0.9 T. Per step (a = 10, b = 18), epoch e's last step
    used m(4e + 3): m(3) = m(7) = 1, m(11) = 0.8875, m(15) = 0.4375, m(19) = 0.1 (the old records held m(4e + 4):
    1, 1, 0.775, 0.325, 0.1). Per epoch (a = 2.5, b = 4.5) it used m(e): 1, 1, 1, 0.775, 0.325.
    """
    used = []

    class Recording(EagerStep):
        def step(self, x, y, kl_weight, check=True):
            used.append([group["lr"] for group in self.parts.optimizer.param_groups])
            return super().step(x, y, kl_weight, check)

    x = torch.randn(40, 2, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=10)
    bnn = BNN(nn.Linear(2, 1), NormalPrior(0.0, 1.0), Gaussian(40, learn_scale=True))  # a "model" group: its scale
    total = 20 if interval == "step" else 5
    trainer = Trainer(
        bnn,
        "flat:0.01",
        optim=ParamGroups(constructor=torch.optim.SGD, model={"lr": 1e-3}, guide={"lr": 2e-4}),
        lr_scheduler=LRSchedulerOptions(lambda o: group_scheduler(o, {"model": "decay:0.1"}, total), interval),
        runtime=RuntimeOptions(seed=0, progress=False, step_runner=Recording),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnmovedPosteriorWarning)
        history = trainer.fit(loader, 5)
    m = {"step": [1.0, 1.0, 0.8875, 0.4375, 0.1], "epoch": [1.0, 1.0, 1.0, 0.775, 0.325]}[interval]
    assert [record["lr"] for record in history] == pytest.approx([1e-3 * f for f in m], rel=1e-12)
    assert [record["lr_model"] for record in history] == pytest.approx([1e-3 * f for f in m], rel=1e-12)
    assert [record["lr_guide"] for record in history] == [2e-4] * 5
    assert [record["lr_model"] for record in history] == [used[4 * e + 3][0] for e in range(5)]
