"""Numbers and commands the documentation quotes from committed result files, read back from those files, so the
prose cannot drift from them again: each test reads the number from its source file (a report, a csv, a study's
Markdown) and looks for it, as the page prints it, in the page."""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import statistics
from pathlib import Path

import pytest

from pyro_bnn.experiments._moved import MOVED

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RESULTS = ROOT / "results"

RUN_NEUTRAL = {"--quiet", "--retrain-stale", "--workers"}
"""Options of ``pyro-bnn reproduce`` that change no run and no number (progress bars, which runs are retrained
after a code change, how many train at once): a page may leave them out of a command a report records."""


def page(name: str) -> str:
    """``docs/<name>`` with its lines joined by single spaces (a sentence may wrap anywhere)."""
    return " ".join((DOCS / name).read_text(encoding="utf-8").split())


def section(report: str, title: str) -> str:
    """The text of ``## title`` in ``report`` up to the next ``## `` heading."""
    return report.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def table_rows(text: str, first: str) -> list[dict[str, str]]:
    """Every row of the Markdown table in ``text`` whose first column is ``first``, as ``{column: cell}``."""
    table = text.split(f"\n| {first} |", 1)[1].split("\n\n", 1)[0]
    lines = f"| {first} |{table}".splitlines()
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True)) for line in lines[2:]]


def test_the_implicit_bnn_verdict_count_is_the_report_s():
    report = (RESULTS / "implicit-bnn" / "report.md").read_text(encoding="utf-8")
    labels = re.findall(r"^- \*\*.+?\*\* — \*([^*]+)\*", section(report, "Verdicts"), flags=re.MULTILINE)
    assert len(labels) == 16 and set(labels) == {"not comparable at this scale"}  # the NLL-vs-VI one was added late
    assert f"The report's verdicts, all {len(labels)} *{labels[0]}*:" in page("reproductions.md")


def test_the_fashion_mnist_kfac_timings_are_the_report_s_and_its_csv_s():
    report = (RESULTS / "posterior-families" / "report.md").read_text(encoding="utf-8")
    (kfac,) = [
        r for r in table_rows(section(report, "Fashion-MNIST subset (3FC)"), "family") if r["family"] == "Laplace, KFAC"
    ]
    with open(RESULTS / "posterior-families" / "fashion-mnist-families.csv", newline="") as handle:
        runs = [row for row in csv.DictReader(handle) if row["family"] == "laplace-kfac"]
    for column, key in (("total (s)", "total_seconds"), ("scoring (s)", "scoring_seconds")):
        values = [float(row[key]) for row in runs]
        assert kfac[column] == f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"
    assert (kfac["total (s)"], kfac["scoring (s)"]) == ("14.1 ± 0.6", "4.0 ± 0.1")
    assert f"then, {kfac['total (s)']} s (scoring {kfac['scoring (s)']} s) now" in page("reproductions.md")


def _kl_text(value: float) -> str:
    """A KL as the page prints it: two significant digits, ``2.5e-5`` for 2.47e-05."""
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def test_the_nuts_moons_baselines_name_their_rows():
    study = (RESULTS / "diagnostics" / "nuts-moons.md").read_text(encoding="utf-8")
    agreement = section(study, "Predictive agreement on the test points")
    rows = {r["pair"]: float(r["kl mean"]) for r in table_rows(agreement, "pair")}
    nuts_vi, halves, vi_vi = rows["NUTS vs VI"], rows["NUTS chains 0-1 vs 2-3"], rows["VI vs VI (fresh draws)"]
    assert (_kl_text(halves), _kl_text(vi_vi)) == ("2.5e-5", "3.1e-5")
    assert (
        f"a mean per-point KL of {nuts_vi:.2f} nats between their predictives against {_kl_text(halves)} between two "
        f"halves of the NUTS chains (chains 0-1 against 2-3) and {_kl_text(vi_vi)} between two sets of VI's own draws"
    ) in page("diagnostics.md")


def _recorded(report: Path) -> str:
    return re.search(r"^- Command: `([^`]+)`", report.read_text(encoding="utf-8"), flags=re.MULTILINE).group(1)


