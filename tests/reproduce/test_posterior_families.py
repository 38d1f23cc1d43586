"""``posterior-families`` (a study): the runner hook of the grid, the plan's invariants, the scoring helpers against
hand-computed values, the table and verdict rules on hand-made records, and the quick profile end to end."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from pyro_bnn.diagnostics.nuts import hidden_layers
from pyro_bnn.predict import Prediction
from pyro_bnn.reproduce import Verdict, reproduce, run_grid
from pyro_bnn.reproduce.papers.posterior_families import PosteriorFamilies
from pyro_bnn.reproduce.papers.posterior_families.analysis import (
    best_families,
    best_value,
    dataset_table,
    headlines,
    summary_lines,
)
from pyro_bnn.reproduce.papers.posterior_families.plan import FAMILIES, PROFILES
from pyro_bnn.reproduce.papers.posterior_families.scoring import (
    aligned_sd,
    entropy_auroc,
    moons_ood_inputs,
    nuts_reference,
)
from pyro_bnn.reproduce.planned import RunRecord, RunSpec, Status, run_tags
from pyro_bnn.reproduce.runners import resolve_runner
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.runs.runs import RunResult, build_bnn, load_data

# ------------------------------------------------------------------------------------------ the runner hook
CALLS: list[str] = []


def fake_runner(spec: RunSpec, runs_dir: Path, folder: Path) -> RunResult:
    """Records the call and the members' folders it found; "accuracy" is the option ``value``."""
    if spec.option("fail"):
        raise RuntimeError("asked to fail")
    CALLS.append(spec.label)
    assert all((runs_dir / m.run_id / "result.json").exists() for m in spec.members)
    probs = torch.full((1, 2, 2), 0.5)
    prediction = Prediction(probs=probs, targets=torch.tensor([0, 1]))
    metrics = {"accuracy": float(spec.option("value"))}
    if spec.option("device") is not None:
        metrics["device"] = spec.option("device")
    return RunResult(folder, metrics, prediction)


def _runner_spec(label: str, value: float, members=(), **options) -> RunSpec:
    config = RunConfig(dataset="moons", model="tanh-small", epochs=1, seed=0, device="cpu")
    return RunSpec(config, label=label, runner=f"{__name__}:fake_runner", members=tuple(members),
                   options=run_tags(value=value, **options))  # fmt: skip


def test_a_runner_runs_after_its_members_and_its_options_are_part_of_its_id(tmp_path):
    CALLS.clear()
    first, second = _runner_spec("a", 0.25), _runner_spec("b", 0.5)
    reader = _runner_spec("c", 0.75, members=(first, second))
    assert _runner_spec("a", 0.3).run_id != first.run_id  # options change the id; tags would not
    # The reader is listed first: the grid still runs it after the runs it reads.
    records = run_grid([reader, first, second], tmp_path, progress=False)
    assert CALLS == ["a", "b", "c"]
    assert [r.status for r in records] == [Status.DONE] * 3 and records[0].metrics["accuracy"] == 0.75
    assert (tmp_path / "runs" / reader.run_id / "metrics.json").exists()
    assert {r.metrics["device"] for r in records} == {"cpu"}  # where the config resolves: the runner does not say
    assert run_grid([reader, first, second], tmp_path, progress=False) and CALLS == ["a", "b", "c"]  # resumed


def test_a_runner_s_own_device_is_kept(tmp_path):
    (record,) = run_grid([_runner_spec("on-a-card", 0.5, device="cuda:1")], tmp_path, progress=False)
    assert record.status is Status.DONE and record.metrics["device"] == "cuda:1"


def test_a_runner_fails_with_a_failed_member_and_a_bad_runner_is_one_line(tmp_path):
    bad = _runner_spec("bad", 0.1, fail="yes")
    reader = _runner_spec("reader", 0.2, members=(bad,))
    failed, failed_reader = run_grid([bad, reader], tmp_path, progress=False)
    assert failed.status is Status.FAILED and "asked to fail" in failed.reason
    assert failed_reader.status is Status.FAILED and bad.run_id in failed_reader.reason
    with pytest.raises(ValueError, match="package.module:function"):
        resolve_runner("no_colon_here")
    with pytest.raises(ValueError, match="names no importable function"):
        resolve_runner("pyro_bnn.reproduce:no_such_function")


