"""The verdict rules of ``posterior-families`` as functions: one comparison of two families over seeds, the
detection of out-of-domain inputs against chance (:func:`detection`), the ensemble against mean-field VI
(:func:`ood_cell`), the convergence of the MAP networks a family rests on, and the headlines. The rules in words are
the docstring of :mod:`pyro_bnn.reproduce.papers.posterior_families.analysis`, which the report cites.
"""

from __future__ import annotations

from pyro_bnn.reproduce.code_state import cell_code_states
from pyro_bnn.reproduce.comparability import check_cell
from pyro_bnn.reproduce.papers.posterior_families.tables import CHANCE, COLUMNS, DATASETS, NAMES, _members, values
from pyro_bnn.reproduce.planned import Headline, RunRecord, Verdict
from pyro_bnn.reproduce.report import compare, format_mean_sd, overall_verdict, select


def _judge(better: list[float], worse: list[float], higher_is_better: bool) -> Verdict:
    """HOLDS when ``better`` beats ``worse`` and the seeds separate them, DOES_NOT_HOLD when the reverse is
    separated, INCONCLUSIVE otherwise (or without values)."""
    if not better or not worse:
        return Verdict.INCONCLUSIVE
    result = compare(better, worse)
    gain = result.gap if higher_is_better else -result.gap
    if result.separated:
        return Verdict.HOLDS if gain > 0 else Verdict.DOES_NOT_HOLD
    return Verdict.INCONCLUSIVE


def _fmt(found: list[float], digits: int = 3) -> str:
    return format_mean_sd(found, digits)


def detection(aurocs: list[float]) -> Verdict:
    """Whether out-of-domain AUROCs (one per seed) show a detection: HOLDS when above 0.5 and separated from it over
    seeds, DOES_NOT_HOLD when below 0.5 and separated (an inverted score: the in-domain inputs rank as more
    uncertain), INCONCLUSIVE otherwise (chance, or fewer than 2 seeds)."""
    if len(aurocs) < 2:
        return Verdict.INCONCLUSIVE
    return _judge(aurocs, [CHANCE] * len(aurocs), True)


def ood_cell(ensemble: list[float], mean_field: list[float]) -> tuple[Verdict, str]:
    """The verdict of one data set on "a deep ensemble detects out-of-domain inputs better than mean-field VI"
    (rule: module docstring) from the per-seed AUROCs, and what the AUROCs say in words (empty when both detect)."""
    comparison = _judge(ensemble, mean_field, True)
    ours, theirs = detection(ensemble), detection(mean_field)
    if ours is Verdict.HOLDS:
        verdict = comparison
    elif ours is Verdict.DOES_NOT_HOLD:
        verdict = Verdict.DOES_NOT_HOLD
    else:
        verdict = Verdict.DOES_NOT_HOLD if comparison is Verdict.DOES_NOT_HOLD else Verdict.INCONCLUSIVE
    inverted = "the predictive entropy ranks the in-domain inputs as more uncertain than the out-of-domain ones"
    if ours is Verdict.DOES_NOT_HOLD and theirs is Verdict.DOES_NOT_HOLD:
        words = f"both below 0.5: {inverted} (an inverted score), so neither family detects them"
    elif ours is Verdict.DOES_NOT_HOLD:
        words = f"the ensemble's below 0.5: {inverted} (an inverted score), so it does not detect them"
    elif ours is Verdict.INCONCLUSIVE:
        words = "the ensemble's not separated from 0.5 (chance)"
    elif theirs is Verdict.DOES_NOT_HOLD:
        words = "mean-field VI's below 0.5 (an inverted score)"
    else:
        words = ""
    return verdict, words


def convergence(records: list[RunRecord], dataset: str, family: str) -> str:
    """Why the MAP networks that ``family``'s runs on ``dataset`` are built from make the data set not comparable
    (:func:`pyro_bnn.reproduce.comparability.check_cell`, no published accuracy: some did not converge), or ``""``.
    Runs without a per-epoch validation history cannot be judged and are left out."""
    by_id = {r.spec.run_id: r for r in records}
    networks: dict[str, RunRecord] = {}
    for record in select(records, dataset=dataset, family=family):
        networks.update((m.spec.run_id, m) for m in _members(record, by_id) if m.history)
    if not networks:
        return ""
    check = check_cell(list(networks.values()), None, 0.0)
    return "" if check.comparable else f"of the MAP networks it is built on, {check.reason}"


