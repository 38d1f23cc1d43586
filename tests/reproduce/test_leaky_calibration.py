"""``leaky-calibration`` (paper 000): the quick profile end to end on tiny IDX files, the plan's invariants across
profiles, and the verdict rules on hand-made records."""

from __future__ import annotations

import csv
import dataclasses
import json
import math

import pytest

from pyro_bnn.reproduce import Status, Verdict, reproduce
from pyro_bnn.reproduce.papers.leaky_calibration import LeakyCalibration
from pyro_bnn.reproduce.papers.leaky_calibration.analysis import _sweep_curve, _table_1, table_1_cell
from pyro_bnn.reproduce.papers.leaky_calibration.plan import LEAKY, PROFILES, slope_activation
from pyro_bnn.reproduce.planned import RunRecord, RunSpec, bound_text, no_effect_text
from pyro_bnn.runs.config import RunConfig

SIZE_FIELDS = {
    "epochs",
    "train_subset",
    "val_size",
    "test_subset",
    "num_samples",
    "num_val_samples",
    "seed",
    "data_dir",
}
"""The RunConfig fields a profile may change: sizes and seeds, never the method."""


def _method(spec: RunSpec) -> tuple:
    values = dataclasses.asdict(spec.config)
    method = tuple(sorted((k, str(v)) for k, v in values.items() if k not in SIZE_FIELDS))
    return (*method, ("measure", spec.measures[0].split(":")[0]))


def test_profiles_change_sizes_only():
    experiment = LeakyCalibration()
    methods = {
        name: {
            _method(s) for s in experiment.plan(profile, 1, {}) if s.tag("part") == "bnn" and s.config.model == "3fc"
        }
        for name, profile in PROFILES.items()
    }
    # quick covers fewer slopes than cpu and paper, so compare the Table 1 cells every profile has
    table_1 = {m for m in methods["quick"] if dict(m)["activation"] in ("relu", LEAKY)}
    assert len(table_1) == 8  # 2 data sets x 2 activations x 2 objectives
    for name in ("cpu", "paper"):
        assert table_1 <= methods[name], name


def test_cpu_plan_has_every_table_1_cell_with_every_seed_and_the_slope_sweep():
    specs = LeakyCalibration().plan(PROFILES["cpu"], 3, {})
    ids = [s.run_id for s in specs]
    unique = {s.run_id: s for s in specs}
    table_1 = [s for s in unique.values() if s.tag("part") == "bnn" and s.config.activation in ("relu", LEAKY)]
    cells = {(s.tag("objective"), s.config.model, s.config.dataset, s.config.activation) for s in table_1}
    assert len(cells) == 16 and len(table_1) == 48
    slopes = {s.config.activation for s in unique.values() if s.tag("part") == "bnn"}
    assert slopes == {slope_activation(x) for x in PROFILES["cpu"]["slopes"]} | {LEAKY}
    assert len(PROFILES["cpu"]["slopes"]) == 11
    # the sweep's slopes 0 and -0.5 are Table 1's runs (same id), so they are trained once
    assert len(ids) > len(unique)
    assert all(s.config.guide == "flat:0.1,loc=median" for s in table_1)
    assert {s.config.kl_scale for s in table_1} == {"paper", "dataset"}
    assert all(s.config.batch_size == 512 and s.config.patience == 3 for s in table_1)


def test_run_ids_ignore_device_and_data_folder_but_not_the_method():
    spec = LeakyCalibration().plan(PROFILES["quick"], 1, {})[0]
    moved = dataclasses.replace(spec, config=dataclasses.replace(spec.config, device="cuda", data_dir="/elsewhere"))
    assert moved.run_id == spec.run_id
    other = dataclasses.replace(spec, config=dataclasses.replace(spec.config, kl_scale="dataset"))
    assert other.run_id != spec.run_id
    assert spec.run_id.startswith(spec.label + "-")


def _record(activation: str, seed: int, ece: float, accuracy: float) -> RunRecord:
    config = RunConfig(dataset="mnist", activation=activation, seed=seed)
    spec = RunSpec(config, label="x", tags=(("objective", "paper"), ("part", "bnn")))
    return RunRecord(spec, Status.DONE, {"ece_sampled_10": ece, "accuracy": accuracy})


