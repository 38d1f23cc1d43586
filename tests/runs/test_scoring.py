"""The conformal columns every classifier's test scoring records: THR at alpha 0.1 on the seeded half split of
``pyro-bnn evaluate --conformal``, checked against hand-placed labels, and left out where they cannot be computed."""

import json

import pytest
import torch

from pyro_bnn.predict import Prediction
from pyro_bnn.runs import train_run
from pyro_bnn.runs.conformal import SPLIT_SEED, ConformalOptions, conformal_record
from pyro_bnn.runs.scoring import CONFORMAL_KEYS, conformal_metrics

PROBS = (0.7, 0.2, 0.1)  # every input's predictive: the THR scores of its classes are 0.3, 0.8 and 0.9


def _prediction(num_test: int, calibration_ones: int, scored_twos: int) -> Prediction:
    """``num_test`` inputs with the predictive :data:`PROBS`, all labelled 0 except ``calibration_ones`` inputs of
    the calibration half labelled 1 and ``scored_twos`` of the scored half labelled 2 (halves by the split seed)."""
    order = torch.randperm(num_test, generator=torch.Generator().manual_seed(SPLIT_SEED))
    calibration, scored = order[: num_test // 2], order[num_test // 2 :]
    labels = torch.zeros(num_test, dtype=torch.long)
    labels[calibration[:calibration_ones]] = 1
    labels[scored[:scored_twos]] = 2
    probs = torch.tensor(PROBS).expand(3, num_test, 3).clone()
    return Prediction(probs=probs, targets=labels)


@pytest.mark.parametrize(
    ("calibration_ones", "scored_twos", "coverage", "size"),
    [
        # no 1 among the 10 calibration labels: all scores 0.3, q = 0.3, every set {0}; the two 2s are missed
        (0, 2, 8 / 10, 1.0),
        # one 1 among them: ceil(11 * 0.9) = 10, the largest score 0.8 is q, every set {0, 1}; the 2s still missed
        (1, 2, 8 / 10, 2.0),
        (1, 0, 1.0, 2.0),
    ],
)
def test_thr_sets_on_the_scored_half_match_the_hand_count(calibration_ones, scored_twos, coverage, size):
    prediction = _prediction(20, calibration_ones, scored_twos)
    metrics = conformal_metrics(prediction)
    assert metrics == pytest.approx({"conformal_coverage": coverage, "conformal_set_size": size}, abs=1e-12)
    # the same split and numbers as `pyro-bnn evaluate RUN --conformal 0.1` on the same prediction
    record = conformal_record(prediction, ConformalOptions(0.1).check())
    assert metrics == {"conformal_coverage": record["coverage"], "conformal_set_size": record["mean_set_size"]}


def test_no_keys_where_half_the_test_set_is_too_few_for_alpha_or_for_regression():
    # ceil((1 - 0.1) / 0.1) = 9 calibration inputs give a finite threshold: 18 test inputs are the fewest
    assert conformal_metrics(_prediction(17, 0, 0)) == {}
    assert set(conformal_metrics(_prediction(18, 0, 0))) == set(CONFORMAL_KEYS)
    regression = Prediction(means=torch.zeros(2, 40, 1), noise_scale=1.0, targets=torch.zeros(40, 1))
    assert conformal_metrics(regression) == {}
    assert conformal_metrics(Prediction(probs=torch.full((1, 40, 2), 0.5))) == {}  # no targets


def test_a_trained_classifiers_metrics_hold_the_conformal_keys(tmp_path):
    from pyro_bnn.runs import RunConfig

    config = RunConfig(
        dataset="moons", model="tanh-small", activation="tanh", guide="flat:rel=1", epochs=1, batch_size=64,
        num_samples=4, num_val_samples=2, device="cpu",
    )  # fmt: skip
    result = train_run(config, tmp_path / "run", progress=False)
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["conformal_coverage"] == result.metrics["conformal_coverage"]
    assert saved["conformal_coverage"] == conformal_metrics(result.prediction)["conformal_coverage"]
    assert 1 <= saved["conformal_set_size"] <= 2
