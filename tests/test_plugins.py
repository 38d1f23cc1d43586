"""Plugins from outside the package (:mod:`pyro_bnn.plugins`): a tiny distribution built in ``tmp_path`` (a module
and a ``toy_plugin-0.1.dist-info`` folder whose ``entry_points.txt`` importlib.metadata finds on ``sys.path``, no pip)
registers a guide family, an objective and a paper; the ``pyro-bnn`` command sees all three (train, reproduce
--list, reproduce NAME); a broken entry point is one warning line naming it and the rest loads; PYRO_BNN_NO_PLUGINS
loads none. Every test leaves the built-in registries as it found them."""

from __future__ import annotations

import json
import math
import sys
import textwrap
import warnings

import pytest

from pyro_bnn.cli import main
from pyro_bnn.guides import guide_families, guide_family, parse_guide
from pyro_bnn.infer.objective_registry import make_objective, objective_entries, objective_entry
from pyro_bnn.plugins import (
    DISABLE_ENV,
    PluginError,
    PluginWarning,
    discovered_plugins,
    load_plugins,
    unload_plugins,
)
from pyro_bnn.reproduce import records
from pyro_bnn.reproduce.papers import EXPERIMENTS, register_experiment, unregister_experiment

TOY_MODULE = '''
"""A plugin of pyro_bnn: a guide family, an objective and a paper, as another package would ship them."""

import dataclasses

from pyro_bnn.experiments.config import RunConfig
from pyro_bnn.guides import guide_family
from pyro_bnn.infer import TraceELBO
from pyro_bnn.infer.objective_registry import register_objective
from pyro_bnn.reproduce.report import markdown_table
from pyro_bnn.reproduce.spec import Analysis, Profile, RunSpec, Section

# the flat mean-field family under another name: its grammar, builder and capabilities
_FLAT = guide_family("flat")
TOYFLAT = dataclasses.replace(
    _FLAT,
    form=dataclasses.replace(_FLAT.form, kind="toyflat", aliases=(), example="toyflat:0.05", doc="Flat, renamed."),
)


class ToyELBO(TraceELBO):
    """TraceELBO that counts its steps."""

    calls = 0

    def __call__(self, *args, **kwargs):
        ToyELBO.calls += 1
        return super().__call__(*args, **kwargs)


def register_toy_elbo():
    register_objective("toy-elbo", options=("num_particles", "vectorize_particles"), doc="TraceELBO, counted.")(
        ToyELBO
    )


CONFIG = RunConfig(dataset="moons", model="tanh-small", activation="tanh", guide="toyflat:0.05", elbo="toy-elbo",
                   epochs=1, lr=0.01, batch_size=64, num_samples=4, num_val_samples=2, device="cpu")


class ToyPaper:
    name = "toypaper"
    title = "A toy paper"
    summary = "one moons run with the toy guide and objective"
    profiles = {"quick": Profile("quick", "seconds", seeds=1, settings={"epochs": 1})}

    def plan(self, profile, seeds, data_dirs):
        return [RunSpec(dataclasses.replace(CONFIG, seed=s), label=f"toy{s}") for s in range(seeds)]

    def analyse(self, records, profile, out):
        rows = [[r.spec.run_id, r.status.value, r.metrics.get("accuracy", float("nan"))] for r in records]
        return Analysis([Section("Runs", tables=[markdown_table(["run", "status", "accuracy"], rows)])], [])


TOYPAPER = ToyPaper()
'''

TOY_ENTRY_POINTS = """
[pyro_bnn.guides]
toyflat = toy_plugin:TOYFLAT

[pyro_bnn.objectives]
toy-elbo = toy_plugin:register_toy_elbo

[pyro_bnn.papers]
toypaper = toy_plugin:TOYPAPER
"""

BROKEN_MODULE = """
from pyro_bnn.guides import guide_family
from pyro_bnn.infer import TraceELBO
from pyro_bnn.infer.objective_registry import register_objective


class HalfELBO(TraceELBO):
    pass


def register_then_fail():
    register_objective("half-elbo")(HalfELBO)
    raise RuntimeError("boom\\nsecond line")


FLAT = guide_family("flat")  # a name that is taken
NOT_A_PAPER = "toypaper"
"""

