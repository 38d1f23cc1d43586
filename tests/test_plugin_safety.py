"""What a plugin may not do (:mod:`pyro_bnn.plugins`), and the registrations the registries refuse when they are
made rather than when they are used: a plugin whose import (or whose registering) replaces or removes a built-in
guide, objective, model, paper, measurement or runner fails and is undone exactly (every field, the order); a plugin
that exits when imported is a failed plugin naming itself, not the end of the command; an objective, a guide family
or a model that could never be used is refused in one line naming it. Every test leaves the registries as it found
them."""

from __future__ import annotations

import sys
import textwrap

import pytest

from pyro_bnn.cli import main
from pyro_bnn.guides.registry import GuideFamily, guide_families, guide_family
from pyro_bnn.infer.objective_registry import (
    batched_objectives,
    objective_entries,
    objective_entry,
    register_objective,
)
from pyro_bnn.models.registry import ModelArguments, model_registrations, register_model, unregister_model
from pyro_bnn.plugins import discovered_plugins, load_plugins
from pyro_bnn.reproduce.papers import EXPERIMENTS
from pyro_bnn.spec import Form


@pytest.fixture
def install(plugin_path):
    """``install(source, entry_points, **modules)``: a distribution ``sneaky-plugin 0.1`` with the module
    ``sneaky_plugin`` (and ``modules``) on ``sys.path``; the registries are checked to be as they were afterwards."""
    load_plugins(on_error="record")  # whatever else is installed, tried now: only the plugin below is tried later
    root = plugin_path

    def install(source: str, entry_points: str, **modules: str) -> None:
        for module, text in {"sneaky_plugin": source, **modules}.items():
            (root / f"{module}.py").write_text(textwrap.dedent(text))
        info = root / "sneaky_plugin-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sneaky-plugin\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(textwrap.dedent(entry_points).lstrip())

    return install


OBJECTIVE_ENTRY_POINT = """
[pyro_bnn.objectives]
sneaky-elbo = sneaky_plugin:register_sneaky
"""

REGISTER_SNEAKY = """
from pyro_bnn.infer import TraceELBO
from pyro_bnn.infer.objective_registry import register_objective


class Sneaky(TraceELBO):
    pass


def register_sneaky():
    register_objective("sneaky-elbo")(Sneaky)
"""

NUTS = "pyro_bnn.reproduce.papers.posterior_families_runs:nuts"  # a built-in paper's runner
IMPORT_TIME_REPLACEMENTS = {
    "objective": 'register_objective("meanfield", replace=True)(Sneaky)',
    "guide": (
        "from pyro_bnn.guides.registry import guide_family, register_guide\n"
        "import dataclasses\n"
        'register_guide(dataclasses.replace(guide_family("flat")), replace=True)'
    ),
    "model": (
        "from pyro_bnn.models.registry import register_model\n"
        'register_model("mlp", replace=True)(lambda **kwargs: None)'
    ),
    "paper": (
        "from pyro_bnn.reproduce.papers import EXPERIMENTS, register_experiment\n"
        'register_experiment(type(EXPERIMENTS["priors"])(), replace=True)'
    ),
    "measurement": (
        "from pyro_bnn.reproduce.measures import register_measure\n"
        'register_measure("plateaus", lambda *args: {}, replace=True)'
    ),
    "runner": (
        "from pyro_bnn.reproduce.runners import register_runner\n"
        f"register_runner({NUTS!r}, lambda *args: None, replace=True)"
    ),
}
REPLACED_NAME = {
    "objective": "meanfield",
    "guide": "flat",
    "model": "mlp",
    "paper": "priors",
    "measurement": "plateaus",
    "runner": NUTS,
}


