"""Tables, figures and verdicts of ``implicit-bnn`` from its run records.

The rules behind the verdicts (per-seed values compared with :func:`~pyro_bnn.reproduce.report.compare`, Welch's
t-test at level 0.05: a gap "is separated" when the seeds tell the two groups apart; its 95 % interval is the gap ±
the t quantile at the Welch-Satterthwaite degrees of freedom times its standard error):

- **Comparability first** (:mod:`pyro_bnn.reproduce.comparability`, the rules declared in
  :mod:`~pyro_bnn.reproduce.papers.implicit_bnn` beside the paper's numbers). A LeNet cell (node noise and one rival
  at one width, on clean or corrupted inputs) is judged only when every run of both converged under
  :data:`~pyro_bnn.reproduce.papers.implicit_bnn.COMPARABLE` (stopped by patience, or its validation accuracy flat
  over its last epochs at the cap; the paper prints no LeNet accuracy, so there is none to check); a CIFAR cell when
  every run converged (or trained the paper's 300 epochs) and each method's accuracy lies within 0.02 of its row of
  the paper's Table 3 (:data:`~pyro_bnn.reproduce.papers.implicit_bnn.CIFAR_COMPARABLE`); the cubic by
  :func:`~pyro_bnn.reproduce.papers.implicit_bnn.cubic.cubic_check`. A cell that fails is *not comparable at this
  scale*, with the reason and the numbers its runs reached (unjudged), never *does not hold*; a cell missing any planned
  run (a seed of either side) is *inconclusive*, *runs missing (k of n planned)*, so an unfinished grid never reads
  *holds*. Every headline counts its comparable cells
  (:func:`~pyro_bnn.reproduce.report.overall_verdict`: *holds* when every comparable cell holds, *does not hold* when
  at least half do not, *no effect* when every one shows none, *not comparable* when none is comparable) and says
  how many there were (a cell whose runs are missing is not among them, and is counted apart: *with runs
  missing*); a claim *at every LeNet width* reads *does not hold* as soon as one comparable cell separates the gap
  against it, naming the cell (:func:`~.verdicts.every_cell_verdict`; a cell that is not comparable never
  counts against a claim). Every table shows each cell's training state
  (:attr:`~pyro_bnn.reproduce.comparability.CellCheck.summary`).
- **Node noise against a rival, in one metric** (:func:`contrast`; lower is better: test error in %, NLL, ECE with
  15 bins). The rivals are the paper's: the deterministic network (its SGD row, here the deep ensemble's first
  member), MC dropout and weight-space VI. The paper compares them on VGG-16 and WRN-28x10 on CIFAR-10/100 (Tables
  3-5, Fig. 7); on LeNet / Fashion-MNIST it shows only node noise against weight-space VI in test error (Fig. 4), so
  every other LeNet headline tests a CIFAR claim at another architecture, data set and scale, and says so beside the
  claim. One headline per rival and metric, its cells the
  LeNet widths (and, against the deterministic network, the paper's CIFAR networks at the ``paper`` profile). Per
  comparable cell: *holds* when node noise is lower (separated); *does not hold* when it is higher (separated);
  *no effect within ±x* when the 95 % interval of the gap lies inside ± its metric's threshold in
  :data:`~pyro_bnn.reproduce.papers.implicit_bnn.NO_EFFECT_WITHIN` (the smallest effect the paper reports on
  CIFAR: such an interval rules out every effect it shows; x is the interval's farther end, the largest over the
  cells in a headline); *inconclusive* otherwise (fewer than 2 seeds, or an interval too wide to tell).
- **The same under corrupted inputs** (the grid's ``shift`` measurement; our extension, not the paper's claim: its
  Fig. 8, WRN-28x10 on corrupted CIFAR, reports mean predictive entropy only): per width and corruption, each seed's
  test error and ECE averaged over the corrupted intensities (level 0, the clean images, left out), against the
  deterministic network and MC dropout, by the same rule and thresholds (the paper prints none for corrupted data),
  the comparable cells counted by :func:`~pyro_bnn.reproduce.report.overall_verdict`.
- **Weight-space VI degrades past about 165k parameters; node noise does not** (Fig. 4,
  :data:`~pyro_bnn.reproduce.papers.implicit_bnn.FIG_4_KNEE_WIDTH`): per width past the paper's 4x point (x2 here),
  VI's and node noise's test error there against at x2. *Holds* when VI's rises (separated) and node noise's does not
  (no separated rise); *does not hold* when VI's falls (separated) or node noise's rises (separated); *no effect
  within ±x* when VI's change lies inside ± the error threshold; *inconclusive* otherwise. With no width past x2 the
  claim is untested, and the headline says so (*not comparable at this scale*).
- **Weight-space VI underfits more as depth grows; node noise does not**: :mod:`.cubic`.
- **Node noise's predictive entropy rises with corruption** (the paper's Fig. 8, on WRN-28x10 and CIFAR; here
  LeNet on Fashion-MNIST): per corruption, at the first
  width, *holds* when the mean predictive entropy at the strongest level is above the clean one (separated), *does
  not hold* when it is not above (separated gap <= 0), *inconclusive* otherwise (the paper prints no effect size,
  so never *no effect*); judged only when node noise's runs converged.
"""

