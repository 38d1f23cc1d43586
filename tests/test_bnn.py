import copy

import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer.autoguide import AutoNormal
from torch import nn
from torch.func import functional_call

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import init_to_network
from pyro_bnn.infer import Trainer
from pyro_bnn.laplace import map_network
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.local_latents import LocalLatent
from pyro_bnn.models import build_model
from pyro_bnn.priors import LaplacePrior, NormalPrior, nothing, weights_only


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def test_selected_parameters_become_sites_and_leave_the_optimiser():
    net = _net()
    initial = net[0].weight.detach().clone()
    bnn = BNN(net, NormalPrior(select=weights_only), Categorical(10))
    assert bnn.site_names == ["0.weight", "2.weight"]
    assert [n for n, _ in bnn.named_parameters()] == ["net.0.bias", "net.2.bias"]
    assert torch.equal(bnn.initial_values()["0.weight"], initial)
    assert "net.0.weight" not in bnn.state_dict()  # the initial value is a non-persistent buffer
    assert "Linear(in_features=4" in repr(bnn)  # the network still prints


def test_model_trace_has_one_site_per_parameter_and_a_scaled_data_site():
    bnn = BNN(_net(), NormalPrior(), Categorical(100))
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    trace = poutine.trace(bnn).get_trace(x, y)
    assert [n for n in trace.stochastic_nodes if n != "data"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert trace.observation_nodes == ["obs"]
    assert trace.nodes["obs"]["scale"] == pytest.approx(100 / 5)


def test_vectorised_weights_match_a_loop_of_functional_calls():
    bnn = BNN(_net(), NormalPrior(), Categorical(10))
    x = torch.randn(6, 4)
    params = {s.name: torch.randn(7, 1, *s.shape) for s in bnn.sites}
    batched = bnn.apply_parameters(x, params)
    assert batched.shape == (7, 6, 3)
    for i in range(7):
        single = functional_call(bnn.net, {k: v[i, 0] for k, v in params.items()}, (x,))
        assert torch.allclose(batched[i], single, atol=1e-6)


def test_parameters_without_the_data_plate_slot_are_refused():
    bnn = BNN(_net(), NormalPrior(), Categorical(10))
    params = {s.name: torch.randn(7, *s.shape) for s in bnn.sites}
    with pytest.raises(ValueError, match=r"leading shape \(7,\); expected \(\*sample_dims, 1\)"):
        bnn.apply_parameters(torch.randn(6, 4), params)


def test_two_models_side_by_side_share_nothing():
    """Same architecture, same site names: training one must not touch the other (no global param store)."""
    bnns = [BNN(_net(), NormalPrior(), Categorical(30)) for _ in range(2)]
    guides = [AutoNormal(b, init_loc_fn=init_to_network(b)) for b in bnns]
    x, y = torch.randn(30, 4), torch.randint(0, 3, (30,))
    for guide in guides:
        guide(x, y)
    before = {k: v.clone() for k, v in guides[1].state_dict().items()}
    Trainer(bnns[0], guides[0], progress=False, optim=pyro.optim.Adam({"lr": 0.1})).fit(BatchLoader(x, y, 10), 2)
    assert all(torch.equal(before[k], v) for k, v in guides[1].state_dict().items())
    assert not all(torch.equal(before[k], v) for k, v in guides[0].state_dict().items())
    assert len(pyro.get_param_store()) == 0


def test_zoo_models_check_their_input_shape():
    net = build_model("3fc", input_shape=(1, 28, 28), num_classes=10, width=8)
    bnn = BNN(net, NormalPrior(), Categorical(10))
    with pytest.raises(ValueError, match=r"per-example shape \(1, 28, 28\); found per-example shape \(1, 8, 8\)"):
        bnn.validate_batch(torch.randn(2, 1, 8, 8))


def test_constructor_errors():
    with pytest.raises(ValueError, match="net must be a torch.nn.Module"):
        BNN("net", NormalPrior(), Categorical(10))
    with pytest.raises(ValueError, match="prior must be a pyro_bnn.priors.Prior"):
        BNN(_net(), object(), Categorical(10))
    with pytest.raises(ValueError, match="likelihood must be a pyro_bnn.likelihoods.Likelihood"):
        BNN(_net(), NormalPrior(), None)


def test_a_network_another_bnn_made_bayesian_is_refused():
    """The first BNN turns the parameters into buffers: a second one found none and was silently deterministic."""
    net = _net()
    early_copy = copy.deepcopy(net)
    first = BNN(net, NormalPrior(), Categorical(10))
    refused = (
        r"^net is already Bayesian in another BNN \(4 of the parameters this prior selects, e.g. '0.weight'.*"
        r"BNN\(copy.deepcopy\(net\)"
    )
    with pytest.raises(ValueError, match=refused):
        BNN(net, LaplacePrior(), Categorical(10))
    with pytest.raises(ValueError, match="already Bayesian"):  # a copy made afterwards holds the same buffers
        BNN(copy.deepcopy(net), LaplacePrior(), Categorical(10))
    with pytest.raises(ValueError, match=r"already Bayesian in another BNN \(2 of the parameters this prior selects"):
        BNN(net[2], LaplacePrior(), Categorical(10))
    assert BNN(early_copy, LaplacePrior(), Categorical(10)).site_names == first.site_names
    # A copy with its parameters put back is a plain network again.
    restored = map_network(first, first.initial_values())
    assert BNN(restored, LaplacePrior(), Categorical(10)).site_names == first.site_names


def test_a_wrapped_network_takes_a_prior_that_selects_none_of_its_random_parameters():
    """A deterministic copy, or a new head on a wrapped body, wants none of the first BNN's parameters: accepted (the
    refusal took any wrapped network at first)."""
    from pyro_bnn.priors import name_matches

    first = BNN(_net(), NormalPrior(), Categorical(10))
    assert BNN(copy.deepcopy(first.net), NormalPrior(select=nothing), Categorical(10)).site_names == []
    headed = BNN(
        nn.Sequential(copy.deepcopy(first.net), nn.Linear(3, 2)),
        NormalPrior(select=name_matches("1.*")),
        Categorical(10),
    )
    assert headed.site_names == ["1.weight", "1.bias"]
    with pytest.raises(ValueError, match=r"\(2 of the parameters this prior selects, e.g. '0.2.weight'"):
        BNN(
            nn.Sequential(copy.deepcopy(first.net), nn.Linear(3, 2)),
            NormalPrior(select=name_matches("0.2.*")),
            Categorical(10),
        )


def test_a_network_whose_prior_selected_nothing_or_whose_bnn_was_refused_can_be_wrapped_again():
    net = _net()
    assert BNN(net, NormalPrior(select=nothing), Categorical(10)).site_names == []
    with pytest.raises(ValueError, match="targets 'fc9', which is not a submodule"):
        BNN(net, NormalPrior(select=weights_only), Categorical(10), [LocalLatent("z", "fc9", (4,))])
    assert BNN(net, NormalPrior(), Categorical(10)).site_names == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_moving_the_model_moves_the_prior():
    bnn = BNN(_net(), NormalPrior(0.0, 2.0), Categorical(10)).double()
    assert bnn.prior.scale.dtype == torch.float64
    assert bnn.initial_values()["0.weight"].dtype == torch.float64


def test_checking_a_batch_leaves_batch_norm_alone_and_runs_on_one_example():
    """predict() and the trainer check one batch first: in eval mode, so batch norm neither fails on a single
    example nor updates its running statistics, and every module's mode is restored."""
    from pyro_bnn.predict import predict

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.1), nn.Linear(8, 3))
    bnn = BNN(net, NormalPrior(0.0, 1.0), Categorical(100))
    net.train()
    before = net[1].running_mean.clone(), int(net[1].num_batches_tracked)
    samples = {k: v.expand(5, *v.shape) for k, v in bnn.initial_values().items()}
    predict(bnn, samples, torch.randn(32, 4))
    net[3].eval()  # a module in its own mode
    bnn.validate_batch(torch.randn(1, 4))
    assert torch.equal(net[1].running_mean, before[0]) and int(net[1].num_batches_tracked) == before[1]
    assert net.training and net[1].training and not net[3].training


