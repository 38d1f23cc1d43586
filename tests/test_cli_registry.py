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
    assert err == "pyro-bnn list: error: unrecognized arguments: extra --more\n"  # one line, no usage block


def test_an_error_about_an_option_field_names_the_flag_the_user_typed(capsys):
    from pyro_bnn.cli import main

    sample = VERBS["sample"]
    assert sample.spell_flags("num_draws must be an int >= 1, got 0") == "--draws must be an int >= 1, got 0"
    assert sample.spell_flags("burn_in must be an int >= 0, got -1") == "--burn-in must be an int >= 0, got -1"
    assert sample.spell_flags("nothing_here must be x") == "nothing_here must be x"  # no such flag: as it was
    # the field, then plain words before "must": still its subject (it read "val_size as a fraction must ...")
    assert sample.spell_flags("val_size as a fraction must lie in [0, 1), got 1.5") == (
        "--val-size as a fraction must lie in [0, 1), got 1.5"
    )
    assert sample.spell_flags("nothing_here as such must be x") == "nothing_here as such must be x"
    # a quote or a comma before "must": the name is prose, left alone
    assert sample.spell_flags("model 'lenet' must take images") == "model 'lenet' must take images"
    assert sample.spell_flags("seed, if given, must be x") == "seed, if given, must be x"
    assert sample.spell_flags("num_draws=5 must be a multiple of num_cycles=2") == (
        "--draws=5 must be a multiple of num_cycles=2"  # names further in are left: there they are often prose
    )
    assert sample.spell_flags("the model has x=3 sites") == "the model has x=3 sites"
    assert sample.spell_flags("the model has no site") == "the model has no site"
    args = ["sample", "--dataset", "moons", "--model", "tanh-small", "--step-size", "1e-3", "--chains", "0"]
    assert main([*args, "--out", "unused"]) == 2
    assert capsys.readouterr().err.strip() == "pyro-bnn sample: error: --chains must be an int >= 1, got 0"


@pytest.mark.parametrize(
    "argv, line",
    [
        (["train", "--epochs", "1.5"], "pyro-bnn train: error: argument --epochs: invalid int value: '1.5'"),
        (["train", "--lr", "abc"], "pyro-bnn train: error: argument --lr: invalid float value: 'abc'"),
        (
            ["train", "--optimizer", "nosuch"],
            "pyro-bnn train: error: argument --optimizer: invalid choice: 'nosuch' (choose from 'adam', 'sgd')",
        ),
        (["train", "--elbo", "nosuch"], "pyro-bnn train: error: argument --elbo: invalid choice: 'nosuch' (choose"),
        (
            ["evaluate", "run", "--data-dir", "mnist"],
            "pyro-bnn evaluate: error: argument --data-dir: expected DATASET=PATH (e.g. mnist=/data/mnist), got "
            "'mnist'",
        ),
        (["sample", "--draws", "x"], "pyro-bnn sample: error: argument --draws: invalid int value: 'x'"),
        (["train"], "pyro-bnn train: error: the following arguments are required: --out"),
        (["nosuchverb"], "pyro-bnn: error: argument command: invalid choice: 'nosuchverb' (choose from 'train'"),
    ],
)
def test_a_value_argparse_refuses_is_one_line_without_the_usage_block(capsys, argv, line):
    # argparse printed its whole usage block (dozens of lines for train) above the error line
    from pyro_bnn.cli import main

    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--out", "o"] if argv[0] == "sample" else argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert len(err.splitlines()) == 1 and err.startswith(line), err


def test_every_verbs_parser_is_the_one_line_parser():
    from pyro_bnn.commands.verb import ArgumentParser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert isinstance(build_parser(), ArgumentParser)
    assert all(isinstance(parser, ArgumentParser) for parser in commands.choices.values())
    assert all(isinstance(verb.parser(), ArgumentParser) for verb in VERBS.values())


def test_a_missing_verb_is_one_line_that_lists_the_verbs(capsys):
    # With argparse's usage block gone, the line said only "the following arguments are required: command".
    from pyro_bnn.cli import main

    with pytest.raises(SystemExit) as exit_:
        main([])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err == f"pyro-bnn: error: name a verb, one of: {', '.join(VERBS)} (pyro-bnn --help says what each does)\n"
