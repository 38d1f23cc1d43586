"""pyro_bnn.checks: each check returns good values and refuses each bad kind with its one-line message."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import importlib
import math
import re

import numpy as np
import pytest

from pyro_bnn import checks


def _refuses(check, value, message, *args):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check(value, "n", *args)


@pytest.mark.parametrize("value", [1, 7, np.int64(3)])
def test_positive_int_returns_a_python_int(value):
    assert checks.positive_int(value, "n") == value
    assert type(checks.positive_int(value, "n")) is int


@pytest.mark.parametrize("value", [0, -1, 1.0, 2.5, "3", None, True, False, float("nan")])
def test_positive_int_refuses(value):
    _refuses(checks.positive_int, value, f"n must be an int >= 1, got {value!r}")


def test_the_message_names_parameter_value_and_expectation():
    with pytest.raises(ValueError) as info:
        checks.positive_int(0, "num_samples")
    assert str(info.value) == "num_samples must be an int >= 1, got 0"


def test_non_negative_int():
    assert checks.non_negative_int(0, "n") == 0
    assert checks.non_negative_int(5, "n") == 5
    for value in (-1, True, 0.0):
        _refuses(checks.non_negative_int, value, f"n must be an int >= 0, got {value!r}")


def test_int_at_least():
    assert checks.int_at_least(3, "n", 3) == 3
    _refuses(checks.int_at_least, 2, "n must be an int >= 3, got 2", 3)
    _refuses(checks.int_at_least, True, "n must be an int >= 0, got True", 0)


def test_optional_positive_int():
    assert checks.optional_positive_int(None, "n") is None
    assert checks.optional_positive_int(4, "n") == 4
    _refuses(checks.optional_positive_int, 0, "n must be None or an int >= 1, got 0")
    _refuses(checks.optional_positive_int, False, "n must be None or an int >= 1, got False")


def test_positive_ints():
    assert checks.positive_ints([3, 4], "n") == (3, 4)
    assert checks.positive_ints((), "n") == ()
    _refuses(checks.positive_ints, "34", "n must be a sequence of ints >= 1, got '34'")
    _refuses(checks.positive_ints, 3, "n must be a sequence of ints >= 1, got 3")
    _refuses(checks.positive_ints, [3, 0], "every entry of n must be an int >= 1, got 0")
    _refuses(checks.positive_ints, [True], "every entry of n must be an int >= 1, got True")


def test_int_below():
    assert checks.int_below(0, "n", 3) == 0
    assert checks.int_below(2, "n", 3) == 2
    for value in (3, -1, True, 1.0):
        _refuses(checks.int_below, value, f"n must be an int in [0, 3), got {value!r}", 3)


def test_finite_float():
    assert checks.finite_float(-2, "n") == -2.0
    assert type(checks.finite_float(1, "n")) is float
    for value in (math.nan, math.inf, True, "1", None):
        _refuses(checks.finite_float, value, f"n must be a finite number, got {value!r}")


@pytest.mark.parametrize("value", [1e-9, 1, 2.5, np.float32(0.5)])
def test_positive_float_returns_a_float(value):
    assert checks.positive_float(value, "n") == pytest.approx(float(value))
    assert type(checks.positive_float(value, "n")) is float


@pytest.mark.parametrize("value", [0, -1.0, math.inf, math.nan, True, "1", None])
def test_positive_float_refuses(value):
    _refuses(checks.positive_float, value, f"n must be a finite number > 0, got {value!r}")


def test_non_negative_float():
    assert checks.non_negative_float(0, "n") == 0.0
    for value in (-1.0, math.inf, False):
        _refuses(checks.non_negative_float, value, f"n must be a finite number >= 0, got {value!r}")


def test_probability():
    assert checks.probability(0, "n") == 0.0
    assert checks.probability(1, "n") == 1.0
    assert checks.probability(0.25, "n") == 0.25
    for value in (-0.1, 1.5, math.nan, True, "0.5"):
        _refuses(checks.probability, value, f"n must be a number in [0, 1], got {value!r}")


def test_open_unit():
    assert checks.open_unit(0.05, "n") == 0.05
    for value in (0, 1, 0.0, 1.0, -0.5, math.nan, True, None):
        _refuses(checks.open_unit, value, f"n must be a number in (0, 1), got {value!r}")


def test_one_of():
    assert checks.one_of("mean", ("mean", "sum"), "n") == "mean"
    assert checks.one_of(2, [1, 2], "n") == 2
    for value, choices, message in [
        ("avg", ("mean", "sum"), "n must be one of 'mean', 'sum', got 'avg'"),
        (True, (0, 1), "n must be one of 0, 1, got True"),
        ([1], ("a",), "n must be one of 'a', got [1]"),
    ]:
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            checks.one_of(value, choices, "n")


def test_checks_is_a_leaf():
    """The module imports nothing else of pyro_bnn (also an import-linter contract, tests/test_layers.py)."""
    source = checks.__file__
    with open(source, encoding="utf-8") as file:
        text = file.read()
    assert "pyro_bnn" not in re.sub(r'""".*?"""', "", text, flags=re.S).replace("pyro_bnn.checks", "")


class Color(str, enum.Enum):
    RED = "red"
    BLUE = "blue"


def test_enum_member():
    assert checks.enum_member(Color, "red", "color") is Color.RED
    assert checks.enum_member(Color, Color.BLUE, "color") is Color.BLUE
    with pytest.raises(ValueError, match=r"^unknown color 'green'; expected one of 'red', 'blue'$"):
        checks.enum_member(Color, "green", "color")


@dataclasses.dataclass(frozen=True)
class Fit(checks.Settings):
    epochs: int = 10
    lr: float = 1e-3
    color: Color | str = Color.RED

    def check(self) -> None:
        self._set("epochs", checks.positive_int(self.epochs, "epochs"))
        self._set("lr", checks.positive_float(self.lr, "lr"))
        self._set("color", checks.enum_member(Color, self.color, "color"))


def test_settings_are_checked_when_made():
    assert Fit(epochs=np.int64(3), color="blue") == Fit(epochs=3, color=Color.BLUE)  # normalised by check()
    assert type(Fit(epochs=np.int64(3)).epochs) is int
    with pytest.raises(ValueError, match=r"^epochs must be an int >= 1, got 0$"):
        Fit(epochs=0)
    with pytest.raises(ValueError, match=r"^lr must be a finite number > 0, got -1.0$"):
        dataclasses.replace(Fit(), lr=-1.0)  # a copy is made, so checked, too


def test_settings_are_frozen():
    fit = Fit()
    with pytest.raises(dataclasses.FrozenInstanceError):
        fit.epochs = 3  # type: ignore[misc]


def test_settings_must_be_a_frozen_dataclass():
    @dataclasses.dataclass
    class Loose(checks.Settings):
        epochs: int = 1

    with pytest.raises(TypeError, match=r"^Loose must be a @dataclass\(frozen=True\) to be Settings$"):
        Loose()


def test_from_args_maps_fields_by_name_and_ignores_the_rest():
    args = argparse.Namespace(epochs=5, lr=None, color="blue", verbose=True, out="runs/x")
    fit = Fit.from_args(args)
    assert fit == Fit(epochs=5, color=Color.BLUE)  # lr None: not given, the default stays
    assert Fit.from_args(argparse.Namespace()) == Fit()


def test_from_args_overrides_rename_or_compute_a_field():
    args = argparse.Namespace(num_epochs=7, fast=True)
    fit = Fit.from_args(args, epochs="num_epochs", lr=lambda a: 0.1 if a.fast else None)
    assert fit == Fit(epochs=7, lr=0.1)


def test_from_args_over_a_base_object_keeps_its_values():
    base = Fit(epochs=4, lr=0.5)
    assert Fit.from_args(argparse.Namespace(lr=0.2, color=None), base) == Fit(epochs=4, lr=0.2)
    with pytest.raises(TypeError, match=r"^base must be a Fit, got Namespace$"):
        Fit.from_args(argparse.Namespace(), argparse.Namespace())


def test_from_args_rejects_an_unknown_override_and_checks_the_values():
    with pytest.raises(TypeError, match=r"^Fit has no field 'epoch'$"):
        Fit.from_args(argparse.Namespace(epochs=2), epoch="epochs")
    with pytest.raises(ValueError, match=r"^epochs must be an int >= 1, got -2$"):
        Fit.from_args(argparse.Namespace(epochs=-2))


def test_from_args_matches_options_from_args():
    """The commands' ``options_from_args`` and ``Settings.from_args`` build the same object (a drop-in)."""
    from pyro_bnn.commands import options_from_args
    from pyro_bnn.laplace import LaplaceOptions

    args = argparse.Namespace(subset="all", structure="diag", marglik_steps=5, no_tune=True, output="x")
    tune = {"tune_prior": lambda a: not a.no_tune}
    assert LaplaceOptions.from_args(args, **tune) == options_from_args(LaplaceOptions, args, **tune)


