"""``evaluate --corruption``: the files written and the corruption recorded follow the canonical spelling, so every
spelling of one corruption lands in one file and ``none`` is the uncorrupted evaluation."""

from dataclasses import replace

import pytest

from pyro_bnn.runs import evaluate_run, train_run

SPELLINGS = [
    (["gaussian:0.5", " Gaussian:0.50", "GAUSSIAN:5e-1"], "gaussian:0.5"),
    (["salt-pepper:0.2", "sp:0.2", "saltpepper:.2"], "salt-pepper:0.2"),
    (["none", " NONE "], "none"),
]


@pytest.fixture
def moons_run(tmp_path, tiny_moons):
    train_run(tiny_moons, tmp_path / "run", progress=False)
    return tmp_path / "run"


def _scored_keys(record):
    return {key: value for key, value in record.items() if isinstance(value, float)}


@pytest.mark.parametrize("spellings, canonical", SPELLINGS, ids=[case[1] for case in SPELLINGS])
def test_every_spelling_writes_the_canonical_file_and_record(moons_run, spellings, canonical):
    suffix = "" if canonical == "none" else "-" + canonical.replace(":", "_")
    records = [evaluate_run(moons_run, corruption=spelling) for spelling in spellings]
    if canonical == "none":
        records.append(evaluate_run(moons_run))  # no corruption at all: the same evaluation
    for record in records:
        assert record["corruption"] == canonical
        assert _scored_keys(record) == _scored_keys(records[0])  # the same corruption, drawn under the same seed
    assert sorted(path.name for path in moons_run.glob("evaluation*")) == [f"evaluation{suffix}.json"]
    assert sorted(path.name for path in moons_run.glob("reliability-*")) == (
        [] if canonical == "none" else [f"reliability{suffix}.png"]
    )
    assert sorted(path.name for path in moons_run.glob("risk_coverage*")) == [f"risk_coverage{suffix}.png"]


def test_none_is_no_corruption_for_a_regression_run_too(tmp_path, tiny_moons):
    cubic = replace(tiny_moons, dataset="cubic", model="mlp:16", activation="relu", guide="autonormal:0.05")
    train_run(cubic, tmp_path / "cubic", progress=False)
    assert evaluate_run(tmp_path / "cubic", corruption=" none ")["corruption"] == "none"
    assert (tmp_path / "cubic" / "evaluation.json").is_file()
    with pytest.raises(ValueError, match=r"corruption 'gaussian:0\.5' does not apply to a regression run"):
        evaluate_run(tmp_path / "cubic", corruption="Gaussian:0.50")
