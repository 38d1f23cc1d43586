"""``posterior-families`` verdicts and costs on hand-made records (issue 39 item 5), no training: the out-of-domain
verdict reads the AUROC in the direction :func:`pyro_bnn.evaluation.ood_detection` computes it (out-of-domain inputs
the positive class, so below 0.5 is an inverted score, not a detection), a verdict resting on a MAP network that
did not converge is not comparable, and a run's cost is its fit and its scoring (the cheapest family by the total)."""

from __future__ import annotations

import pytest
import torch

from pyro_bnn.evaluation import ood_detection
from pyro_bnn.reproduce import Verdict
from pyro_bnn.reproduce.papers.posterior_families.analysis import (
    best_value,
    dataset_table,
    detection,
    headlines,
    ood_cell,
    run_cost,
    summary_lines,
)
from pyro_bnn.reproduce.papers.posterior_families.scoring import entropy_auroc
from pyro_bnn.reproduce.planned import RunRecord, RunSpec, Status, run_tags
from pyro_bnn.runs.config import RunConfig

OOD_CLAIM = "A deep ensemble detects out-of-domain inputs better than mean-field VI"
KFAC_CLAIM = "A KFAC Laplace approximation improves the NLL of its MAP network"

IMPROVING = [0.5, 0.6, 0.7, 0.8, 0.9]  # validation accuracy per epoch: the best of the last 3 far above the rest
FLAT = [0.5, 0.9, 0.9, 0.9, 0.9]


def _spec(dataset: str, family: str, seed: int, members: tuple[RunSpec, ...] = (), runner: str = "") -> RunSpec:
    config = RunConfig(dataset=dataset, model="tanh-small", seed=seed, device="cpu")
    return RunSpec(config, label=f"{dataset}-{family}-s{seed}", tags=run_tags(dataset=dataset, family=family,
                   seed=seed), members=members, runner=runner)  # fmt: skip


def _record(spec: RunSpec, seconds: float = 0.0, history: list[float] | None = None, **metrics: float) -> RunRecord:
    rows = [{"epoch": i + 1, "val_accuracy": v} for i, v in enumerate(history or [])]
    return RunRecord(spec, Status.DONE, metrics=dict(metrics), history=rows, seconds=seconds)


def _ood_records(dataset: str, ensemble: list[float], mean_field: list[float], **extra: list[float]) -> list[RunRecord]:
    """One ensemble and one mean-field run per seed with these AUROCs (``extra``: other families' AUROCs)."""
    records = []
    for seed, (ours, theirs) in enumerate(zip(ensemble, mean_field, strict=True)):
        records.append(_record(_spec(dataset, "ensemble", seed), accuracy=0.9, nll=0.3, ood_auroc=ours))
        records.append(_record(_spec(dataset, "mean-field", seed), accuracy=0.9, nll=0.3, ood_auroc=theirs))
        for family, aurocs in extra.items():
            records.append(_record(_spec(dataset, family, seed), accuracy=0.9, nll=0.3, ood_auroc=aurocs[seed]))
    return records


def _verdict(records: list[RunRecord], claim: str):
    return next(h for h in headlines(records) if h.claim == claim)


# ------------------------------------------------------------------------------------- the AUROC's direction
def test_the_auroc_convention_is_ood_detection_s_out_of_domain_positive():
    # ood_detection scores out-of-domain inputs as the positive class: an entropy higher out of domain gives an
    # AUROC above 0.5 (a detection), one higher in domain gives one below 0.5 (inverted), as the verdict reads them.
    assert ood_detection([0.1, 0.2, 0.3], [0.8, 0.9, 1.0])["auroc"] == 1.0
    assert ood_detection([0.8, 0.9, 1.0], [0.1, 0.2, 0.3])["auroc"] == 0.0
    certain, unsure = [0.99, 0.01], [0.5, 0.5]
    detected = entropy_auroc(torch.tensor([[certain] * 3]), torch.tensor([[unsure] * 3]))
    inverted = entropy_auroc(torch.tensor([[unsure] * 3]), torch.tensor([[certain] * 3]))
    assert (detected, inverted) == (1.0, 0.0)
    assert detection([detected] * 3) is Verdict.HOLDS
    assert detection([inverted] * 3) is Verdict.DOES_NOT_HOLD
    assert detection([0.48, 0.5, 0.52]) is Verdict.INCONCLUSIVE  # chance
    assert detection([0.9]) is Verdict.INCONCLUSIVE  # one seed separates nothing


def test_both_aurocs_below_one_half_do_not_read_holds():
    # The ensemble's AUROC is above mean-field VI's and the seeds separate them, but both are below 0.5: the
    # predictive entropy ranks the in-domain inputs as more uncertain, so neither family detects anything.
    records = _ood_records("moons", [0.22, 0.23, 0.24], [0.12, 0.13, 0.14])
    headline = _verdict(records, OOD_CLAIM)
    assert headline.verdict is Verdict.DOES_NOT_HOLD
    assert "both below 0.5" in headline.reason and "inverted" in headline.reason
    assert "neither family detects them" in headline.reason
    assert "(holds)" not in headline.reason


