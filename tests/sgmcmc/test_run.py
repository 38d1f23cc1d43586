"""sample_sgmcmc's bookkeeping (burn-in, thinning, cycles, chains, inits), its errors, and its draws in predict and
the ArviZ export."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.diagnostics import arviz_compat
from pyro_bnn.diagnostics.arviz_export import to_inference_data
from pyro_bnn.likelihoods import Categorical, Gaussian
from pyro_bnn.models import build_model
from pyro_bnn.predict import Samples, predict
from pyro_bnn.priors import NormalPrior
from pyro_bnn.sgmcmc import (
    LogJoint,
    Method,
    SGMCMCDivergenceError,
    StepPlan,
    sample_sgmcmc,
    sghmc_step,
    sgld_step,
)

STEP = 0.1 / 41  # a tenth of the conjugate posterior's variance: stable for every method


@pytest.fixture
def run(conjugate):
    """``run(**options)``: a short run on the conjugate model (two chains of six draws unless told otherwise)."""

    def run_(**options):
        loader = BatchLoader(conjugate.x, conjugate.y, batch_size=20, shuffle=True, seed=1)
        settings = {"step_size": STEP, "num_draws": 6, "num_chains": 2, "progress": False, **options}
        return sample_sgmcmc(conjugate.bnn, loader, **settings)

    return run_


# ---------------------------------------------------------------------------------------------- the update rules
def test_sgld_step_is_half_step_drift_plus_noise_of_variance_step_size():
    theta, grad = torch.zeros(200_000), torch.full((200_000,), 3.0)
    assert torch.equal(sgld_step(theta, grad, 0.2, noise=False), torch.full_like(theta, 0.3))
    torch.manual_seed(0)
    moved = sgld_step(theta, grad, 0.2, noise=True)
    # 200k draws: the sample mean and variance are within 0.003 and 0.5 % (a few standard errors) of 0.3 and 0.2.
    assert float(moved.mean()) == pytest.approx(0.3, abs=0.003)
    assert float(moved.var()) == pytest.approx(0.2, rel=0.01)


def test_sghmc_step_is_friction_momentum_with_noise_of_variance_two_alpha_eps():
    theta, momentum, grad = torch.ones(200_000), torch.full((200_000,), 2.0), torch.full((200_000,), -1.0)
    new_theta, new_momentum = sghmc_step(theta, momentum, grad, 0.1, 0.25, noise=False)
    assert torch.allclose(new_momentum, torch.full_like(theta, 0.75 * 2.0 - 0.1))
    assert torch.allclose(new_theta, 1.0 + new_momentum)
    torch.manual_seed(0)
    _, noisy = sghmc_step(theta, momentum, grad, 0.1, 0.25, noise=True)
    assert float(noisy.var()) == pytest.approx(2 * 0.25 * 0.1, rel=0.01)


def test_constant_plan_keeps_every_thin_th_step_after_burn_in():
    plan = StepPlan(step_size=0.1, num_draws=4, burn_in=5, thin=3)
    assert plan.total_steps == 5 + 4 * 3
    assert [k for k in range(plan.total_steps) if plan.keep(k)] == [7, 10, 13, 16]
    assert all(plan.sampling(k) and plan.step_size_at(k) == 0.1 for k in range(plan.total_steps))


def test_cyclical_plan_explores_then_samples_to_the_cycle_end_under_a_cosine_step_size():
    plan = StepPlan(step_size=0.4, num_draws=6, burn_in=1, thin=2, num_cycles=3, exploration=0.5)
    # 2 draws per cycle, thinned by 2: S = 4 sampling steps after E = 4 exploration steps; 1 + 3 cycles of 8.
    assert (plan.sampling_steps, plan.exploration_steps, plan.cycle_length, plan.total_steps) == (4, 4, 8, 32)
    assert [k for k in range(plan.total_steps) if plan.keep(k)] == [13, 15, 21, 23, 29, 31]
    assert [plan.sampling(k) for k in range(8)] == [False] * 4 + [True] * 4
    assert plan.step_size_at(8) == pytest.approx(0.4)  # every cycle restarts at the peak
    assert plan.step_size_at(12) == pytest.approx(0.2)  # half way: eps_0 / 2 (cos(pi / 2) + 1)
    assert plan.step_size_at(15) == pytest.approx(0.2 * (math.cos(math.pi * 7 / 8) + 1))


# ---------------------------------------------------------------------------------------------- runs
@pytest.mark.parametrize("method", [m.value for m in Method])
def test_draws_have_the_layout_and_count_the_options_give(method, run, conjugate):
    cycles = {"num_cycles": 3} if Method(method).cyclical else {}
    bnn, result = conjugate.bnn, run(method=method, num_draws=6, burn_in=1, thin=2, num_chains=3, **cycles)
    assert result.samples["weight"].shape == (3, 6, 1, 2) and result.samples["bias"].shape == (3, 6, 1)
    assert result.log_joint.shape == (3, result.steps_per_chain)
    expected_steps = (1 + 3) * (4 + 4) if Method(method).cyclical else 1 + 6 * 2
    assert result.steps_per_chain == expected_steps
    assert bnn.training  # the model's mode is restored


def test_thinning_and_burn_in_pick_steps_of_the_same_trajectory(run):
    # Noise is drawn at every step whatever is kept, so one seed gives one trajectory: burn-in and thinning select
    # from it.
    every = run(num_draws=12, burn_in=0, thin=1, seed=5)
    thinned = run(num_draws=4, burn_in=0, thin=3, seed=5)
    burnt = run(num_draws=9, burn_in=3, thin=1, seed=5)
    torch.testing.assert_close(thinned.samples["weight"], every.samples["weight"][:, 2::3])
    torch.testing.assert_close(burnt.samples["bias"], every.samples["bias"][:, 3:])


def test_inits_start_the_chains_where_they_say(run, conjugate):
    bnn = conjugate.bnn
    start = {"weight": torch.tensor([[[5.0, 5.0]], [[-5.0, -5.0]]]), "bias": torch.tensor([5.0])}
    result = run(init=start, num_draws=1, step_size=1e-12)
    torch.testing.assert_close(result.samples["weight"][:, 0], start["weight"])
    torch.testing.assert_close(result.samples["bias"][:, 0], torch.tensor([[5.0], [5.0]]))
    network = run(init="network", num_draws=1, step_size=1e-12)
    torch.testing.assert_close(network.samples["weight"][:, 0], bnn.net.weight.expand(2, 1, 2))
    prior = run(init="prior", num_draws=1, step_size=1e-12)
    assert not torch.allclose(prior.samples["weight"][0], prior.samples["weight"][1])  # a prior draw per chain


def test_draws_go_through_predict_and_the_arviz_export_unchanged(run, conjugate):
    bnn, x, y = conjugate.bnn, conjugate.x, conjugate.y
    result = run(num_draws=5, num_chains=2)
    flat = result.flat_samples()
    assert flat["weight"].shape == (10, 1, 2)
    torch.testing.assert_close(flat["weight"][5:], result.samples["weight"][1])  # chain 1's draws follow chain 0's
    prediction = predict(bnn, result.source(), (x, y))
    assert isinstance(result.source(), Samples)
    expected = torch.einsum("nd,sd->sn", x, flat["weight"][:, 0]) + flat["bias"]
    torch.testing.assert_close(prediction.means[..., 0], expected, rtol=1e-5, atol=1e-5)

    data = to_inference_data(bnn, result.samples, (x, y))
    posterior = arviz_compat.group(data, "posterior")
    np.testing.assert_array_equal(posterior["weight"].values, result.samples["weight"].numpy())
    assert arviz_compat.group(data, "log_likelihood")["obs"].shape == (2, 5, len(x))
    assert "log_likelihood" in arviz_compat.group_names(result.inference_data(bnn, (x, y)))


def test_rhat_and_ess_come_from_arviz_per_scalar(run):
    result = run(num_draws=30, num_chains=3, burn_in=300)
    rhat, ess = result.rhat(), result.ess()
    assert rhat["weight"].shape == (1, 2) and rhat["bias"].shape == (1,)
    data = arviz_compat.from_dicts({name: value.numpy() for name, value in result.samples.items()})
    np.testing.assert_allclose(rhat["bias"], arviz_compat.rhat(data)["bias"].values)
    np.testing.assert_allclose(ess["weight"], arviz_compat.ess(data)["weight"].values)
    summary = result.convergence()
    assert summary["num_scalars"] == 3 and summary["rhat_max"] == pytest.approx(
        float(np.max([*rhat["weight"].ravel(), *rhat["bias"]]))
    )


def test_a_diverging_step_size_stops_the_run_naming_chain_and_step(run):
    with pytest.raises(
        SGMCMCDivergenceError, match=r"sgld chain \d diverged at step \d+ of 106: .*smaller step_size"
    ) as error:
        run(step_size=10.0, num_draws=100, burn_in=6)
    assert "\n" not in str(error.value)


def test_the_progress_bar_can_be_shown(run, capsys):
    run(progress=True)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"step_size": 0.0}, "step_size must be a finite number > 0, got 0.0"),
        ({"step_size": -1e-3}, "step_size must be a finite number > 0"),
        ({"step_size": float("nan")}, "step_size must be a finite number > 0"),
        ({"thin": 0}, "thin must be an int >= 1, got 0"),
        ({"num_draws": 0}, "num_draws must be an int >= 1"),
        ({"burn_in": -1}, "burn_in must be an int >= 0"),
        ({"num_chains": 0}, "num_chains must be an int >= 1"),
        ({"method": "sghmc", "friction": 0.0}, r"friction must be a number in \(0, 1\]"),
        ({"friction": 0.5}, "friction 0.5 applies to the methods sghmc, csghmc only, not 'sgld'"),
        ({"method": "sghmc", "num_cycles": 2}, "num_cycles 2 applies to the methods csgld, csghmc only, not 'sghmc'"),
        ({"exploration": 0.2}, "exploration 0.2 applies to the methods csgld, csghmc only, not 'sgld'"),
        (
            {"method": "csgld", "num_cycles": 2, "exploration": 1.0},
            r"exploration must be a share of the cycle in \[0, 1\)",
        ),
        ({"method": "csgld", "num_draws": 5, "num_cycles": 2}, "num_cycles=2 must divide the 5 draws kept per chain"),
        ({"method": "csgld", "num_cycles": 0}, "num_cycles must be an int >= 1"),
        ({"method": "langevin"}, "unknown SG-MCMC method 'langevin'"),
        ({"init": "zeros"}, "unknown init 'zeros'"),
        (
            {"init": {"weight": torch.zeros(3, 2), "bias": torch.zeros(1)}},
            r"init\['weight'\] has shape \(3, 2\); expected \(1, 2\) or \(2, 1, 2\) for 2 chains$",
        ),
        (
            {"init": {"weight": torch.full((1, 2), math.nan), "bias": torch.zeros(1)}},
            r"^init\['weight'\] holds NaN or infinite values",
        ),
        ({"seed": -1}, "seed must be an int >= 0"),
    ],
)
def test_bad_options_raise_one_line_value_errors(options, match, run):
    with pytest.raises(ValueError, match=match) as error:
        run(**options)
    assert "\n" not in str(error.value)


def test_an_init_that_is_not_a_float_tensor_is_refused(run):
    with pytest.raises(ValueError, match=r"init\['weight'\] must be a floating-point tensor"):
        run(init={"weight": [[0.0, 0.0]], "bias": torch.zeros(1)})


def test_a_loader_of_another_size_than_the_likelihoods_is_refused(conjugate):
    # the docs promise it; the run went on with the wrong N/B scale
    loader = BatchLoader(conjugate.x[:30], conjugate.y[:30], batch_size=10)
    with pytest.raises(ValueError, match=r"^the loader holds 30 examples but the likelihood's dataset_size is 40;"):
        sample_sgmcmc(conjugate.bnn, loader, step_size=STEP, num_draws=2, progress=False)


def test_a_loader_over_a_subset_of_its_dataset_counts_the_subset(conjugate):
    # a DataLoader whose sampler walks 30 of its 40 rows was refused as holding 40
    bnn = BNN(torch.nn.Linear(2, 1), NormalPrior(0.0, 1.0), Gaussian(30, scale=1.0))
    rows = torch.utils.data.TensorDataset(conjugate.x, conjugate.y)
    loader = torch.utils.data.DataLoader(rows, 10, sampler=torch.utils.data.SubsetRandomSampler(range(30)))
    assert sample_sgmcmc(bnn, loader, step_size=STEP, num_draws=2, progress=False).samples["weight"].shape[1] == 2
    # a weighted sampler's length is its draws per epoch, not the examples: N is the dataset's
    weighted = torch.utils.data.WeightedRandomSampler(torch.ones(40), 80)
    loader = torch.utils.data.DataLoader(rows, 10, sampler=weighted)
    assert sample_sgmcmc(conjugate.bnn, loader, step_size=STEP, num_draws=2, progress=False).samples


@pytest.mark.parametrize("column", ["x", "y"])
def test_data_that_is_not_finite_is_named_not_read_as_a_divergence(conjugate, column):
    x, y = conjugate.x.clone(), conjugate.y.clone()
    (x if column == "x" else y)[3, 0] = math.nan
    loader = BatchLoader(x, y, batch_size=40)
    what = "inputs" if column == "x" else "targets"
    with pytest.raises(ValueError, match=rf"^the minibatch of step 1 holds NaN or infinite {what}; the data"):
        sample_sgmcmc(conjugate.bnn, loader, step_size=STEP, num_draws=2, progress=False)


def test_the_log_joint_trace_holds_each_steps_minibatch_log_joint(conjugate):
    x, y = conjugate.x, conjugate.y
    batches = [(x[:20], y[:20]), (x[20:], y[20:])]
    result = sample_sgmcmc(
        conjugate.bnn, batches, step_size=STEP, num_draws=3, num_chains=2, init="network", progress=False
    )
    log_joint = LogJoint(conjugate.bnn)
    start = log_joint.flatten(conjugate.bnn.initial_values())
    torch.testing.assert_close(result.log_joint[:, 0], log_joint(start, *batches[0]).expand(2))
    draws = torch.cat([result.samples["weight"].flatten(2), result.samples["bias"].flatten(2)], -1)
    torch.testing.assert_close(result.log_joint[:, 1], log_joint(draws[:, 0], *batches[1]))  # step 2 starts at draw 1


@pytest.mark.parametrize("method", ["csgld", "sghmc"])
def test_a_classifier_network_samples_and_predicts(method):
    torch.manual_seed(0)
    x, y = torch.randn(30, 2), torch.randint(0, 2, (30,))
    bnn = BNN(build_model("tanh-small", input_shape=(2,), num_classes=2), NormalPrior(0.0, 1.0), Categorical(30))
    loader = BatchLoader(x, y, batch_size=10, shuffle=True, seed=0)
    cycles = {"num_cycles": 2} if Method(method).cyclical else {}
    result = sample_sgmcmc(
        bnn, loader, method=method, step_size=1e-3, num_draws=4, burn_in=1, num_chains=3, progress=False, **cycles
    )
    assert result.samples["fc1.weight"].shape == (3, 4, 5, 2)
    prediction = predict(bnn, result.source(), (x, y))
    assert prediction.probs.shape == (12, 30, 2) and torch.isfinite(prediction.log_likelihood).all()


def test_a_classifier_that_blows_up_is_reported_as_a_divergence():
    """Logits that overflow score a NaN log joint: the sampler's divergence error, not a distribution's complaint."""
    torch.manual_seed(0)
    x, y = torch.randn(30, 2), torch.randint(0, 2, (30,))
    bnn = BNN(build_model("tanh-small", input_shape=(2,), num_classes=2), NormalPrior(0.0, 1.0), Categorical(30))
    loader = BatchLoader(x, y, batch_size=10, shuffle=True, seed=0)
    with pytest.raises(SGMCMCDivergenceError, match=r"sgld chain \d diverged at step \d+"):
        sample_sgmcmc(bnn, loader, method="sgld", step_size=1e30, num_draws=50, num_chains=2, progress=False)
