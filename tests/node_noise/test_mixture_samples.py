"""Node noise: a K-component mixture's default sample counts, the prior's scale checks, add_node_noise's refusals."""

import numpy as np
import pytest
import torch
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.guides import NodeNoiseMixture
from pyro_bnn.guides.mixture import samples_for_components
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.node_noise import NodeNoisePrior, add_node_noise
from pyro_bnn.predict import predict
from pyro_bnn.runs.config import RunConfig


def _trained_mixture(k: int):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))
    add_node_noise(net)
    bnn = BNN(net, NodeNoisePrior(0.1), Categorical(10))
    x = torch.randn(4, 4)
    guide = NodeNoiseMixture(bnn, k)
    guide(x, torch.zeros(4, dtype=torch.long))
    return bnn, guide, x


def test_samples_for_components_rounds_up_to_a_multiple():
    assert [samples_for_components(100, k) for k in (1, 3, 4, 7, 200)] == [100, 102, 100, 105, 200]
    with pytest.raises(ValueError, match="num_components must be an int >= 1, got 0"):
        samples_for_components(100, 0)


@pytest.mark.parametrize("k", [3, 4])
def test_predict_default_takes_every_component_equally(k):
    bnn, guide, x = _trained_mixture(k)
    prediction = predict(bnn, guide, x)
    assert prediction.num_samples == samples_for_components(100, k)
    assert prediction.num_samples % k == 0


def test_predict_refuses_a_count_that_weighs_the_components_unequally():
    # num_samples=4 of K = 3 drew component 0 twice, silently
    bnn, guide, x = _trained_mixture(3)
    message = r"^num_samples=4 is not a multiple of 3: .* \(e.g. num_samples=6; the default, None, is 102\)$"
    with pytest.raises(ValueError, match=message):
        predict(bnn, guide, x, num_samples=4)
    assert predict(bnn, guide, x, num_samples=6).num_samples == 6


def test_a_trainer_validates_a_mixture_of_three_with_its_default_sample_count():
    import pyro

    from pyro_bnn.data import BatchLoader
    from pyro_bnn.infer import RuntimeOptions, Trainer, ValidationOptions
    from pyro_bnn.infer.validation import Validation

    bnn, guide, x = _trained_mixture(3)
    x, y = torch.randn(10, 4), torch.arange(10) % 3
    loader = BatchLoader(x, y, 5)
    trainer = Trainer(bnn, guide, optim=pyro.optim.Adam({"lr": 0.01}), runtime=RuntimeOptions(seed=0, progress=False))
    assert trainer.fit(loader, 1, val_loader=loader)[0]["val_accuracy"] >= 0  # 16 draws of 3 would be refused
    assert Validation().samples_for(guide) == 18 and Validation(6).samples_for(guide) == 6
    assert ValidationOptions().num_val_samples is None
    # an explicit count the mixture refuses: before an epoch is spent, and only where there is a validation
    runtime = RuntimeOptions(seed=0, progress=False)
    trainer = Trainer(bnn, guide, optim=pyro.optim.Adam({"lr": 0.01}), runtime=runtime, validation=ValidationOptions(8))
    message = r"^num_val_samples=8 is not a multiple of 3: .* \(e.g. 9; the default, None, is 18 here\)$"
    with pytest.raises(ValueError, match=message):
        trainer.fit(loader, 1, val_loader=loader)
    assert trainer.epoch == 0
    assert len(trainer.fit(loader, 1)) == 1  # no validation: nothing to refuse


def test_run_config_defaults_round_to_the_mixture():
    three = RunConfig(dataset="cubic", model="mlp:16,16", node_noise=True, guide="mixture:3", num_samples=6)
    assert (three.resolved().num_samples, three.resolved().num_val_samples) == (6, 18)
    assert (RunConfig(node_noise=True, guide="mixture:3").resolved().num_samples) == 102
    # the defaults of every other guide are as before (and so are run ids)
    assert (RunConfig().resolved().num_samples, RunConfig().resolved().num_val_samples) == (100, 16)
    four = RunConfig(node_noise=True).resolved()
    assert (four.guide, four.num_samples, four.num_val_samples) == ("mixture:4", 100, 16)


def test_run_config_refuses_a_given_count_that_is_no_multiple():
    with pytest.raises(ValueError, match=r"^num_val_samples=16 is not a multiple of 3: guide 'mixture:3'.*unset"):
        RunConfig(dataset="cubic", model="mlp:16,16", node_noise=True, guide="mixture:3", num_val_samples=16)


@pytest.mark.parametrize(
    "value, shown",
    [
        (True, "got True"),
        ("0.1", "got '0.1'"),
        ("abc", "got 'abc'"),
        ([0.1], r"got \[0.1\]"),
        (torch.tensor([0.1, 0.2]), r"got a tensor of shape \(2,\)"),
        (0, "got 0"),
        (float("nan"), "got nan"),
    ],
)
def test_node_noise_prior_refuses_a_bad_scale_in_one_line(value, shown):
    with pytest.raises(ValueError, match=rf"^NodeNoisePrior: scale must be a finite number > 0, {shown}") as err:
        NodeNoisePrior(value)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=rf"^NodeNoisePrior: layer_scales\['0'\] must be a finite number > 0, {shown}"):
        NodeNoisePrior(0.1, layer_scales={"0": value})


@pytest.mark.parametrize(
    "value",
    [0.3, 2, np.float64(0.3), np.float32(0.3), torch.tensor(0.3), torch.tensor([0.3]), np.array(0.3), np.array([0.3])],
)
def test_node_noise_prior_takes_real_numbers_for_both(value):
    prior = NodeNoisePrior(value, layer_scales={"0": value})
    expected = float(np.asarray(value, dtype=float).reshape(()))
    assert prior.scale.item() == pytest.approx(expected)
    assert prior.layer_scale("0").item() == pytest.approx(expected)


def test_add_node_noise_refuses_a_lazy_layer_in_one_line():
    net = nn.Sequential(nn.LazyLinear(3))
    with pytest.raises(ValueError, match=r"^layer '0' \(LazyLinear\) is not initialised yet.*run the network once"):
        add_node_noise(net)
    net(torch.randn(2, 5))
    assert add_node_noise(net)[0].input_noise.shape == (5,)


def test_add_node_noise_names_the_conv_layers_it_applies_to():
    with pytest.raises(ValueError, match=r"nn.Conv1d, nn.Conv2d and nn.Conv3d layers, not to transposed"):
        add_node_noise(nn.Sequential(nn.ConvTranspose2d(3, 4, 3)))
