"""The CUDA-graph training step: when it applies (any machine), and that replaying it trains exactly as the eager
step does (CUDA only: skipped without a GPU)."""

import math

import pyro
import pytest
import torch
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import FlatMeanField, parse_guide
from pyro_bnn.infer import FastMeanFieldELBO, NonFiniteLossError, TraceELBO, Trainer
from pyro_bnn.infer.annealing import linear_warmup
from pyro_bnn.infer.cuda_graph import GraphedStep, unavailable_reason
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.priors import NormalPrior

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
CUDA = torch.device("cuda")


def _adam(params):
    return torch.optim.Adam(params, lr=0.01)


@pytest.mark.parametrize(
    ("objective", "device", "optimizer", "per_step", "expected"),
    [
        (FastMeanFieldELBO(), "cuda", _adam, False, None),
        (FastMeanFieldELBO(), "cpu", _adam, False, "the device is cpu, not CUDA"),
        (TraceELBO(), "cuda", _adam, False, "reads values back to the host"),
        (FastMeanFieldELBO(), "cuda", lambda p: torch.optim.RMSprop(p), False, "the optimiser is RMSprop"),
        (FastMeanFieldELBO(), "cuda", _adam, True, "changes the rate after every step"),
    ],
)
def test_unavailable_reason(objective, device, optimizer, per_step, expected):
    reason = unavailable_reason(objective, torch.device(device), optimizer([nn.Parameter(torch.zeros(2))]), per_step)
    assert reason == expected if expected is None else expected in reason


def test_warmup_is_checked():
    with pytest.raises(ValueError, match="warmup must be an int >= 1, got 0"):
        GraphedStep(FastMeanFieldELBO(), None, None, None, [], warmup=0)


@pytest.mark.parametrize("weight", [float("nan"), -0.5, float("inf")])
def test_a_bad_kl_weight_is_refused_before_the_graph_sees_it(weight):
    step = GraphedStep(FastMeanFieldELBO(), None, None, None, [])
    with pytest.raises(ValueError, match="KL weight must be a finite number >= 0"):
        step.step(torch.zeros(2, 3), torch.zeros(2), weight)


def test_trainer_says_why_it_runs_step_by_step_on_a_cpu():
    x, y = torch.randn(40, 3), torch.arange(40) % 3
    trainer = Trainer(_bnn(40), parse_guide("flat:rel=1").build, device="cpu", progress=False, seed=0)
    trainer.fit(BatchLoader(x, y, 16), 1)
    assert trainer.graph_reason == "the device is cpu, not CUDA"
    off = Trainer(_bnn(40), parse_guide("flat:rel=1").build, device="cpu", progress=False, cuda_graph=False)
    off.fit(BatchLoader(x, y, 16), 1)
    assert off.graph_reason == "turned off (cuda_graph=False)"


def _bnn(num_data: int) -> BNN:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))
    return BNN(net, NormalPrior(0.0, 1.0), Categorical(num_data))


def _train(cuda_graph: bool, epochs: int = 3, **kwargs):
    """Trains on CUDA: 100 examples in batches of 32 (three full batches and a last one of 4, which runs
    eagerly)."""
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(100, 3, generator=g), torch.randint(0, 3, (100,), generator=g)
    kwargs = {"optim": pyro.optim.Adam({"lr": 0.01}), "seed": 0, **kwargs}
    trainer = Trainer(
        _bnn(100), parse_guide("flat:rel=1").build, device=CUDA, progress=False, cuda_graph=cuda_graph, **kwargs
    )
    history = trainer.fit(BatchLoader(x, y, 32, shuffle=True), epochs)
    return trainer, history


def _assert_same_training(graphed, eager):
    (trainer, history), (reference, reference_history) = graphed, eager
    assert trainer.graph_reason is None and trainer.step_runner.graphed.replays > 0
    assert reference.graph_reason == "turned off (cuda_graph=False)"
    for (name, p), q in zip(trainer.guide.named_parameters(), reference.guide.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
    for record, expected in zip(history, reference_history, strict=True):
        assert math.isclose(record["loss"], expected["loss"], rel_tol=1e-5)
        assert math.isclose(record["kl_term"], expected["kl_term"], rel_tol=1e-5)


@needs_cuda
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"kl_schedule": linear_warmup(2), "kl_weighting": "blundell"},  # a different KL weight at every step
        {"optim": pyro.optim.Adam({"lr": 0.01}, {"clip_norm": 0.5})},  # clipping inside the graph
        {"optim": lambda params: torch.optim.SGD(params, lr=1e-4, momentum=0.9, nesterov=True)},
        {"optim": lambda params: torch.optim.Adam(params, lr=0.01, foreach=True)},  # host step counts
    ],
    ids=["default", "kl-weights", "clip", "sgd", "foreach-adam"],
)
def test_replayed_steps_train_as_eager_steps(kwargs):
    graphed = _train(True, **kwargs)
    assert graphed[0].step_runner.graphed.captures == 1
    # Warm-up (3 eager steps), then 3 full batches per epoch replayed; the last batch of each epoch runs eagerly.
    assert graphed[0].step_runner.graphed.replays == 3 * 3 - 3
    _assert_same_training(graphed, _train(False, **kwargs))


