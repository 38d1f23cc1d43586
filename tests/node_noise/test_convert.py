"""Node-noise conversion: where the noise goes, per-row noise, counts, pretrained weights, the prior."""

from __future__ import annotations

import re

import pytest
import torch
import torchvision
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.node_noise import NodeNoisePrior, add_node_noise, count_latents, is_node_noise, noisy_layers


def _mixed_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 5))


def test_noise_multiplies_inputs_and_bias_as_the_authors_define():
    torch.manual_seed(0)
    net = _mixed_net()
    conv, linear = net[0], net[3]
    x = torch.randn(2, 3, 6, 6)
    add_node_noise(net, bias_noise=True)
    z_conv, z_lin = torch.rand(3) + 0.5, torch.rand(64) + 0.5
    b_conv, b_lin = torch.tensor(0.7), torch.tensor(1.6)
    with torch.no_grad():
        conv.input_noise.copy_(z_conv), linear.input_noise.copy_(z_lin)
        conv.bias_noise.copy_(b_conv), linear.bias_noise.copy_(b_lin)
        h = nn.functional.conv2d(x * z_conv.view(3, 1, 1), conv.weight) + b_conv * conv.bias.view(4, 1, 1)
        expected = nn.functional.linear(h.relu().flatten(1) * z_lin, linear.weight) + b_lin * linear.bias
        torch.testing.assert_close(net(x), expected)


def test_per_row_noise_equals_running_each_row_with_its_own_noise():
    torch.manual_seed(1)
    net = add_node_noise(_mixed_net(), bias_noise=True)
    x = torch.randn(3, 3, 6, 6)
    rows = {
        name: 1 + 0.3 * torch.randn(3, *p.shape)
        for name, p in net.named_parameters()
        if is_node_noise(name, net.get_submodule(name.rsplit(".", 1)[0]))
    }
    together = torch.func.functional_call(net, rows, (x,))
    for r in range(3):
        alone = torch.func.functional_call(net, {k: v[r] for k, v in rows.items()}, (x[r : r + 1],))
        torch.testing.assert_close(together[r : r + 1], alone)


def test_at_noise_one_the_network_is_its_deterministic_twin():
    torch.manual_seed(2)
    net = build_model("lenet", input_shape=(1, 28, 28), num_classes=10)
    x = torch.randn(4, 1, 28, 28)
    before = net(x)
    add_node_noise(net, bias_noise=True)
    torch.testing.assert_close(net(x), before)


def test_counts_and_sites_of_lenet():
    net = add_node_noise(build_model("lenet", input_shape=(1, 28, 28), num_classes=10), bias_noise=True)
    counts = count_latents(net)
    # Input nodes: conv1 1, conv2 6, conv3 16, fc1 120, out 64.
    assert (counts.input_nodes, counts.bias_scalars, counts.weights) == (207, 5, 41_806)
    assert [(layer.name, layer.num_inputs) for layer in noisy_layers(net)] == [
        ("conv1", 1),
        ("conv2", 6),
        ("conv3", 16),
        ("fc1", 120),
        ("out", 64),
    ]
    bnn = BNN(net, NodeNoisePrior(0.1), Categorical(10))
    assert bnn.site_names == [
        f"{layer}.{attr}"
        for layer in ("conv1", "conv2", "conv3", "fc1", "out")
        for attr in ("input_noise", "bias_noise")
    ]
    assert count_latents(bnn.net) == counts  # the same once the noise became sample sites
    trained = {name for name, p in bnn.named_parameters()}
    assert "net.conv1.weight" in trained and not any("noise" in name for name in trained)


def test_torchvision_vgg16_has_the_papers_36995_input_nodes():
    net = add_node_noise(torchvision.models.vgg16(weights=None))
    counts = count_latents(net)
    assert counts.input_nodes == 36_995
    assert counts.bias_scalars == 0


def test_selection_and_errors():
    net = add_node_noise(_mixed_net(), lambda name, module: isinstance(module, nn.Linear))
    assert [layer.name for layer in noisy_layers(net)] == ["3"]
    with pytest.raises(ValueError, match="already has node noise"):
        add_node_noise(net)
    with pytest.raises(ValueError, match="selected no layer"):
        add_node_noise(nn.Sequential(nn.ReLU()))
    with pytest.raises(ValueError, match="torch.nn.Module"):
        add_node_noise("net")
    with pytest.raises(ValueError, match="^bias_noise must be True or False, got 'no'$"):
        add_node_noise(_mixed_net(), bias_noise="no")


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.att = nn.MultiheadAttention(4, 2, batch_first=True)
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        return self.head(self.att(x, x, x, need_weights=False)[0].mean(1))