@pytest.mark.parametrize("kind", sorted(IMPORT_TIME_REPLACEMENTS))
def test_a_plugin_whose_import_replaces_a_registration_fails_and_is_undone(install, registries, kind):
    install(REGISTER_SNEAKY + IMPORT_TIME_REPLACEMENTS[kind] + "\n", OBJECTIVE_ENTRY_POINT)
    before = registries()
    (plugin,) = load_plugins(on_error="record")
    assert not plugin.loaded
    assert plugin.error == (
        f"importing it replaced the registered {kind} {REPLACED_NAME[kind]!r}; a plugin adds names, never replaces "
        "(undone)"
    )
    assert registries() == before
    assert "sneaky-elbo" not in [entry.name for entry in objective_entries()]


def test_a_plugin_whose_import_removes_a_registration_fails_and_is_undone(install, registries):
    source = REGISTER_SNEAKY.replace("import register_objective", "import register_objective, unregister_objective")
    install(source + 'unregister_objective("trace")\n', OBJECTIVE_ENTRY_POINT)
    before = registries()
    (plugin,) = load_plugins(on_error="record")
    assert plugin.error.startswith("importing it removed the registered objective 'trace'")
    assert registries() == before


def test_an_objective_callable_that_replaces_a_built_in_is_undone_exactly(install, registries):
    # The built-in comes back with every field (batched=True) and in its place, so batched runs still compute it.
    install(
        REGISTER_SNEAKY + '    register_objective("trace", replace=True)(Sneaky)\n',
        OBJECTIVE_ENTRY_POINT,
    )
    before, batched = registries(), batched_objectives()
    assert "trace" in batched
    (plugin,) = load_plugins(on_error="record")
    assert plugin.error == (
        "registering it replaced the registered objective 'trace'; a plugin adds names, never replaces (undone)"
    )
    assert registries() == before and batched_objectives() == batched
    assert objective_entry("trace").batched and objective_entries()[0].name == "trace"


def test_a_plugin_that_exits_when_imported_is_a_failed_plugin_naming_itself(install, capsys):
    install('import sys\nsys.exit("sneaky: no such option")\n', OBJECTIVE_ENTRY_POINT)
    assert main(["plugins"]) == 1  # the command goes on, and lists the plugin as failed
    (line,) = capsys.readouterr().out.splitlines()
    assert line == (
        "failed  plugin sneaky-plugin 0.1 (entry point pyro_bnn.objectives:sneaky-elbo = sneaky_plugin:register_sneaky)"
        ": cannot import it: SystemExit('sneaky: no such option'): it exits when imported (sys.exit(), or argparse "
        "reading the command line)"
    )


def test_a_plugin_that_parses_the_command_line_when_imported_does_not_end_help(install, monkeypatch, capsys):
    install("import argparse\nargparse.ArgumentParser(prog='sneaky').parse_args()\n", OBJECTIVE_ENTRY_POINT)
    monkeypatch.setattr(sys, "argv", ["pyro-bnn", "--help"])
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    captured = capsys.readouterr()
    assert "usage: pyro-bnn" in captured.out  # pyro-bnn's own help, after the plugin's
    assert "sneaky-plugin 0.1 (entry point pyro_bnn.objectives:sneaky-elbo" in captured.err
    assert "cannot import it: SystemExit(0)" in captured.err


def test_an_interrupt_while_a_plugin_imports_still_interrupts(install):
    # The first plugin exits when imported: a failed plugin. The second is interrupted: that ends the command.
    install(
        "import sys\nsys.exit(3)\n",
        "[pyro_bnn.objectives]\nexits = sneaky_plugin:reg\ninterrupted = sneaky_interrupt:reg\n",
        sneaky_interrupt="raise KeyboardInterrupt\n",
    )
    with pytest.raises(KeyboardInterrupt):
        load_plugins(on_error="record")
    (plugin,) = discovered_plugins()
    assert plugin.name == "exits" and plugin.error.startswith("cannot import it: SystemExit(3): it exits when imported")


