"""The figures of ``priors`` on moons and circles: loss curves, predictive maps and last-layer posteriors.

Maps and weight histograms are drawn from the posterior each record keeps (the ``posterior`` measurement: the
mean-field guide's locations and scales), so the report rebuilds from the committed records without checkpoints.

Verdict rule of **the Laplace posterior is sparser than the Cauchy one** (per data set, at the high noise, both
families at the fixed scale :data:`SHARED_SCALE`): a run's sparsity is the mean over its last layer's weights of
the posterior mass within ±:data:`NEAR_ZERO` of 0; Laplace's and Cauchy's per-seed values compared by Welch's t-test
at level 0.05, the difference stated as mean ± the half-width of its 95 % interval. *Not comparable at this scale*
unless both cells are comparable (:func:`~.analysis.cell_check`: every run converged; the paper gives no
accuracy for them). *Holds* when Laplace's is larger and separated, *does not hold* when it is smaller and
separated, *no effect within ±x* when the interval covers zero within ±:data:`SPARSITY_TIGHT` (x the larger of its
ends in absolute value), *inconclusive* otherwise; one verdict over the comparable data sets. A data set whose two
cells are short of any planned run is not judged on the seeds it has: *inconclusive*, *runs missing (k of n
planned)*, tallied apart.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from pyro_bnn.plots import plot_predictive_map, save_figure
from pyro_bnn.predict import Samples
from pyro_bnn.predict.maps import map_bounds, predictive_map
from pyro_bnn.reproduce.comparability import CellCheck
from pyro_bnn.reproduce.papers.priors.analysis import (
    Cells,
    cell_check,
    cell_name,
    comparable_count,
    effect_text,
    joint_check,
    no_effect_width,
    verdict_text,
    welch_interval,
)
from pyro_bnn.reproduce.papers.priors.cells import absent_text
from pyro_bnn.reproduce.papers.priors.measures import draw_stored_posterior, stored_posterior
from pyro_bnn.reproduce.papers.priors.plan import KL_WARMUP
from pyro_bnn.reproduce.papers.priors.verdicts import PanelAbsence, headline_or_unjudged, not_judged
from pyro_bnn.reproduce.planned import Headline, RunRecord, Section, Verdict
from pyro_bnn.reproduce.report import compare, format_mean_sd, markdown_table, overall_verdict, runs_missing
from pyro_bnn.runs.runs import build_bnn, load_data

NEAR_ZERO = 0.05
"""Half-width of the interval around 0 that counts a weight's posterior mass as 'at zero'."""

SPARSITY_TIGHT = 0.05
"""The widest interval of the Laplace - Cauchy difference in near-zero mass, as ±x around zero, that reads *no effect
within ±x*. The mass is a mean over the last layer's ten weights, so one weight moving its whole posterior into
±:data:`NEAR_ZERO` changes it by 0.1; an interval within ±0.05 rules out even half of that, while the paper's Fig. 3
shows eight of the ten Laplace weights centred at zero and none of the Cauchy ones."""

SHARED_SCALE = "1"
"""The fixed scale at which the Laplace and Cauchy posteriors are compared (the verdict and the figure): at their
own tuned scales the comparison would measure the scales as much as the families (the table has those too)."""

LAST_LAYER = "out.weight"
"""The last layer's weight site of ``mlp:5,5``."""

MAP_SAMPLES = 200
MAP_RESOLUTION = 120
STYLE = {"fixed": "-", "hyper": "--", "flat": ":"}
COLOURS = {"normal": "tab:blue", "laplace": "tab:orange", "cauchy": "tab:green", "flat": "black"}


# ----------------------------------------------------------------------------------------------------- loss curves


