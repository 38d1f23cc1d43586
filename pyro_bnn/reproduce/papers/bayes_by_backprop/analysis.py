"""Tables, figures and verdicts of ``bayes-by-backprop`` from its run records.

The test error of a run is ``1 - accuracy`` of its 10-sample predictive at the best epoch (by validation accuracy).
Groups of per-seed values are compared with :func:`~pyro_bnn.reproduce.report.compare` (Welch's t-test at level
0.05; "separated" when the seeds tell the groups apart):

- **Comparability first** (:mod:`pyro_bnn.reproduce.comparability`): a comparison is judged only when every run of
  both its groups converged (the paper's 600 epochs, or validation accuracy flat over the last epochs at the cap)
  and each group's mean accuracy lies within the tolerance of
  :data:`~pyro_bnn.reproduce.papers.bayes_by_backprop.COMPARABLE` of its published one
  (:data:`~pyro_bnn.reproduce.papers.bayes_by_backprop.PUBLISHED_ACCURACY`; a group without one is checked for
  convergence alone); otherwise it is *not comparable at this scale*, with the reason, never *does not hold*, and a
  headline counts the comparable cells only and says how many there were.
- **Scale mixture against Gaussian** (uniform weighting, /126 inputs), comparable when both arms converged and each
  arm's mean test error lies in :data:`~pyro_bnn.reproduce.papers.bayes_by_backprop.plan.PRIOR_ERROR_BAND` (the
  span of Singh's two published errors ± 0.2 points, so that either ordering of the priors can be observed;
  :func:`~.verdicts.prior_check`): *holds* when the ``pi = 0.5`` mixture's test
  error is separated below the Gaussian prior's, *does not hold* when it is separated above; otherwise *no effect
  within ±x* when the 95 % interval of the gap lies within
  :data:`~pyro_bnn.reproduce.papers.bayes_by_backprop.NO_EFFECT_WITHIN` of zero (x: its farther end), else
  *inconclusive*. (The ``pi = 0.25`` mixture is reported beside it.)
- **Blundell weighting**, per prior (/126 inputs): Blundell's against uniform weighting, the same rule; over the
  comparable priors (:func:`~pyro_bnn.reproduce.report.overall_verdict`), *holds* when every one holds, *does not
  hold* when at least half do not, *no effect* when every one shows none, *inconclusive* otherwise.
- **Pruning** (the ``pi = 0.5`` mixture, uniform weighting, /126 inputs): at 75 % and at 95 % pruned, the test
  error after pruning by ``|mu| / sigma`` against by ``|mu|``: *holds* when signal-to-noise is separated below at
  both, *does not hold* when magnitude is separated below at one of them, *no effect* when neither fraction shows
  one, *inconclusive* otherwise; judged only when the pruned network's cell is comparable.

A comparison short of any planned run (a seed of either arm, or of the pruned networks: the grid's records are its
plan) is not judged on the seeds it has: it is *inconclusive*, *runs missing (k of n planned)*, so an unfinished grid
never reads *holds*, and its headline tallies it apart (*with runs missing*).
"""

from __future__ import annotations

from pathlib import Path

from pyro_bnn.reproduce.papers.bayes_by_backprop.figures import PRUNING_CLAIM_FRACTIONS as PRUNING_CLAIM_FRACTIONS
from pyro_bnn.reproduce.papers.bayes_by_backprop.figures import WEIGHT_HISTOGRAMS as WEIGHT_HISTOGRAMS
from pyro_bnn.reproduce.papers.bayes_by_backprop.figures import _accuracies, _curves, _histograms
from pyro_bnn.reproduce.papers.bayes_by_backprop.figures import _pruning as _pruning
from pyro_bnn.reproduce.papers.bayes_by_backprop.plan import (
    BASE_NORMALIZATION,
    BASE_PRIOR,
    BASE_WEIGHTING,
    COMPARABLE,
    NORMALIZATIONS,
    PRIOR_ERROR_BAND,
    PRIOR_LABELS,
    PUBLISHED,
    PUBLISHED_ACCURACY,
    SIGMA2_NOTE,
    WEIGHTINGS,
)
from pyro_bnn.reproduce.papers.bayes_by_backprop.verdicts import (
    _best_epoch,
    _comparable_count,
    _done,
    _errors,
    _judged,
    _pct,
    _planned,
    _training_cells,
    prior_check,
)
from pyro_bnn.reproduce.papers.bayes_by_backprop.verdicts import cell_check as cell_check
from pyro_bnn.reproduce.planned import Analysis, Headline, Profile, RunRecord, Section
from pyro_bnn.reproduce.report import (
    CONFORMAL_COLUMNS,
    CONFORMAL_NOTE,
    markdown_table,
    metric_cells,
    overall_verdict,
    overall_width,
    write_csv,
)