@pytest.mark.parametrize(
    ("dtype", "torch_name"), [(torch.float64, "Double"), (torch.int64, "Long"), (torch.float16, "Half")]
)
def test_inputs_of_another_dtype_are_named_by_dtype_not_shape(dtype, torch_name):
    """x.double() said "cannot run on inputs of shape (5, 4): mat1 and mat2 must have the same dtype": the shape was
    right, the dtype not. The message now names both dtypes; a float32 input of the wrong shape keeps its own."""
    bnn = BNN(_net(), NormalPrior(select=weights_only), Categorical(10))
    with pytest.raises(ValueError) as error:
        bnn.validate_batch(torch.randn(5, 4).to(dtype))
    assert str(error.value) == (
        f"the network cannot run on inputs of dtype {dtype}: the network's parameters are torch.float32 (convert the "
        f"inputs with x.to(torch.float32)); torch: mat1 and mat2 must have the same dtype, but got {torch_name} and "
        "Float"
    )
    with pytest.raises(ValueError, match=r"^the network cannot run on inputs of shape \(5, 3\): mat1 and mat2"):
        bnn.validate_batch(torch.randn(5, 3))


def test_network_outputs_without_an_outputs_axis_are_refused():
    """Outputs (N,) passed the check (a Gaussian's 1-D targets matched them) and training failed with a bare
    IndexError; the likelihoods read outputs (N, outputs)."""
    from pyro_bnn.likelihoods import Gaussian

    bnn = BNN(nn.Sequential(nn.Linear(2, 1), nn.Flatten(0)), NormalPrior(0.0, 1.0), Gaussian(40))
    with pytest.raises(ValueError) as error:
        bnn.validate_batch(torch.randn(40, 2), torch.randn(40))
    assert str(error.value) == (
        "inputs of shape (40, 2) give network outputs of shape (40,), not (N, outputs) with N = 40, the inputs' first "
        "axis: pass a batch of inputs (N, *input_shape) (a single example x as x.unsqueeze(0)) to a network whose "
        "outputs are (N, outputs) (one output: (N, 1))"
    )
    with pytest.raises(
        ValueError, match=r"^inputs of shape \(10, 2\) give network outputs of shape \(10,\)"
    ):  # a batch
        Trainer(bnn, "map").fit(BatchLoader(torch.randn(40, 2), torch.randn(40), 10), 1)
