"""``selective_record``'s accuracies after referral: as many inputs referred as :func:`referral_curve` refers."""

import pytest
import torch

from pyro_bnn.evaluation import referral_curve
from pyro_bnn.predict import Prediction
from pyro_bnn.runs import selective_scoring


def test_the_record_refers_floor_f_n_inputs_as_referral_curve_does(monkeypatch):
    # 100 inputs, class 0 predicted with confidence rising with the index, so input 28 is the 29th most uncertain:
    # the only mistake. At 0.29 (0.29 * 100 = 28.999999999999996 in floats) floor(f N) = 29 refers it; referring
    # 28 kept it, accuracy 71 / 72
    monkeypatch.setattr(selective_scoring, "REFERRAL_RATES", (0.0, 0.29))
    confidence = 0.55 + 0.004 * torch.arange(100, dtype=torch.float64)
    probs = torch.stack([confidence, 1 - confidence], dim=-1)
    labels = torch.zeros(100, dtype=torch.long)
    labels[28] = 1
    record = selective_scoring.selective_record(Prediction(probs=probs.unsqueeze(0), targets=labels))
    assert record["accuracy_at_referral"]["max_probability"] == {"0": pytest.approx(0.99), "0.29": 1.0}
    assert referral_curve(probs, labels, [0.29], score="max_probability").accuracy == (1.0,)