def test_an_inverted_ensemble_does_not_hold_whatever_mean_field_does():
    verdict, words = ood_cell([0.3, 0.31, 0.32], [0.7, 0.71, 0.72])
    assert verdict is Verdict.DOES_NOT_HOLD and "the ensemble's below 0.5" in words
    verdict, words = ood_cell([0.3, 0.31, 0.32], [0.1, 0.11, 0.12])
    assert verdict is Verdict.DOES_NOT_HOLD and "both below 0.5" in words


def test_a_detecting_ensemble_is_compared_with_mean_field():
    # Above 0.5 and above an inverted mean-field VI: holds (and says mean-field VI's score is inverted).
    verdict, words = ood_cell([0.8, 0.81, 0.82], [0.2, 0.21, 0.22])
    assert verdict is Verdict.HOLDS and "mean-field VI's below 0.5" in words
    # Both detect; the ensemble higher and separated: holds; lower and separated: does not hold.
    assert ood_cell([0.9, 0.91, 0.92], [0.7, 0.71, 0.72]) == (Verdict.HOLDS, "")
    assert ood_cell([0.7, 0.71, 0.72], [0.9, 0.91, 0.92]) == (Verdict.DOES_NOT_HOLD, "")
    # At chance: inconclusive, unless mean-field VI is separated above it.
    assert ood_cell([0.48, 0.5, 0.52], [0.2, 0.21, 0.22])[0] is Verdict.INCONCLUSIVE
    assert ood_cell([0.48, 0.5, 0.52], [0.9, 0.91, 0.92])[0] is Verdict.DOES_NOT_HOLD


def test_the_claim_over_data_sets_counts_an_inverted_data_set_against_it():
    records = _ood_records("moons", [0.22, 0.23, 0.24], [0.12, 0.13, 0.14])  # inverted: does not hold
    records += _ood_records("fashion-mnist", [0.93, 0.94, 0.95], [0.90, 0.91, 0.92])  # detects, higher: holds
    headline = _verdict(records, OOD_CLAIM)
    assert headline.verdict is Verdict.DOES_NOT_HOLD  # one of two data sets does not hold
    assert "fashion-mnist: 0.940 ± 0.010 against 0.910 ± 0.010 (holds)" in headline.reason


def test_the_summary_names_the_families_whose_score_is_inverted():
    records = _ood_records("moons", [0.22, 0.23, 0.24], [0.12, 0.13, 0.14], nuts=[0.6, 0.61, 0.62])
    line = next(line for line in summary_lines(records) if "out-of-domain detection" in line and "moons" in line)
    assert "NUTS (OOD AUROC 0.610)" in line
    assert "below 0.5" in line and "mean-field VI, deep ensemble." in line
    everything_inverted = _ood_records("moons", [0.22, 0.23, 0.24], [0.12, 0.13, 0.14])
    line = next(line for line in summary_lines(everything_inverted) if "out-of-domain detection" in line)
    assert "No family detects them" in line


# ------------------------------------------------------------------------------------------- convergence
def _ensemble_cell(dataset: str, histories: list[list[float]], auroc: float) -> list[RunRecord]:
    """Per seed: two MAP members with these validation histories (seed-major), a NUTS member, the ensemble built
    from them and a mean-field run."""
    records = []
    for seed in range(3):
        maps = [_spec(dataset, f"map{i}", seed) for i in range(2)]
        nuts = _spec(dataset, "nuts", seed, runner="x:nuts")
        records += [_record(s, seconds=10, history=histories[2 * seed + i], accuracy=0.9, nll=0.3)
                    for i, s in enumerate(maps)]  # fmt: skip
        records.append(_record(nuts, seconds=500, accuracy=0.9, nll=0.3, ood_auroc=0.6, fit_seconds=499))
        ensemble = _spec(dataset, "ensemble", seed, members=(*maps, nuts), runner="x:ensemble")
        records.append(_record(ensemble, seconds=1, accuracy=0.9, nll=0.3, ood_auroc=auroc + seed / 100,
                               fit_seconds=20))  # fmt: skip
        records.append(_record(_spec(dataset, "mean-field", seed), accuracy=0.9, nll=0.3, ood_auroc=0.2 + seed / 100))
    return records


def test_an_ensemble_with_a_member_still_improving_is_not_comparable():
    converged = _ensemble_cell("moons", [FLAT] * 6, 0.8)
    assert _verdict(converged, OOD_CLAIM).verdict is Verdict.HOLDS
    one_improving = _ensemble_cell("moons", [FLAT] * 5 + [IMPROVING], 0.8)
    headline = _verdict(one_improving, OOD_CLAIM)
    assert headline.verdict is Verdict.NOT_COMPARABLE
    assert "1 of 6 runs at the cap, still improving" in headline.reason
    assert "the numbers alone say holds" in headline.reason
    # The NUTS reference (no history) and members without a history are not judged.
    no_history = _ensemble_cell("moons", [[]] * 6, 0.8)
    assert _verdict(no_history, OOD_CLAIM).verdict is Verdict.HOLDS


