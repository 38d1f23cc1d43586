"""Each paper is one package under ``pyro_bnn/reproduce/papers/``, and a paper with its own measurement needs no
file of ``pyro_bnn/`` changed: the toy paper below lives in this test file alone, registers its experiment and its
measurement, and its value reaches the report that :func:`pyro_bnn.reproduce.reproduce` writes."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import pyro_bnn.reproduce.papers as papers
from pyro_bnn.reproduce import reproduce
from pyro_bnn.reproduce.measures import MEASURES, check_measure, register_measure
from pyro_bnn.reproduce.papers import register_experiment, unregister_experiment
from pyro_bnn.reproduce.planned import Analysis, Headline, Profile, RunRecord, RunSpec, Section, Verdict
from pyro_bnn.reproduce.report import select
from pyro_bnn.reproduce.runners import RUNNERS, resolve_runner
from pyro_bnn.runs.config import RunConfig

PAPERS = Path(papers.__file__).parent
PACKAGES = sorted(p.parent.name for p in PAPERS.glob("*/__init__.py"))


def test_every_paper_is_one_package_and_no_paper_module_lies_at_the_top_of_reproduce():
    assert PACKAGES == [
        "bayes_by_backprop", "bbb_fashion", "implicit_bnn", "leaky_calibration", "posterior_families", "priors"
    ]  # fmt: skip
    assert [p.name for p in PAPERS.glob("*.py")] == ["__init__.py"]
    top = sorted(p.name for p in PAPERS.parent.glob("*.py"))
    assert not [name for name in top if name.endswith("_measures.py")]
    for package in PACKAGES:
        assert {"__init__.py", "plan.py"} <= {p.name for p in (PAPERS / package).glob("*.py")}


def _imports(path: Path, package: str) -> set[str]:
    """The modules of ``package`` that the file ``path`` imports, at module level or inside a function."""
    found = set()
    prefix = f"pyro_bnn.reproduce.papers.{package}"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(prefix):
            if node.module == prefix:  # from the package: a submodule or a name of its __init__
                modules = {p.stem for p in (PAPERS / package).glob("*.py")}
                found |= {f"{prefix}.{a.name}" if a.name in modules else prefix for a in node.names}
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith(prefix)}
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` (module -> modules it imports), or []."""
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> list[str]:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target] if target in path else [module, target]
            if target not in state and (found := visit(target, [*path, target])):
                return found
        state[module] = 2
        return []

    for module in sorted(graph):
        if module not in state and (found := visit(module, [module])):
            return found
    return []


@pytest.mark.parametrize("package", PACKAGES)
def test_a_papers_modules_import_each_other_in_no_circle(package):
    # lazy imports inside functions count too: the analysis imports the plan, never the other way round
    prefix = f"pyro_bnn.reproduce.papers.{package}"
    graph = {
        (prefix if path.stem == "__init__" else f"{prefix}.{path.stem}"): _imports(path, package)
        for path in (PAPERS / package).glob("*.py")
    }
    graph = {module: targets - {module} for module, targets in graph.items()}
    assert _cycle(graph) == []
    assert all(prefix not in targets for module, targets in graph.items()), "a module imports its package"


def test_the_cycle_finder_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_the_papers_register_their_measurements_and_runners():
    check_measure("uncertainty:3")  # loads the built-in papers when needed
    assert {"accuracies", "pruning", "ood", "shift", "cubic", "posterior", "uncertainty"} <= set(MEASURES)
    assert MEASURES["shift"].__module__ == "pyro_bnn.reproduce.papers.implicit_bnn.measures"
    from pyro_bnn.reproduce.papers.posterior_families.plan import RUNS

    assert resolve_runner(f"{RUNS}:nuts") is RUNNERS[f"{RUNS}:nuts"]
    assert RUNNERS[f"{RUNS}:nuts"].__module__ == "pyro_bnn.reproduce.papers.posterior_families.runs"


def test_register_measure_refuses_bad_names_and_silent_replacement():
    with pytest.raises(ValueError, match="letters"):
        register_measure("a:b", _toy_measure)
    with pytest.raises(TypeError, match="not callable"):
        register_measure("toy-not-callable", 3)
    with pytest.raises(ValueError, match="already registered"):
        register_measure("accuracies", _toy_measure)
    with pytest.raises(ValueError, match="unknown measurement"):
        check_measure("no-such-measure-anywhere")


# The toy paper: one run on moons and a measurement that no file of pyro_bnn/ knows.

TOY_MEASURE = "toy_weight_count"


def _toy_measure(result, folder, config, data_dirs, scale: str = "1") -> dict:
    """The run's test inputs times ``scale``, and a constant to find in the report."""
    return {"toy_value": 41.5 + float(scale), "toy_test_inputs": int(result.prediction.targets.numel())}


class ToyPaper:
    name = "toy-paper"
    title = "A toy paper defined in the tests alone"
    summary = "one moons run and one measurement of its own"
    profiles = {"tiny": Profile("tiny", "one epoch", 1, {"epochs": 1})}

    def plan(self, profile: Profile, seeds: int, data_dirs: dict[str, str]) -> list[RunSpec]:
        config = RunConfig(
            dataset="moons",
            model="tanh-small",
            activation="tanh",
            guide="flat:rel=1",
            epochs=profile["epochs"],
            batch_size=64,
            num_samples=4,
            num_val_samples=2,
            device="cpu",
        )
        return [
            RunSpec(dataclasses.replace(config, seed=seed), label=f"toy-s{seed}", measures=(f"{TOY_MEASURE}:1",))
            for seed in range(seeds)
        ]

    def analyse(self, records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
        done = select(records)
        values = [r.metrics["toy_value"] for r in done if "toy_value" in r.metrics]
        text = f"toy measurement: {', '.join(f'{v:.2f}' for v in values) or 'none'}"
        verdict = Verdict.HOLDS if values else Verdict.INCONCLUSIVE
        return Analysis([Section("Toy", text)], [Headline("the toy value is taken", verdict, text)])


@pytest.fixture
def toy_paper():
    register_measure(TOY_MEASURE, _toy_measure)
    register_experiment(ToyPaper())
    yield
    unregister_experiment("toy-paper")
    MEASURES.pop(TOY_MEASURE, None)


def test_a_paper_and_its_measurement_from_outside_the_package_reach_the_report(tmp_path, toy_paper):
    report = reproduce("toy-paper", profile="tiny", out=tmp_path / "toy", progress=False)
    text = Path(report).read_text()
    assert "toy measurement: 42.50" in text
    assert "the toy value is taken" in text


def test_a_spawned_worker_takes_a_measurement_registered_in_its_parent_alone(tmp_path, toy_paper):
    # A pool worker is a fresh interpreter that imported nothing of this test: the parent's registry travels.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from pyro_bnn.reproduce.executors import _execute_group, _registries

    spec = ToyPaper().plan(ToyPaper.profiles["tiny"], 1, {})[0]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        (record,) = pool.submit(
            _execute_group, [spec], tmp_path / "runs", progress=False, threads=1, registries=_registries([spec])
        ).result()
    assert record.metrics["toy_value"] == 42.5, record.reason
