"""The verb registry of ``pyro-bnn`` (pyro_bnn.cli.VERBS) and the one way from argparse to options objects
(pyro_bnn.commands.options_from_args)."""

import argparse
import dataclasses

import pytest

from pyro_bnn.cli import VERBS, build_parser
from pyro_bnn.commands import Verb, options_from_args


@dataclasses.dataclass(frozen=True)
class _Options:
    size: int = 3
    name: str = "a"
    flag: bool = True


def test_each_argument_fills_its_field_and_an_option_not_given_keeps_the_default():
    args = argparse.Namespace(size=None, name="b", flag=False, other=1)
    assert options_from_args(_Options, args) == _Options(size=3, name="b", flag=False)


def test_a_rename_names_the_argument_or_computes_the_value():
    args = argparse.Namespace(count=5, no_flag=True)
    assert options_from_args(_Options, args, size="count", flag=lambda a: not a.no_flag) == _Options(5, "a", False)


def test_an_instance_as_base_keeps_its_own_values_for_the_options_not_given():
    base = _Options(size=7, name="c")
    assert options_from_args(base, argparse.Namespace(size=None, name="d")) == _Options(7, "d", True)


def test_a_rename_of_no_field_is_refused():
    with pytest.raises(TypeError, match="no field 'sise'"):
        options_from_args(_Options, argparse.Namespace(), sise="size")


def test_the_parser_has_every_registered_verb_in_order():
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(commands.choices) == list(VERBS)
    assert all(isinstance(verb, Verb) and VERBS[verb.name] is verb for verb in VERBS.values())
    assert list(VERBS)[:2] == ["train", "evaluate"] and set(VERBS) >= {"reproduce", "ensemble", "laplace", "sample"}


def test_an_argument_a_verb_does_not_take_is_named_by_that_verb(capsys):
    from pyro_bnn.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["list", "guide", "extra", "--more"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.startswith("usage: pyro-bnn list") and err.rstrip().endswith(
        "pyro-bnn list: error: unrecognized arguments: extra --more"
    )


def test_an_error_about_an_option_field_names_the_flag_the_user_typed(capsys):
    from pyro_bnn.cli import main

    sample = VERBS["sample"]
    assert sample.spell_flags("num_draws must be an int >= 1, got 0") == "--draws must be an int >= 1, got 0"
    assert sample.spell_flags("burn_in must be an int >= 0, got -1") == "--burn-in must be an int >= 0, got -1"
    assert sample.spell_flags("nothing_here must be x") == "nothing_here must be x"  # no such flag: as it was
    assert sample.spell_flags("num_draws=5 must be a multiple of num_cycles=2") == (
        "--draws=5 must be a multiple of num_cycles=2"  # names further in are left: there they are often prose
    )
    assert sample.spell_flags("the model has x=3 sites") == "the model has x=3 sites"
    assert sample.spell_flags("the model has no site") == "the model has no site"
    args = ["sample", "--dataset", "moons", "--model", "tanh-small", "--step-size", "1e-3", "--chains", "0"]
    assert main([*args, "--out", "unused"]) == 2
    assert capsys.readouterr().err.strip() == "pyro-bnn sample: error: --chains must be an int >= 1, got 0"