def test_attention_out_proj_is_not_a_candidate_its_hooks_would_never_run():
    torch.manual_seed(0)
    net = add_node_noise(_Attention())
    assert [layer.name for layer in noisy_layers(net)] == ["head"]
    # Oracle: every noise parameter changes the output (a latent whose value does nothing is not a latent).
    x = torch.randn(2, 5, 4)
    base = net(x)
    for layer in noisy_layers(net):
        with torch.no_grad():
            net.get_parameter(f"{layer.name}.input_noise").mul_(1.5)
        assert not torch.allclose(net(x), base), layer.name


def test_pretrained_state_dict_loads_before_conversion_and_keys_stay_the_same(tmp_path):
    torch.manual_seed(3)
    trained = build_model("lenet", input_shape=(1, 28, 28), num_classes=10)
    path = tmp_path / "lenet.pt"
    torch.save(trained.state_dict(), path)
    x = torch.randn(2, 1, 28, 28)

    torch.manual_seed(4)
    net = build_model("lenet", input_shape=(1, 28, 28), num_classes=10)
    net.load_state_dict(torch.load(path, weights_only=True))
    bnn = BNN(add_node_noise(net, bias_noise=True), NodeNoisePrior(0.1), Categorical(10))
    torch.testing.assert_close(bnn.apply_parameters(x, bnn.initial_values()), trained(x))
    assert set(bnn.net.state_dict()) == set(trained.state_dict())
    bnn.net.load_state_dict(trained.state_dict())  # and a converted network takes the plain state dict again


def test_node_noise_prior_per_layer_scales():
    net = add_node_noise(_mixed_net())
    prior = NodeNoisePrior(0.1, layer_scales={"3": 0.3})
    bnn = BNN(net, prior, Categorical(10))
    conv_site, linear_site = bnn.sites
    assert prior.distribution(conv_site, {}).base_dist.scale.unique().item() == pytest.approx(0.1)
    assert prior.distribution(linear_site, {}).base_dist.scale.unique().item() == pytest.approx(0.3)
    assert prior.distribution(linear_site, {}).base_dist.loc.unique().item() == 1.0
    with pytest.raises(ValueError, match="finite number > 0"):
        NodeNoisePrior(0.1, layer_scales={"3": 0.0})
    with pytest.raises(ValueError, match="finite number > 0"):
        NodeNoisePrior(-1.0)


def test_node_noise_prior_refuses_layer_scales_of_layers_without_noise():
    net = add_node_noise(_mixed_net())
    with pytest.raises(ValueError, match=r"layer_scales names \['conv_1'\], which have no node noise"):
        BNN(net, NodeNoisePrior(0.1, layer_scales={"conv_1": 0.3}), Categorical(10))


@pytest.mark.parametrize("conv, spatial", [(nn.Conv1d, (3,)), (nn.Conv2d, (3, 3)), (nn.Conv3d, (3, 2, 3))])
def test_unbatched_convolution_input_takes_the_noise_on_its_channels(conv, spatial):
    # An unbatched (C, *spatial) input has its channels first: the noise z (C,) must scale x[c], and the bias noise
    # the output channels' biases, exactly as for the same input with a batch dimension of one. (The spatial size 3
    # equals C, so noise put on the wrong axis would broadcast silently.)
    torch.manual_seed(7)
    layer = add_node_noise(conv(3, 2, 1), bias_noise=True)
    z, b = torch.tensor([0.0, 1.0, 2.0]), torch.tensor(0.25)
    with torch.no_grad():
        layer.input_noise.copy_(z), layer.bias_noise.copy_(b)
    x = torch.randn(3, *spatial)
    ones = (1,) * len(spatial)
    weight = layer.weight.reshape(2, 3)
    expected = torch.einsum("oc,c...->o...", weight, x * z.reshape(3, *ones)) + b * layer.bias.reshape(2, *ones)
    torch.testing.assert_close(layer(x), expected)
    torch.testing.assert_close(layer(x), layer(x[None])[0])


@pytest.mark.parametrize("layer, x", [(nn.Conv2d(3, 2, 1), torch.ones(3, 4, 4)), (nn.Linear(3, 2), torch.ones(3))])
def test_per_row_noise_refuses_an_unbatched_input(layer, x):
    add_node_noise(layer)
    rows = {"input_noise": torch.ones(2, 3)}
    message = (
        f"per-row node noise (2, 3) (one draw per row) needs a batched input, got an unbatched input of shape "
        f"{tuple(x.shape)} for {type(layer).__name__}; add the batch dimension (x[None])"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        torch.func.functional_call(layer, rows, (x,))
    torch.func.functional_call(layer, rows, (torch.stack([x, x]),))  # the batched twin runs