def _error_table(
    cells, profile: Profile, out: Path, records: list[RunRecord] | None = None
) -> tuple[Section, list[Headline]]:
    """The test-error table and the prior and KL-weighting headlines from the done runs by cell; ``records``: the
    grid's records of any status, each cell's planned runs (None, hand-made cells: the runs done are all planned)."""
    rows, csv_rows = [], []
    for prior in profile["priors"]:
        for weighting in profile["weightings"]:
            runs = cells.get((prior, weighting, BASE_NORMALIZATION), [])
            planned = _planned(records, (prior, weighting, BASE_NORMALIZATION), len(runs))
            published = ""
            if prior == "gaussian" and weighting == "uniform":
                published = f"{100 * PUBLISHED['gaussian_error']:.2f} (Singh); {100 * PUBLISHED['blundell_error']:.2f}"
                published += " (Blundell, as Singh quotes it)"
            elif (prior, weighting) == (BASE_PRIOR, BASE_WEIGHTING):
                published = f"{100 * PUBLISHED['pruning'][0.0][0]:.2f} (Singh's pruning baseline)"
            rows.append(
                [
                    PRIOR_LABELS[prior],
                    WEIGHTINGS[weighting],
                    _pct(_errors(runs)),
                    _pct(_errors(runs, "posterior_mean_accuracy")),
                    *metric_cells(runs),
                    ", ".join(str(_best_epoch(r)) for r in runs) or "—",
                    len(runs) if len(runs) >= planned else f"{len(runs)} of {planned}",
                    published or "—",
                    *_training_cells(runs, (prior, weighting, BASE_NORMALIZATION)),
                ]
            )
    for (prior, weighting, normalization), runs in sorted(cells.items()):
        csv_rows += [
            {
                "prior": prior,
                "weighting": weighting,
                "normalization": normalization,
                "seed": r.config.seed,
                "test_error": 1 - r.metrics["accuracy"],
                "posterior_mean_test_error": 1 - r.metrics["posterior_mean_accuracy"],
                "test_nll": r.metrics.get("nll"),
                "test_ece": r.metrics.get("ece"),
                **{key: r.metrics.get(key) for key, _ in CONFORMAL_COLUMNS},
                "best_epoch": _best_epoch(r),
                "epochs_run": r.metrics.get("epochs_run"),
                "train_time_s": r.metrics.get("train_time_s"),
            }
            for r in runs
        ]
    write_csv(out / "test-errors.csv", csv_rows)
    table = markdown_table(
        [
            "prior",
            "KL weighting",
            "test error % (10 samples)",
            "test error % (posterior mean)",
            "coverage (α = 0.1)",
            "set size",
            "best epochs",
            "seeds",
            "published %",
            "training",
            "comparable",
        ],
        rows,
        "llrrrrrrlll",
    )

    base_cell, gaussian_cell = (BASE_PRIOR, "uniform", BASE_NORMALIZATION), ("gaussian", "uniform", BASE_NORMALIZATION)
    base, gaussian = cells.get(base_cell, []), cells.get(gaussian_cell, [])
    arms = (("scale mixture (π = 0.5)", base_cell, base), ("Gaussian", gaussian_cell, gaussian))
    verdict, numbers, within, comparable, missing = _judged(
        arms, _errors(base), _errors(gaussian), prior_check, records
    )
    other = cells.get(("mixture-0.25", "uniform", BASE_NORMALIZATION), [])
    if other:
        numbers += f"; the π = 0.25 mixture: {_pct(_errors(other))} %"
    prior_headline = Headline(
        "The scale-mixture prior gives a lower test error than the Gaussian prior (Blundell et al.; Singh found the "
        "opposite)",
        verdict,
        f"{_comparable_count([comparable], missing=int(missing))}. {numbers}",
        interval=within,
    )
    verdicts, reasons, intervals, comparables, missing = [], [], [], [], 0
    for prior in profile["priors"]:
        blundell_cell, uniform_cell = (prior, "blundell", BASE_NORMALIZATION), (prior, "uniform", BASE_NORMALIZATION)
        blundell, uniform = cells.get(blundell_cell, []), cells.get(uniform_cell, [])
        arms = (("Blundell", blundell_cell, blundell), ("uniform", uniform_cell, uniform))
        verdict, numbers, within, comparable, short = _judged(arms, _errors(blundell), _errors(uniform), None, records)
        missing += short
        if comparable and uniform_cell not in PUBLISHED_ACCURACY:
            numbers += "; no published accuracy for this prior, judged on convergence alone"
        verdicts.append(verdict)
        comparables.append(comparable)
        intervals.append(within)
        reasons.append(f"{PRIOR_LABELS[prior]}: {verdict.value} ({numbers})")
    overall = overall_verdict(verdicts)
    weighting_headline = Headline(
        "Blundell's KL weighting lowers the test error (Singh: by 0.3 points)",
        overall,
        f"{_comparable_count(comparables, 'priors', missing)}. " + "; ".join(reasons),
        interval=overall_width(overall, intervals),
    )
    all_runs = [r for runs in cells.values() for r in runs]
    late = sum(1 for r in all_runs if (_best_epoch(r) or 0) >= profile["epochs"] - 1)
    text = (
        f"Test error of the 10-sample predictive and of the posterior-mean network at the best of "
        f"{profile['epochs']} epochs (by validation accuracy on {profile['val_images']:,} held-out training images), "
        f"mean ± sd over seeds, inputs /126. Estimator: Pyro's `Trace_ELBO` (`--elbo auto` is it for the bbb guide), "
        f"2 weight draws per step and the KL by Monte Carlo, as in Blundell et al. The published runs trained 600 "
        f"epochs; here {late} of "
        f"{len(all_runs)} runs had their best epoch among the last two"
        + (
            " (the error curves below): their validation accuracy was still rising when they stopped, and the "
            "*training* column says whether it rose by more than the comparability rule's flatness margin."
            if late * 2 > len(all_runs)
            else "."
        )
        + " *Training*: the runs' convergence (`converged k/n`), epochs and mean test accuracy against the published "
        "one where the papers give it; *comparable*: whether the cell may be judged, and why not. "
        + COMPARABLE.describe()
        + f" The prior comparison (the π = 0.5 mixture against the Gaussian) checks each arm's convergence and that "
        f"its test error lies within {100 * PRIOR_ERROR_BAND[0]:.2f}-{100 * PRIOR_ERROR_BAND[1]:.2f} %, the span of "
        "both priors' published errors widened by the same 0.2 points, instead of each arm's own published error: "
        "the mixture could otherwise beat the Gaussian only between 1.83 and 1.89 %, so that gate would have built "
        "Singh's opposite finding in. " + SIGMA2_NOTE + " " + CONFORMAL_NOTE
    )
    return Section("Test error by prior and KL weighting", text, [table], [], ["test-errors.csv"]), [
        prior_headline,
        weighting_headline,
    ]