def _options(command: str) -> dict[str, list[str]]:
    """``{option: its values}`` of a command line (a repeated option keeps every value)."""
    words, options = command.split(), {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else ""
            options.setdefault(word, []).append(value)
    return options


def test_every_report_command_a_page_quotes_is_the_one_the_report_records():
    """``results/X/report.md is the ... report (`pyro-bnn reproduce ...`)``: the quoted command is the recorded one,
    bar options that change no number; never one the report was not run with (priors' page once added ``--workers 2
    --retrain-stale``)."""
    quoted = re.findall(
        r"`(results/[\w.-]+)/(?:report\.md)?`.{0,60}?\(`(pyro-bnn reproduce [^`]+)`", page("reproductions.md")
    )
    assert {folder for folder, _ in quoted} >= {"results/priors", "results/implicit-bnn", "results/leaky-calibration"}
    for folder, command in quoted:
        recorded = _recorded(ROOT / folder / "report.md")
        mine, theirs = _options(command), _options(recorded)
        assert command.split()[:3] == recorded.split()[:3], (folder, command, recorded)
        assert all(theirs.get(k) == v for k, v in mine.items()), (folder, command, recorded)  # nothing added
        assert set(theirs) - set(mine) <= RUN_NEUTRAL, (folder, command, recorded)  # only run-neutral ones left out
    (priors,) = [command for folder, command in quoted if folder == "results/priors"]
    assert priors == _recorded(RESULTS / "priors" / "report.md")


STUDY_PAGES = {"results.md": "guide-defaults", "diagnostics.md": "diagnostics"}
"""Pages that give a study's ``python -m`` command for files in these results folders."""


@pytest.mark.parametrize("name, folder", STUDY_PAGES.items())
def test_study_commands_run_and_old_paths_are_named_as_the_same_study(name, folder):
    text = page(name)
    for module in set(re.findall(r"python -m (pyro_bnn[\w.]+)", text)):
        spec = importlib.util.find_spec(module)
        assert spec is not None, f"{name}: python -m {module} names no module"
        if spec.submodule_search_locations is not None:  # a package runs by its __main__
            assert importlib.util.find_spec(f"{module}.__main__") is not None, module
        else:
            assert 'if __name__ == "__main__":' in Path(spec.origin).read_text(), module
    # where the committed files record a study by its old pyro_bnn.experiments path, the page says so, and the shim
    # still forwards to the module the page runs
    recorded = set()
    for path in (RESULTS / folder).rglob("*.md"):
        recorded |= set(re.findall(r"pyro_bnn\.experiments\.(\w+)", path.read_text(encoding="utf-8")))
    assert recorded
    for old in recorded:
        assert f"pyro_bnn.experiments.{old}" in text, f"{name} does not say {folder} records pyro_bnn.experiments.{old}"
        new = MOVED[old]
        assert any(new == m or new.startswith(m + ".") for m in re.findall(r"python -m (pyro_bnn[\w.]+)", text)), old


def test_the_node_noise_pages_step_ratios_are_those_of_the_committed_benchmark():
    # The page kept db38345's 3.9x / 6.0x after bench/node_noise.json was rerun.
    text = " ".join((ROOT / "docs" / "node-noise.md").read_text().split())
    training = json.loads((ROOT / "bench" / "node_noise.json").read_text())["training"]
    ratio = {size: training[size]["node noise, mixture:4 (S = 2)"]["ratio"] for size in ("128", "512")}
    assert (
        f"A node-noise step costs {ratio['128']:.1f}x a deterministic LeNet step at batch 128 and "
        f"{ratio['512']:.1f}x at 512" in text
    )


def test_the_gpu_profile_table_gives_each_report_s_runs_and_run_time():
    """docs/reproductions.md's table of `gpu` profiles: each row's runs done and run time are its report's."""
    text = (DOCS / "reproductions.md").read_text(encoding="utf-8")
    rows = table_rows(text, "profile")
    assert len(rows) >= 3
    for row in rows:
        experiment, profile = re.findall(r"`([^`]+)`", row["profile"])[:2]
        report = (RESULTS / f"{experiment}-{profile}" / "report.md").read_text(encoding="utf-8")
        done, hours = re.search(r"^- Runs: (\d+) done \(([\d.]+) h of run time\)", report, flags=re.MULTILINE).groups()
        assert (row["runs"], row["run time"]) == (done, f"{hours} h"), row["profile"]