def _runs(activation, eces, accuracies):
    return [_record(activation, i, e, a) for i, (e, a) in enumerate(zip(eces, accuracies, strict=True))]


@pytest.mark.parametrize(
    "leaky, relu, expected",
    [
        # Leaky clearly better calibrated, same accuracy
        (([0.010, 0.012, 0.011], [0.97, 0.97, 0.97]), ([0.040, 0.042, 0.041], [0.97, 0.98, 0.97]), Verdict.HOLDS),
        # ReLU clearly better calibrated
        (
            ([0.040, 0.042, 0.041], [0.97, 0.97, 0.97]),
            ([0.010, 0.012, 0.011], [0.97, 0.98, 0.97]),
            Verdict.DOES_NOT_HOLD,
        ),
        # Leaky better calibrated but 10 points less accurate
        (
            ([0.010, 0.012, 0.011], [0.85, 0.86, 0.85]),
            ([0.040, 0.042, 0.041], [0.97, 0.98, 0.97]),
            Verdict.DOES_NOT_HOLD,
        ),
        # the seeds' spread covers the gap
        (
            ([0.010, 0.050, 0.030], [0.97, 0.97, 0.97]),
            ([0.020, 0.060, 0.040], [0.97, 0.97, 0.97]),
            Verdict.INCONCLUSIVE,
        ),
        # one seed: never more than inconclusive, whatever the gap
        (([0.010], [0.97]), ([0.090], [0.97]), Verdict.INCONCLUSIVE),
    ],
)
def test_table_1_cell_verdicts(leaky, relu, expected):
    verdict, reason, within = table_1_cell(_runs(LEAKY, *leaky), _runs("relu", *relu))
    assert verdict is expected, reason
    assert within is None  # without the paper's gap, never "no effect"


TIGHT = (([0.010, 0.011, 0.012], [0.97, 0.97, 0.97]), ([0.011, 0.012, 0.013], [0.97, 0.97, 0.97]))
# gap -0.001, se sqrt(2e-6 / 3) = 0.000816, t(0.975, 4 dof) = 2.776: interval [-0.00327, +0.00127]


def test_a_tight_interval_that_excludes_the_papers_gap_is_no_effect_within_its_farther_end():
    leaky, relu = TIGHT
    verdict, reason, within = table_1_cell(_runs(LEAKY, *leaky), _runs("relu", *relu), paper_gap=-0.012)
    assert verdict is Verdict.NO_EFFECT, reason
    assert within == pytest.approx(0.001 + 2.7764451 * (2e-6 / 3) ** 0.5, rel=1e-5)
    assert "[-0.003, +0.001]" in reason and "excludes the paper's gap -0.012" in reason


def test_an_interval_that_holds_the_papers_gap_stays_inconclusive():
    leaky, relu = TIGHT
    verdict, reason, within = table_1_cell(_runs(LEAKY, *leaky), _runs("relu", *relu), paper_gap=-0.003)
    assert (verdict, within) == (Verdict.INCONCLUSIVE, None), reason
    wide = ([0.010, 0.050, 0.030], [0.97, 0.97, 0.97]), ([0.020, 0.060, 0.040], [0.97, 0.97, 0.97])
    verdict, reason, _ = table_1_cell(_runs(LEAKY, *wide[0]), _runs("relu", *wide[1]), paper_gap=-0.012)
    assert verdict is Verdict.INCONCLUSIVE, reason