def _normalization_table(cells, profile: Profile) -> Section:
    rows = []
    for normalization in profile["normalizations"]:
        runs = cells.get((BASE_PRIOR, BASE_WEIGHTING, normalization), [])
        rows.append(
            [
                NORMALIZATIONS[normalization],
                _pct(_errors(runs)),
                _pct(_errors(runs, "posterior_mean_accuracy")),
                len(runs),
                *_training_cells(runs, (BASE_PRIOR, BASE_WEIGHTING, normalization)),
            ]
        )
    table = markdown_table(
        ["inputs", "test error % (10 samples)", "test error % (posterior mean)", "seeds", "training", "comparable"],
        rows,
        "lrrrll",
    )
    text = (
        f"{PRIOR_LABELS[BASE_PRIOR]}, {WEIGHTINGS[BASE_WEIGHTING]} KL weighting. Singh: /126 was 0.1-0.2 points "
        "better than the other two."
    )
    return Section("Input scaling", text, [table])


def analyse(records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
    """The report's sections and headlines for ``bayes-by-backprop`` (figures and CSV files written to ``out``)."""
    cells = _done(records)
    errors, headlines = _error_table(cells, profile, out, records)
    pruning, pruning_headline = _pruning(cells, profile, out, records)
    sections = [
        errors,
        _normalization_table(cells, profile),
        _curves(cells, profile, out),
        _histograms(cells, out),
        pruning,
        _accuracies(cells, out),
    ]
    return Analysis(sections, [*headlines, pruning_headline])
