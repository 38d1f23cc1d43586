"""The cubic part of ``implicit-bnn``'s report: the paper's Fig. 1, the table of RMSE, NLL and coverage inside
and outside the data's range per depth (with each cell's training state), and the depth verdict.

**Comparability first**: the verdict compares the runs at the smallest and the greatest depth, and is given only
when every one of them converged under :data:`~pyro_bnn.reproduce.papers.implicit_bnn.CUBIC_COMPARABLE`
(:func:`cubic_check`): it trained the authors' 5 000 full-batch steps, or its training loss, averaged over blocks of
:data:`~pyro_bnn.reproduce.papers.implicit_bnn.CUBIC_BLOCK` steps from the step the KL weight reached 1, was flat
(the lowest block mean of its last 3 blocks at most 0.5 % below the lowest before them). The paper prints no numbers
for Fig. 1, so there is no accuracy to check. Otherwise the verdict is *not comparable at this scale*, with the
reason and the RMSEs the runs reached.

**Weight-space VI underfits more as depth grows; node noise does not** (RMSE inside the data's range, Welch's t-test
over seeds at level 0.05, :func:`~pyro_bnn.reproduce.report.compare`). *Holds* when VI's RMSE at the greatest depth
is above its RMSE at depth 1 (separated), node noise's is not (no separated rise) and node noise is below VI at the
greatest depth (separated); *does not hold* when VI's RMSE does not rise (a separated gap <= 0), node noise's does
(a separated rise), or node noise is above VI at the greatest depth (separated); *inconclusive* otherwise. The paper
prints no effect size for Fig. 1, so this verdict never reads *no effect*.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from pyro_bnn.data.synthetic import cubic_regression
from pyro_bnn.plots import save_figure
from pyro_bnn.reproduce.comparability import FLAT, WINDOW, CellCheck
from pyro_bnn.reproduce.papers.implicit_bnn.departures import cubic_departures
from pyro_bnn.reproduce.papers.implicit_bnn.plan import CUBIC_BLOCK, CUBIC_COMPARABLE, CUBIC_FIT
from pyro_bnn.reproduce.planned import Headline, Profile, RunRecord, Section, Verdict
from pyro_bnn.reproduce.report import compare, format_mean_sd, markdown_table, mean_sd, select, write_csv
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.runs.runs import load_data

CUBIC_METHODS = {"vi": "weight-space VI", "node-noise": "node noise (K = 8)"}


def loss_blocks(record: RunRecord) -> RunRecord:
    """``record`` with its history replaced by one row per block of :data:`CUBIC_BLOCK` full-batch steps from the
    step its KL weight reached 1, holding :data:`CUBIC_FIT` (minus the log of the block's mean training loss), so
    that :data:`CUBIC_COMPARABLE` judges its flatness. A record's history may be binned (each row the mean of
    ``epochs`` steps, ``epoch`` the last of them); a block's mean weighs its rows by the steps they hold."""
    sums: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    full = record.config.temperature  # the KL weight at the end of the warm-up (times N for the notebook's KL)
    for row in record.history:
        if "loss" not in row or row.get("kl_weight", full) < full * (1.0 - 1e-9):
            continue
        steps = float(row.get("epochs", 1))
        block = sums[(int(row["epoch"]) - 1) // CUBIC_BLOCK]
        block[0] += steps * float(row["loss"])
        block[1] += steps
    history = []
    for block in sorted(sums):
        total, steps = sums[block]
        mean = total / steps
        if not (math.isfinite(mean) and mean > 0):
            return dataclasses.replace(record, history=[])  # a loss that log cannot take: no judgement
        history.append({"epoch": (block + 1) * CUBIC_BLOCK, CUBIC_FIT: -math.log(mean)})
    return dataclasses.replace(record, history=history)


def cubic_check(runs: Sequence[RunRecord]) -> CellCheck:
    """Whether the cubic ``runs`` may be judged (:data:`CUBIC_COMPARABLE` on :func:`loss_blocks`); the summary
    counts full-batch steps and has no accuracy."""
    check = CUBIC_COMPARABLE.check([loss_blocks(r) for r in runs], None)
    summary = check.summary.replace(", accuracy —", "").replace("epochs", "steps")
    return dataclasses.replace(check, summary=summary)


def describe_cubic_rule() -> str:
    """The cubic's comparability rule in one sentence, for the report."""
    return (
        f"The depth verdict is given only when every run it compares converged: it trained the authors' "
        f"{CUBIC_COMPARABLE.paper_epochs} full-batch steps, or its training loss, averaged over blocks of "
        f"{CUBIC_BLOCK} steps from the step the KL weight reached 1, was flat (the lowest mean of its last {WINDOW} "
        f"blocks at most {100 * (1 - math.exp(-FLAT)):.1f} % below the lowest before them); {CUBIC_COMPARABLE.why}. "
        "Otherwise it is *not comparable at this scale*."
    )


def cubic_section(records: list[RunRecord], profile: Profile, out: Path) -> tuple[Section, Headline]:
    depths = profile["depths"]
    rows, csv_rows = [], []
    rmse: dict[tuple[str, int], list[float]] = defaultdict(list)
    checks: dict[tuple[str, int], CellCheck] = {}
    for depth in depths:
        for method, name in CUBIC_METHODS.items():
            runs = select(records, part="cubic", method=method, depth=depth)
            parts = {side: [r.metrics["cubic"][side] for r in runs] for side in ("inside", "outside")}
            rmse[method, depth] = [p["rmse"] for p in parts["inside"]]
            checks[method, depth] = cubic_check(runs)
            rows.append(
                [
                    depth,
                    name,
                    len(runs),
                    *(format_mean_sd([p[key] for p in parts[side]], 2) for key in ("rmse", "nll") for side in parts),
                    *(format_mean_sd([p["coverage"] for p in parts[side]], 2) for side in parts),
                    checks[method, depth].summary,
                ]
            )
            for r in runs:
                csv_rows.append(
                    {
                        "depth": depth,
                        "method": method,
                        "seed": r.config.seed,
                        **{
                            f"{key}_{side}": r.metrics["cubic"][side][key]
                            for side in parts
                            for key in ("rmse", "nll", "coverage")
                        },
                        "train_time_s": r.metrics.get("train_time_s"),
                    }
                )
    write_csv(out / "cubic.csv", csv_rows)
    table = markdown_table(
        [
            "hidden layers", "method", "seeds", "RMSE inside", "RMSE outside", "NLL inside", "NLL outside",
            "coverage inside", "coverage outside", "training",
        ],
        rows,
        "llrrrrrrrl",
    )  # fmt: skip
    figure = "cubic.png"
    save_figure(_cubic_figure(records, depths), out / figure)
    deepest = max(depths)
    vi_rises = compare(rmse["vi", deepest], rmse["vi", min(depths)])
    nn_rises = compare(rmse["node-noise", deepest], rmse["node-noise", min(depths)])
    nn_vs_vi = compare(rmse["node-noise", deepest], rmse["vi", deepest])
    if (
        vi_rises.separated
        and vi_rises.gap > 0
        and not (nn_rises.separated and nn_rises.gap > 0)
        and (nn_vs_vi.separated and nn_vs_vi.gap < 0)
    ):
        verdict = Verdict.HOLDS
    elif (
        (vi_rises.separated and vi_rises.gap <= 0)
        or (nn_rises.separated and nn_rises.gap > 0)
        or (nn_vs_vi.separated and nn_vs_vi.gap > 0)
    ):
        verdict = Verdict.DOES_NOT_HOLD
    else:
        verdict = Verdict.INCONCLUSIVE
    m = {key: mean_sd(values)[0] for key, values in rmse.items()}
    numbers = (
        f"RMSE inside the data's range, {min(depths)} -> {deepest} hidden layers: weight-space VI "
        f"{m['vi', min(depths)]:.2f} -> {m['vi', deepest]:.2f}, node noise {m['node-noise', min(depths)]:.2f} -> "
        f"{m['node-noise', deepest]:.2f} (the noise sd is 2)"
    )
    compared = [(method, depth) for method in CUBIC_METHODS for depth in sorted({min(depths), deepest})]
    pooled = cubic_check(
        [r for method, depth in compared for r in select(records, part="cubic", method=method, depth=depth)]
    )
    if all(rmse[key] for key in compared) and not pooled.comparable:
        verdict = Verdict.NOT_COMPARABLE
        depths_compared = " and ".join(str(d) for d in sorted({min(depths), deepest}))
        reason = (
            f"Not comparable: of the runs at {depths_compared} hidden layers, {pooled.reason} (the paper trains "
            f"{CUBIC_COMPARABLE.paper_epochs} steps). Unjudged, the runs show {numbers}."
        )
    else:
        reason = numbers + "."
    text = (
        "Predictive mean ± 2 sd (noise included) of the first seed over the test grid, with the training data and "
        "x³ (the paper's Fig. 1). RMSE and NLL against the noiseless x³; coverage: the share of test points whose x³ "
        "lies within mean ± 2 sd. *Inside*: the training inputs' range [-3, -1) ∪ [1, 3); *outside*: the gap "
        "[-1, 1) and both ends out to ±4. Mean ± sd over seeds; per-seed values in `cubic.csv`. *Training*: how "
        "the cell's runs ended (converged or still improving at their last step, and how many steps they ran). "
        + describe_cubic_rule()
        + cubic_departures(records)
    )
    section = Section("Cubic: depth against underfitting (Fig. 1)", text, [table], [figure], ["cubic.csv"])
    return section, Headline(
        "Weight-space VI underfits more as depth grows; node noise does not (1-D cubic).", verdict, reason
    )


def _cubic_figure(records: list[RunRecord], depths: tuple[int, ...]) -> Figure:
    figure = Figure(figsize=(3.2 * len(depths), 5.6), layout="constrained")
    axes = figure.subplots(len(CUBIC_METHODS), len(depths), squeeze=False, sharex=True, sharey=True)
    data = None
    for row, (method, name) in enumerate(CUBIC_METHODS.items()):
        for column, depth in enumerate(depths):
            ax = axes[row][column]
            runs = sorted(select(records, part="cubic", method=method, depth=depth), key=lambda r: r.config.seed)
            if not runs:
                ax.set_title(f"{name}, {depth} layers: no run")
                continue
            curve = runs[0].metrics["cubic"]
            if data is None or data.config != runs[0].config:
                data = _CubicData(runs[0].config)
            x, mean, sd = (np.asarray(curve[key]) for key in ("x", "mean", "sd"))
            ax.fill_between(x, mean - 2 * sd, mean + 2 * sd, color="tab:blue", alpha=0.25, lw=0)
            ax.plot(x, mean, color="tab:blue", lw=1.2, label="predictive mean ± 2 sd")
            ax.plot(x, x**3, color="black", lw=0.8, ls="--", label="x³")
            ax.scatter(data.x, data.y, s=2, color="tab:red", label="data")
            ax.set_ylim(-80, 80)
            ax.set_title(f"{name}, {depth} layer{'s' if depth > 1 else ''}", fontsize=9)
            if row == len(CUBIC_METHODS) - 1:
                ax.set_xlabel("x")
    axes[0][0].legend(fontsize=7, loc="upper left")
    return figure


class _CubicData:
    """The training points of one cubic run (regenerated: the data set is a deterministic function of the seed; a
    run on a subset, the paper's 30 points, shows that subset)."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        if config.train_subset is None:
            data = cubic_regression(seed=config.seed)
            x, y = data.x_train, data.y_train
        else:
            train = load_data(config).train
            x, y = train.x, train.y
        self.x = x.reshape(-1).numpy()
        self.y = y.reshape(-1).numpy()