def test_an_sgmcmc_run_from_the_network_s_initialisation_does_not_depend_on_the_runs_before_it(tmp_path):
    from pyro_bnn.reproduce.papers.posterior_families.runs import sgmcmc

    config = RunConfig(dataset="moons", model="tanh-small", seed=3, device="cpu", batch_size=64, num_samples=4)
    options = run_tags(method="sgld", step_size=1e-3, chains=1, draws=3, burn_in=5, thin=1, init="network")
    spec = RunSpec(config, label="sgld", runner="x:sgmcmc", options=options)
    metrics = []
    for before in (0, 1):  # what the process's generator holds from the runs before this one
        torch.manual_seed(before)
        metrics.append(sgmcmc(spec, tmp_path, tmp_path / f"run{before}").metrics)
    assert metrics[0]["nll"] == metrics[1]["nll"] and metrics[0]["accuracy"] == metrics[1]["accuracy"]


# ------------------------------------------------------------------------------------------------ the plan
SIZE_KEYS = {"epochs", "train_subset", "val_size", "test_subset", "num_samples", "num_particles", "model", "seed",
             "data_dir", "data_seed"}  # fmt: skip


def test_the_plan_has_every_family_once_per_data_set_and_seed_and_reads_the_right_runs():
    specs = PosteriorFamilies().plan(PROFILES["cpu"], 3, {"mnist": "/m"})
    assert len({s.run_id for s in specs}) == len(specs)
    for seed in range(3):
        for dataset in ("moons", "fashion-mnist"):
            families = [s.tag("family") for s in specs if s.tag("seed") == str(seed) and s.tag("dataset") == dataset]
            expected = FAMILIES if dataset == "moons" else tuple(f for f in FAMILIES if f not in ("nuts", "flow"))
            assert sorted(f for f in families if not f.startswith("map")) == sorted(expected)
            for spec in specs:
                if spec.tag("seed") != str(seed) or spec.tag("dataset") != dataset or not spec.members:
                    continue
                # every member is of the same seed and data set: the same training examples
                assert {m.tag("seed") for m in spec.members} == {str(seed)}
                assert {m.config.dataset for m in spec.members} == {dataset}
                nuts = [m for m in spec.members if m.tag("family") == "nuts"]
                assert len(nuts) == (dataset == "moons")
                if spec.runner.endswith(":laplace"):
                    assert spec.members[0].tag("family") == "map0" and spec.members[0].config.guide == "map"
    fashion = [s for s in specs if s.tag("dataset") == "fashion-mnist" and not s.trains]
    assert all(dict(s.other_data) == {"mnist": "/m"} for s in fashion)


def test_the_profiles_differ_in_sizes_only():
    def method(spec: RunSpec) -> tuple:
        values = dataclasses.asdict(spec.config)
        values["guide"] = str(values["guide"]).split(",rank=")[0]  # the low-rank guide's rank is a size
        kept = tuple(sorted((k, str(v)) for k, v in values.items() if k not in SIZE_KEYS))
        family = "map" if spec.tag("family").startswith("map") else spec.tag("family")  # members: a size
        return kept, family, spec.runner

    quick, cpu, paper = (PosteriorFamilies().plan(PROFILES[name], 1, {}) for name in ("quick", "cpu", "paper"))
    assert {method(s) for s in quick} == {method(s) for s in cpu} == {method(s) for s in paper}


# ---------------------------------------------------------------------------------------------- scoring
def test_moons_ood_points_lie_on_the_circle_at_the_asked_radius():
    x = torch.tensor([[0.0, 0.0], [2.0, 0.0], [1.0, 3.0]])  # mean (1, 1); the farthest point, (1, 3), 2 from it
    centre = torch.tensor([1.0, 1.0])
    reach = 2.0
    points = moons_ood_inputs(x, num_points=8, radius=3.0)
    distances = (points - centre).norm(dim=1)
    torch.testing.assert_close(distances, torch.full((8,), 3.0 * reach), rtol=1e-6, atol=1e-6)
    assert float(points[0, 1] - centre[1]) == pytest.approx(0.0, abs=1e-6)  # the first point at angle 0


