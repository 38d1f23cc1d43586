"""``bayes-by-backprop`` (paper 001) and ``bbb-fashion`` (paper 004): the quick profiles end to end on tiny IDX
files, the plans' invariants across profiles, the measurements on a trained run, and the verdict rules on hand-made
records."""

from __future__ import annotations

import csv
import dataclasses
import json
import math

import pytest

from pyro_bnn.reproduce import Status, Verdict, reproduce
from pyro_bnn.reproduce.papers.bayes_by_backprop import BayesByBackprop
from pyro_bnn.reproduce.papers.bayes_by_backprop.analysis import _error_table, _pruning
from pyro_bnn.reproduce.papers.bayes_by_backprop.plan import PRIOR_LABELS, PRIORS, PROFILES, WEIGHTINGS
from pyro_bnn.reproduce.papers.bbb_fashion import BbbFashion
from pyro_bnn.reproduce.papers.bbb_fashion.analysis import _accuracies, _ood
from pyro_bnn.reproduce.papers.bbb_fashion.plan import PROFILES as FASHION_PROFILES
from pyro_bnn.reproduce.planned import RunRecord, RunSpec
from pyro_bnn.runs.batched_runs import batch_key
from pyro_bnn.runs.config import RunConfig

SIZE_FIELDS = {"epochs", "train_subset", "val_size", "test_subset", "num_val_samples", "seed", "data_dir", "patience"}
"""The RunConfig fields a profile may change: sizes and seeds (patience is the run's length), never the method."""


def _method(spec: RunSpec) -> tuple:
    values = dataclasses.asdict(spec.config)
    return (*sorted((k, str(v)) for k, v in values.items() if k not in SIZE_FIELDS), spec.tags)


def test_profiles_change_sizes_only():
    experiment = BayesByBackprop()
    methods = {name: {_method(s) for s in experiment.plan(profile, 1, {})} for name, profile in PROFILES.items()}
    assert len(methods["quick"]) == 5  # 2 priors x 2 weightings + one more input scaling
    assert methods["quick"] <= methods["cpu"] == methods["paper"]
    assert len(methods["cpu"]) == 8  # 3 priors x 2 weightings + 2 more input scalings
    assert methods["gpu"] < methods["paper"] and len(methods["gpu"]) == 6  # 3 priors x 2 weightings, /126 only
    fashion = {name: {_method(s) for s in BbbFashion().plan(p, 1, {})} for name, p in FASHION_PROFILES.items()}
    assert fashion["quick"] == fashion["cpu"] == fashion["gpu"] == fashion["paper"]


def test_cpu_plan_is_the_papers_method_with_three_seeds_per_cell():
    specs = BayesByBackprop().plan(PROFILES["cpu"], 3, {"mnist": "/data"})
    assert len({s.run_id for s in specs}) == 24
    cells = {(s.tag("prior"), s.tag("weighting"), s.tag("normalization")) for s in specs}
    assert len(cells) == 8
    assert {s.config.prior for s in specs} == set(PRIORS.values())
    for spec in specs:
        c = spec.config
        assert (c.model, c.guide, c.batch_size, c.num_particles, c.lr, c.num_samples) == (
            "bbb-mlp",
            "bbb",
            100,
            2,
            1e-3,
            10,
        )
        assert c.train_subset == 50_000 and c.val_size == 10_000 and c.data_dir == "/data"
        assert c.patience == c.epochs  # never stops early; the best epoch is restored
        assert spec.measures == ("accuracies", "pruning:0,0.25,0.5,0.75,0.95,0.98")
    assert [s.config.seed for s in specs[:8]] == [0] * 8  # seed-major
    fashion = BbbFashion().plan(FASHION_PROFILES["cpu"], 3, {"mnist": "/m"})
    assert [s.config.seed for s in fashion] == [0, 1, 2]
    assert all(s.other_data == (("mnist", "/m"),) and s.config.val_size == 0 for s in fashion)
    assert all(s.config.normalization == "unit" and s.config.dataset == "fashion-mnist" for s in fashion)