def test_a_seed_without_a_finite_ece_is_left_out_and_named_and_counted_as_no_seed():
    nan = float("nan")
    # Leaky 0.010, 0.011 (NaN left out) against ReLU 0.030, 0.031, 0.032: gap 0.0105 - 0.031 = -0.0205, separated;
    # it held before too, on 2 seeds, with nothing saying a third was dropped
    leaky, relu = _runs(LEAKY, [0.010, 0.011, nan], [0.97] * 3), _runs("relu", [0.030, 0.031, 0.032], [0.97] * 3)
    verdict, reason, _ = table_1_cell(leaky, relu, paper_gap=-0.012)
    assert verdict is Verdict.HOLDS
    assert reason == (
        "ECE gap Leaky - ReLU -0.021 (se 0.001), accuracy gap +0.000; 1 of 3 Leaky seeds have no finite ECE, left out"
    )
    # ReLU 0.031 and NaN: one finite seed, so "fewer than 2 seeds" (it read "the seed spread covers the gap (95 %
    # interval [+nan, +nan])"); gap 0.011 - 0.031
    leaky, relu = _runs(LEAKY, [0.010, 0.012], [0.97] * 2), _runs("relu", [0.031, nan], [0.97] * 2)
    verdict, reason, within = table_1_cell(leaky, relu, paper_gap=-0.012)
    assert (verdict, within) == (Verdict.INCONCLUSIVE, None)
    assert reason == (
        "ECE gap Leaky - ReLU -0.020 (se n/a), accuracy gap +0.000; 1 of 2 ReLU seeds have no finite ECE, left out: "
        "fewer than 2 seeds"
    )


def test_table_1_shows_coverage_and_set_size_of_both_activations(tmp_path):
    leaky, relu = _runs(LEAKY, [0.01, 0.012], [0.97, 0.97]), _runs("relu", [0.04, 0.042], [0.97, 0.97])
    for run, coverage, size in zip(leaky, (0.90, 0.92), (1.5, 1.7), strict=True):
        run.metrics.update(conformal_coverage=coverage, conformal_set_size=size)
    relu[0].metrics.update(conformal_coverage=0.95, conformal_set_size=2.0)  # one seed re-scored, one not
    settings = {**PROFILES["quick"].settings, "datasets": ("mnist",), "models": ("3fc",)}
    for run in leaky + relu:
        run.spec = dataclasses.replace(run.spec, config=dataclasses.replace(run.config, model="3fc"))
    section, _ = _table_1(leaky + relu, dataclasses.replace(PROFILES["quick"], settings=settings), tmp_path)
    header, _, row = section.tables[0].splitlines()[2:5]
    columns, cells = header.split(" | "), row.split(" | ")
    at = columns.index("coverage Leaky (α = 0.1)")
    assert columns[at : at + 4] == ["coverage Leaky (α = 0.1)", "coverage ReLU (α = 0.1)", "set size Leaky",
                                    "set size ReLU"]  # fmt: skip
    assert cells[at : at + 4] == ["0.910 ± 0.014", "0.950 (1 of 2 seeds)", "1.60 ± 0.14", "2.00 (1 of 2 seeds)"]
    assert "alpha = 0.1" in section.text


def test_sweep_verdicts():
    peak_at_zero = {-1.0: [0.02, 0.021], -0.2: [0.03, 0.031], 0.0: [0.08, 0.082], 0.4: [0.03, 0.029]}
    assert _sweep_curve(peak_at_zero)[0] is Verdict.HOLDS
    peak_far = {-1.0: [0.09, 0.091], 0.0: [0.03, 0.031], 0.2: [0.02, 0.021], 0.6: [0.03, 0.029]}
    assert _sweep_curve(peak_far)[0] is Verdict.DOES_NOT_HOLD
    flat = {-1.0: [0.03, 0.05], 0.0: [0.04, 0.03], 0.6: [0.02, 0.05]}
    assert _sweep_curve(flat)[0] is Verdict.INCONCLUSIVE
    # two seeds a slope: no Bonferroni contrast of eight can separate, the pooled far slopes can
    highest_at_zero = {0.0: [0.050, 0.051], **{s: [0.030, 0.040] for s in (-1, -0.8, -0.6, -0.4, 0.4, 0.6, 0.8, 1)}}
    verdict, reason = _sweep_curve(highest_at_zero)
    assert verdict is Verdict.HOLDS and "separated above the far slopes pooled" in reason, reason
    pool_above = {0.0: [0.030, 0.031], **{s: [0.045, 0.055] for s in (-1, -0.8, -0.6, -0.4, 0.4, 0.6, 0.8, 1)}}
    assert _sweep_curve(pool_above)[0] is Verdict.DOES_NOT_HOLD


