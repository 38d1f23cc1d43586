"""The cubic part of ``implicit-bnn``'s report: the paper's Fig. 1, the table of RMSE, NLL and coverage inside
and outside the data's range per depth, and the depth verdict.

**Weight-space VI underfits more as depth grows; node noise does not** (RMSE inside the data's range, Welch's t-test
over seeds at level 0.05, :func:`~pyro_bnn.reproduce.report.compare`). *Holds* when VI's RMSE at the greatest depth
is above its RMSE at depth 1 (separated), node noise's is not (no separated rise) and node noise is below VI at the
greatest depth (separated); *does not hold* when VI's RMSE does not rise (a separated gap <= 0), node noise's does
(a separated rise), or node noise is above VI at the greatest depth (separated); *inconclusive* otherwise.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from pyro_bnn.data.synthetic import cubic_regression
from pyro_bnn.plots import save_figure
from pyro_bnn.reproduce.report import compare, format_mean_sd, markdown_table, mean_sd, select, write_csv
from pyro_bnn.reproduce.spec import Headline, Profile, RunRecord, Section, Verdict

CUBIC_METHODS = {"vi": "weight-space VI", "node-noise": "node noise (K = 8)"}


def cubic_section(records: list[RunRecord], profile: Profile, out: Path) -> tuple[Section, Headline]:
    depths = profile["depths"]
    rows, csv_rows = [], []
    rmse: dict[tuple[str, int], list[float]] = defaultdict(list)
    for depth in depths:
        for method, name in CUBIC_METHODS.items():
            runs = select(records, part="cubic", method=method, depth=depth)
            parts = {side: [r.metrics["cubic"][side] for r in runs] for side in ("inside", "outside")}
            rmse[method, depth] = [p["rmse"] for p in parts["inside"]]
            rows.append(
                [
                    depth,
                    name,
                    len(runs),
                    *(format_mean_sd([p[key] for p in parts[side]], 2) for key in ("rmse", "nll") for side in parts),
                    *(format_mean_sd([p["coverage"] for p in parts[side]], 2) for side in parts),
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
            "coverage inside", "coverage outside",
        ],
        rows,
        "llrrrrrrr",
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
    reason = (
        f"RMSE inside the data's range, {min(depths)} -> {deepest} hidden layers: weight-space VI "
        f"{m['vi', min(depths)]:.2f} -> {m['vi', deepest]:.2f}, node noise {m['node-noise', min(depths)]:.2f} -> "
        f"{m['node-noise', deepest]:.2f} (the noise sd is 2)."
    )
    text = (
        "Predictive mean ± 2 sd (noise included) of the first seed over the test grid, with the training data and "
        "x³ (the paper's Fig. 1). RMSE and NLL against the noiseless x³; coverage: the share of test points whose x³ "
        "lies within mean ± 2 sd. *Inside*: the training inputs' range [-3, -1) ∪ [1, 3); *outside*: the gap "
        "[-1, 1) and both ends out to ±4. Mean ± sd over seeds; per-seed values in `cubic.csv`."
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
            if data is None or data.seed != runs[0].config.seed:
                data = _CubicData(runs[0].config.seed)
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
    """The training points of the cubic for one seed (regenerated: the data set is a deterministic function of
    the seed)."""

    def __init__(self, seed: int) -> None:
        data = cubic_regression(seed=seed)
        self.seed = seed
        self.x = data.x_train.reshape(-1).numpy()
        self.y = data.y_train.reshape(-1).numpy()