def test_entropy_auroc_against_a_hand_count():
    # In-domain entropies: two certain predictions and one at 50/50; out: two at 50/50 and one certain.
    certain, unsure = [0.999, 0.001], [0.5, 0.5]
    in_probs = torch.tensor([[certain, certain, unsure]])
    out_probs = torch.tensor([[unsure, unsure, certain]])
    # Pairs (out, in) with out's entropy higher: each unsure out beats 2 certain ins and ties 1 unsure (1/2): 2.5
    # each; the certain out ties 2 certain ins (1/2 each) and loses to the unsure one: 1. (2.5 + 2.5 + 1) / 9.
    assert entropy_auroc(in_probs, out_probs) == pytest.approx(6 / 9)


def _tanh_bnn():
    config = RunConfig(dataset="moons", model="tanh-small", activation="tanh", prior="normal:0,1", device="cpu")
    return build_bnn(config.validate(), load_data(config.validate()))[0]


def test_sd_after_alignment_ignores_relabelled_chains():
    torch.manual_seed(0)
    bnn = _tanh_bnn()
    layers = hidden_layers(bnn)
    shapes = {site.name: tuple(site.shape) for site in bnn.sites}
    base = {name: torch.randn(200, *shape) * 0.1 + 3 * torch.randn(shape) for name, shape in shapes.items()}
    # Chain 1: chain 0's draws with the first hidden layer's units permuted and sign-flipped, the same functions.
    first = layers[0]
    perm, signs = torch.tensor([2, 0, 1, 4, 3]), torch.tensor([1.0, -1, 1, -1, 1])
    other = dict(base)
    other[first.weight_in] = base[first.weight_in][:, perm] * signs[:, None]
    other[first.bias_in] = base[first.bias_in][:, perm] * signs
    other[first.weight_out] = base[first.weight_out][:, :, perm] * signs
    draws = {name: torch.stack([base[name], other[name]]) for name in bnn.site_names}
    reference, pooled = nuts_reference(draws, bnn)
    alone = torch.cat([base[name].double().std(0).reshape(-1) for name in bnn.site_names])
    # Aligned, both chains hold the same draws, so the pooled sd is chain 0's (n-1 normalisation: 399 vs 199).
    torch.testing.assert_close(pooled, alone * math.sqrt(199 * 400 / (399 * 200)), rtol=1e-6, atol=1e-9)
    family = {name: other[name].unsqueeze(0) for name in bnn.site_names}
    torch.testing.assert_close(aligned_sd(family, reference, bnn), alone, rtol=1e-6, atol=1e-9)
    # Without alignment the relabelled layer's sd is that of the spread between units (sd 3), not of the draws (0.1).
    unaligned = draws[first.weight_in].reshape(400, -1).double().std(0)
    assert float(unaligned.median()) > 10 * float(base[first.weight_in].double().std(0).median())


# ------------------------------------------------------------------------------------------------ analysis
def _record(dataset: str, family: str, seed: int, **metrics: float) -> RunRecord:
    config = RunConfig(dataset=dataset, model="tanh-small", seed=seed, device="cpu")
    spec = RunSpec(
        config, label=f"{dataset}-{family}-s{seed}", tags=run_tags(dataset=dataset, family=family, seed=seed)
    )
    return RunRecord(spec, Status.DONE, metrics=dict(metrics))