def test_the_gpu_plan_is_the_prior_and_weighting_grid_on_the_full_data_with_three_seeds():
    gpu, paper = PROFILES["gpu"], PROFILES["paper"]
    specs = BayesByBackprop().plan(gpu, gpu.seeds, {"mnist": "/data"})
    assert gpu.seeds == paper.seeds == 3
    assert len({s.run_id for s in specs}) == len(specs) == 18  # 3 priors x 2 weightings x 3 seeds
    assert {(s.tag("prior"), s.tag("weighting"), s.tag("normalization")) for s in specs} == {
        (prior, weighting, "bbb") for prior in PRIORS for weighting in WEIGHTINGS
    }  # the prior and weighting contrasts, and the pruned network (mixture-0.5, uniform, /126) among them
    assert sorted(s.config.seed for s in specs) == [0] * 6 + [1] * 6 + [2] * 6
    # the paper's method, per cell: the paper profile's spec of the same cell and seed differs in its length only
    by_cell = {(s.label, s.config.seed): s for s in BayesByBackprop().plan(paper, paper.seeds, {"mnist": "/data"})}
    for spec in specs:
        c, twin = spec.config, by_cell[(spec.label, spec.config.seed)]
        assert _method(spec) == _method(twin) and spec.measures == twin.measures
        assert (c.train_subset, c.val_size, c.test_subset) == (50_000, 10_000, None)  # the paper's data, all of it
        assert (c.batch_size, c.num_particles, c.num_samples, c.num_val_samples) == (100, 2, 10, 10)
        assert c.epochs == c.patience == 20 < twin.config.epochs == 600  # never stops early, as the paper's runs
        assert spec.run_id != twin.run_id
    # Blundell's two particles and scale mixtures batch: on a GPU, --batch-runs auto trains all 18 in one kind,
    # and bbb-fashion's 5 gpu runs in another.
    assert len({batch_key(s.config) for s in specs}) == 1 and batch_key(specs[0].config) is not None
    fashion = BbbFashion().plan(FASHION_PROFILES["gpu"], FASHION_PROFILES["gpu"].seeds, {})
    assert len(fashion) == 5 and len({batch_key(s.config) for s in fashion}) == 1
    assert batch_key(fashion[0].config) not in (None, batch_key(specs[0].config))


FLAT = [0.96, 0.97, 0.975, 0.977, 0.978, 0.979, 0.98, 0.98, 0.981, 0.981]
"""A validation-accuracy curve flat over its last epochs (+0.001): a converged run at its cap of 10."""


def _record(prior, weighting, seed, error, normalization="bbb", curve=FLAT, **metrics) -> RunRecord:
    """A done run of the plan's kind (never stops early: patience = epochs) with test error ``error``."""
    config = RunConfig(dataset="mnist", seed=seed, epochs=len(curve), patience=len(curve))
    tags = (("normalization", normalization), ("prior", prior), ("weighting", weighting))
    values = {"accuracy": 1 - error, "posterior_mean_accuracy": 1 - error, "epochs_run": len(curve), **metrics}
    history = [{"epoch": i + 1, "val_accuracy": v} for i, v in enumerate(curve)]
    return RunRecord(RunSpec(config, "x", tags=tags), Status.DONE, values, history)


def _cells(records):
    cells = {}
    for r in records:
        cells.setdefault((r.spec.tag("prior"), r.spec.tag("weighting"), r.spec.tag("normalization")), []).append(r)
    return cells


