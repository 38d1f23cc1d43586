"""The per-epoch validation callback (:class:`pyro_bnn.infer.validation.Validation`): its metrics against values
worked out by hand, the keys it writes, and its place before the other callbacks."""

import math

import pyro
import pytest
import torch
from pyro.infer.autoguide import AutoDelta, AutoNormal
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import init_to_network
from pyro_bnn.infer import Callback, NonFiniteLossError, Trainer
from pyro_bnn.infer.validation import Validation
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.priors import NormalPrior

# Inputs (1, 0) predict p = (0.7, 0.2, 0.1), inputs (0, 1) predict q = (0.15, 0.65, 0.2): a bias-free linear layer
# whose columns are the log-probabilities (softmax(log p) = p), and a point-mass guide at those weights.
P, Q = (0.7, 0.2, 0.1), (0.15, 0.65, 0.2)
X = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
Y = torch.tensor([0, 1, 1, 2])
EXPECTED = {
    "val_accuracy": 0.5,  # predicted 0, 0, 1, 1
    "val_nll": -(math.log(0.7) + math.log(0.2) + math.log(0.65) + math.log(0.2)) / 4,
    # sum_c (p_c - onehot_c)^2 per point: 0.14, 1.14, 0.185, 1.085
    "val_brier": (0.14 + 1.14 + 0.185 + 1.085) / 4,
    # 15 bins: confidence 0.7 (bin 10, accuracy 1/2) and 0.65 (bin 9, accuracy 1/2), two points each
    "val_ece": 0.5 * abs(0.7 - 0.5) + 0.5 * abs(0.65 - 0.5),
    "val_mce": 0.2,
}


def _known_trainer(**kwargs):
    net = nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        net.weight.copy_(torch.tensor([P, Q]).log().T)
    bnn = BNN(net, NormalPrior(0.0, 1.0), Categorical(4))
    trainer = Trainer(bnn, lambda m: AutoDelta(m, init_loc_fn=init_to_network(m)), progress=False, **kwargs)
    trainer.setup(X, Y)
    return trainer


def test_validation_writes_the_val_metrics_worked_out_by_hand():
    trainer = _known_trainer(num_val_samples=3)
    assert isinstance(trainer.validation, Validation) and trainer.validation.num_samples == 3
    record = {"epoch": 1, "loss": 1.0}
    trainer.validation.on_epoch_end(trainer, record)  # no loader: nothing added
    assert record == {"epoch": 1, "loss": 1.0}
    trainer.validation.loader = BatchLoader(X, Y, 3)
    trainer.validation.on_epoch_end(trainer, record)
    assert set(record) == {"epoch", "loss", *EXPECTED}
    for key, value in EXPECTED.items():
        assert record[key] == pytest.approx(value, abs=1e-6), key
    assert trainer.evaluate(BatchLoader(X, Y, 4)) == {
        k.removeprefix("val_"): v for k, v in record.items() if k.startswith("val_")
    }


def test_validation_settings_come_from_the_trainers_arguments():
    trainer = _known_trainer(num_val_samples=5, n_bins=4)
    assert (trainer.validation.num_samples, trainer.validation.n_bins) == (5, 4)
    assert (trainer.num_val_samples, trainer.n_bins) == (5, 4)
    trainer.n_bins = 15
    trainer.validation.loader = BatchLoader(X, Y, 4)
    record = {"epoch": 1}
    trainer.validation.on_epoch_end(trainer, record)
    assert record["val_ece"] == pytest.approx(EXPECTED["val_ece"], abs=1e-6)
    with pytest.raises(ValueError, match="n_bins must be an int >= 1, got 0"):
        Validation(4, 0)


class _Seen(Callback):
    """Records what each callback hook sees."""

    def __init__(self):
        self.records, self.epochs = [], []

    def on_epoch_end(self, trainer, record):
        self.records.append(dict(record))
        self.epochs.append(trainer.epoch)


def test_callbacks_see_the_validation_metrics_of_their_epoch():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(60, 2, generator=g), torch.arange(60) % 3
    torch.manual_seed(0)
    bnn = BNN(nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 3)), NormalPrior(0.0, 1.0), Categorical(40))
    seen = _Seen()
    trainer = Trainer(
        bnn,
        lambda m: AutoNormal(m, init_loc_fn=init_to_network(m), init_scale=0.05),
        optim=pyro.optim.Adam({"lr": 0.05}),
        seed=0,
        progress=False,
        num_val_samples=4,
        callbacks=[seen],
    )
    history = trainer.fit(BatchLoader(x[:40], y[:40], 20), 2, val_loader=BatchLoader(x[40:], y[40:], 20))
    assert seen.records == history and seen.epochs == [1, 2]
    assert all({f"val_{k}" for k in ("accuracy", "nll", "brier", "ece", "mce")} <= set(r) for r in history)
    trainer.fit(BatchLoader(x[:40], y[:40], 20), 3)  # no val_loader this time: no metrics
    assert not any(k.startswith("val_") for k in history[-1])


def test_diverged_predictions_are_the_trainers_error():
    trainer = _known_trainer()
    with torch.no_grad():
        for p in trainer.guide.parameters():
            p.fill_(float("inf"))
    trainer.validation.loader = BatchLoader(X, Y, 4)
    with (
        pyro.validation_enabled(False),  # with checks on, a distribution's argument check may see it first
        pytest.raises(NonFiniteLossError, match="after epoch 3: the parameters diverged; .* no checkpoint had been"),
    ):
        trainer.validation.on_epoch_end(trainer, {"epoch": 3})


def test_an_empty_val_loader_is_refused_before_the_first_epoch():
    trainer = _known_trainer()
    empty = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X[:0], Y[:0]), batch_size=2)
    with pytest.raises(ValueError, match=r"val_loader has no batch .* pass val_loader=None for none") as error:
        trainer.fit(BatchLoader(X, Y, 2), 1, val_loader=empty)
    assert trainer.epoch == 0 and "\n" not in str(error.value)


def test_a_val_loader_without_a_length_still_validates():
    """A DataLoader over an IterableDataset has no len(): the empty-loader check must not stop it."""

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(zip(X, Y, strict=True))

    trainer = _known_trainer()
    history = trainer.fit(BatchLoader(X, Y, 2), 1, val_loader=torch.utils.data.DataLoader(Stream(), batch_size=2))
    assert 0 <= history[0]["val_accuracy"] <= 1  # it validated (the check raised TypeError before)