def cell_state(records: list[RunRecord], dataset: str, families: tuple[str, ...]) -> str:
    """What a verdict that reads ``families``' runs on ``dataset`` rests on, for its reason: each family's training
    state (:func:`pyro_bnn.reproduce.comparability.check_cell` without a published accuracy, so convergence only;
    "not checked" for runs without a per-epoch validation history, such as NUTS and SG-MCMC) and training code."""
    parts = []
    for family in families:
        runs = select(records, dataset=dataset, family=family)
        trained = [r for r in runs if r.history]
        state = check_cell(trained, None, 0.0, name_code=False).summary if trained else "convergence not checked"
        parts.append(f"{NAMES[family]}: {state}, training code {cell_code_states(runs)}")
    return "Runs: " + "; ".join(parts) + "."


def headlines(records: list[RunRecord]) -> list[Headline]:
    """The four verdicts of the module docstring."""
    result = []
    ratio = values(records, "moons", "mean-field", "sd_ratio_median")
    verdict = _judge([1.0] * max(len(ratio), 2), ratio, True) if len(ratio) >= 2 else Verdict.INCONCLUSIVE
    result.append(Headline(
        "Mean-field VI's weight marginals are narrower than NUTS's (moons)", verdict,
        f"median sd ratio to NUTS {_fmt(ratio, 2)} over {len(ratio)} seed(s), against 1. "
        + cell_state(records, "moons", ("nuts", "mean-field"))))  # fmt: skip
    mean_field = values(records, "moons", "mean-field", "kl_to_nuts")
    verdicts, parts = [], []
    for family in ("sgld", "cyclical-sgld"):
        kl = values(records, "moons", family, "kl_to_nuts")
        verdicts.append(_judge(kl, mean_field, False))
        parts.append(f"{NAMES[family]} {_fmt(kl, 4)}")
    verdict = (Verdict.DOES_NOT_HOLD if Verdict.DOES_NOT_HOLD in verdicts
               else Verdict.HOLDS if all(v is Verdict.HOLDS for v in verdicts) else Verdict.INCONCLUSIVE)  # fmt: skip
    result.append(Headline(
        "SG-MCMC's predictive is closer to NUTS's than mean-field VI's (moons)", verdict,
        f"KL from the NUTS predictive, mean over test points: {', '.join(parts)}, mean-field VI "
        f"{_fmt(mean_field, 4)}. "
        + cell_state(records, "moons", ("nuts", "sgld", "cyclical-sgld", "mean-field"))))  # fmt: skip
    for family, other, key, claim in (
        ("ensemble", "mean-field", "ood_auroc",
         "A deep ensemble detects out-of-domain inputs better than mean-field VI"),
        ("laplace-kfac", "map", "nll", "A KFAC Laplace approximation improves the NLL of its MAP network"),
    ):  # fmt: skip
        verdicts, parts = [], []
        for dataset in DATASETS:
            a, b = values(records, dataset, family, key), values(records, dataset, other, key)
            if not (a and b):
                continue
            if key == "ood_auroc":
                verdict, words = ood_cell(a, b)
            else:
                verdict, words = _judge(a, b, False), ""
            words = f", {words}" if words else ""
            why = convergence(records, dataset, family)
            if why:
                verdicts.append(Verdict.NOT_COMPARABLE)
                status = f"{Verdict.NOT_COMPARABLE.value}: {why}; the numbers alone say {verdict.value}"
            else:
                verdicts.append(verdict)
                status = verdict.value
            parts.append(f"{dataset}: {_fmt(a)} against {_fmt(b)}{words} ({status})")
        result.append(Headline(claim, overall_verdict(verdicts),
                               f"{COLUMNS[key][0]} {'; '.join(parts) if parts else 'not measured yet'}."))  # fmt: skip
    return result