@pytest.mark.parametrize(
    "mixture, gaussian, expected",
    [
        # converged runs within 0.2 points of Singh's 2.03 % (mixture) and 1.69 % (Gaussian)
        ([0.0184, 0.0186, 0.0185], [0.0187, 0.0189, 0.0188], Verdict.HOLDS),
        ([0.0205, 0.0207, 0.0206], [0.0170, 0.0172, 0.0171], Verdict.DOES_NOT_HOLD),  # Singh's finding
        ([0.019, 0.021, 0.020], [0.0175, 0.0195, 0.0185], Verdict.INCONCLUSIVE),  # interval ±0.38 points
        ([0.0185, 0.0187, 0.0186], [0.0186, 0.0185, 0.0187], Verdict.NO_EFFECT),  # interval ±0.02 points
        ([0.019], [0.018], Verdict.INCONCLUSIVE),  # one seed never decides
    ],
)
def test_prior_verdict(tmp_path, mixture, gaussian, expected):
    records = [_record("mixture-0.5", "uniform", i, e) for i, e in enumerate(mixture)]
    records += [_record("gaussian", "uniform", i, e) for i, e in enumerate(gaussian)]
    _, headlines = _error_table(_cells(records), PROFILES["quick"], tmp_path)
    assert headlines[0].verdict is expected, headlines[0].reason
    assert headlines[0].reason.startswith("1 of 1 cells comparable with the paper's")
    assert (headlines[0].interval is not None) is (expected is Verdict.NO_EFFECT)


def test_the_error_table_shows_coverage_and_set_size_beside_the_errors(tmp_path):
    # Gaussian runs scored with conformal sets (hand: mean 0.91, sd 0.014; 1.60, sd 0.14); mixture runs from before
    gaussian = [_record("gaussian", "uniform", i, 0.02, conformal_coverage=c, conformal_set_size=z)
                for i, (c, z) in enumerate(((0.90, 1.5), (0.92, 1.7)))]  # fmt: skip
    mixture = [_record("mixture-0.5", "uniform", i, 0.02) for i in range(2)]
    section, _ = _error_table(_cells(gaussian + mixture), PROFILES["quick"], tmp_path)
    rows = {tuple(line.split(" | ")[:2]): line.split(" | ") for line in section.tables[0].splitlines()[2:]}
    header = section.tables[0].splitlines()[0].split(" | ")
    at = header.index("coverage (α = 0.1)")
    assert header[at + 1] == "set size" and header[at - 1] == "test error % (posterior mean)"
    uniform = WEIGHTINGS["uniform"]
    assert rows[("| " + PRIOR_LABELS["gaussian"], uniform)][at : at + 2] == ["0.910 ± 0.014", "1.60 ± 0.14"]
    assert rows[("| " + PRIOR_LABELS["mixture-0.5"], uniform)][at : at + 2] == ["—", "—"]
    assert "alpha = 0.1" in section.text and "--rescore" in section.text
    with open(tmp_path / "test-errors.csv") as handle:
        coverages = [row["conformal_coverage"] for row in csv.DictReader(handle)]
    assert sorted(coverages) == ["", "", "0.9", "0.92"]


def _pruned(seed, snr, magnitude):
    rows = [
        {"fraction": f, "error_snr": s, "error_magnitude": m, "nll_snr": 1.0, "nll_magnitude": 1.0}
        for f, s, m in zip((0.0, 0.75, 0.95), snr, magnitude, strict=True)
    ]
    return _record("mixture-0.5", "uniform", seed, snr[0], pruning=rows)


@pytest.mark.parametrize(
    "snr, magnitude, expected",
    [
        ((0.02, 0.05, 0.10), (0.02, 0.30, 0.60), Verdict.HOLDS),
        ((0.02, 0.40, 0.80), (0.02, 0.30, 0.60), Verdict.DOES_NOT_HOLD),  # Singh's finding
    ],
)
def test_pruning_verdict(tmp_path, snr, magnitude, expected):
    jitter = (0.0, 0.004, -0.003)
    records = [_pruned(i, [v + d for v in snr], [v - d for v in magnitude]) for i, d in enumerate(jitter)]
    section, headline = _pruning(_cells(records), PROFILES["quick"], tmp_path)
    assert headline.verdict is expected, headline.reason
    with open(tmp_path / "pruning.csv") as handle:
        assert len(list(csv.DictReader(handle))) == 9