def test_a_paper_plugin_naming_the_class_says_to_name_an_instance(install):
    install(
        "from pyro_bnn.reproduce.papers import EXPERIMENTS\nPaperClass = type(EXPERIMENTS['priors'])\n",
        "[pyro_bnn.papers]\nsneaky = sneaky_plugin:PaperClass\n",
    )
    (plugin,) = load_plugins(on_error="record")
    cls = type(EXPERIMENTS["priors"])
    assert plugin.error == (
        "cannot register it: TypeError: a pyro_bnn.papers entry point names an experiment object, an instance, got the "
        f"class {cls.__module__}.{cls.__qualname__}; name an instance ({cls.__qualname__}() at module level)"
    )


class _Factory:
    def __init__(self, num_particles: int = 1) -> None:
        self.num_particles = num_particles


def _needs_scale(scale, num_particles=1):
    return scale


@pytest.mark.parametrize(
    ("name", "keywords", "factory", "error", "message"),
    [
        ("x", {}, 42, TypeError, "elbo 'x': register_objective decorates a class or factory, got 42"),
        (
            "x",
            {"options": ("vectorize_particles",)},
            _Factory,
            TypeError,
            "elbo 'x': its factory '_Factory' takes no keyword vectorize_particles",
        ),
        (
            "x",
            {"options": ("nonsense",)},
            _Factory,
            TypeError,
            "elbo 'x': its factory '_Factory' takes no keyword nonsense",
        ),
        (
            "x",
            {"options": ("num particles",)},
            _Factory,
            ValueError,
            "elbo 'x': an option is a keyword argument's name, got 'num particles'",
        ),
        (
            "x",
            {"options": "num_particles"},
            _Factory,
            TypeError,
            "elbo 'x': options takes a collection of keyword names",
        ),
        (
            "x",
            {"options": ("num_particles",)},
            _needs_scale,
            TypeError,
            "elbo 'x': its factory needs scale, which no declared option passes",
        ),
        (
            "x",
            {"requires": {"flat_normal"}},
            _Factory,
            ValueError,
            "elbo 'x': requires names no capability 'flat_normal'; expected some of draws, flat-normal",
        ),
        ("x", {"excludes": {"bogus"}}, _Factory, ValueError, "elbo 'x': excludes names no capability 'bogus'"),
        ("x", {"requires": "flat-normal"}, _Factory, TypeError, "elbo 'x': requires takes a collection of Capability"),
        (
            "my elbo",
            {},
            _Factory,
            ValueError,
            "an objective name is letters, digits, '.', '_' and '-' (not first; no ':' or space), got 'my elbo'",
        ),
        (
            "my:elbo",
            {},
            _Factory,
            ValueError,
            "an objective name is letters, digits, '.', '_' and '-' (not first; no ':' or space), got 'my:elbo'",
        ),
        (42, {}, _Factory, TypeError, "an objective name is a string, got 42"),
    ],
)
def test_register_objective_refuses_what_could_never_be_used_when_it_registers(name, keywords, factory, error, message):
    before = objective_entries()
    with pytest.raises(error) as raised:
        register_objective(name, **keywords)(factory)
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)
    assert objective_entries() == before


def _build(spec, bnn):
    return None


