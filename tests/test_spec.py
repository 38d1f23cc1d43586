"""The option-string layer (pyro_bnn.spec): every family in the CLI catalogue is listed, helped, parsed and checked
from one declaration; bad specs fail in one line before any data is loaded."""

from __future__ import annotations

import argparse
import math
from enum import Enum

import pytest
import torch

from pyro_bnn.cli import build_parser, main
from pyro_bnn.guides import GuideKind, GuideSpec, parse_guide
from pyro_bnn.nn import ActivationSpec
from pyro_bnn.priors import NormalPrior, ScaleMixturePrior, parse_prior
from pyro_bnn.runs import runs
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.spec import (
    FLOAT32_TINY,
    Arg,
    Choice,
    Family,
    Form,
    Integer,
    Interval,
    Positive,
    Real,
    SpecError,
    format_number,
    member_doc,
    summary,
)
from pyro_bnn.spec.catalogue import OPTIONS, listing, option

FORMS = [(entry, form) for entry in OPTIONS for form in entry.family.forms]
FORM_IDS = [f"{entry.flag}={form.name}" for entry, form in FORMS]


def _squeeze(text: str) -> str:
    # argparse wraps help lines, even inside a long usage string; compare without any whitespace.
    return "".join(text.split())


def _help(command: str) -> str:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return _squeeze(subparsers.choices[command].format_help())


@pytest.fixture(scope="module")
def list_output() -> str:
    return listing()


# ---- every family: listed, in --help, parsed ---------------------------------------------------------------


@pytest.mark.parametrize(("entry", "form"), FORMS, ids=FORM_IDS)
def test_every_form_is_listed_helped_and_round_trips(entry, form, list_output):
    # One line of `pyro-bnn list` per form, starting with its usage grammar.
    lines = [
        line
        for line in list_output.splitlines()
        if line[2:].startswith(form.label) and line[2 + len(form.label) :][:2] in ("", "  ")
    ]
    assert len(lines) == 1
    # The option's --help names it with the same usage.
    assert _squeeze(form.label) in _help(entry.command)
    # The spec it is listed with parses back to it, through the family and through the public parser.
    example = form.example or form.name
    assert entry.family.parse(example).kind == form.kind
    for alias in form.aliases:
        assert entry.family.parse(alias.upper() + example[len(form.name) :]).kind == form.kind
    built = entry.parse(example)
    if isinstance(built, (ActivationSpec, GuideSpec)):
        assert entry.parse(str(built)) == built  # the canonical string form round-trips
    if entry.build is None or entry.flag == "--dataset":
        assert built is form.kind