SETTINGS_CLASSES = [
    ("pyro_bnn.infer.trainer_options", "ObjectiveOptions"),
    ("pyro_bnn.infer.trainer_options", "ValidationOptions"),
    ("pyro_bnn.infer.trainer_options", "LRSchedulerOptions"),
    ("pyro_bnn.infer.trainer_options", "RuntimeOptions"),
    ("pyro_bnn.infer.trainer_options", "ResumeOptions"),
    ("pyro_bnn.infer.optim", "ParamGroups"),
    ("pyro_bnn.laplace.options", "LaplaceOptions"),
    ("pyro_bnn.sgmcmc.samplers", "StepPlan"),
    ("pyro_bnn.diagnostics.slices", "SliceOptions"),
    ("pyro_bnn.runs.conformal", "ConformalOptions"),
    ("pyro_bnn.runs.config", "RunConfig"),
]


@pytest.mark.parametrize("module, name", SETTINGS_CLASSES)
def test_the_settings_classes_share_the_one_style(module, name):
    """Each is a frozen dataclass checked in ``check()`` when made, with no ``__post_init__`` of its own."""
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, checks.Settings)
    assert cls.__dataclass_params__.frozen
    assert "__post_init__" not in vars(cls) and "check" in vars(cls)


def test_dataclass_from_args_takes_any_dataclass_or_object():
    @dataclasses.dataclass
    class Plain:
        seed: int = 0
        name: str = "a"

    args = argparse.Namespace(seed=3, name=None, other=1)
    assert checks.dataclass_from_args(Plain, args) == Plain(seed=3)
    assert checks.dataclass_from_args(Plain(name="b"), args, seed=lambda a: a.seed + 1) == Plain(seed=4, name="b")
    with pytest.raises(TypeError, match=r"^Plain has no field 'x'$"):
        checks.dataclass_from_args(Plain, args, x="seed")
