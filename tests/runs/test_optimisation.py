"""A run's optimiser and learning-rate schedules (:mod:`pyro_bnn.runs.optimisation`)."""

import json

import pytest

from pyro_bnn.cli import main

TRAIN = "train --dataset moons --model tanh-small --activation tanh --epochs 2 --batch-size 64 --num-samples 4 "
TRAIN = (TRAIN + "--num-val-samples 2 --device cpu --quiet").split()


def _lr_warnings(err):
    return [line for line in err.splitlines() if "warning" in line and "schedule" in line]


def test_lr_schedule_with_every_weight_random_warns_that_it_is_unused(tmp_path, capsys):
    """The default guide makes every weight random, so the optimiser has no "model" group: --lr-schedule was
    accepted, did nothing and said nothing (history.json showed lr 0.001 throughout)."""
    out = tmp_path / "run"
    assert main([*TRAIN, "--lr-schedule", "decay:0.1", "--out", str(out)]) == 0
    assert _lr_warnings(capsys.readouterr().err) == [
        "pyro-bnn train: warning: lr_schedule (--lr-schedule) 'decay:0.1' is unused: the optimiser has no 'model' "
        "parameter group (the model has no trainable parameters of its own: every weight is random); "
        "lr_variational_schedule (--lr-variational-schedule) schedules the guide's parameters, all there are"
    ]
    history = json.loads((out / "history.json").read_text())
    assert [record["lr"] for record in history] == [1e-3, 1e-3] and "lr_model" not in history[0]


def test_lr_variational_schedule_schedules_the_guide_without_a_warning(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*TRAIN, "--lr-variational-schedule", "decay:0.1,0,1", "--out", str(out)]) == 0
    assert _lr_warnings(capsys.readouterr().err) == []
    history = json.loads((out / "history.json").read_text())
    # 640 training examples, 10 steps an epoch, T = 20: the 10th step used m(9) = 1 - 0.9 * 9 / 20, the 20th m(19).
    assert [record["lr_guide"] for record in history] == pytest.approx([1e-3 * 0.595, 1e-3 * 0.145], rel=1e-12)