BROKEN_ENTRY_POINTS = """
[pyro_bnn.guides]
ghost = nowhere_at_all:FAMILY
flat = broken_plugin:FLAT

[pyro_bnn.objectives]
half = broken_plugin:register_then_fail

[pyro_bnn.papers]
notapaper = broken_plugin:NOT_A_PAPER
"""


def _install(root, module: str, source: str, entry_points: str, distribution: str):
    """``root/module.py`` and ``root/<distribution>-0.1.dist-info`` (METADATA, entry_points.txt)."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{distribution.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points).lstrip())


def _registries() -> tuple:
    return (
        [family.name for family in guide_families()],
        [entry.name for entry in objective_entries()],
        list(EXPERIMENTS),
    )


@pytest.fixture
def plugin_path(tmp_path, monkeypatch):
    """A folder on ``sys.path`` to install plugins into; every registration they make is undone afterwards."""
    monkeypatch.delenv(DISABLE_ENV, raising=False)
    unload_plugins()
    before = _registries()
    root = tmp_path / "site"
    root.mkdir()
    for module in ("toy_plugin", "broken_plugin"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.syspath_prepend(str(root))
    yield root
    unload_plugins()
    assert _registries() == before


@pytest.fixture
def toy(plugin_path):
    _install(plugin_path, "toy_plugin", TOY_MODULE, TOY_ENTRY_POINTS, "toy-plugin")
    return plugin_path


def test_load_plugins_registers_the_guide_the_objective_and_the_paper_once(toy, capsys):
    loaded = load_plugins(on_error="raise")
    assert [(p.group, p.name, p.registered, p.distribution) for p in loaded] == [
        ("pyro_bnn.guides", "toyflat", ("toyflat",), "toy-plugin 0.1"),
        ("pyro_bnn.objectives", "toy-elbo", ("toy-elbo",), "toy-plugin 0.1"),
        ("pyro_bnn.papers", "toypaper", ("toypaper",), "toy-plugin 0.1"),
    ]
    assert all(p.loaded for p in loaded) and discovered_plugins() == loaded
    toy_plugin = sys.modules["toy_plugin"]
    assert guide_family("toyflat") is toy_plugin.TOYFLAT and EXPERIMENTS["toypaper"] is toy_plugin.TOYPAPER
    assert objective_entry("toy-elbo").factory is toy_plugin.ToyELBO
    assert load_plugins() == () and discovered_plugins() == loaded  # each entry point loads once

    spec = parse_guide("toyflat:0.05")
    assert str(spec) == "toyflat:0.05" and spec.capabilities == guide_family("flat").capabilities
    assert isinstance(make_objective("toy-elbo"), toy_plugin.ToyELBO)

    assert main(["plugins"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "loaded  plugin toy-plugin 0.1 (entry point pyro_bnn.guides:toyflat = toy_plugin:TOYFLAT): guide toyflat"
    )
    assert out[2].endswith("paper toypaper") and len(out) == 3


@pytest.mark.filterwarnings("ignore:the posterior has barely left its start")  # 2 epochs of a toy run
def test_the_cli_trains_with_the_plugin_guide_and_objective(toy, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "--dataset", "moons", "--model", "tanh-small", "--activation", "tanh", "--guide", "toyflat:0.05"]
    argv += ["--elbo", "toy-elbo", "--epochs", "2", "--batch-size", "64", "--num-samples", "4"]
    assert main([*argv, "--num-val-samples", "2", "--quiet", "--out", str(out)]) == 0  # main loads the plugins
    config = json.loads((out / "config.json").read_text())
    assert (config["guide"], config["elbo"]) == ("toyflat:0.05", "toy-elbo")
    assert math.isfinite(json.loads((out / "metrics.json").read_text())["nll"])
    assert sys.modules["toy_plugin"].ToyELBO.calls > 0  # the plugin's objective trained it


def test_reproduce_lists_and_runs_the_plugin_paper(toy, tmp_path, capsys):
    assert main(["reproduce", "--list"]) == 0
    listed = capsys.readouterr().out
    assert "toypaper" in listed and "one moons run with the toy guide and objective" in listed
    assert "leaky-calibration" in listed
    out = tmp_path / "grid"
    # runs name a clean commit, so that a developer's uncommitted changes do not leave the run uncounted
    # (tests/reproduce/conftest.py does the same)
    records.inherit_code_version("pyro_bnn test-suite at 0000000")
    try:
        assert main(["reproduce", "toypaper", "--profile", "quick", "--out", str(out), "--quiet"]) == 0
    finally:
        records.inherit_code_version("")
    report = (out / "report.md").read_text()
    assert "A toy paper" in report and "| done |" in report
    (run,) = (out / "runs").iterdir()
    assert json.loads((run / "config.json").read_text())["guide"] == "toyflat:0.05"


def test_a_broken_plugin_is_one_warning_line_and_the_others_load(plugin_path, capsys):
    _install(plugin_path, "toy_plugin", TOY_MODULE, TOY_ENTRY_POINTS, "toy-plugin")
    _install(plugin_path, "broken_plugin", BROKEN_MODULE, BROKEN_ENTRY_POINTS, "broken-plugin")
    with pytest.warns(PluginWarning) as caught:
        tried = load_plugins()
    messages = [str(w.message) for w in caught]
    assert len(messages) == 4 and all("\n" not in m for m in messages)
    assert messages[0] == (
        "plugin broken-plugin 0.1 (entry point pyro_bnn.guides:ghost = nowhere_at_all:FAMILY) failed: cannot import "
        "it: ModuleNotFoundError: No module named 'nowhere_at_all'; skipped (PYRO_BNN_NO_PLUGINS=1 loads no plugin)"
    )
    assert (
        "pyro_bnn.guides:flat = broken_plugin:FLAT) failed: cannot register it: ValueError: guide 'flat' is "
        "already registered; a plugin adds names, never replaces" in messages[1]
    )
    assert "RuntimeError: boom; second line" in messages[2]
    assert "pyro_bnn.papers:notapaper" in messages[3] and "register_experiment takes an Experiment" in messages[3]
    assert sorted(p.name for p in tried if p.loaded) == ["toy-elbo", "toyflat", "toypaper"]
    assert "half-elbo" not in [e.name for e in objective_entries()]  # undone when its callable raised
    assert load_plugins() == ()  # not retried, not warned about again

    unload_plugins()
    assert main(["reproduce", "--list"]) == 0  # the command goes on without them
    captured = capsys.readouterr()
    warned = captured.err.splitlines()
    assert len(warned) == 4 and warned[0].startswith("pyro-bnn: warning: plugin broken-plugin 0.1 (entry point")
    assert "toypaper" in captured.out
    assert main(["plugins"]) == 1  # lists them all, failed ones with the cause
    listing = capsys.readouterr().out.splitlines()
    assert len(listing) == 7 and sum(line.startswith("failed  ") for line in listing) == 4

    unload_plugins()
    with pytest.raises(PluginError, match=r"^plugin broken-plugin 0.1 \(entry point pyro_bnn.guides:ghost"):
        load_plugins(on_error="raise")


def test_the_environment_variable_turns_plugins_off(toy, monkeypatch, capsys):
    monkeypatch.setenv(DISABLE_ENV, "1")
    assert load_plugins() == () and discovered_plugins() == ()
    assert main(["reproduce", "--list"]) == 0 and "toypaper" not in capsys.readouterr().out
    assert main(["plugins"]) == 0
    assert capsys.readouterr().out.strip() == "plugin loading is off (PYRO_BNN_NO_PLUGINS is set): no plugin was loaded"
    with pytest.raises(ValueError, match="unknown guide"):
        parse_guide("toyflat")
    monkeypatch.setenv(DISABLE_ENV, "0")  # 0 is "not set"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(load_plugins()) == 3


def test_register_experiment_refuses_a_taken_name_in_one_line():
    taken = EXPERIMENTS["priors"]
    other = type(taken)()
    with pytest.raises(ValueError, match=r"^experiment 'priors' is already registered; pass replace=True"):
        register_experiment(other)
    assert register_experiment(taken) is taken  # the same object again: nothing to refuse
    try:
        assert register_experiment(other, replace=True) is other and EXPERIMENTS["priors"] is other
    finally:
        register_experiment(taken, replace=True)
    with pytest.raises(TypeError, match="register_experiment takes an Experiment"):
        register_experiment(type(taken))  # the class, not an instance
    unregister_experiment("no-such-paper")  # nothing to remove: no error
    assert list(EXPERIMENTS)[:2] == ["leaky-calibration", "bayes-by-backprop"]
