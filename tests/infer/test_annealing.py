import math

import numpy as np
import pytest

from pyro_bnn.infer import (
    blundell_fraction,
    constant,
    cyclical,
    linear_warmup,
    minibatch_kl_weight,
    parse_kl_schedule,
)
from pyro_bnn.infer.annealing import step_progress


@pytest.mark.parametrize("num_steps", [1, 2, 7, 50, 600, 5000])
def test_blundell_fractions_sum_to_one(num_steps):
    fractions = [blundell_fraction(i, num_steps) for i in range(1, num_steps + 1)]
    assert math.fsum(fractions) == pytest.approx(1.0, abs=1e-12)
    assert all(a >= b for a, b in zip(fractions, fractions[1:], strict=False))
    weights = [minibatch_kl_weight("blundell", i, num_steps) for i in range(1, num_steps + 1)]
    assert math.fsum(weights) / num_steps == pytest.approx(1.0, abs=1e-12)


def test_blundell_fraction_hand_values():
    # M = 3: 2^(3-i) / (2^3 - 1) = 4/7, 2/7, 1/7.
    assert [blundell_fraction(i, 3) for i in (1, 2, 3)] == pytest.approx([4 / 7, 2 / 7, 1 / 7], rel=1e-15)


def test_blundell_fraction_is_stable_for_huge_epochs():
    assert blundell_fraction(1, 100_000) == pytest.approx(0.5, rel=1e-15)
    assert blundell_fraction(100_000, 100_000) == 0.0  # 2^-100000 underflows, its true value to double precision


def test_uniform_weighting_is_one():
    assert {minibatch_kl_weight("uniform", i, 10) for i in range(1, 11)} == {1.0}


def test_bad_steps_and_weighting():
    with pytest.raises(ValueError, match=r"step must lie in \[1, 5\], got 0"):
        blundell_fraction(0, 5)
    with pytest.raises(ValueError, match="unknown KL weighting 'exponential'"):
        minibatch_kl_weight("exponential", 1, 5)


def test_linear_warmup():
    schedule = linear_warmup(4)
    assert [schedule(t) for t in (0, 1, 2.5, 4, 10)] == pytest.approx([0, 0.25, 0.625, 1, 1])
    stepped = linear_warmup(4, per_epoch=True)
    assert stepped(2.9) == pytest.approx(0.5)


def test_cyclical():
    schedule = cyclical(4, ramp_fraction=0.5)
    assert [schedule(t) for t in (0, 1, 2, 3, 4, 5)] == pytest.approx([0, 0.5, 1, 1, 0, 0.5])


def test_step_progress_is_where_a_step_starts():
    # what the trainer weights step 2 of 3 of the second epoch by, and what `pyro-bnn laplace` re-evaluates
    assert [step_progress(1, step, 3) for step in (1, 2, 3)] == [1.0, 1 + 1 / 3, 1 + 2 / 3]
    assert step_progress(0, 1, 1) == 0.0


@pytest.mark.parametrize(
    ("period", "steps", "epoch", "step"), [(1.6, 2, 8, 0), (1.1, 2, 11, 0), (1.1, 2, 5, 1), (2.2, 4, 11, 0)]
)
def test_a_step_that_starts_a_period_gets_weight_zero(period, steps, epoch, step):
    """``progress % period`` of 8.0 and 1.6 is 1.5999...: that step got the full weight instead of 0."""
    progress = epoch + step / steps
    assert progress / period == pytest.approx(round(progress / period))  # a whole number of periods
    assert cyclical(period)(progress) == 0.0
    assert cyclical(period)(progress + 0.05 * period) == pytest.approx(0.1)  # the ramp starts again


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: linear_warmup(math.inf), "warmup_epochs must be a finite number > 0, got inf"),
        (lambda: linear_warmup(2, start=-1), "start must be a finite number >= 0, got -1"),
        (lambda: linear_warmup(2, end=math.nan), "end must be a finite number >= 0, got nan"),
        (lambda: cyclical(math.inf), "period_epochs must be a finite number > 0, got inf"),
        (lambda: cyclical(2, end=-0.5), "end must be a finite number >= 0, got -0.5"),
        (lambda: cyclical(2, ramp_fraction=0), r"ramp_fraction must lie in \(0, 1\], got 0"),
    ],
)
def test_schedules_refuse_what_their_string_forms_refuse(build, message):
    assert cyclical(2, ramp_fraction=np.float32(0.5))(1.0) == pytest.approx(1.0)  # any real number is a fraction
    with pytest.raises(ValueError, match=message):
        build()


def test_parse_kl_schedule():
    assert parse_kl_schedule("constant")(3.0) == 1.0
    assert parse_kl_schedule("constant:0.1")(3.0) == 0.1
    assert parse_kl_schedule("linear:10")(5) == pytest.approx(0.5)
    assert parse_kl_schedule("cyclical:2,1")(1) == pytest.approx(0.5)
    assert constant(0.0)(1.0) == 0.0


@pytest.mark.parametrize(
    "spec, message",
    [
        ("sigmoid:3", "unknown KL schedule 'sigmoid'"),
        ("linear", "takes 1 numeric"),
        ("linear:-2", "KL schedule 'linear:-2': epochs must be a finite number > 0, got '-2'; expected linear:EPOCHS"),
        ("linear:inf", "epochs must be a finite number > 0, got 'inf'"),
        ("constant:-1", "weight must be a finite number >= 0, got '-1'"),
        ("cyclical:4,0", r"ramp fraction must be a number in \(0, 1\], got '0'"),
    ],
)
def test_bad_schedules(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_kl_schedule(spec)
