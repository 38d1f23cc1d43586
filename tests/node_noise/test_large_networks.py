"""Node noise on torchvision-size networks: a ResNet-18 converts, trains one step and has few latents."""

from __future__ import annotations

import pytest
import torch

from pyro_bnn import BNN
from pyro_bnn.guides import NodeNoiseMixture
from pyro_bnn.infer import ParamGroups, Trainer
from pyro_bnn.infer.mixture_kl import MixtureMeanKL
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.node_noise import NodeNoisePrior, add_node_noise, count_latents
from pyro_bnn.predict import predict


class _Loader(list):
    def __init__(self, batches, dataset_size):
        super().__init__(batches)
        self.dataset = range(dataset_size)


def test_resnet18_converts_trains_one_step_and_has_far_fewer_latents_than_weights(capsys):
    torch.manual_seed(0)
    net = build_model("resnet18", input_shape=(3, 32, 32), num_classes=10)
    without_bias = count_latents(add_node_noise(build_model("resnet18", input_shape=(3, 32, 32), num_classes=10)))
    add_node_noise(net, bias_noise=True)
    counts = count_latents(net)
    with capsys.disabled():
        print(
            f"\nresnet18 (32x32x3, 10 classes): {counts.input_nodes:,} input nodes, {without_bias.latents:,} latents "
            f"without bias scalars, {counts.latents:,} with; {counts.weights:,} weights"
        )
    assert without_bias.latents == counts.input_nodes == 4_355
    assert counts.latents == 4_356  # only the final Linear has a bias (the convs have none)
    assert counts.latents * 1000 < counts.weights

    bnn = BNN(net, NodeNoisePrior(0.1), Categorical(8))
    x, y = torch.randn(4, 3, 32, 32), torch.randint(10, (4,))
    trainer = Trainer(
        bnn,
        lambda model: NodeNoiseMixture(model, 2),
        objective=MixtureMeanKL(2),
        optim=ParamGroups(model={"lr": 1e-3, "momentum": 0.9}, guide={"lr": 1e-2}),
        progress=False,
    )
    before = {name: p.detach().clone() for name, p in bnn.named_parameters()}
    history = trainer.fit(_Loader([(x, y)], 8), epochs=1)
    assert torch.isfinite(torch.tensor(history[0]["loss"]))
    moved = [name for name, p in bnn.named_parameters() if not torch.equal(p, before[name])]
    assert "net.conv1.weight" in moved and any("bn1" in name for name in moved)  # batch norm trains too
    assert not torch.equal(trainer.guide.locs.detach(), trainer.guide.locs.detach()[[1, 0]])
    prediction = predict(bnn, trainer.guide, x, num_samples=4)  # eval mode: batch norm uses running stats
    assert prediction.probs.shape == (4, 4, 10)
    assert torch.isfinite(prediction.probs).all()


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("vgg16", (3, 32, 32)),
        ("wrn:16,2", (3, 32, 32)),
        ("lenet", (1, 28, 28)),
        ("3fc", (1, 28, 28)),
        ("conv", (1, 28, 28)),
    ],
)
def test_zoo_and_torchvision_networks_convert_with_and_without_batch_norm(name, shape):
    torch.manual_seed(0)
    net = build_model(name, input_shape=shape, num_classes=10).eval()  # eval: batch norm uses running statistics
    x = torch.randn(2, *shape)
    with torch.no_grad():
        before = net(x)
    expected_nodes = sum(
        m.in_features if isinstance(m, torch.nn.Linear) else m.in_channels
        for m in net.modules()
        if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))
    )
    add_node_noise(net)
    assert count_latents(net).input_nodes == expected_nodes
    with torch.no_grad():
        torch.testing.assert_close(net(x), before)  # noise at 1: the deterministic twin
    bnn = BNN(net.train(), NodeNoisePrior(0.1), Categorical(10))
    y = torch.randint(10, (2,))
    guide = NodeNoiseMixture(bnn, 2)
    guide(x, y)
    MixtureMeanKL(2)(bnn, guide, x, y, 1.0).loss.backward()  # train mode, batch norm over the 4 expanded rows
    assert torch.isfinite(guide.locs.grad).all() and guide.locs.grad.abs().sum() > 0