def _last_quarter_change(curve: list[float]) -> float:
    """Relative fall of a loss curve over the last quarter of the steps: ``(L(3/4) - L(end)) / |L(end)|``, each end
    the mean of a twentieth of the rows."""
    k = max(1, len(curve) // 20)
    quarter = len(curve) * 3 // 4
    at_three_quarters = float(np.mean(curve[max(0, quarter - k // 2) : quarter + k - k // 2]))
    end = float(np.mean(curve[-k:]))
    return (at_three_quarters - end) / abs(end) if end else math.inf


def loss_section(cells: Cells, out: Path) -> Section:
    panels = cells.panels()
    figure = Figure(figsize=(5.0 * max(1, len(panels)), 4.2), layout="constrained")
    axes = figure.subplots(1, max(1, len(panels)), squeeze=False)[0]
    rows = []
    warmup = KL_WARMUP * cells.profile["steps"]
    for ax, (dataset, noise) in zip(axes, panels, strict=False):
        changes, proper = {}, []
        for family, scale, kind in cells.rows(dataset, noise):
            runs = [r for r in cells.runs[(dataset, noise, family, scale)] if r.history]
            if not runs:
                continue
            shortest = min(runs, key=lambda r: len(r.history))
            length = len(shortest.history)
            mean = np.mean([[row["loss"] for row in r.history[:length]] for r in runs], axis=0)
            steps = [row["epoch"] for row in shortest.history]
            ax.plot(steps, mean, STYLE[kind], color=COLOURS[family], lw=1, label=cell_name(family, scale))
            changes[cell_name(family, scale)] = _last_quarter_change(list(mean))
            if kind != "flat":
                proper.append(mean[len(mean) // 10 :])
        if changes:
            name = max((n for n in changes if n != "flat"), key=lambda n: abs(changes[n]), default=None)
            flat = changes.get("flat")
            sigma = {
                flat_prior: [
                    r.metrics["mean_posterior_sigma"]
                    for f, sc, kind in cells.rows(dataset, noise)
                    if (kind == "flat") == flat_prior
                    for r in cells.runs[(dataset, noise, f, sc)]
                ]
                for flat_prior in (True, False)
            }
            rows.append(
                (dataset, noise, f"{100 * changes[name]:.1f} % ({name})" if name else "—",
                 f"{100 * flat:.1f} %" if flat is not None else "—",
                 format_mean_sd(sigma[True], 0) if sigma[True] else "—", format_mean_sd(sigma[False], 2))
            )  # fmt: skip
        if proper:  # the flat prior's curve has no floor: the limits are the proper priors'
            low, high = float(np.min([c.min() for c in proper])), float(np.max([c.max() for c in proper]))
            ax.set_ylim(low - 0.05 * (high - low), high + 0.05 * (high - low))
        ax.axvspan(0, warmup, color="grey", alpha=0.15, lw=0)
        ax.set(title=f"{dataset}, {noise} noise", xlabel="step", ylabel="negative ELBO (mean over seeds)")
    axes[0].legend(fontsize=6, ncol=2)
    save_figure(figure, out / "loss_curves.png")
    text = (
        "The full-batch negative ELBO of every prior, mean over seeds (each point the mean over a bin of steps); "
        "the grey band is the KL warm-up, during which the loss rises with the KL's weight. The table gives, per "
        "panel, the largest relative fall of a proper prior's curve over the last quarter of the steps (small "
        "means flat), and the flat prior's: its negative ELBO has no minimum (the guide's entropy grows without "
        "bound as the scales of weights the likelihood no longer sees, behind saturated tanh units, grow: see the "
        "mean posterior sigma of its weights at the end against the proper priors'), so its curve keeps falling. "
        "Whether a run converged, for the verdicts, is judged on its validation accuracy instead (the comparability "
        "table), which rises as a run improves under every prior."
    )
    header = ["data set", "noise", "largest fall in the last quarter (proper priors)", "flat prior",
              "mean posterior sigma, flat prior", "mean posterior sigma, proper priors"]  # fmt: skip
    return Section("Training to convergence", text, [markdown_table(header, rows)], ["loss_curves.png"])


# ------------------------------------------------------------------------------------------------------------ maps


def _map_figure(record: RunRecord, title: str, path: Path) -> None:
    config = record.config
    data = load_data(config)
    bnn, _ = build_bnn(config, data)
    samples = draw_stored_posterior(record.metrics, MAP_SAMPLES, seed=config.seed)
    pmap = predictive_map(
        bnn,
        Samples(samples),
        map_bounds(torch.cat([data.train.x, data.test.x])),
        resolution=MAP_RESOLUTION,
    )
    figure = plot_predictive_map(
        pmap, data.train.x, data.train.y, quantities=("probability", "sd", "mutual_information"), title=title
    )
    save_figure(figure, path)


def map_section(cells: Cells, out: Path) -> Section:
    figures, lines = [], []
    for dataset, noise in cells.panels():
        if noise != "high":
            continue
        best, hyper = cells.best(dataset, noise), cells.best(dataset, noise, "hyper")
        shown = [("best", best), ("best-hierarchical", hyper), ("flat", ("flat", "none"))]
        for name, cell in shown:
            runs = cells.runs.get((dataset, noise, *cell)) if cell else None
            if not runs:
                continue
            record = runs[0]
            file = f"map-{dataset}-{name}.png"
            accuracy = format_mean_sd([r.metrics["accuracy"] for r in runs])
            title = f"{dataset} ({noise} noise): {cell_name(*cell)}, seed {record.spec.tag('seed')}"
            _map_figure(record, title, out / file)
            figures.append(file)
            lines.append(
                f"- `{file}`: {name.replace('-', ' ')}, {cell_name(*cell)}, seed {record.spec.tag('seed')} (test "
                f"accuracy over seeds {accuracy})"
            )
    text = (
        "The paper's Fig. 2 pairs, at the high noise: the posterior-mean p(class 1), its standard deviation over "
        f"{MAP_SAMPLES} posterior samples and the mutual information between label and weights, training points "
        "on top; for the best prior of each data set (by validation accuracy), the best hierarchical prior and the "
        "flat prior. One seed each (its posterior samples drawn from the stored posterior).\n\n" + "\n".join(lines)
    )
    return Section("Predictive maps", text, figures=figures)


# -------------------------------------------------------------------------------------------- last-layer sparsity


def near_zero_mass(record: RunRecord, site: str = LAST_LAYER) -> torch.Tensor:
    """Posterior mass within ±:data:`NEAR_ZERO` of 0 of every weight of ``site`` (a flat tensor)."""
    loc, scale = stored_posterior(record.metrics)[site]
    normal = torch.distributions.Normal(loc.double().flatten(), scale.double().flatten())
    return normal.cdf(torch.tensor(NEAR_ZERO)) - normal.cdf(torch.tensor(-NEAR_ZERO))


def _histograms(cells: Cells, dataset: str, noise: str, path: Path) -> bool:
    chosen = [(f, SHARED_SCALE) for f in ("laplace", "cauchy")]
    runs = [cells.runs.get((dataset, noise, f, s)) for f, s in chosen]
    if not all(runs):
        return False
    figure = Figure(figsize=(10, 3.8), layout="constrained")
    axes = figure.subplots(1, 2, sharey=False)
    for ax, (family, scale), cell_runs in zip(axes, chosen, runs, strict=True):
        record = cell_runs[0]
        draws = draw_stored_posterior(record.metrics, 2000, seed=record.config.seed)[LAST_LAYER]
        draws = draws.flatten(1)  # (S, weights)
        limit = float(draws.abs().quantile(0.995))
        bins = np.linspace(-limit, limit, 80)
        for j in range(draws.shape[1]):
            ax.hist(draws[:, j].numpy(), bins=bins, histtype="step", density=True, lw=1)
        ax.axvspan(-NEAR_ZERO, NEAR_ZERO, color="grey", alpha=0.25, lw=0)
        mass = near_zero_mass(record)
        mostly = f"{int((mass > 0.5).sum())} of {mass.numel()} weights mostly in ±{NEAR_ZERO}"
        ax.set(
            title=f"{cell_name(family, scale)}, seed {record.spec.tag('seed')}: {mostly}",
            xlabel="last-layer weight",
            ylabel="posterior density",
        )
        ax.title.set_fontsize(9)
    figure.suptitle(f"{dataset} ({noise} noise)")
    save_figure(figure, path)
    return True


def _masses(cells: Cells, dataset: str, noise: str, family: str, scale: str | None) -> list[float]:
    """Per-seed mean near-zero mass of the last layer of one cell (none when the cell has no runs)."""
    runs = cells.runs.get((dataset, noise, family, scale), []) if scale else []
    return [float(near_zero_mass(r).mean()) for r in runs]


def _sparsity_verdict(laplace: list[float], cauchy: list[float], check: CellCheck) -> tuple[Verdict, float | None]:
    """The verdict on one data set's per-seed near-zero masses (the module docstring's rule) and the x of its *no
    effect within ±x* (None for any other verdict)."""
    if not (laplace and cauchy):
        return Verdict.INCONCLUSIVE, None
    if not check.comparable:
        return Verdict.NOT_COMPARABLE, None
    if min(len(laplace), len(cauchy)) < 2:
        return Verdict.INCONCLUSIVE, None
    test = compare(laplace, cauchy)
    if test.separated:
        return (Verdict.HOLDS if test.gap > 0 else Verdict.DOES_NOT_HOLD), None
    width = no_effect_width(*welch_interval(laplace, cauchy), tight=SPARSITY_TIGHT)
    return (Verdict.NO_EFFECT, width) if width is not None else (Verdict.INCONCLUSIVE, None)


def sparsity_section(cells: Cells, out: Path) -> tuple[Section, Headline]:
    rows, figures, verdicts, widths, reasons, comparable, missing = [], [], [], [], [], [], 0
    absent: dict[str, PanelAbsence] = {}  # per data set without both cells at s = SHARED_SCALE: its uncounted runs
    for dataset, noise in cells.panels():
        for family, scale, _ in cells.rows(dataset, noise):
            masses = [near_zero_mass(r) for r in cells.runs[(dataset, noise, family, scale)]]
            rows.append(
                (dataset, noise, cell_name(family, scale), format_mean_sd([float(m.mean()) for m in masses]),
                 format_mean_sd([float((m > 0.5).double().mean()) for m in masses]))
            )  # fmt: skip
        if noise != "high":
            continue
        file = f"last-layer-{dataset}.png"
        if _histograms(cells, dataset, noise, out / file):
            figures.append(file)
        laplace, cauchy = (_masses(cells, dataset, noise, f, SHARED_SCALE) for f in ("laplace", "cauchy"))
        tuned = {f: cells.tuned(dataset, noise, f) for f in ("laplace", "cauchy")}
        at_tuned = {f: _masses(cells, dataset, noise, f, s) for f, s in tuned.items()}
        check = joint_check(
            {
                cell_name(f, SHARED_SCALE): cell_check(cells, dataset, noise, f, SHARED_SCALE)
                for f in ("laplace", "cauchy")
            }
        )
        verdict, width = _sparsity_verdict(laplace, cauchy, check)
        # both families ran, but not every planned seed: never judged on the seeds it has, counted apart
        arms = [cells.arm(dataset, noise, f, SHARED_SCALE) for f in ("laplace", "cauchy")]
        if short := runs_missing(*arms) if laplace and cauchy else "":
            verdict, width, missing = Verdict.INCONCLUSIVE, None, missing + 1
        verdicts.append(verdict)
        widths.append(width)
        comparable.append(check.comparable and not short if laplace and cauchy else None)
        if not (laplace and cauchy):
            shared = [(f, SHARED_SCALE) for f in ("laplace", "cauchy")]
            absent[dataset] = PanelAbsence(counts=cells.absent(dataset, noise, "fixed", shared))
            found = absent_text(absent[dataset].counts)
            reasons.append(
                f"{dataset}: not judged: no counted runs of both families at s = {SHARED_SCALE}"
                + (f" ({found})" if found else "")
            )
            continue
        if short:
            reasons.append(f"{dataset}: {verdict.value}, {short}")
            continue
        if verdict is Verdict.NOT_COMPARABLE:
            reasons.append(f"{dataset}: {verdict.value} ({check.reason})")
            continue
        if min(len(laplace), len(cauchy)) < 2:
            reasons.append(f"{dataset}: fewer than 2 seeds at s = {SHARED_SCALE}")
            continue
        low, high = welch_interval(laplace, cauchy)
        tuned_text = ", ".join(
            f"{f.capitalize()} {np.mean(v):.3f} at its tuned s = {tuned[f]}" for f, v in at_tuned.items() if v
        )
        reasons.append(
            f"{dataset}: mass within ±{NEAR_ZERO} at s = {SHARED_SCALE} {np.mean(laplace):.3f} (Laplace) against "
            f"{np.mean(cauchy):.3f} (Cauchy), difference {effect_text(np.mean(laplace) - np.mean(cauchy), low, high)}: "
            f"{verdict_text(verdict, width)} ({tuned_text})"
        )
    text = (
        f"The paper's Fig. 3: the posteriors of the last layer's 10 weights under the Laplace and the Cauchy prior, "
        f"both at the scale s = {SHARED_SCALE} so that the family is the only difference (high noise, one seed), one "
        f"histogram of 2 000 draws per weight; the grey band is ±{NEAR_ZERO}. The table gives, for every prior of "
        f"the tables above, the mean posterior mass within ±{NEAR_ZERO} of 0 over the last layer's weights and the "
        "share of those weights with most of their mass there (mean ± sd over seeds). The training state of the two "
        f"cells at s = {SHARED_SCALE} the verdict reads is in the comparability table (*read by* sparsity)."
    )
    header = ["data set", "noise", "prior", f"mass within ±{NEAR_ZERO}", "weights mostly there"]
    overall = overall_verdict(verdicts)
    headline = headline_or_unjudged(
        f"The Laplace prior's last-layer posterior is sparser (more mass within ±{NEAR_ZERO} of 0) than the Cauchy "
        f"prior's (both at s = {SHARED_SCALE}).",
        overall,
        (f"{comparable_count(comparable, 'cells (data sets at the high noise)', missing)}; " + "; ".join(reasons) + ".")
        if reasons
        else "no high-noise runs.",
        widths,
        comparable,
        not_judged(f"the Laplace and the Cauchy prior at s = {SHARED_SCALE}", absent),
    )
    section = Section("Last-layer posteriors: Laplace against Cauchy", text, [markdown_table(header, rows)], figures)
    return section, headline


__all__ = ["loss_section", "map_section", "near_zero_mass", "sparsity_section"]