_BAD_GUIDE_NAME = (
    "a guide name is lower-case letters, digits, '.', '_' and '-' (not first; no ':', ',', '=' or space: "
    "--guide NAME:ARGS could not spell it), got "
)


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: GuideFamily(Form("g-int", ()), build=42), TypeError, "guide 'g-int': build is a callable, got 42"),
        (
            lambda: GuideFamily(Form("g-int"), build=_build, check=3),
            TypeError,
            "guide 'g-int': check is a callable or None, got 3",
        ),
        (lambda: GuideFamily(Form("g:3"), build=_build), ValueError, _BAD_GUIDE_NAME + "'g:3'"),
        (lambda: GuideFamily(Form("g 3"), build=_build), ValueError, _BAD_GUIDE_NAME + "'g 3'"),
        (lambda: GuideFamily(Form("Gee"), build=_build), ValueError, _BAD_GUIDE_NAME + "'Gee'"),
        (lambda: GuideFamily(Form("g", aliases=("g,h",)), build=_build), ValueError, _BAD_GUIDE_NAME + "'g,h'"),
        (
            lambda: GuideFamily(Form("g"), build=_build, capabilities={"flat_normal"}),
            ValueError,
            "guide 'g': no capability 'flat_normal'; expected some of draws",
        ),
        (
            lambda: GuideFamily(Form("g"), build=_build, capabilities="random"),
            TypeError,
            "guide 'g': capabilities is a collection of Capability",
        ),
        (lambda: GuideFamily("g", build=_build), TypeError, "a GuideFamily's form is a pyro_bnn.spec.Form, got 'g'"),
    ],
)
def test_a_guide_family_that_could_never_be_used_is_refused_when_it_is_made(make, error, message):
    before = guide_families()
    with pytest.raises(error) as raised:
        make()
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)
    assert guide_families() == before
    assert guide_family("flat")  # the registry still parses


@pytest.mark.parametrize(
    ("name", "factory", "error", "message"),
    [
        ("m", 42, TypeError, "model 'm': register_model decorates a class or factory function, got 42"),
        (
            "m",
            lambda width: None,
            TypeError,
            "model 'm': its factory takes no keyword input_shape, num_classes, activation, dropout",
        ),
        (
            "my model",
            lambda **kwargs: None,
            ValueError,
            "a model name is letters, digits, '.', '_' and '-' (not first; no space), got 'my model'",
        ),
    ],
)
def test_register_model_refuses_what_build_model_could_never_call(name, factory, error, message):
    before = model_registrations()
    with pytest.raises(error) as raised:
        register_model(name)(factory)
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)
    assert model_registrations() == before


def test_unregister_model_removes_a_model_and_its_arguments():
    before = model_registrations()
    register_model("toy-model", arguments=ModelArguments("WIDTH", lambda args: {"width": int(args[0])}))(
        lambda **kwargs: None
    )
    assert model_registrations()["toy-model"][1].usage == "WIDTH"
    unregister_model("TOY-model")
    assert model_registrations() == before
    unregister_model("toy-model")  # nothing to remove: no error


def test_an_objective_callable_that_only_replaces_a_built_in_is_named_and_undone(install, registries):
    # It said "it registered no objective", hiding the replacement of 'trace' that replace=True had made.
    install(
        REGISTER_SNEAKY.replace('register_objective("sneaky-elbo")', 'register_objective("trace", replace=True)'),
        OBJECTIVE_ENTRY_POINT,
    )
    before = registries()
    (plugin,) = load_plugins(on_error="record")
    assert plugin.error == (
        "registering it replaced the registered objective 'trace'; a plugin adds names, never replaces (undone)"
    )
    assert registries() == before and objective_entry("trace").factory is not sys.modules["sneaky_plugin"].Sneaky


@pytest.mark.parametrize(("where", "verb"), [("callable", "register"), ("import", "import")])
def test_an_objective_plugin_taking_a_name_says_a_plugin_never_replaces(install, registries, where, verb):
    # register_objective's own advice, "pass replace=True", is what a plugin may not do (and then failed otherwise).
    taken = 'register_objective("trace")(Sneaky)'
    source = REGISTER_SNEAKY.replace('register_objective("sneaky-elbo")(Sneaky)', taken)
    install(source if where == "callable" else REGISTER_SNEAKY + taken + "\n", OBJECTIVE_ENTRY_POINT)
    before = registries()
    (plugin,) = load_plugins(on_error="record")
    assert plugin.message == (
        "plugin sneaky-plugin 0.1 (entry point pyro_bnn.objectives:sneaky-elbo = sneaky_plugin:register_sneaky) "
        f"failed: cannot {verb} it: ValueError: objective 'trace' is already registered; a plugin adds names, never "
        "replaces"
    )
    assert registries() == before