def test_a_kfac_fit_around_a_map_network_still_improving_is_not_comparable():
    records = []
    for dataset, history in (("moons", FLAT), ("fashion-mnist", IMPROVING)):
        for seed in range(3):
            map0 = _spec(dataset, "map0", seed)
            records.append(_record(map0, seconds=10, history=history, accuracy=0.9, nll=0.5 + seed / 100))
            kfac = _spec(dataset, "laplace-kfac", seed, members=(map0,), runner="x:laplace")
            records.append(_record(kfac, seconds=5, accuracy=0.9, nll=0.4 + seed / 100, fit_seconds=11))
    headline = _verdict(records, KFAC_CLAIM)
    # moons holds (0.41 against 0.51, separated); fashion-mnist is not comparable and not counted.
    assert headline.verdict is Verdict.HOLDS
    assert "moons: 0.410 ± 0.010 against 0.510 ± 0.010 (holds)" in headline.reason
    assert "fashion-mnist: 0.410 ± 0.010 against 0.510 ± 0.010 (not comparable at this scale" in headline.reason


# -------------------------------------------------------------------------------------------------- cost
def test_a_run_s_cost_is_its_fit_and_its_scoring():
    map0 = _spec("fashion-mnist", "map0", 0)
    nuts = _spec("fashion-mnist", "nuts", 0, runner="x:nuts")
    laplace = _spec("fashion-mnist", "laplace-kfac", 0, members=(map0, nuts), runner="x:laplace")
    records = [_record(map0, seconds=20), _record(nuts, seconds=700)]
    by_id = {r.spec.run_id: r for r in records}
    # fit_seconds 23: the MAP network's 20 s and 3 s of its own; the run took 1 100 s, so 1 097 s of scoring.
    cost = run_cost(_record(laplace, seconds=1100, fit_seconds=23), by_id)
    assert cost == pytest.approx({"fit_seconds": 23, "scoring_seconds": 1097, "total_seconds": 1120})
    # A member rewritten since (now 8 s, 15 s more than the run's own 7 s): the run's own time is all scoring.
    records[0] = _record(map0, seconds=8)
    by_id = {r.spec.run_id: r for r in records}
    cost = run_cost(_record(laplace, seconds=7, fit_seconds=23), by_id)
    assert cost == pytest.approx({"fit_seconds": 23, "scoring_seconds": 7, "total_seconds": 30})
    assert run_cost(records[0], by_id) == {}  # a MAP network records no fit of a family


def _cost_records() -> list[RunRecord]:
    """Two families the seeds cannot tell apart on NLL: KFAC fits in 10 s and scores in 1 000 s, mean-field VI
    fits in 30 s and scores in 5 s."""
    records = []
    for seed in range(3):
        jitter = 0.01 * seed
        records.append(_record(_spec("fashion-mnist", "laplace-kfac", seed), seconds=1010 + seed, accuracy=0.8,
                               nll=0.5 + jitter, ood_auroc=0.9, fit_seconds=10 + seed))  # fmt: skip
        records.append(_record(_spec("fashion-mnist", "mean-field", seed), seconds=35 + seed, accuracy=0.8,
                               nll=0.5 - jitter, ood_auroc=0.9, fit_seconds=30 + seed))  # fmt: skip
    return records


def test_the_cheapest_family_is_chosen_by_its_full_cost():
    found = best_value(_cost_records(), "fashion-mnist")
    assert found["family"] == "mean-field"  # 36 s in all, against KFAC's 1 011 s (whose fit alone is cheaper)
    assert found["seconds"] == pytest.approx(36) and found["fit_seconds"] == pytest.approx(31)
    assert found["scoring_seconds"] == pytest.approx(5)
    lines = summary_lines(_cost_records())
    cheapest = next(line for line in lines if line.startswith("- **The cheapest run (fit and scoring)**"))
    assert "mean-field VI (total (s) 36.0: fit 31.0 + scoring 5.0)" in cheapest
    value = next(line for line in lines if line.startswith("- **The cheapest family whose NLL"))
    assert "mean-field VI (NLL 0.490 in 36.0 s: fit 31.0 + scoring 5.0;" in value


def test_the_table_shows_fit_scoring_and_total(tmp_path):
    table, csv_name = dataset_table(_cost_records(), "fashion-mnist", tmp_path)
    assert "| OOD AUROC | fit (s) | scoring (s) | total (s) |" in table.splitlines()[0]
    kfac = next(line for line in table.splitlines() if line.startswith("| Laplace, KFAC |"))
    assert kfac.endswith("| 11.0 ± 1.0 | 1000.0 ± 0.0 | 1011.0 ± 1.0 | one state (unknown) |")
    header = (tmp_path / csv_name).read_text().splitlines()[0]
    assert header.endswith("ood_auroc,fit_seconds,scoring_seconds,total_seconds")