QUICKER = {
    "test_subset": 200,
    "num_samples": 10,
    "plateau_images": 100,
    "max_epochs": {"3fc": 1},
    "plateau_epochs": 1,
}
"""The end-to-end test's sizes where they differ from the quick profile's (1 000 test images, 50 posterior draws of
the 3FC network on each, 300 plateau images, 2 epochs): scoring those draws was most of its time, then the second
epoch (its validation, checkpoint and weight statistics). Ten draws still give the sampled-label ECE's ten bins
(frequencies k / 10) and every other metric; the plan, the runs and the report are the quick profile's."""


@pytest.fixture
def tiny_image_sets(tmp_path, make_tiny):
    """MNIST and Fashion-MNIST stand-ins with 1 000 training images (the quick profile's pool) and
    ``QUICKER["test_subset"]`` test images."""
    folders = {}
    for seed, name in enumerate(("mnist", "fashion-mnist")):
        folders[name] = str(make_tiny(1_000, QUICKER["test_subset"], seed=seed).write(tmp_path / name))
    return folders


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_quick_profile_writes_a_complete_report(tmp_path, tiny_image_sets, read_by, resized_profile):
    resized_profile(PROFILES, "quick", **QUICKER)
    out = tmp_path / "quick"
    report = reproduce(
        "leaky-calibration",
        profile="quick",
        out=out,
        data_dirs=read_by("leaky-calibration", tiny_image_sets),
        device="cpu",
        progress=False,
        command="pyro-bnn reproduce leaky-calibration --profile quick",
    )
    text = report.read_text()
    assert "Runs: 15 done" in text and "0 failed, 0 missing" in text  # 11 of the method, 4 of the ablation
    verdicts = [line for line in text.splitlines() if line.startswith("- **")]
    assert len(verdicts) == 4
    assert all(any(v.value in line for v in Verdict) for line in verdicts)
    assert "pyro-bnn reproduce leaky-calibration --profile quick" in text
    for name in ("slopes.png", "decalibration.png", "plateaus.png"):
        assert (out / name).stat().st_size > 1_000 and f"]({name})" in text
    with open(out / "table1.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 8
    for row in rows:
        for key in ("accuracy", "ece_sampled_10", "ece_mean_15", "nll"):
            assert math.isfinite(float(row[key])), (key, row)
    with open(out / "plateaus.csv") as handle:
        plateaus = list(csv.DictReader(handle))
    assert {row["layer"] for row in plateaus} == {"fc1.weight", "fc2.weight", "fc3.weight", "out.weight"}
    assert all(0 <= float(row["fraction"]) <= 1 for row in plateaus)
    with open(out / "slopes.csv") as handle:
        assert all(math.isfinite(float(row.get("ece_sampled_10") or row["accuracy"])) for row in csv.DictReader(handle))
    with open(out / "estimator.csv") as handle:
        estimators = [row["estimator"] for row in csv.DictReader(handle)]
    assert sorted(estimators) == ["fused"] * 4 + ["trace"] * 4
    assert "## Estimator ablation" in text and "Measured effect of the fused objective" in text
    state = json.loads((out / "reproduce.json").read_text())
    assert state["profile"] == "quick" and state["seeds"] == 1

    # the report is rebuilt from the run folders alone
    (out / "report.md").unlink()
    rebuilt = reproduce("leaky-calibration", profile="quick", out=out, report_only=True)
    assert rebuilt.read_text().split("## Verdicts")[1] == text.split("## Verdicts")[1]


def _plateau_record(activation: str, fractions: dict[str, float]) -> RunRecord:
    spec = RunSpec(RunConfig(dataset="mnist", activation=activation, guide="mle"), "p", tags=(("part", "plateaus"),))
    metrics = {"plateau_fraction": fractions, "plateau_sampled": dict.fromkeys(fractions, 20)}
    return RunRecord(spec, Status.DONE, metrics)


@pytest.mark.parametrize(
    "relu, leaky, expected",
    [
        # first-layer plateaus (dead input pixels) are shown but do not decide
        ([0.5, 0.3, 0.2], [0.15, 0.0, 0.0], Verdict.HOLDS),
        ([0.5, 0.3, 0.0], [0.0, 0.0, 0.0], Verdict.INCONCLUSIVE),  # a ReLU layer without any
        ([0.5, 0.1, 0.1], [0.0, 0.2, 0.1], Verdict.DOES_NOT_HOLD),
    ],
)
def test_plateau_verdicts(tmp_path, relu, leaky, expected):
    from pyro_bnn.reproduce.papers.leaky_calibration.analysis import _plateaus

    layers = ("fc1.weight", "fc2.weight", "out.weight")
    records = [
        _plateau_record("relu", dict(zip(layers, relu, strict=True))),
        _plateau_record(LEAKY, dict(zip(layers, leaky, strict=True))),
    ]
    _, headline = _plateaus(records, tmp_path)
    assert headline.verdict is expected, headline.reason


def test_the_method_uses_the_authors_estimator_and_the_fused_objective_is_a_labelled_ablation():
    for name, profile in PROFILES.items():
        specs = LeakyCalibration().plan(profile, profile.seeds, {})
        bnn = [s for s in specs if s.tag("part") == "bnn"]
        ablation = [s for s in specs if s.tag("part") == "ablation"]
        assert bnn and {s.config.elbo for s in bnn} == {"trace"}, name
        assert {s.tag("estimator") for s in bnn} == {"trace"}
        assert {(s.config.elbo, s.tag("estimator"), s.tag("objective"), s.config.model) for s in ablation} == (
            set() if name in ("gpu", "full-3fc-authors", "gpu-authors") else {("auto", "fused", "paper", "3fc")}
        ), name
        assert all(s.label.endswith(f"-paper-fused-s{s.config.seed}") for s in ablation)


def test_the_full_data_3fc_profile_is_table_1_s_3fc_cells_at_the_paper_s_scale():
    specs = LeakyCalibration().plan(PROFILES["full-3fc"], 3, {})
    assert len({s.run_id for s in specs}) == 24  # 2 data sets x 2 activations x 3 seeds, and as many fused
    for spec in specs:
        config = spec.config
        assert (config.model, config.train_subset, config.val_size, config.test_subset) == ("3fc", None, 0.3, None)
        assert (config.epochs, config.patience, config.batch_size, config.kl_scale) == (50, 3, 512, "paper")
        assert config.num_samples == 50 and spec.tag("objective") == "paper"


def test_the_authors_profile_is_full_3fc_s_method_runs_with_the_authors_scaling_and_binning():
    full = [s for s in LeakyCalibration().plan(PROFILES["full-3fc"], 3, {}) if s.tag("part") == "bnn"]
    specs = LeakyCalibration().plan(PROFILES["full-3fc-authors"], 3, {})
    assert len({s.run_id for s in specs}) == 12 and not {s.run_id for s in specs} & {s.run_id for s in full}
    assert {s.config.normalization for s in specs} == {"mnist-standard"}
    assert {s.measures for s in specs} == {("sampled_label_ece:10,authors",)}
    # everything else is full-3fc's: the same configs once the scaling is put back
    assert {dataclasses.replace(s.config, normalization="unit") for s in specs} == {s.config for s in full}
    assert {s.config.normalization for s in full} == {"unit"} and {s.measures for s in full} == {
        ("sampled_label_ece:10",)
    }


def test_the_gpu_profile_is_table_1_at_the_paper_s_data_scale_with_the_3fc_runs_of_full_3fc():
    specs = LeakyCalibration().plan(PROFILES["gpu"], 3, {})
    assert len({s.run_id for s in specs}) == 24  # 2 nets x 2 data sets x 2 activations x 3 seeds
    assert {(s.config.model, s.config.dataset, s.config.activation) for s in specs} == {
        (m, d, a) for m in ("3fc", "conv") for d in ("mnist", "fashion-mnist") for a in ("relu", LEAKY)
    }
    for spec in specs:
        config = spec.config
        assert (config.train_subset, config.val_size, config.test_subset, config.elbo) == (None, 0.3, None, "trace")
        assert (config.epochs, config.patience, config.batch_size, config.kl_scale) == (50, 3, 512, "paper")
        assert config.num_samples == 50 and spec.tag("part") == "bnn"
    # the 3FC runs are full-3fc's own (a device changes no run id), so the two grids check each other
    full = {s.run_id for s in LeakyCalibration().plan(PROFILES["full-3fc"], 3, {}) if s.tag("part") == "bnn"}
    assert {s.run_id for s in specs if s.config.model == "3fc"} == full


def _sweep_run(slope: float, seed: int, accuracy: float, epochs_run: int = 8) -> RunRecord:
    config = RunConfig(dataset="mnist", model="3fc", activation=slope_activation(slope), seed=seed, epochs=30,
                       patience=3)  # fmt: skip
    spec = RunSpec(config, label="x", tags=(("objective", "paper"), ("part", "bnn")))
    return RunRecord(spec, Status.DONE, {"ece_sampled_10": 0.03, "accuracy": accuracy, "epochs_run": epochs_run})


def test_a_sweep_curve_is_comparable_only_where_table_1_s_cell_is():
    """Oracle: Table 1 for the MNIST 3FC gives Leaky (-0.5) 0.97 and ReLU 0.98, tolerance 0.02. The cpu profile's
    curve has no slope -0.5 and only 2 of the 3 seeds, so the gate reads Table 1's own runs of both activations."""
    from pyro_bnn.reproduce.papers.leaky_calibration.figures import _sweep_unlike_the_paper

    slopes = PROFILES["cpu"]["slopes"]
    assert -0.5 not in slopes

    def unlike(leaky: float, relu: float, curve_epochs: int = 8) -> str:
        table_1 = [_sweep_run(-0.5, seed, leaky) for seed in range(3)]
        table_1 += [_sweep_run(0.0, seed, relu) for seed in range(3)]
        others = [_sweep_run(s, seed, 0.96, curve_epochs if s == -1 else 8) for s in slopes if s for seed in (0, 1)]
        curve = others + table_1[3:5]  # slope 0 of the curve: Table 1's ReLU runs of seeds 0 and 1
        return _sweep_unlike_the_paper(curve, others + table_1, "3fc", "mnist")

    assert unlike(0.96, 0.97) == ""
    assert unlike(0.94, 0.97) == (
        "Table 1's cell not comparable (Leaky: accuracy 0.940 is 0.030 from the paper's 0.970 (tolerance 0.02))"
    )
    assert unlike(0.96, 0.955) == (
        "Table 1's cell not comparable (ReLU: accuracy 0.955 is 0.025 from the paper's 0.980 (tolerance 0.02))"
    )
    assert unlike(0.96, 0.97, curve_epochs=30) == "2 of 22 runs no validation history"  # at the cap: not converged


def test_no_effect_within_x_never_rounds_x_below_the_interval_s_end():
    """The MNIST 3FC cell of results/leaky-calibration-gpu (these are its six runs' ECEs): the interval's farther end
    is 0.0100098, which 3 significant digits rounded to nearest print as ±0.01, below the end; rounded up: ±0.0101."""
    leaky = ([0.022952009125053883, 0.02861401033550501, 0.023848010057210923], [0.9679, 0.9620, 0.9615])
    relu = ([0.028252010637521745, 0.03145001074820757, 0.026462010356783867], [0.9695, 0.9719, 0.9701])
    verdict, reason, within = table_1_cell(_runs(LEAKY, *leaky), _runs("relu", *relu), paper_gap=-0.012)
    assert verdict is Verdict.NO_EFFECT and within == pytest.approx(0.0100098, abs=1e-7)
    assert "the 95 % interval [-0.010, +0.003] lies within ±0.0101 and excludes" in reason
    assert no_effect_text(within) == "no effect within ±0.0101"
    assert no_effect_text(0.0125) == "no effect within ±0.0125"  # a width that prints exactly is not pushed up
    assert no_effect_text(0.016) == "no effect within ±0.016"
    assert bound_text(0.0100098) == "0.0101" and bound_text(0.00601) == "0.00601" and bound_text(0.006001) == "0.00601"
    assert bound_text(0.41649, decimals=2) == "0.42" and bound_text(0.28, decimals=2) == "0.28"