def _grid() -> list[RunRecord]:
    records = []
    for seed in range(3):
        jitter = 0.01 * seed
        records += [
            _record("moons", "nuts", seed, accuracy=0.95, nll=0.12, ood_auroc=0.3, kl_to_nuts=0.001,
                    sd_ratio_median=1.0, fit_seconds=300 + seed),
            _record("moons", "mean-field", seed, accuracy=0.9 + jitter, nll=0.3 + jitter, ood_auroc=0.2 + jitter,
                    kl_to_nuts=0.05 + jitter, sd_ratio_median=0.4 + jitter, fit_seconds=10),
            _record("moons", "sgld", seed, accuracy=0.94, nll=0.15 + jitter, ood_auroc=0.25,
                    kl_to_nuts=0.004 + jitter / 10, sd_ratio_median=0.9 + jitter, fit_seconds=12),
            _record("moons", "cyclical-sgld", seed, accuracy=0.94, nll=0.16, ood_auroc=0.25,
                    kl_to_nuts=0.006 + jitter / 10, sd_ratio_median=1.3, fit_seconds=14),
            _record("moons", "ensemble", seed, accuracy=0.93, nll=0.2, ood_auroc=0.6 + jitter, kl_to_nuts=0.02,
                    fit_seconds=20),
            _record("moons", "laplace-kfac", seed, accuracy=0.9, nll=0.25 - jitter, ood_auroc=0.2, fit_seconds=9),
            _record("moons", "map0", seed, accuracy=0.9, nll=0.35 + jitter),
            _record("fashion-mnist", "ensemble", seed, accuracy=0.85, nll=0.4, ood_auroc=0.7 + jitter),
            _record("fashion-mnist", "mean-field", seed, accuracy=0.8, nll=0.5, ood_auroc=0.75 + jitter),
        ]  # fmt: skip
    return records


def test_the_table_holds_mean_and_sd_over_seeds(tmp_path):
    table, csv_name = dataset_table(_grid(), "moons", tmp_path)
    row = next(line for line in table.splitlines() if line.startswith("| mean-field VI |"))
    # accuracy 0.90, 0.91, 0.92: mean 0.910, sd 0.010; sd ratio 0.40, 0.41, 0.42
    assert "| 3 | 0.910 ± 0.010 |" in row and "| 0.41 ± 0.01 |" in row
    assert table.splitlines()[2].startswith("| NUTS |")  # NUTS first
    assert "| MAP network (one) | 3 |" in table
    assert (tmp_path / csv_name).read_text().count("\n") == 7 * 3 + 1  # 6 families and the MAP


def test_best_family_and_the_ones_the_seeds_cannot_separate():
    found = best_families(_grid(), "moons", "kl_to_nuts", exclude=("nuts",))
    assert found["best"] == "sgld" and found["mean"] == pytest.approx(0.005)
    assert "mean-field" not in found["ties"]
    ratio = best_families(_grid(), "moons", "sd_ratio_median", exclude=("nuts",))
    assert ratio["best"] == "sgld"  # 0.91 is closer to 1 than 1.3 on a log scale, and far closer than 0.41


def _zero_ratio_grid(ratios=(0.0, 0.0, 0.0)) -> list[RunRecord]:
    """Two families on sd ratio alone: KFAC at 1.20, 1.25, 1.30 and the last layer at ``ratios``."""
    return [
        record
        for seed, ratio in enumerate(ratios)
        for record in (
            _record("moons", "laplace-kfac", seed, sd_ratio_median=1.2 + 0.05 * seed),
            _record("moons", "laplace-last-layer", seed, sd_ratio_median=ratio),
        )
    ]


def test_a_family_with_a_sd_ratio_of_0_is_never_tied_with_the_best():
    # log 0 is -inf, infinitely far from 1: compare() used to drop the -inf scores and call the family a tie
    found = best_families(_zero_ratio_grid(), "moons", "sd_ratio_median")
    assert found == {"best": "laplace-kfac", "mean": pytest.approx(1.25), "ties": [], "worst": ["laplace-last-layer"]}
    assert summary_lines(_zero_ratio_grid())[0] == (
        "- **Weight marginals as wide as NUTS's (median sd ratio closest to 1)** on moons: Laplace, KFAC (sd ratio "
        "(median) 1.25); separated from every other family; Laplace, last layer has sd ratio (median) 0.00 on every "
        "seed, the farthest possible from 1."
    )
    # one seed at 0 makes the mean score -inf: separated, though not at the worst on every seed
    mixed = best_families(_zero_ratio_grid((0.0, 1.2, 1.3)), "moons", "sd_ratio_median")
    assert (mixed["best"], mixed["ties"], mixed["worst"]) == ("laplace-kfac", [], [])
    # both at 0 on every seed: nothing tells them apart
    both = [r for r in _zero_ratio_grid() if r.spec.tag("family") == "laplace-last-layer"]
    both += [_record("moons", "laplace-kfac", seed, sd_ratio_median=0.0) for seed in range(3)]
    tied = best_families(both, "moons", "sd_ratio_median")
    assert (tied["best"], tied["ties"], tied["worst"]) == ("laplace-last-layer", ["laplace-kfac"], [])


