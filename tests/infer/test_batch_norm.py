"""Networks with batch norm: the checks before training run in evaluation mode (a one-example pass in training mode
cannot run through batch norm and would move its running statistics)."""

import pyro
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pyro_bnn import BNN
from pyro_bnn.infer import RuntimeOptions, Trainer
from pyro_bnn.infer.trainer_loop import check_all_labels
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.predict import predict
from pyro_bnn.priors import NormalPrior

N = 64


def _setup():
    torch.manual_seed(0)
    x = torch.randn(N, 3)
    y = (x[:, 0] > 0).long()
    net = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    return BNN(net, NormalPrior(), Categorical(N)), DataLoader(TensorDataset(x, y), batch_size=32)


def test_the_label_check_leaves_batch_norm_as_it_was():
    bnn, loader = _setup()
    state = {k: v.clone() for k, v in bnn.net[1].state_dict().items()}
    check_all_labels(loader, bnn, loader.dataset.tensors[0][:32])
    for key, value in bnn.net[1].state_dict().items():
        assert torch.equal(value, state[key]), key
    assert all(module.training for module in bnn.net.modules())  # each module's mode is restored


def test_the_label_check_still_refuses_a_label_beyond_the_classes():
    bnn, loader = _setup()
    x, y = loader.dataset.tensors
    y[-1] = 2
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\) .* found values in \[0, 2\]"):
        check_all_labels(loader, bnn, x[:32])


@pytest.mark.parametrize("guide", ["flat:0.01", "autonormal:0.01", "map"])
def test_a_batch_norm_network_trains_from_a_tensor_dataset(guide):
    bnn, loader = _setup()
    runtime = RuntimeOptions(seed=0, progress=False)
    trainer = Trainer(bnn, guide, optim=pyro.optim.Adam({"lr": 0.01}), runtime=runtime)
    history = trainer.fit(loader, 2)
    assert len(history) == 2
    assert int(bnn.net[1].num_batches_tracked) >= 4  # its training steps do update batch norm


@pytest.mark.parametrize("guide", ["flat:0.01", "autonormal:0.01", "map", "flat:0.01,loc=map,map_epochs=1"])
def test_several_vectorised_particles_through_batch_norm_are_refused_before_a_step(guide):
    from pyro_bnn.infer import ObjectiveOptions

    bnn, loader = _setup()
    state = {k: v.clone() for k, v in bnn.net[1].state_dict().items()}
    runtime = RuntimeOptions(seed=0, progress=False)
    trainer = Trainer(bnn, guide, objective=ObjectiveOptions(num_particles=2), runtime=runtime)
    with pytest.raises(ValueError, match=r"^batch norm in training mode cannot run 2 weight draws in one") as error:
        trainer.fit(loader, 1)
    assert "\n" not in str(error.value)
    assert all(torch.equal(v, state[k]) for k, v in bnn.net[1].state_dict().items())  # no step ran


def test_batch_norm_without_running_statistics_trains_with_vectorised_particles():
    from pyro_bnn.infer import ObjectiveOptions

    torch.manual_seed(0)
    x = torch.randn(N, 3)
    y = (x[:, 0] > 0).long()
    net = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8, track_running_stats=False), nn.ReLU(), nn.Linear(8, 2))
    bnn = BNN(net, NormalPrior(), Categorical(N))
    runtime = RuntimeOptions(seed=0, progress=False)
    trainer = Trainer(bnn, "flat:0.01", objective=ObjectiveOptions(num_particles=2), runtime=runtime)
    loader = DataLoader(TensorDataset(x, y), batch_size=32)
    history = trainer.fit(loader, 1, val_loader=loader)  # validation predicts on a batch, never on one example
    assert len(history) == 1 and 0 <= history[0]["val_accuracy"] <= 1
    assert predict(bnn, trainer.guide, (x, y), num_samples=3).probs.shape == (3, N, 2)


def test_the_trace_objective_runs_particles_one_by_one_through_batch_norm():
    from pyro_bnn.infer import ObjectiveOptions

    bnn, loader = _setup()
    objective = ObjectiveOptions("trace", num_particles=2, vectorize_particles=False)
    trainer = Trainer(bnn, "autonormal:0.01", objective=objective, runtime=RuntimeOptions(seed=0, progress=False))
    assert len(trainer.fit(loader, 1)) == 1


@pytest.mark.parametrize(
    ("layer", "couples"),
    [
        (nn.BatchNorm1d(8), True),
        (nn.LazyBatchNorm1d(), True),  # no subclass of BatchNorm1d: it was missed
        (nn.BatchNorm1d(8, track_running_stats=False), True),  # batch statistics couple rows all the same
        (nn.GroupNorm(2, 8), False),
        (nn.LayerNorm(8), False),
    ],
)
def test_the_fast_plan_knows_which_layers_couple_the_rows_of_a_batch(layer, couples):
    """The fused objective's antithetic pair runs each half of a batch separately: only right where no layer
    normalises by the batch's statistics."""
    from pyro_bnn.guides import FlatMeanField
    from pyro_bnn.infer.fast_plan import build_plan
    from pyro_bnn.nn import has_batch_norm

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 8), layer, nn.ReLU(), nn.Linear(8, 2))
    net(torch.randn(4, 3))  # materialises a lazy layer
    bnn = BNN(net, NormalPrior(), Categorical(N))
    guide = FlatMeanField(bnn, init_scale=0.01)
    guide(torch.randn(4, 3), torch.zeros(4, dtype=torch.long))
    assert has_batch_norm(net) is couples
    assert build_plan(bnn, guide, closed_form_kl=True, linear_noise=False).couples_rows is couples


@pytest.mark.parametrize("guide", ["flat:0.01", "autonormal:0.01", "bbb", "map", "lowrank:0.01"])
def test_the_set_up_passes_leave_batch_norm_as_it_was(guide):
    # the guide's first call and the objective's check ran the network in training mode: two batches tracked
    bnn, loader = _setup()
    x, y = loader.dataset.tensors
    with torch.no_grad():
        bnn.net[1].running_mean.fill_(0.5)
    state = {k: v.clone() for k, v in bnn.net[1].state_dict().items()}
    trainer = Trainer(bnn, guide, optim=pyro.optim.Adam({"lr": 0.01}), runtime=RuntimeOptions(seed=0, progress=False))
    trainer.setup(x[:32] * 5 + 2, y[:32])
    for key, value in bnn.net[1].state_dict().items():
        assert torch.equal(value, state[key]), key
    trainer.fit(loader, 1)
    assert int(bnn.net[1].num_batches_tracked) == 2  # the epoch's two steps, and only they


def test_a_lazy_batch_norm_materialised_in_a_preserved_block_holds_the_statistics_of_no_batch():
    from pyro_bnn.nn import preserved_state

    net = nn.Sequential(nn.Linear(3, 8), nn.LazyBatchNorm1d())
    with preserved_state(net):
        net(torch.randn(32, 3) * 5 + 2)
    layer = net[1]
    assert layer.running_mean.shape == (8,) and int(layer.num_batches_tracked) == 0
    assert torch.equal(layer.running_mean, torch.zeros(8)) and torch.equal(layer.running_var, torch.ones(8))


def test_preserved_state_puts_the_buffers_back_when_the_block_raises():
    from pyro_bnn.nn import preserved_state

    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    with pytest.raises(RuntimeError, match="boom"), preserved_state(net):
        net(torch.randn(8, 3) + 3)
        raise RuntimeError("boom")
    assert int(net[1].num_batches_tracked) == 0 and torch.equal(net[1].running_mean, torch.zeros(4))
    assert net[1].training  # the mode is not touched
