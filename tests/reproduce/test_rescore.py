"""``pyro-bnn reproduce NAME --rescore`` on a tiny grid whose records predate the conformal metrics: point networks
and an ensemble get back exactly the values their training scored, a sampled posterior gets values from a fresh
prediction, every other value stays as it was, a run without checkpoint is counted and left alone, and a run that
cannot be restored is reported without touching its files."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from pyro_bnn.cli import main
from pyro_bnn.reproduce import LocalExecutor, run_grid
from pyro_bnn.reproduce.papers import EXPERIMENTS
from pyro_bnn.reproduce.planned import Analysis, Profile, RunSpec, Section, Status
from pyro_bnn.reproduce.records import RESULT
from pyro_bnn.reproduce.report import format_mean_sd, markdown_table
from pyro_bnn.reproduce.rescore import RESCORED, RESCORED_KEYS, rescore_grid
from pyro_bnn.runs.config import RunConfig

POINT = RunConfig(dataset="moons", model="mlp:8", guide="map", epochs=2, batch_size=64, num_samples=1, device="cpu",
                  data_seed=0)  # fmt: skip
SAMPLED = RunConfig(dataset="moons", model="tanh-small", activation="tanh", guide="flat:0.05", epochs=2, lr=0.01,
                    batch_size=64, num_samples=8, num_val_samples=2, device="cpu")  # fmt: skip


def _grid() -> tuple[list[RunSpec], list[RunSpec], list[RunSpec]]:
    """Two MAP members and their ensemble (deterministic predictions), and two sampled runs."""
    members = [RunSpec(dataclasses.replace(POINT, seed=s), label=f"member{s}") for s in range(2)]
    ensemble = RunSpec(dataclasses.replace(POINT, num_samples=2), label="ensemble", members=tuple(members))
    sampled = [RunSpec(dataclasses.replace(SAMPLED, seed=s), label=f"sampled{s}") for s in range(2)]
    return [*members, ensemble], sampled, [*members, ensemble, *sampled]


def _files(runs: Path, spec: RunSpec) -> dict[str, dict]:
    folder = runs / spec.run_id
    return {name: json.loads((folder / name).read_text()) for name in (RESULT, "metrics.json")}


def _strip(runs: Path, spec: RunSpec) -> None:
    """Makes the run look as if it finished before test scoring had the conformal keys."""
    for name, values in _files(runs, spec).items():
        metrics = values["metrics"] if name == RESULT else values
        for key in RESCORED_KEYS:
            metrics.pop(key)
        (runs / spec.run_id / name).write_text(json.dumps(values, indent=2))


def _without_rescore(values: dict[str, dict]) -> dict[str, dict]:
    result = {k: v for k, v in values[RESULT].items() if k != RESCORED}
    result["metrics"] = {k: v for k, v in result["metrics"].items() if k not in RESCORED_KEYS}
    return {RESULT: result, "metrics.json": {k: v for k, v in values["metrics.json"].items() if k not in RESCORED_KEYS}}


def test_rescore_adds_the_conformal_keys_and_changes_nothing_else(tmp_path):
    points, sampled, specs = _grid()
    records = run_grid(specs, tmp_path, LocalExecutor(batch_runs=2), progress=False)
    assert [r.status for r in records] == [Status.DONE] * 5
    assert records[3].metrics.get("batched_runs") == 2  # the sampled runs trained as one batch
    runs = tmp_path / "runs"
    trained = {s.run_id: _files(runs, s) for s in specs}
    for spec in specs:
        _strip(runs, spec)
    stripped = {s.run_id: _files(runs, s) for s in specs}
    gone = sampled[1]
    (runs / gone.run_id / "checkpoint.pt").unlink()
    gone_bytes = (runs / gone.run_id / RESULT).read_bytes()

    summary = rescore_grid(specs, tmp_path, progress=False)

    assert sorted(summary.rescored) == sorted(s.run_id for s in [*points, sampled[0]])
    assert summary.no_checkpoint == [gone.run_id] and not summary.failed and not summary.current
    assert f"1 runs have no checkpoint: re-run them to add coverage (first: {gone.run_id})" in summary.lines()
    assert (runs / gone.run_id / RESULT).read_bytes() == gone_bytes
    for spec in [*points, sampled[0]]:
        now = _files(runs, spec)
        assert _without_rescore(now) == stripped[spec.run_id]  # every other value, history and spec included
        assert now[RESULT][RESCORED]["keys"] == sorted(RESCORED_KEYS)
    for spec in points:
        # a point network and an ensemble of them predict the same probabilities after the checkpoint round trip:
        # exactly the values their training recorded, and the same accuracy
        now = _files(runs, spec)
        assert now[RESULT]["metrics"] == trained[spec.run_id][RESULT]["metrics"]
        assert now["metrics.json"] == trained[spec.run_id]["metrics.json"]
        assert summary.accuracy_gaps[spec.run_id] == 0.0
    # fresh posterior samples (8 of them, 200 test points): a prediction like the saved one. Two 8-sample accuracies
    # of this narrow posterior (scale 0.05) differed by at most 0.01 in trials; a network that was not the trained
    # one scores about 0.5 against its 0.85, so 0.1 tells the two apart
    metrics = _files(runs, sampled[0])[RESULT]["metrics"]
    assert abs(summary.accuracy_gaps[sampled[0].run_id]) < 0.1
    assert 0.5 <= metrics["conformal_coverage"] <= 1 and 1 <= metrics["conformal_set_size"] <= 2

    again = rescore_grid(specs, tmp_path, progress=False)
    assert sorted(again.current) == sorted(summary.rescored) and not again.rescored
    assert again.no_checkpoint == [gone.run_id]


def test_a_run_that_cannot_be_restored_is_reported_and_left_as_it_was(tmp_path):
    spec = RunSpec(SAMPLED, label="sampled0")
    run_grid([spec], tmp_path, progress=False)
    runs = tmp_path / "runs"
    _strip(runs, spec)
    config = json.loads((runs / spec.run_id / "config.json").read_text())
    (runs / spec.run_id / "config.json").write_text(json.dumps({**config, "lr": 0.5}))  # edited after training
    before = (runs / spec.run_id / RESULT).read_bytes()
    summary = rescore_grid([spec], tmp_path, progress=False)
    assert [run for run, _ in summary.failed] == [spec.run_id] and "does not match" in summary.failed[0][1]
    assert (runs / spec.run_id / RESULT).read_bytes() == before and not summary.rescored


class _Tiny:
    """A registered experiment of two sampled moons runs whose report shows the coverage per run."""

    name = "tiny"
    title = "Tiny"
    summary = "two moons runs"
    profiles = {"quick": Profile("quick", "seconds", seeds=2, settings={})}

    def plan(self, profile, seeds, data_dirs):
        return [RunSpec(dataclasses.replace(SAMPLED, seed=s, epochs=1), label=f"tiny{s}") for s in range(seeds)]

    def analyse(self, records, profile, out):
        rows = [[r.spec.run_id, format_mean_sd([r.metrics.get("conformal_coverage", math.nan)], 4)] for r in records]
        return Analysis([Section("Coverage", tables=[markdown_table(["run", "coverage"], rows)])], [])


def test_the_cli_rescores_and_rewrites_the_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(EXPERIMENTS, "tiny", _Tiny())
    out = tmp_path / "grid"
    assert main(["reproduce", "tiny", "--out", str(out), "--quiet"]) == 0
    specs = _Tiny().plan(None, 2, {})
    runs = out / "runs"
    for spec in specs:
        _strip(runs, spec)
    (runs / specs[1].run_id / "checkpoint.pt").unlink()
    assert main(["reproduce", "tiny", "--out", str(out), "--report-only"]) == 0
    assert (out / "report.md").read_text().count("| — |") == 2
    capsys.readouterr()

    assert main(["reproduce", "tiny", "--out", str(out), "--rescore", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "re-scored 1 runs" in printed and "1 runs have no checkpoint: re-run them to add coverage" in printed
    coverage = _files(runs, specs[0])[RESULT]["metrics"]["conformal_coverage"]
    report = (out / "report.md").read_text()
    assert f"| {specs[0].run_id} | {coverage:.4f} (1 seed) |" in report and report.count("| — |") == 1
    command = json.loads((out / "reproduce.json").read_text())["command"]
    assert f"- Command: `{command}`" in report and "--rescore" not in command  # the grid's command, as before


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--report-only"], "leave out --report-only"),
        (["--workers", "2"], "leave out --workers"),
        (["--executor", "ray"], "leave out --executor"),
        ([], "holds no leaky-calibration grid to re-score"),
    ],
)
def test_bad_rescore_requests_are_one_line(tmp_path, capsys, extra, message):
    assert main(["reproduce", "leaky-calibration", "--rescore", "--out", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pyro-bnn reproduce: error:") and message in err and "\n" not in err
    assert not (tmp_path / "o").exists()