@needs_cuda
def test_a_per_epoch_scheduler_recaptures_the_step():
    kwargs = {"lr_scheduler": lambda opt: torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)}
    graphed = _train(True, epochs=4, **kwargs)
    # Epoch 1 is the eager warm-up (3 steps) and its short last batch; each later epoch has a new rate to capture.
    assert graphed[0].step_runner.graphed.captures == 3
    _assert_same_training(graphed, _train(False, epochs=4, **kwargs))


@needs_cuda
def test_resume_continues_the_run_with_a_new_capture(tmp_path):
    from pyro_bnn.infer import Checkpoint

    path = tmp_path / "c.pt"
    _train(True, epochs=2, callbacks=[Checkpoint(path)])
    resumed, _ = _train_resume(path)
    assert (
        resumed.step_runner.graphed.captures == 1 and resumed.step_runner.graphed.replays == 3
    )  # epoch 3 warms up, epoch 4 replays
    straight, _ = _train(False, epochs=4)  # step by step, without a break
    for p, q in zip(resumed.guide.parameters(), straight.guide.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


@needs_cuda
def test_a_changed_prior_or_batch_size_is_captured_again():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(128, 3, generator=g), torch.randint(0, 3, (128,), generator=g)

    def run(cuda_graph):
        trainer = Trainer(
            _bnn(128), parse_guide("flat:rel=1").build, device=CUDA, progress=False, seed=0, cuda_graph=cuda_graph
        )
        trainer.fit(BatchLoader(x, y, 32), 2)  # 3 warm-up steps, then replays
        trainer.bnn.prior.scale.mul_(0.5)  # in place: the fused objective's plan copies the prior's values
        trainer.fit(BatchLoader(x, y, 32), 3)
        trainer.fit(BatchLoader(x, y, 64), 4)  # another batch shape in a later fit
        return trainer

    graphed, eager = run(True), run(False)
    assert graphed.step_runner.graphed.captures == 3
    for p, q in zip(graphed.guide.parameters(), eager.guide.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def _train_resume(path):
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(100, 3, generator=g), torch.randint(0, 3, (100,), generator=g)
    trainer = Trainer(
        _bnn(100), parse_guide("flat:rel=1").build, optim=pyro.optim.Adam({"lr": 0.01}), device=CUDA, progress=False
    )
    history = trainer.fit(BatchLoader(x, y, 32, shuffle=True), 4, resume_from=path)
    return trainer, history


@needs_cuda
def test_a_non_finite_batch_stops_training_after_the_replayed_step():
    x, y = torch.randn(128, 3), torch.arange(128) % 3
    x[100] = float("inf")  # in the fourth batch, the first replayed one (after 3 eager warm-up steps)
    trainer = Trainer(_bnn(128), parse_guide("flat:rel=1").build, device=CUDA, progress=False, seed=0)
    with pytest.raises(NonFiniteLossError, match=r"epoch 1, step 4 holds NaN .* after the optimiser step"):
        trainer.fit(BatchLoader(x, y, 32), 2)
    assert trainer.step_runner.graphed.replays == 1


@needs_cuda
def test_graph_step_matches_the_objective_value():
    """The terms a replay returns are the objective's at the parameters before the update."""
    x, y = torch.randn(32, 3, device=CUDA), torch.arange(32, device=CUDA) % 3
    bnn = _bnn(32).to(CUDA)
    guide = FlatMeanField(bnn, init_scale=0.1).to(CUDA)
    objective = FastMeanFieldELBO(antithetic=False)
    with torch.no_grad():
        guide(x, y)
    optimizer = torch.optim.SGD(guide.parameters(), lr=0.0)  # no update: every step sees the same parameters
    step = GraphedStep(objective, bnn, guide, optimizer, list(guide.parameters()), warmup=1)
    assert step.step(x, y, 0.5) is None  # warm-up: the caller steps eagerly (which also plans the objective)
    with step.eager_stream():
        optimizer.zero_grad(set_to_none=True)
        objective(bnn, guide, x, y, 0.5).loss.backward()
        optimizer.step()
    torch.manual_seed(3)
    terms = step.step(x, y, 0.5)
    loss = float(terms.loss)
    torch.manual_seed(3)
    with torch.no_grad():
        expected = objective(bnn, guide, x, y, 0.5)
    assert math.isclose(loss, float(expected.loss), rel_tol=1e-5)
    assert step.step(x[:16], y[:16], 0.5) is None  # another shape: eager