def _fashion(seed, samples, mean_net, ensemble, ood_auroc=0.9, epochs=20) -> RunRecord:
    """A done run of the tutorial's kind: no validation set, ``epochs`` epochs (the tutorial's 20 by default)."""
    detection = {"auroc": ood_auroc, "aupr_in": 0.9, "aupr_out": 0.9, "fpr_at_95_tpr": 0.3}
    ood = {s: {**detection, "mean_in": 0.2, "mean_out": 0.8} for s in ("entropy", "mutual_information")}
    ood["max_probability"] = {**detection, "mean_in": 0.1, "mean_out": 0.4}
    bins = {"ece": 0.05, "counts": [1, 2], "confidence": [0.3, 0.8], "accuracy": [0.2, 0.9]}
    metrics = {
        "sample_accuracies": samples,
        "mean_network_accuracy": mean_net,
        "ensemble_accuracy": ensemble,
        "reliability": {"sample": bins, "posterior_mean": bins, "ensemble": bins},
        "ood": {"data": "mnist", "num_samples": 100, **ood},
        "accuracy": ensemble,
        "epochs_run": epochs,
    }
    config = RunConfig(dataset="fashion-mnist", seed=seed, epochs=epochs, val_size=0)
    history = [{"epoch": i + 1, "loss": 1.0} for i in range(epochs)]
    return RunRecord(RunSpec(config, "f"), Status.DONE, metrics, history)


def test_fashion_verdicts(tmp_path):
    ordered = [_fashion(i, [0.84, 0.85], 0.86, 0.87) for i in range(3)]
    assert _accuracies(ordered, tmp_path)[1].verdict is Verdict.HOLDS
    assert _ood(ordered, tmp_path)[1].verdict is Verdict.HOLDS
    # the tutorial's order fails when the best sample beats the mean network
    broken = [_fashion(i, [0.84, 0.865], 0.86, 0.87, ood_auroc=0.4) for i in range(3)]
    assert _accuracies(broken, tmp_path)[1].verdict is Verdict.DOES_NOT_HOLD
    assert _ood(broken, tmp_path)[1].verdict is Verdict.DOES_NOT_HOLD
    assert _accuracies(ordered[:1], tmp_path)[1].verdict is Verdict.INCONCLUSIVE