def test_verdicts_follow_the_rules():
    verdicts = {h.claim: h.verdict for h in headlines(_grid())}
    claims = list(verdicts)
    assert verdicts[claims[0]] is Verdict.HOLDS  # mean-field ratio 0.41 ± 0.01 below 1
    assert verdicts[claims[1]] is Verdict.HOLDS  # both samplers' KL below mean-field's, separated
    # ensemble AUROC above mean-field's on moons (separated), below on Fashion-MNIST (separated): half do not hold
    assert verdicts[claims[2]] is Verdict.DOES_NOT_HOLD
    assert verdicts[claims[3]] is Verdict.HOLDS  # KFAC NLL 0.24 against the MAP's 0.36 on moons; no Fashion values
    one_seed = [r for r in _grid() if r.spec.tag("seed") == "0"]
    assert all(h.verdict is Verdict.INCONCLUSIVE for h in headlines(one_seed))


# --------------------------------------------------------------------------------------------- end to end
@pytest.mark.slow
def test_quick_profile_writes_a_complete_report(tmp_path, tiny_image_sets, read_by):
    out = tmp_path / "families"
    data_dirs = read_by("posterior-families", tiny_image_sets)
    report = reproduce("posterior-families", profile="quick", out=out, data_dirs=data_dirs, device="cpu",
                       progress=False, command="pyro-bnn reproduce posterior-families --profile quick")  # fmt: skip
    text = report.read_text()
    assert "Runs: 22 done" in text and "0 failed, 0 missing" in text, text
    assert (out / "moons-predictive-maps.png").stat().st_size > 1_000
    for section in ("## Which family for what", "## Caveats", "| NUTS |", "| node-noise mixture |"):
        assert section in text
    assert len([line for line in text.splitlines() if line.startswith("- **")]) >= 4
    rebuilt = reproduce("posterior-families", profile="quick", out=out, report_only=True)
    assert rebuilt.read_text().split("## Verdicts")[1] == text.split("## Verdicts")[1]


def test_best_value_is_the_cheapest_family_the_seeds_cannot_separate_from_the_best_nll():
    # sgld (0.16 ± 0.01) and cyclical SGLD (0.16) tie on NLL; sgld's fit is cheaper (12 s against 14 s).
    found = best_value(_grid(), "moons")
    assert found["best"] == "sgld" and found["family"] == "sgld" and found["seconds"] == 12
    records = [r for r in _grid() if not (r.spec.tag("family") == "sgld")]
    assert best_value(records, "moons")["family"] == "cyclical-sgld"


def test_the_conformal_columns_show_what_the_records_hold(tmp_path):
    records = _grid()
    # Only two of the three SGLD seeds hold coverage (0.90 and 0.92) and set size (1.10 and 1.30); no NUTS run does.
    for record, coverage, size in zip([r for r in records if r.spec.tag("family") == "sgld"][:2], (0.9, 0.92),
                                      (1.1, 1.3), strict=True):  # fmt: skip
        record.metrics.update(conformal_coverage=coverage, conformal_set_size=size)
    table, _ = dataset_table(records, "moons", tmp_path)
    header = table.splitlines()[0]
    assert "| ECE | coverage | set size | OOD AUROC |" in header
    sgld = next(line for line in table.splitlines() if line.startswith("| SGLD |"))
    assert "| 0.910 ± 0.014 (2 of 3 seeds) | 1.20 ± 0.14 (2 of 3 seeds) |" in sgld
    nuts = next(line for line in table.splitlines() if line.startswith("| NUTS |"))
    assert nuts.count("| — |") >= 2
