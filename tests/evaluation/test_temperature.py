"""Temperature scaling: recovery of a known temperature, the never-worse guarantee, the two modes, shapes, the
``Prediction`` method and one-line errors."""

import math

import pytest
import torch

from pyro_bnn.evaluation import (
    TEMPERATURE_RANGE,
    TemperatureMode,
    apply_temperature,
    fit_temperature,
    nll,
    summarize,
)
from pyro_bnn.predict import Prediction

NUM_POINTS, NUM_CLASSES = 20_000, 10


def _miscalibrated(true_temperature: float, *, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A model's probabilities ``softmax(z)`` ``(N, C)`` and labels drawn from ``softmax(z / T*)``, so that the
    temperature that calibrates the model is ``T*`` (``T* > 1``: the model is over-confident)."""
    generator = torch.Generator().manual_seed(seed)
    logits = 3.0 * torch.randn(NUM_POINTS, NUM_CLASSES, generator=generator)
    labels = torch.multinomial(torch.softmax(logits / true_temperature, dim=-1), 1, generator=generator).squeeze(-1)
    return torch.softmax(logits, dim=-1), labels


# ------------------------------------------------------------------------------------------------ recovery


@pytest.mark.parametrize("true_temperature", [0.5, 2.0, 4.0])
def test_a_known_temperature_is_recovered_within_five_percent(true_temperature):
    probs, labels = _miscalibrated(true_temperature)
    fitted = fit_temperature(probs, labels)
    assert fitted == pytest.approx(true_temperature, rel=0.05)
    assert nll(apply_temperature(probs, fitted), labels) < nll(probs, labels)


def test_a_calibrated_model_keeps_a_temperature_near_one():
    probs, labels = _miscalibrated(1.0, seed=1)
    assert fit_temperature(probs, labels) == pytest.approx(1.0, rel=0.05)


def test_identical_samples_give_the_same_fit_in_both_modes():
    probs, labels = _miscalibrated(2.0, seed=2)
    probs, labels = probs[:2000], labels[:2000]
    stacked = probs.expand(4, -1, -1)
    fitted_mean = fit_temperature(stacked, labels, mode="mean")
    fitted_samples = fit_temperature(stacked, labels, mode="samples")
    assert fitted_samples == pytest.approx(fitted_mean, rel=1e-5)
    assert fitted_mean == pytest.approx(fit_temperature(probs, labels), rel=1e-5)
    tempered_mean = apply_temperature(stacked, 2.0, mode="mean")
    tempered_samples = apply_temperature(stacked, 2.0, mode="samples")
    torch.testing.assert_close(tempered_samples, tempered_mean.expand(4, -1, -1))
    torch.testing.assert_close(tempered_mean[0], apply_temperature(probs, 2.0))


# ------------------------------------------------------------------------------------------------ the guarantee


def _random_samples(seed: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    concentration = torch.full((7,), 0.3)
    probs = torch.distributions.Dirichlet(concentration).sample((5, 400))
    return probs, torch.randint(0, 7, (400,), generator=generator)


def _least_likely_labels() -> tuple[torch.Tensor, torch.Tensor]:
    """Every label is the class the predictive thinks least likely: the best T is as large as allowed."""
    probs, _ = _random_samples(4)
    return probs, probs.mean(0).argmin(-1)


def _most_likely_labels() -> tuple[torch.Tensor, torch.Tensor]:
    """Every label is the predicted class: the best T is as small as allowed."""
    probs, _ = _random_samples(5)
    return probs, probs.mean(0).argmax(-1)


def _one_hot_and_wrong() -> tuple[torch.Tensor, torch.Tensor]:
    """Exact zeros at the labels (log 0 clamped) next to confident right answers."""
    labels = torch.arange(50) % 3
    predicted = torch.where(torch.arange(50) % 5 == 0, (labels + 1) % 3, labels)
    return torch.nn.functional.one_hot(predicted, 3).float(), labels


def _disagreeing_samples() -> tuple[torch.Tensor, torch.Tensor]:
    """Confident samples that disagree: the ``samples`` objective is a mixture, not convex in 1 / T."""
    first = torch.tensor([[0.98, 0.01, 0.01]]).expand(60, -1)
    second = torch.tensor([[0.01, 0.98, 0.01]]).expand(60, -1)
    return torch.stack([first, second]), torch.arange(60) % 3


def _uniform() -> tuple[torch.Tensor, torch.Tensor]:
    """A flat objective: every temperature gives the same NLL."""
    return torch.full((30, 4), 0.25), torch.arange(30) % 4


def _single_point() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([[[0.2, 0.8]], [[0.6, 0.4]]]), torch.tensor([0])


def _float16_calibrated() -> tuple[torch.Tensor, torch.Tensor]:
    probs, labels = _miscalibrated(1.0, seed=6)
    return probs[:1000].half(), labels[:1000]


CASES = {
    "random": _random_samples,
    "calibrated": lambda: _miscalibrated(1.0, seed=7),
    "least-likely": _least_likely_labels,
    "most-likely": _most_likely_labels,
    "one-hot-wrong": _one_hot_and_wrong,
    "disagreeing": _disagreeing_samples,
    "uniform": _uniform,
    "single-point": _single_point,
    "float16": _float16_calibrated,
}


@pytest.mark.parametrize("mode", list(TemperatureMode))
@pytest.mark.parametrize("case", list(CASES))
def test_the_fit_never_raises_the_nll_it_was_fitted_on(case, mode):
    probs, labels = CASES[case]()
    fitted = fit_temperature(probs, labels, mode=mode)
    assert math.isfinite(fitted) and TEMPERATURE_RANGE[0] <= fitted <= TEMPERATURE_RANGE[1]
    assert nll(apply_temperature(probs, fitted, mode=mode), labels) <= nll(probs, labels)


def test_the_extremes_reach_the_ends_of_the_range():
    assert fit_temperature(*_least_likely_labels()) == pytest.approx(TEMPERATURE_RANGE[1], rel=0.01)
    assert fit_temperature(*_most_likely_labels()) < 0.05


@pytest.mark.parametrize("log_temperature", [math.log(50.0), 1e6, math.nan], ids=["worse", "overflowing", "nan"])
def test_a_worse_optimum_falls_back_to_one(monkeypatch, log_temperature):
    """Whatever the optimiser returns, a temperature that raises the NLL is not returned."""
    probs, labels = _miscalibrated(1.0, seed=8)

    def astray(self, closure):
        with torch.no_grad():
            for group in self.param_groups:
                group["params"][0].fill_(log_temperature)

    monkeypatch.setattr(torch.optim.LBFGS, "step", astray)
    assert fit_temperature(probs, labels) == 1.0


# ------------------------------------------------------------------------------------------------ apply_temperature


def test_apply_temperature_shapes_and_dtypes():
    probs, _ = _random_samples()
    assert apply_temperature(probs, 2.0, mode="mean").shape == (1, 400, 7)
    assert apply_temperature(probs, 2.0, mode="samples").shape == (5, 400, 7)
    assert apply_temperature(probs[0], 2.0, mode="mean").shape == (400, 7)
    assert apply_temperature(probs[0], 2.0, mode="samples").shape == (400, 7)
    assert apply_temperature(probs.double(), 0.5).dtype == torch.float64
    assert apply_temperature(probs.half(), 0.5).dtype == torch.float32
    for mode in TemperatureMode:
        assert apply_temperature(probs, 1.0, mode=mode) is probs
        assert set(summarize(apply_temperature(probs, 3.0, mode=mode), torch.zeros(400, dtype=torch.long))) == {
            "accuracy",
            "nll",
            "brier",
            "ece",
            "mce",
        }


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_half_precision_input_gives_float32_at_every_temperature(half, temperature):
    # (S=2, N=2, C=4) probabilities that both half dtypes hold exactly (bfloat16 rounds random ones off the simplex)
    rows = [[0.5, 0.25, 0.125, 0.125], [0.75, 0.125, 0.0625, 0.0625]]
    low = torch.tensor([rows, rows[::-1]], dtype=half)
    labels = torch.tensor([0, 2])
    for mode in TemperatureMode:
        tempered = apply_temperature(low, temperature, mode=mode)
        assert tempered.dtype == torch.float32, (mode, tempered.dtype)
        expected = apply_temperature(low.float(), temperature, mode=mode)  # the same values, computed from float32
        torch.testing.assert_close(tempered, expected, rtol=0, atol=0)
    assert nll(apply_temperature(low, 1.0), labels) == nll(low, labels)


def test_a_higher_temperature_flattens_and_a_lower_one_sharpens():
    probs = torch.tensor([[0.7, 0.2, 0.1]])
    flat, sharp = apply_temperature(probs, 2.0), apply_temperature(probs, 0.5)
    expected_flat = torch.softmax(probs.log() / 2.0, dim=-1)
    torch.testing.assert_close(flat, expected_flat)
    torch.testing.assert_close(sharp, probs.square() / probs.square().sum())
    assert flat.max() < 0.7 < sharp.max()
    assert flat.argmax() == sharp.argmax() == 0


def test_mode_mean_tempers_the_average_and_mode_samples_averages_the_tempered():
    probs = torch.tensor([[[0.9, 0.1]], [[0.5, 0.5]]])
    mean = probs.mean(0)
    torch.testing.assert_close(apply_temperature(probs, 2.0, mode="mean")[0], torch.softmax(mean.log() / 2, -1))
    per_sample = torch.softmax(probs.log() / 2, -1)
    torch.testing.assert_close(apply_temperature(probs, 2.0, mode="samples"), per_sample)


# ------------------------------------------------------------------------------------------------ Prediction


def test_a_prediction_is_tempered_with_its_point_and_targets():
    probs, labels = _random_samples()
    point = Prediction(probs=probs[:1], targets=labels)
    prediction = Prediction(probs=probs, targets=labels, point=point)
    for mode, samples in (("mean", 1), ("samples", 5)):
        tempered = prediction.tempered(2.0, mode=mode)
        assert tempered.probs.shape == (samples, 400, 7) and tempered.targets is labels
        assert tempered.log_likelihood.shape == (samples, 400)
        torch.testing.assert_close(
            tempered.log_likelihood.exp(),
            tempered.probs.gather(-1, labels.view(1, -1, 1).expand(samples, -1, 1)).squeeze(-1),
        )
        assert tempered.point.probs.shape == (1, 400, 7)
        assert tempered.metrics()["nll"] == pytest.approx(nll(apply_temperature(probs, 2.0, mode=mode), labels))
    assert prediction.tempered(1.0).probs is probs


def test_a_regression_prediction_cannot_be_tempered():
    prediction = Prediction(means=torch.zeros(3, 5, 1), noise_scale=torch.tensor(1.0), targets=torch.zeros(5, 1))
    with pytest.raises(ValueError) as raised:
        prediction.tempered(2.0)
    assert str(raised.value) == "temperature scaling needs class probabilities; this is a regression prediction"


# ------------------------------------------------------------------------------------------------ bad inputs

PROBS = torch.full((2, 4, 3), 1 / 3)
LABELS = torch.tensor([0, 1, 2, 0])

BAD_FITS = [
    (torch.full((4,), 0.25), LABELS, {}, "probs must have rank 2 (N, C) or rank 3 (num_samples, N, C); got shape (4,)"),
    (torch.full((1, 2, 4, 3), 1 / 3), LABELS, {}, "got shape (1, 2, 4, 3) (rank 4)"),
    (PROBS, LABELS[:3], {}, "labels has N=3 entries but probs has N=4 data points"),
    (PROBS, LABELS.view(2, 2), {}, "labels must have rank 1 (N,); got shape (2, 2)"),
    (PROBS, LABELS.float(), {}, "labels must be an integer tensor of class indices; got dtype torch.float32"),
    (PROBS, torch.tensor([0, 1, 3, 0]), {}, "labels must lie in [0, 3) for C=3 classes; found 3 at index 2"),
    (
        PROBS.index_put((torch.tensor(0), torch.tensor(1), torch.tensor(2)), torch.tensor(math.nan)),
        LABELS,
        {},
        "probs must be finite; found nan at index (0, 1, 2)",
    ),
    (PROBS.log(), LABELS, {}, "probs must be non-negative"),
    (PROBS, LABELS, {"mode": "median"}, "mode must be one of 'mean', 'samples'; got 'median'"),
]


def _one_line(raised: pytest.ExceptionInfo) -> str:
    message = str(raised.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(("probs", "labels", "options", "message"), BAD_FITS)
def test_bad_fit_inputs_are_refused_in_one_line(probs, labels, options, message):
    with pytest.raises(ValueError) as raised:
        fit_temperature(probs, labels, **options)
    assert message in _one_line(raised)


NOT_A_NUMBER = "temperature must be a positive finite number (a Python number or a 0-d real tensor)"


def test_a_zero_dimensional_tensor_is_taken_as_its_number():
    # softmax(log p / 2) is sqrt(p) normalised: [0.1, 0.2, 0.3, 0.4] -> sqrt(p) / 1.94362 (was refused: "temperature
    # must be a positive finite number; got tensor(2.)")
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    expected = probs.sqrt() / probs.sqrt().sum()
    torch.testing.assert_close(apply_temperature(probs, torch.tensor(2.0)), expected, rtol=1e-12, atol=0)
    assert torch.equal(apply_temperature(probs, torch.tensor(2, dtype=torch.int64)), apply_temperature(probs, 2.0))
    assert apply_temperature(probs, torch.tensor(1.0)) is probs  # T = 1 leaves the probabilities as they are
    tempered = Prediction(probs=probs.unsqueeze(0), targets=torch.tensor([3])).tempered(torch.tensor(2.0))
    torch.testing.assert_close(tempered.probs[0], expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    ("temperature", "message"),
    [
        (0.0, "temperature must be a positive finite number; got 0.0"),
        (-2, "temperature must be a positive finite number; got -2"),
        (math.inf, "temperature must be a positive finite number; got inf"),
        (math.nan, "temperature must be a positive finite number; got nan"),
        ("2", f"{NOT_A_NUMBER}; got '2'"),
        (True, f"{NOT_A_NUMBER}; got True"),
        (torch.tensor([2.0]), f"{NOT_A_NUMBER}; got tensor([2.])"),
        (torch.tensor(True), f"{NOT_A_NUMBER}; got tensor(True)"),
        (torch.tensor(0.0), "temperature must be a positive finite number; got 0.0"),
        (torch.tensor(math.nan, dtype=torch.float64), "temperature must be a positive finite number; got nan"),
    ],
)
def test_bad_temperatures_are_refused_in_one_line(temperature, message):
    with pytest.raises(ValueError) as raised:
        apply_temperature(PROBS, temperature)
    assert _one_line(raised) == message
    with pytest.raises(ValueError):
        Prediction(probs=PROBS, targets=LABELS).tempered(temperature)


def test_an_unknown_mode_is_refused_by_apply_and_by_prediction():
    with pytest.raises(ValueError, match="mode must be one of 'mean', 'samples'; got 'logits'"):
        apply_temperature(PROBS, 2.0, mode="logits")
    with pytest.raises(ValueError, match="got 'logits'"):
        Prediction(probs=PROBS).tempered(2.0, mode="logits")


def test_the_fit_runs_where_the_probabilities_are(device):
    probs, labels = _random_samples()
    for mode in TemperatureMode:
        fitted = fit_temperature(probs.to(device), labels.to(device), mode=mode)
        assert fitted == pytest.approx(fit_temperature(probs, labels, mode=mode), rel=1e-4)
        tempered = Prediction(probs=probs.to(device), targets=labels.to(device)).tempered(fitted, mode=mode)
        assert tempered.probs.device.type == device.type