def test_the_fashion_table_shows_each_seeds_coverage_and_set_size(tmp_path):
    runs = [_fashion(i, [0.84, 0.85], 0.86, 0.87) for i in range(2)]
    runs[0].metrics.update(conformal_coverage=0.9034, conformal_set_size=1.234)
    table = _accuracies(runs, tmp_path)[0].tables[0].splitlines()
    assert "| coverage (α = 0.1) | set size |" in table[0]
    assert table[2].startswith("| 0 |") and "| 0.903 | 1.23 |" in table[2]  # per seed, as the table's other columns
    assert table[3].startswith("| 1 |") and "| — | — |" in table[3] and "| — | — |" in table[4]  # no record; tutorial


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_quick_profiles_write_complete_reports(tmp_path, tiny_image_sets, read_by, resized_profile):
    # 250 test images (the quick profile's 1 000): scoring the pruned networks on them, 10 draws at each of six
    # fractions for each of the five runs, was half of the grid's time; the plan, runs and report are the profile's
    resized_profile(PROFILES, "quick", test_subset=250)
    out = tmp_path / "bbb"
    data_dirs = read_by("bayes-by-backprop", tiny_image_sets)
    report = reproduce("bayes-by-backprop", profile="quick", out=out, data_dirs=data_dirs, device="cpu",
                       progress=False, command="pyro-bnn reproduce bayes-by-backprop --profile quick")  # fmt: skip
    text = report.read_text()
    assert "Runs: 5 done" in text and "0 failed, 0 missing" in text
    verdicts = [line for line in text.splitlines() if line.startswith("- **")]
    # one epoch of the paper's 600: too short to show convergence
    assert len(verdicts) == 3 and all(Verdict.NOT_COMPARABLE.value in line for line in verdicts)
    for name in ("error-curves.png", "weight-histograms.png", "snr.png", "reliability.png"):
        assert (out / name).stat().st_size > 1_000 and f"]({name})" in text
    result = json.loads(next((out / "runs").glob("bbb-mixture-0.5-uniform-bbb-s0-*/result.json")).read_text())
    metrics = result["metrics"]
    assert len(metrics["sample_accuracies"]) == 10
    assert f"| {metrics['conformal_coverage']:.3f} (1 seed) | {metrics['conformal_set_size']:.2f} (1 seed) |" in text
    # the measurement's ensemble and posterior mean are the run's own test metrics
    assert metrics["ensemble_accuracy"] == pytest.approx(metrics["accuracy"])
    assert metrics["mean_network_accuracy"] == pytest.approx(metrics["posterior_mean_accuracy"])
    rows = metrics["pruning"]
    assert [r["fraction"] for r in rows] == [0.0, 0.25, 0.5, 0.75, 0.95, 0.98]
    assert rows[0]["error_snr"] == rows[0]["error_magnitude"]  # nothing pruned, the same draws
    assert abs(rows[0]["error_snr"] - (1 - metrics["accuracy"])) < 0.05  # other draws of the same predictive
    assert sum(metrics["snr_db_histogram"]["counts"]) == 784 * 400 + 400 * 400 + 400 * 10  # weights, no biases
    # a clean checkout has no weight_stats.json: the report rebuilds from the summary kept beside it
    for path in (out / "runs").glob("*/weight_stats.json"):
        path.unlink()
    rebuilt = reproduce("bayes-by-backprop", profile="quick", out=out, report_only=True)
    assert rebuilt.read_text().split("## Verdicts")[1] == text.split("## Verdicts")[1]

    out = tmp_path / "fashion"
    data_dirs = read_by("bbb-fashion", tiny_image_sets)
    text = reproduce("bbb-fashion", profile="quick", out=out, data_dirs=data_dirs, device="cpu",
                     progress=False).read_text()  # fmt: skip
    assert "Runs: 1 done" in text and "0 failed, 0 missing" in text
    for name in ("reliability.png", "ood-examples.png", "ood-uncertainty.png"):
        assert (out / name).stat().st_size > 1_000 and f"]({name})" in text
    metrics = json.loads(next((out / "runs").glob("*/result.json")).read_text())["metrics"]
    assert f"| {metrics['conformal_coverage']:.3f} | {metrics['conformal_set_size']:.2f} |" in text
    for score in ("entropy", "mutual_information", "max_probability"):
        assert 0 <= metrics["ood"][score]["auroc"] <= 1 and math.isfinite(metrics["ood"][score]["fpr_at_95_tpr"])
    examples = metrics["ood_examples"]
    assert all(sum(counts) == 20 for domain in ("in", "out") for counts in examples[domain]["class_counts"])
    assert sum(metrics["ood_uncertainty"]["in"]["entropy"]) == 1_000


def test_a_seed_without_a_finite_test_error_is_left_out_and_named():
    from pyro_bnn.reproduce.papers.bayes_by_backprop.verdicts import _verdict

    # a: 0.02 and NaN, one finite seed: "fewer than 2 seeds" (it read "the seed spread covers the gap (95 % interval
    # ±nan points)"); b: 3.05 ± 0.07 %
    verdict, text, within = _verdict([0.02, math.nan], [0.03, 0.031], "a", "b")
    assert (verdict, within) == (Verdict.INCONCLUSIVE, None)
    assert text == (
        "test error a 2.00 (1 seed) % against b 3.05 ± 0.07 % (gap -1.05 points, se n/a); 1 of 2 a seeds have no "
        "finite test error, left out: fewer than 2 seeds"
    )
    # every seed finite: the words are as before
    assert _verdict([0.02, 0.021], [0.03, 0.031], "a", "b")[1].startswith("test error a 2.05 ± 0.07 % against b")
    assert "left out" not in _verdict([0.02, 0.021], [0.03, 0.031], "a", "b")[1]
