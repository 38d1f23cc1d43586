"""Stored configs compared up to the letter case their parsers ignore (pyro_bnn.runs.config_compare)."""

import pytest

from pyro_bnn.models import register_model
from pyro_bnn.models.registry import ModelArguments, model_registrations, restore_models
from pyro_bnn.runs import RunConfig
from pyro_bnn.runs.config_compare import CASE_BLIND_KEYS, changed_keys, same_setting, spelled_as
from pyro_bnn.spec import catalogue


@pytest.mark.parametrize(
    "key, saved, current, same",
    [
        ("activation", "TANH", "tanh", True),
        ("dataset", "MOONS", "moons", True),
        ("model", "TANH-SMALL", "tanh-small", True),
        ("guide", "FLAT:0.01", "flat:0.01", True),
        ("guide", "AutoNormal:0.01,LOC=Median", "autonormal:0.01,loc=median", True),
        ("prior", "NORMAL:0,1", "normal:0,1", True),
        ("kl_anneal", "LINEAR:2", "linear:2", True),
        ("lr_variational_schedule", "Constant", "constant", True),
        ("normalization", "UNIT", "unit", True),
        ("activation", "tanh", "relu", False),  # another value
        ("prior", "normal", "normal:0,1", False),  # read alike, but not a matter of case
        ("data_dir", "/Data/MNIST", "/data/mnist", False),  # a path: case matters
        ("device", "CPU", "cpu", False),  # not an option string
        ("lr", 0.001, 0.001, True),
        ("activation", None, "tanh", False),
    ],
)
def test_same_setting_ignores_only_the_case_the_parser_ignores(key, saved, current, same):
    assert same_setting(key, saved, current) is same


def test_a_models_own_case_sensitive_arguments_still_differ():
    saved = model_registrations()
    try:

        @register_model("named", arguments=ModelArguments("NAME", lambda raw: {"label": raw[0]}))
        def named(
            *, input_shape, num_classes, activation=None, dropout=0.0, label="x"
        ):  # pragma: no cover - never built
            raise AssertionError

        assert not same_setting("model", "named:Big", "named:big")
        assert same_setting("model", "NAMED:big", "named:big")  # the name itself ignores case
    finally:
        restore_models(saved)


def test_the_case_blind_keys_are_the_option_strings_train_takes():
    fields = {option.field for option in catalogue.OPTIONS if option.command == "train"}
    assert CASE_BLIND_KEYS == fields | {"lr_variational_schedule"}


def test_changed_keys_and_spelled_as():
    saved = {"activation": "TANH", "model": "3FC", "lr": 0.1, "data_dir": "/A"}
    current = {"activation": "tanh", "model": "3fc", "lr": 0.2, "data_dir": "/a"}
    assert changed_keys(saved, current) == ["data_dir", "lr"]
    assert changed_keys(saved, current, ignore=["lr", "data_dir"]) == []
    config = RunConfig(dataset="moons", model="tanh-small", activation="tanh", guide="flat:0.01", device="cpu")
    respelled = spelled_as(config, {"activation": "TANH", "guide": "flat:0.01", "model": "mlp", "dataset": "MOONS"})
    assert (respelled.activation, respelled.guide, respelled.model, respelled.dataset) == (
        "TANH",
        "flat:0.01",
        "tanh-small",  # another model, not a respelling: left as it is (a resume refuses it)
        "MOONS",
    )