from __future__ import annotations

from pathlib import Path

from pyro_bnn.reproduce.papers.implicit_bnn.claims import RIVAL_NAMES as RIVAL_NAMES
from pyro_bnn.reproduce.papers.implicit_bnn.cubic import cubic_section
from pyro_bnn.reproduce.papers.implicit_bnn.departures import lenet_departures
from pyro_bnn.reproduce.papers.implicit_bnn.figures import _components, _ood
from pyro_bnn.reproduce.papers.implicit_bnn.figures import _corruptions as _corruptions
from pyro_bnn.reproduce.papers.implicit_bnn.plan import (
    CIFAR_COMPARABLE,
    COMPARABLE,
    PUBLISHED_LENET_ACCURACY,
    PUBLISHED_TABLES_3_TO_5,
    lenet_methods,
)
from pyro_bnn.reproduce.papers.implicit_bnn.records import CORRUPTION_NAMES as CORRUPTION_NAMES
from pyro_bnn.reproduce.papers.implicit_bnn.records import METHOD_NAMES as METHOD_NAMES
from pyro_bnn.reproduce.papers.implicit_bnn.records import (
    _ensemble_seconds,
    _method_metrics,
    _method_records,
    _seconds_per_epoch,
    _training_runs,
    _untested_widths_note,
)
from pyro_bnn.reproduce.papers.implicit_bnn.verdicts import METRIC_DIGITS as METRIC_DIGITS
from pyro_bnn.reproduce.papers.implicit_bnn.verdicts import METRIC_NAMES as METRIC_NAMES
from pyro_bnn.reproduce.papers.implicit_bnn.verdicts import RIVAL_CLAIMS as RIVAL_CLAIMS
from pyro_bnn.reproduce.papers.implicit_bnn.verdicts import Contrast as Contrast
from pyro_bnn.reproduce.papers.implicit_bnn.verdicts import RivalClaim as RivalClaim
from pyro_bnn.reproduce.papers.implicit_bnn.verdicts import contrast as contrast
from pyro_bnn.reproduce.papers.implicit_bnn.verdicts import half_width as half_width
from pyro_bnn.reproduce.papers.implicit_bnn.verdicts import rival_contrasts as rival_contrasts
from pyro_bnn.reproduce.papers.implicit_bnn.verdicts import rival_headline as rival_headline
from pyro_bnn.reproduce.papers.implicit_bnn.verdicts import rival_verdicts as rival_verdicts
from pyro_bnn.reproduce.planned import Analysis, Profile, RunRecord, Section
from pyro_bnn.reproduce.report import (
    CONFORMAL_COLUMNS,
    CONFORMAL_NOTE,
    format_mean_sd,
    markdown_table,
    metric_cells,
    select,
    write_csv,
)


def _widths(records: list[RunRecord], profile: Profile, out: Path) -> Section:
    rows, csv_rows = [], []
    for width in profile["widths"]:
        for method in lenet_methods(profile):
            runs = _method_records(records, method, width=width)
            metrics = [_method_metrics(r, method) for r in runs]
            if method == "ensemble":
                seconds = [_ensemble_seconds(records, width, r.spec.tag("seed")) for r in runs]
            elif method == "temperature":
                seconds = [None] * len(runs)  # the deterministic run's; fitting T takes well under a second
            else:
                seconds = [_seconds_per_epoch(r) for r in runs]
            values = {
                "error": [100 * (1 - m["accuracy"]) for m in metrics],
                "nll": [m["nll"] for m in metrics],
                "ece": [m["ece"] for m in metrics],
            }
            name = METHOD_NAMES[method]
            if method == "temperature":
                name += f" (T = {format_mean_sd([r.metrics['shift']['temperature'] for r in runs], 2)})"
            check = COMPARABLE.check(_training_runs(records, method, width), PUBLISHED_LENET_ACCURACY)
            rows.append(
                [
                    f"x{width}",
                    name,
                    len(runs),
                    format_mean_sd(values["error"], 2),
                    format_mean_sd(values["nll"], 3),
                    format_mean_sd(values["ece"], 3),
                    *metric_cells(runs if method != "temperature" else []),
                    format_mean_sd([t for t in seconds if t is not None], 1),
                    ("members: " if method == "ensemble" else "") + check.summary,
                ]
            )
            for r, m, t in zip(runs, metrics, seconds, strict=True):
                csv_rows.append(
                    {"width": width, "method": method, "seed": r.spec.tag("seed"), **m, "seconds_per_epoch": t}
                )
    write_csv(out / "lenet.csv", csv_rows)
    table = markdown_table(
        ["width", "method", "seeds", "test error %", "NLL", "ECE (15 bins)", "coverage (α = 0.1)", "set size",
         "s / epoch", "training"],
        rows,
        "llrrrrrrrl",
    )  # fmt: skip
    untested = _untested_widths_note(profile)
    text = (
        "LeNet widened by M (``lenet:M``: M = 2 has 4x the parameters, the paper's Fig. 4 axis) on Fashion-MNIST, "
        "every method on the same training examples for the same epochs. Test metrics on the whole test set, mean ± "
        "sd over seeds (per seed in `lenet.csv`). *deterministic* is the ensemble's first member; *+ temperature* "
        "tempers its predictive with T fitted on the validation split (NLL, L-BFGS on log T). *s / epoch*: training "
        "only, one CPU thread; for the ensemble, all members together. The grid ran two runs at a time on a 2-core "
        "machine that also did other work, so the seconds compare only roughly. *Training*: how the row's runs "
        "ended (for the ensemble, its members'; for the tempered network, the deterministic run's): how many "
        "converged, their epochs and mean test accuracy. The verdicts on these rows are in *Node noise against its "
        "rivals*. "
        + (
            f"The paper's Fig. 4 claim that weight-space VI degrades is untested at these widths. {untested} "
            if untested
            else ""
        )
        + f"The tempered predictive has no conformal sets (—). {CONFORMAL_NOTE}"
        + lenet_departures(records)
    )
    section = Section("LeNet width: node noise against weight-space VI and the baselines (Fig. 4)", text, [table])
    section.csv_files.append("lenet.csv")
    return section