def test_pyro_bnn_list_prints_a_heading_per_option_and_a_line_per_form(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert out == listing() + "\n"
    for entry in OPTIONS:
        assert f"{entry.flag}: {entry.title}" in out
    form_lines = [line for line in out.splitlines() if line.startswith("  ")]
    assert len(form_lines) == len(FORMS)
    assert "  cubic (regression)" in out and "  mlp[:W1,W2,...]" in out
    assert "  hierarchical:FAMILY,HYPERPRIOR,H1[,H2]" in out and "FAMILY: normal|laplace|cauchy" in out
    assert "  normal[:LOC,SCALE]" in out and "default LOC=0, SCALE=1" in out


@pytest.mark.parametrize("entry", OPTIONS, ids=[entry.flag for entry in OPTIONS])
def test_pyro_bnn_list_option_prints_every_description_whole(entry, capsys, list_output):
    """The listing cuts a description at 90 characters ("... an Adam..."); ``pyro-bnn list OPTION`` prints each
    form's first paragraph whole, under its usage, whichever way the option is named."""
    name = entry.flag.removeprefix("--")
    assert main(["list", name.upper().replace("-", "_")]) == 0
    out = capsys.readouterr().out
    assert out == listing("--" + name) + "\n" and out.splitlines()[0].endswith(f"{entry.flag}: {entry.title}")
    squeezed = " ".join(out.split())
    for form in entry.family.forms:
        assert f"\n  {form.label}\n" in out
        assert " ".join(form.full_description.split()) in squeezed
        short = form.description
        whole = short.removesuffix("...") if short.endswith("...") else short
        assert form.full_description.startswith(whole)  # the listing's line is the start of the whole text
    assert all(len(line) <= 120 for line in out.splitlines() if not line.startswith("  ") or line.startswith("    "))


def test_the_listing_cuts_some_descriptions_and_says_where_they_are_whole(list_output):
    assert "pyro-bnn list OPTION" in list_output.splitlines()[0]
    cut = [form for _, form in FORMS if form.description.endswith("...")]
    assert cut and all(len(form.full_description) > len(form.description) for form in cut)


def test_pyro_bnn_list_refuses_an_unknown_option_in_one_line(capsys):
    assert main(["list", "priors"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("pyro-bnn list: error: unknown option 'priors'; one of dataset, model,") and err.count("\n") == 1
    )


def test_a_reader_that_closes_stdout_ends_the_command_quietly(tmp_path):
    """``pyro-bnn list | head -1``: the reader gone is no error to report (it read
    "pyro-bnn list: error: [Errno 32] Broken pipe", a BrokenPipeError taken for a lost Ray connection)."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pyro_bnn", "list"], stdout=write, stderr=subprocess.PIPE, text=True, timeout=120
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (1, "")


@pytest.mark.parametrize("entry", OPTIONS, ids=[entry.flag for entry in OPTIONS])
def test_every_enum_member_has_a_form(entry):
    if entry.family.enum is not None:
        assert [form.kind for form in entry.family.forms] == list(entry.family.enum)
    elif entry.flag == "--guide":  # the guide registry: the built-in families, in GuideKind's order, first
        from pyro_bnn.guides import GuideKind, guide_families

        assert entry.family.names() == [family.name for family in guide_families()]
        assert [form.kind for form in entry.family.forms][: len(GuideKind)] == list(GuideKind)
    elif entry.flag == "--elbo":  # the objective registry: the built-in objectives, in ElboKind's order, first
        from pyro_bnn.infer import ElboKind
        from pyro_bnn.infer.objective_registry import objective_entries

        assert sorted(entry.family.names()) == sorted(e.name for e in objective_entries())
        assert [form.kind for form in entry.family.forms][: len(ElboKind)] == list(ElboKind)
    else:  # the model registry
        from pyro_bnn.models import available_models

        assert entry.family.names() == available_models()


@pytest.mark.parametrize("entry", [e for e in OPTIONS if e.command == "train"], ids=lambda e: e.flag)
def test_train_options_come_from_the_catalogue(entry):
    parser = build_parser()
    train = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["train"]
    action = next(a for a in train._actions if entry.flag in a.option_strings)
    assert action.default == getattr(RunConfig(), entry.field)
    assert action.help == entry.help(action.default)
    assert action.choices == (entry.family.names() if entry.choices else None)
    if entry.choices:  # names ignore case on the command line too ("--kl-weighting Blundell" was refused)
        for name in entry.family.names():
            args = train.parse_args(["--out", "o", entry.flag, name.upper()])
            assert getattr(args, entry.field) == name


def test_every_spec_field_of_run_config_has_a_catalogue_entry():
    spec_fields = {"dataset", "model", "activation", "prior", "guide", "elbo", "kl_anneal", "kl_weighting"}
    spec_fields |= {"kl_scale", "normalization", "optimizer", "lr_schedule"}
    assert {entry.field for entry in OPTIONS if entry.command == "train"} == spec_fields


def test_enum_member_docstrings_are_read_from_the_source():
    from pyro_bnn.priors import PriorKind

    assert member_doc(PriorKind.NORMAL) == "Every weight ~ Normal(LOC, SCALE^2)."
    for entry, form in FORMS:
        if isinstance(form.kind, Enum):
            assert form.description, f"{entry.flag} {form.name} has no member docstring"


def test_summary_keeps_the_first_sentence_as_plain_text():
    assert summary("The :class:`~pyro_bnn.guides.LocInit` value, e.g. ``map``. More.") == "The LocInit value, e.g. map"
    long = "word " * 40
    assert summary(long).endswith("...") and len(summary(long)) <= 90


# ---- valid specs build what they built before ------------------------------------------------------------


def test_defaults_build_the_same_objects():
    mixture, default = parse_prior("mixture"), ScaleMixturePrior()
    for name in ("pi", "sigma1", "sigma2"):
        assert torch.equal(getattr(mixture, name), getattr(default, name))
    normal = parse_prior(" Normal : 0 , 1 ")
    assert torch.equal(normal.loc, NormalPrior().loc) and torch.equal(normal.scale, NormalPrior().scale)
    assert parse_guide("autonormal") == GuideSpec(GuideKind.AUTONORMAL)
    assert parse_guide("autonormal:") == GuideSpec(GuideKind.AUTONORMAL)
    assert parse_guide("bbb") == GuideSpec(GuideKind.BBB) and parse_guide("MC-Dropout") == GuideSpec(
        GuideKind.MC_DROPOUT, dropout=0.1
    )
    assert parse_guide("autonormal:rel=0.5,LOC=Median").relative_scale == 0.5


def test_a_small_scale_that_float32_holds_is_kept():
    prior = parse_prior("mixture:0.5,1,1e-30")
    assert 0 < float(prior.sigma2) < 2e-30


# ---- the grammar ------------------------------------------------------------------------------------------


class Colour(str, Enum):
    RED = "red"
    """Red."""
    BLUE = "blue"
    """Blue."""


def test_usage_strings_are_generated_from_the_grammar():
    both = (Arg("a", Real(), 0.0), Arg("b", Positive(), 1.0))
    assert Form(Colour.RED, both).usage == "red[:A,B]"
    assert Form(Colour.RED, both).usage_with_arguments == "red:A,B"
    assert Form(Colour.RED, (Arg("n", Integer()), Arg("f", Interval(0, 1), 0.5))).usage == "red:N[,F]"
    options = (Arg("k", Choice(Colour, "colour"), Colour.RED),)
    assert Form(Colour.RED, options=options).usage == "red[:k=red|blue]"
    assert Form(Colour.RED, (Arg("x", Real(), 1.0),), options=options).usage == "red[:X][,k=red|blue]"
    assert Form(Colour.RED).usage == "red" and Form(Colour.RED, aliases=("r",)).label == "red (or r)"


def test_a_family_must_cover_its_enum_once():
    with pytest.raises(TypeError, match=r"member\(s\) \['blue'\] have no form"):
        Family("colour", [Form(Colour.RED)], enum=Colour, example="red")
    with pytest.raises(TypeError, match="declared twice"):
        Family("colour", [Form(Colour.RED), Form(Colour.BLUE, aliases=("red",))], enum=Colour, example="red")
    with pytest.raises(TypeError, match="must follow the required ones"):
        Form(Colour.RED, (Arg("a", Real(), 0.0), Arg("b", Real())))


def test_parsed_spec_says_which_arguments_were_given():
    forms = [Form(Colour.RED, (Arg("a", Real(), 0.0),)), Form(Colour.BLUE)]
    family = Family("colour", forms, enum=Colour, example="red")
    assert family.parse("red").given == frozenset() and family.parse("red")["a"] == 0.0
    assert family.parse("RED:2").given == {"a"} and family.parse("red:2")["a"] == 2.0


def test_a_key_value_option_given_to_a_form_without_options_is_named_as_an_unknown_option():
    family = Family(
        "colour", [Form(Colour.RED, (Arg("a", Real(), 0.0),)), Form(Colour.BLUE)], enum=Colour, example="red"
    )
    with pytest.raises(SpecError) as err:
        family.parse("red:a=1")  # was "a must be a finite number, got 'a=1'"
    assert str(err.value) == "colour 'red:a=1': unknown option 'a'; red takes no key=value options; expected red:A"
    assert family.parse("red:1")["a"] == 1.0


@pytest.mark.parametrize(
    ("value_type", "text", "message"),
    [
        (Real(), "nan", "x must be finite, got 'nan'"),
        (Real(), "1e999", "x must be finite, got '1e999'"),
        (Real(minimum=0.0), "-0.5", "x must be a finite number >= 0, got '-0.5'"),
        (Positive(), "0", "x must be a finite number > 0, got '0'"),
        (Positive(float32=True), "1e-40", "x must be a positive number that float32 holds"),
        (Positive(float32=True), "4e38", "x must be a positive number that float32 holds"),
        (Interval(0, 1, closed="neither"), "1", "x must be a number in (0, 1), got '1'"),
        (Integer(minimum=1), "2.0", "x must be an int >= 1, got '2.0'"),
        (Choice(Colour, "colour"), "green", "unknown colour 'green'; expected one of 'red', 'blue'"),
    ],
)
def test_value_types_refuse_in_one_clause(value_type, text, message):
    with pytest.raises(ValueError) as info:
        value_type.parse(text, "x")
    assert str(info.value) == message or str(info.value).startswith(message)


@pytest.mark.parametrize(
    "value, text",
    [(0.1, "0.1"), (1.0, "1"), (-5.0, "-5"), (1e-5, "1e-05"), (0.0123456789, "0.0123456789"), (1234567.0, "1234567.0")],
)
def test_format_number_writes_g_where_it_reads_back_exactly_else_the_shortest_exact_text(value, text):
    assert format_number(value) == text
    assert float(format_number(value)) == value


def test_float32_bounds():
    assert Positive(float32=True).parse(str(FLOAT32_TINY), "x") == FLOAT32_TINY
    assert math.isclose(Positive(float32=True).parse("3.4e38", "x"), 3.4e38)


# ---- bad specs on the command line: exit code 2, one line, before any data is loaded ----------------------

BAD_TRAIN_SPECS = [
    ("--prior", "gaussian:0,1", "unknown prior 'gaussian'"),
    ("--prior", "normal:0", "takes 0 or 2 numeric argument(s), got 1"),
    ("--prior", "normal:0,-1", "scale must be a finite number > 0, got '-1'"),
    ("--prior", "normal:nan,1", "loc must be finite, got 'nan'"),
    ("--prior", "laplace:0,inf", "scale must be a finite number > 0, got 'inf'"),
    ("--prior", "mixture:0.5,1,1e-300", "sigma2 must be a positive number that float32 holds"),
    ("--prior", "mixture:1.5,1,0.1", "pi must be a number in (0, 1), got '1.5'"),
    ("--prior", "hierarchical:normal", "expected hierarchical:FAMILY,HYPERPRIOR,H1[,H2]"),
    ("--prior", "hierarchical:student,halfnormal,1", "unknown weight family 'student'"),
    ("--prior", "hierarchical:normal,inversegamma,1", "hyperprior 'inversegamma' takes 2 argument(s), got 1"),
    ("--prior", "flat:1", "prior 'flat' takes no arguments after ':'"),
    ("--guide", "svgd", "unknown guide 'svgd'; expected one of autonormal[:INIT_SCALE]"),
    ("--guide", "autonormal:0", "init scale must be a finite number > 0, got '0'"),
    ("--guide", "autonormal:1e-300", "init scale must be a positive number that float32 holds"),
    ("--guide", "autonormal:spread=1", "unknown option 'spread'; expected one of rel, loc, map_epochs"),
    ("--guide", "autonormal:loc=prior", "unknown location init 'prior'"),
    # A form without options counted key=value as one more positional ("takes 0 or 1 numeric argument(s), got 2").
    ("--guide", "mvn:0.1,rank=3", "guide 'mvn:0.1,rank=3': unknown option 'rank'; mvn takes no key=value options"),
    ("--prior", "normal:0,Scale=1", "unknown option 'scale'; normal takes no key=value options; expected normal:LOC"),
    ("--guide", "autonormal:0.1,rel=1", "not both"),
    ("--guide", "bbb:-4,-5", "low <= high"),
    ("--guide", "bbb:nan,1", "rho low must be finite, got 'nan'"),
    ("--guide", "mc-dropout:1", "dropout probability must be a number in (0, 1), got '1'"),
    ("--activation", "swish", "unknown activation 'swish'"),
    ("--activation", "leaky:inf", "slope must be finite, got 'inf'"),
    ("--activation", "leaky:", "slope must be a finite number, got ''"),
    ("--activation", "relu:0.5", "activation 'relu' takes no arguments after ':'"),
    ("--kl-anneal", "linear", "takes 1 numeric argument(s), got 0; expected linear:EPOCHS"),
    ("--kl-anneal", "linear:inf", "epochs must be a finite number > 0, got 'inf'"),
    ("--kl-anneal", "cyclical:4,1.5", "ramp fraction must be a number in (0, 1], got '1.5'"),
    ("--kl-anneal", "constant:-1", "weight must be a finite number >= 0, got '-1'"),
    ("--kl-anneal", "sigmoid:3", "unknown KL schedule 'sigmoid'"),
    ("--model", "resnet:18", "unknown model 'resnet' (in 'resnet:18'); expected one of 3fc"),
    ("--model", "mlp:1.5", "hidden widths must be positive ints, got '1.5'; expected mlp:W1,W2,..."),
    ("--model", "3fc:10", "model '3fc' takes no arguments after ':', got '3fc:10'"),
    ("--model", "", "a model must be a non-empty string"),
]


@pytest.mark.parametrize(("flag", "spec", "message"), BAD_TRAIN_SPECS, ids=[f"{f}={s}" for f, s, _ in BAD_TRAIN_SPECS])
def test_bad_train_specs_fail_in_one_line_before_data_loads(tmp_path, monkeypatch, capsys, flag, spec, message):
    def refuse(config):
        raise AssertionError("data was loaded")

    monkeypatch.setattr(runs, "load_data", refuse)
    out = tmp_path / "run"
    assert main(["train", flag, spec, "--device", "cpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pyro-bnn train: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert message in err and repr(spec) in err
    assert not out.exists()


@pytest.mark.parametrize("flag", [e.flag for e in OPTIONS if e.choices])
def test_plain_enum_options_are_refused_by_argparse(flag, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", flag, "nonsense", "--out", "unused"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nonsense'" in err and ", ".join(repr(n) for n in option(flag).family.names()) in err


def test_spec_errors_are_value_errors_of_one_line():
    with pytest.raises(SpecError) as info:
        option("--prior").family.parse("mixture:0.5,1,1e-300")
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)
    assert str(info.value).startswith("prior 'mixture:0.5,1,1e-300': sigma2 must be a positive number")
