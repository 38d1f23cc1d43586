"""Plugins from outside the package (:mod:`pyro_bnn.plugins`): a tiny distribution built in ``tmp_path`` (a module
and a ``toy_plugin-0.1.dist-info`` folder whose ``entry_points.txt`` importlib.metadata finds on ``sys.path``, no pip)
registers a guide family, an objective and a paper; the ``pyro-bnn`` command sees all three (train, reproduce
--list, reproduce NAME); a broken entry point is one warning line naming it and the rest loads; PYRO_BNN_NO_PLUGINS
loads none. Every test leaves the built-in registries as it found them."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from pyro_bnn.cli import main
from pyro_bnn.guides import Capability, guide_family, parse_guide
from pyro_bnn.guides.registry import GuideFamily, register_guide, unregister_guide
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
from pyro_bnn.reproduce.planned import RunSpec
from pyro_bnn.spec import Form

DOCS = Path(__file__).resolve().parent.parent / "docs" / "plugins.md"


def _docs_block(language: str) -> str:
    """The first ``language`` code block of docs/plugins.md: the recipe's plugin is the one tested here."""
    match = re.search(rf"^```{language}\n(.*?)^```$", DOCS.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    assert match, f"docs/plugins.md has no {language} block"
    return match.group(1)


def _entry_points_txt(pyproject: str) -> str:
    """``[project.entry-points."GROUP"]`` tables of a pyproject.toml as the ``entry_points.txt`` they install."""
    text = re.sub(r'^\[project\.entry-points\."([^"]+)"\]$', r"[\1]", pyproject, flags=re.MULTILINE)
    return re.sub(r'^(\S+) = "([^"]+)"$', r"\1 = \2", text, flags=re.MULTILINE)


TOY_MODULE = _docs_block("python")
TOY_ENTRY_POINTS = _entry_points_txt(_docs_block("toml"))

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
def test_the_cli_trains_with_the_plugin_guide_and_objective(toy, tmp_path, monkeypatch):
    out = tmp_path / "run"
    argv = ["train", "--dataset", "moons", "--model", "tanh-small", "--activation", "tanh", "--guide", "toyflat:0.05"]
    argv += ["--elbo", "toy-elbo", "--epochs", "2", "--batch-size", "64", "--num-samples", "4"]
    load_plugins(on_error="raise")
    calls = []
    toy_elbo = sys.modules["toy_plugin"].ToyELBO
    train_step = toy_elbo.__call__
    monkeypatch.setattr(toy_elbo, "__call__", lambda self, *a, **k: calls.append(1) or train_step(self, *a, **k))
    assert main([*argv, "--num-val-samples", "2", "--quiet", "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["guide"], config["elbo"]) == ("toyflat:0.05", "toy-elbo")
    assert math.isfinite(json.loads((out / "metrics.json").read_text())["nll"])
    assert len(calls) >= 2  # the plugin's objective trained it, a step per batch


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


def test_a_spawned_worker_trains_with_the_plugin_guide_and_objective(toy, tmp_path):
    # A pool worker (--workers 2) is a fresh interpreter that loaded no plugin: the grid hands it the families and
    # objectives registered from outside pyro_bnn that its runs use, as it does the measurements.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from pyro_bnn.reproduce.executors import _execute_group, _registries

    load_plugins(on_error="raise")
    spec = EXPERIMENTS["toypaper"].plan(EXPERIMENTS["toypaper"].profiles["quick"], 1, {})[0]
    register_guide(_lambda_guide())  # a notebook's family that no run uses: it failed every run, unpicklable
    try:
        registries = _registries([spec])
        assert [family.name for family in registries.guides] == ["toyflat"]
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            (record,) = pool.submit(
                _execute_group, [spec], tmp_path / "runs", progress=False, threads=1, registries=registries
            ).result()
    finally:
        unregister_guide("nb-guide")
    assert record.status.value == "done", record.reason
    assert math.isfinite(record.metrics["nll"])


def _lambda_guide() -> GuideFamily:
    """The flat family under the name ``nb-guide``, built by a lambda (as a notebook writes it): it cannot travel."""
    return GuideFamily(
        Form("nb-guide", ()),
        build=lambda spec, bnn: parse_guide("flat:0.05").build(bnn),
        capabilities=guide_family("flat").capabilities - {Capability.BATCHED},
    )


def test_a_grid_sends_its_workers_only_the_registrations_its_runs_use(toy, tmp_path, monkeypatch):
    from pyro_bnn.reproduce import executors
    from pyro_bnn.reproduce.measures import MEASURES

    load_plugins(on_error="raise")
    (spec,) = EXPERIMENTS["toypaper"].plan(EXPERIMENTS["toypaper"].profiles["quick"], 1, {})
    measured = RunSpec(spec.config, label="measured", measures=("sampled_label_ece:10",))
    register_guide(_lambda_guide())
    try:
        registries = executors._registries([spec, measured])
        assert [family.name for family in registries.guides] == ["toyflat"]  # not nb-guide, which no run uses
        assert [entry.name for entry in registries.objectives] == ["toy-elbo"]
        assert registries.measures == {"sampled_label_ece": MEASURES["sampled_label_ece"]}
        assert registries.runners == {}
        # A run that uses the lambda's family: the grid is refused before any run starts, in one line naming it.
        uses = RunSpec(dataclasses.replace(spec.config, guide="nb-guide"), label="uses")
        expected = (
            "the grid's runs use the guide 'nb-guide', which cannot be sent to a worker process (AttributeError: "
            "Can't pickle local object '_lambda_guide.<locals>.<lambda>'); register it from an importable module, "
            "defined at module level (not a lambda or a local function), or run the grid in this process (--workers 1)"
        )
        with pytest.raises(ValueError) as raised:
            executors._registries([spec, uses])
        assert str(raised.value) == expected
        monkeypatch.setattr(executors, "capped_workers", lambda workers, threads: (workers, ""))
        with pytest.raises(ValueError) as raised:
            next(executors.LocalExecutor(workers=2).run([spec, uses], tmp_path / "runs", progress=False))
        assert str(raised.value) == expected
        assert not (tmp_path / "runs").exists()
    finally:
        unregister_guide("nb-guide")


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
    # the class, not an instance: it read "<class '...'> lacks an instance, not the class"
    cls = type(taken)
    message = (
        rf"^register_experiment takes an instance of an Experiment, got the class {cls.__module__}\.{cls.__name__}; "
    )
    with pytest.raises(TypeError, match=message + rf"pass {cls.__name__}\(\)$"):
        register_experiment(cls)
    unregister_experiment("no-such-paper")  # nothing to remove: no error
    assert list(EXPERIMENTS)[:2] == ["leaky-calibration", "bayes-by-backprop"]


MEASFAIL_MODULE = """
from pyro_bnn.reproduce.measures import register_measure
from pyro_bnn.reproduce.runners import register_runner


def leaked(result, folder, config, data_dirs, *args):
    return {}


register_measure("leaked_measure", leaked)
register_runner("leaked_runner", leaked)
raise RuntimeError("broken after registering a measure")
"""


def test_a_paper_plugin_that_fails_after_registering_a_measurement_leaves_none(plugin_path):
    # It kept the measurement and the runner, which every later --workers grid sent to its workers, where their
    # module does not import: every run failed with a PicklingError.
    from pyro_bnn.reproduce.measures import MEASURES
    from pyro_bnn.reproduce.runners import RUNNERS

    _install(plugin_path, "measfail_plugin", MEASFAIL_MODULE, "[pyro_bnn.papers]\nmf = measfail_plugin:X\n", "mf")
    measures, runners = dict(MEASURES), dict(RUNNERS)
    with pytest.warns(PluginWarning) as caught:
        load_plugins()
    assert [str(w.message) for w in caught] == [
        "plugin mf 0.1 (entry point pyro_bnn.papers:mf = measfail_plugin:X) failed: cannot import it: RuntimeError: "
        "broken after registering a measure; skipped (PYRO_BNN_NO_PLUGINS=1 loads no plugin)"
    ]
    assert "leaked_measure" not in MEASURES and "leaked_runner" not in RUNNERS
    assert MEASURES == measures and RUNNERS == runners


def test_the_module_docstring_says_what_a_grid_s_workers_receive():
    # The Plugins page renders it: it said a grid using a plugin's guide or objective runs in-process, while such a
    # --workers 2 grid ran in its workers (docs/plugins.md, "Limits").
    import pyro_bnn.plugins

    text = " ".join(pyro_bnn.plugins.__doc__.split())
    assert "runs in-process" not in text
    assert (
        "load no plugin there, yet run with a plugin's guide or objective as in the command's process: the grid hands "
        "each worker the guide families, objectives, measurements and runners its runs use "
        "(:mod:`pyro_bnn.reproduce.registries`)" in text
    )
    limits = " ".join(DOCS.read_text(encoding="utf-8").split("## Limits")[1].split())
    assert "the grid hands each worker the guide families, objectives, measurements and runners" in limits