# ------------------------------------------------------------------------------------------------ rival verdicts


def _cifar(records: list[RunRecord], profile: Profile, out: Path) -> Section:
    rows, csv_rows = [], []
    for dataset, model in profile["cifar"]:
        for method in ("node-noise", "deterministic"):
            runs = select(records, part="cifar", dataset=dataset, model=model, method=method)
            published = PUBLISHED_TABLES_3_TO_5[(dataset, model)][method]
            rows.append(
                [
                    dataset,
                    model,
                    METHOD_NAMES[method],
                    len(runs),
                    format_mean_sd([100 * (1 - r.metrics["accuracy"]) for r in runs], 2),
                    format_mean_sd([r.metrics["nll"] for r in runs], 3),
                    format_mean_sd([r.metrics["ece"] for r in runs], 3),
                    *metric_cells(runs),
                    "{:.2f} / {:.4f} / {:.4f}".format(*published),
                    CIFAR_COMPARABLE.check(runs, 1 - published[0] / 100).summary,
                ]
            )
            csv_rows += [
                {"dataset": dataset, "model": model, "method": method, "seed": r.spec.tag("seed"),
                 **{key: r.metrics[key] for key in ("accuracy", "nll", "ece")},
                 **{key: r.metrics.get(key) for key, _ in CONFORMAL_COLUMNS}}
                for r in runs
            ]  # fmt: skip
    write_csv(out / "cifar.csv", csv_rows)
    table = markdown_table(
        ["data", "network", "method", "seeds", "test error %", "NLL", "ECE", "coverage (α = 0.1)", "set size",
         "paper: error % / NLL / ECE", "training"],
        rows,
        "lllrrrrrrrl",
    )  # fmt: skip
    text = (
        f"The paper's large networks ({profile['cifar_epochs']} epochs, no augmentation): node noise with the "
        "authors' setting against the same network trained deterministically. Mean ± sd over seeds; coverage and set "
        "size as in the LeNet width table. *Paper*: Tables 3-5 (iBNN-4 and SGD, mean of 5 seeds). *Training*: how "
        "the runs ended, their mean accuracy against the paper's. The verdicts are in *Node noise against its "
        "rivals*. " + CIFAR_COMPARABLE.describe()
    )
    return Section("VGG16 and WRN-28x10 on CIFAR (Table 2)", text, [table], csv_files=["cifar.csv"])


def analyse(records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
    """The report's sections and headlines (see the module docstring for the verdict rules)."""
    sections, headlines = [], []
    if profile["depths"]:  # the cpu-widths profile runs no cubic
        cubic, cubic_headline = cubic_section(records, profile, out)
        sections.append(cubic)
        headlines.append(cubic_headline)
    rivals, rival_headlines = rival_verdicts(records, profile)
    sections += [_widths(records, profile, out), rivals]
    if len(profile["ks"]) > 1:  # nor a K sweep
        sections.append(_components(records, profile, out))
    corruptions, corruption_headline = _corruptions(records, profile, out)
    sections += [corruptions, _ood(records, profile, out)]
    if profile["cifar"]:
        sections.append(_cifar(records, profile, out))
    return Analysis(sections, [*headlines, *rival_headlines, corruption_headline])
