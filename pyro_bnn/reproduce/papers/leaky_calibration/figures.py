"""The sections of ``leaky-calibration``'s report drawn as figures: the slope sweep (the paper's Fig. 2), the
decalibration curves during training (Fig. 3) and the likelihood plateaus (section 2.1), each with its table and CSV
file; the sweep's and the plateaus' headlines are judged by the rules of :mod:`.verdicts` and :mod:`.analysis`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from pyro_bnn.plots import save_figure
from pyro_bnn.reproduce.papers.leaky_calibration.plan import ACTIVATIONS, COMPARABLE, LEAKY, PUBLISHED_TABLE_1
from pyro_bnn.reproduce.papers.leaky_calibration.verdicts import (
    ECE_SAMPLED,
    _cells,
    _count,
    _slope,
    _sweep_curve,
    _values,
    table_1_check,
    table_1_reason,
)
from pyro_bnn.reproduce.planned import Headline, Profile, RunRecord, Section, Status, Verdict
from pyro_bnn.reproduce.report import (
    format_mean_sd,
    markdown_table,
    mean_sd,
    overall_verdict,
    write_csv,
)


def _sweep(
    runs: list[RunRecord], profile: Profile, out: Path, records: list[RunRecord] | None = None
) -> tuple[Section, Headline]:
    """The sweep from the done Bayesian ``runs``; ``records``: the same of any status, the plan (default ``runs``)."""

    def of_sweep(found: list[RunRecord]) -> list[RunRecord]:
        # Table 1's ReLU runs are the sweep's slope 0; only the sweep's seeds are used, so every slope has as many
        return [
            r
            for r in found
            if r.spec.tag("objective") == "paper"
            and _slope(r.config.activation) in profile["slopes"]
            and r.config.seed < profile["sweep_seeds"]
        ]

    curve_of = lambda r: (r.config.model, r.config.dataset)  # noqa: E731
    curves, planned = _cells(of_sweep(runs), curve_of), _cells(of_sweep(runs if records is None else records), curve_of)
    rows, csv_rows, verdicts, reasons, missing = [], [], [], [], 0
    figure = Figure(figsize=(10, 4))
    axes = figure.subplots(1, 2)
    for model in profile["sweep_models"]:
        for dataset in profile["sweep_datasets"]:
            by_slope = _cells(curves.get((model, dataset), []), lambda r: (_slope(r.config.activation),))
            slopes = sorted(s for (s,) in by_slope)
            ece = {s: _values(by_slope[(s,)], ECE_SAMPLED) for s in slopes}
            acc = {s: _values(by_slope[(s,)], "accuracy") for s in slopes}
            if slopes:
                for ax, values in zip(axes, (ece, acc), strict=True):
                    means = [mean_sd(values[s])[0] for s in slopes]
                    sds = [mean_sd(values[s])[1] for s in slopes]
                    ax.errorbar(slopes, means, yerr=sds, marker="o", capsize=3, label=f"{model}, {dataset}")
            for s in slopes:
                rows.append([model, dataset, f"{s:g}", format_mean_sd(ece[s]), format_mean_sd(acc[s])])
                csv_rows += [
                    {
                        "model": model,
                        "dataset": dataset,
                        "slope": s,
                        "seed": r.config.seed,
                        "ece_sampled_10": r.metrics.get(ECE_SAMPLED),
                        "accuracy": r.metrics.get("accuracy"),
                    }
                    for r in sorted(by_slope[(s,)], key=lambda r: r.config.seed)
                ]
            verdict, why = _sweep_curve(ece)
            unlike = _sweep_unlike_the_paper(curves.get((model, dataset), []), runs, model, dataset)
            status = verdict.value
            if len(slopes) < len(profile["slopes"]):
                # inconclusive for the overall verdict (an unfinished grid never reads holds), counted apart
                verdict, why = Verdict.INCONCLUSIVE, f"{len(slopes)} of {len(profile['slopes'])} slopes have runs"
                status, missing = "runs missing", missing + 1
            elif len(curve := curves.get((model, dataset), [])) < (of := len(planned.get((model, dataset), []))):
                # every slope has runs, but not every seed: never judged on the seeds that happen to be there
                verdict, why = Verdict.INCONCLUSIVE, f"{of - len(curve)} of {of} planned"
                status, missing = "runs missing", missing + 1
            elif unlike:
                verdict, why = Verdict.NOT_COMPARABLE, f"{unlike}; {why}"
                status = verdict.value
            verdicts.append(verdict)
            reasons.append(f"{model} on {dataset}: {status} ({why})")
    for ax, label in zip(axes, ("ECE (10 bins, sampled labels)", "test accuracy"), strict=True):
        ax.set_xlabel("Leaky ReLU negative slope (0: ReLU)")
        ax.set_ylabel(label)
        ax.axvline(0, color="grey", lw=0.5)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    figure.suptitle("ECE and accuracy against the Leaky ReLU slope (mean ± sd over seeds)")
    save_figure(figure, out / "slopes.png")
    write_csv(out / "slopes.csv", csv_rows)
    table = markdown_table(["model", "data set", "slope", "ECE (10 bins, sampled)", "accuracy"], rows, "llrrr")
    headline = Headline(
        "ECE is highest at slope 0 (ReLU)",
        overall_verdict(verdicts),
        f"Curves: {_count(verdicts, missing)}. " + "; ".join(reasons),
    )
    text = f"Authors' objective, slopes {profile['slopes']}, seeds 0 to {profile['sweep_seeds'] - 1} at every slope."
    title = "ECE against the Leaky ReLU slope (the paper's Fig. 2)"
    return Section(title, text, [table], ["slopes.png"], ["slopes.csv"]), headline


def _sweep_unlike_the_paper(curve: list[RunRecord], runs: list[RunRecord], model: str, dataset: str) -> str:
    """Why a sweep curve is not comparable with the paper (empty when it is): a run of the ``curve`` that did not
    converge, or Table 1's cell for this net and data set (authors' objective, every seed of ``runs``) not
    comparable (:func:`~.verdicts.table_1_check`): the sweep trains at Table 1's scale, so a curve whose Table 1
    networks are unlike the paper's is unlike them too."""
    converged = COMPARABLE.check(curve, None)
    if not converged.comparable:
        return converged.reason
    published = PUBLISHED_TABLE_1.get((dataset, model))
    if published is None:
        return ""
    cell = [
        r for r in runs if r.spec.tag("objective") == "paper" and (r.config.model, r.config.dataset) == (model, dataset)
    ]
    leaky = [r for r in cell if r.config.activation == LEAKY]
    relu = [r for r in cell if r.config.activation == "relu"]
    why = table_1_reason(table_1_check(leaky, relu, published))
    return f"Table 1's cell not comparable ({why})" if why else ""


def _decalibration(runs: list[RunRecord], profile: Profile, out: Path) -> Section:
    table1 = [r for r in runs if r.config.activation in ACTIVATIONS and r.spec.tag("objective") == "paper"]
    cells = _cells(table1, lambda r: (r.config.model, r.config.dataset))
    figure = Figure(figsize=(10, 3.2 * max(1, len(cells))))
    axes = np.atleast_2d(figure.subplots(max(1, len(cells)), 2, squeeze=False))
    rows = []
    for row_axes, ((model, dataset), cell_runs) in zip(axes, sorted(cells.items()), strict=False):
        for activation, name in ACTIVATIONS.items():
            histories = [r.history for r in cell_runs if r.config.activation == activation and r.history]
            rises = [_rises_after_minimum(h) for h in histories]
            rows.append([model, dataset, name, f"{sum(rises)} / {len(rises)}"])
            for ax, key in zip(row_axes, ("val_accuracy", "val_ece"), strict=True):
                for i, history in enumerate(histories):
                    epochs = [e["epoch"] for e in history if key in e]
                    ax.plot(
                        epochs,
                        [e[key] for e in history if key in e],
                        color="C0" if activation == "relu" else "C1",
                        alpha=0.8,
                        label=name if i == 0 else None,
                    )
                ax.set_title(f"{model}, {dataset}: {key.replace('_', ' ')}", fontsize=9)
                ax.set_xlabel("epoch")
                if ax.get_legend_handles_labels()[0]:
                    ax.legend(fontsize=8)
    figure.tight_layout()
    save_figure(figure, out / "decalibration.png")
    header = ["model", "data set", "activation", "runs whose validation ECE rose after its minimum"]
    table = markdown_table(header, rows, "lllr")
    text = (
        "Validation accuracy and ECE (15 bins, mean probabilities) per epoch under the authors' objective, one line "
        "per seed. \"Rose\" means the last epoch's validation ECE exceeds the run's minimum by more than 0.005 "
        "(the paper's Fig. 3 shows ReLU's ECE falling, then rising before accuracy has converged)."
    )
    return Section("Decalibration during training (the paper's Fig. 3)", text, [table], ["decalibration.png"])


def _rises_after_minimum(history: list[dict]) -> bool:
    ece = [e["val_ece"] for e in history if "val_ece" in e]
    return bool(ece) and ece[-1] > min(ece) + 0.005


def _plateaus(records: list[RunRecord], out: Path) -> tuple[Section, Headline]:
    runs = [r for r in records if r.spec.tag("part") == "plateaus" and r.status is Status.DONE]
    rows, csv_rows = [], []
    pooled: dict[str, list[int]] = {a: [0, 0] for a in ACTIVATIONS}
    every_relu_layer, any_leaky = True, False
    figure = Figure(figsize=(8, 3.5))
    ax = figure.subplots()
    dead_inputs = None
    first_layer: dict[str, float] = {}
    for i, run in enumerate(sorted(runs, key=lambda r: (r.config.model, r.config.activation))):
        fractions, sampled = run.metrics["plateau_fraction"], run.metrics["plateau_sampled"]
        name = ACTIVATIONS.get(run.config.activation, run.config.activation)
        dead_inputs = run.metrics.get("dead_input_fraction", dead_inputs)
        for position, (layer, fraction) in enumerate(fractions.items()):
            flagged = round(fraction * sampled[layer])
            first = position == 0
            note = " (first layer: not judged)" if first else ""
            rows.append([run.config.model, name, layer + note, f"{flagged}/{sampled[layer]} ({fraction:.0%})"])
            csv_rows.append(
                {
                    "model": run.config.model,
                    "activation": run.config.activation,
                    "layer": layer,
                    "with_plateau": flagged,
                    "sampled": sampled[layer],
                    "fraction": fraction,
                }
            )
            if first:
                first_layer[run.config.activation] = fraction
                continue  # its plateaus include weights on inputs that are 0 on every image, flat for any activation
            pooled.setdefault(run.config.activation, [0, 0])
            pooled[run.config.activation][0] += flagged
            pooled[run.config.activation][1] += sampled[layer]
            if run.config.activation == "relu" and flagged == 0:
                every_relu_layer = False
            if run.config.activation == LEAKY and flagged:
                any_leaky = True
        width = 0.8 / len(runs)
        positions = np.arange(len(fractions)) + width * i
        ax.bar(positions, list(fractions.values()), width=width, label=f"{run.config.model} {name}")
        ax.set_xticks(np.arange(len(fractions)) + 0.4 - width / 2, list(fractions), fontsize=8)
    ax.set_ylabel("sampled weights with a plateau")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    save_figure(figure, out / "plateaus.png")
    write_csv(out / "plateaus.csv", csv_rows)
    relu_fraction = pooled["relu"][0] / max(1, pooled["relu"][1])
    leaky_fraction = pooled[LEAKY][0] / max(1, pooled[LEAKY][1])
    if not pooled["relu"][1] or not pooled[LEAKY][1]:
        verdict, why = Verdict.INCONCLUSIVE, "the plateau runs have not finished"
    elif every_relu_layer and not any_leaky:
        verdict, why = Verdict.HOLDS, "every judged ReLU weight tensor has weights with a plateau, no Leaky one has any"
    elif leaky_fraction >= relu_fraction:
        verdict, why = Verdict.DOES_NOT_HOLD, "the Leaky networks have at least as many plateaus as the ReLU ones"
    else:
        verdict, why = Verdict.INCONCLUSIVE, "some ReLU layers show none, or some Leaky weights show plateaus"
    reason = (
        f"Pooled over the layers after the first: ReLU {relu_fraction:.0%}, Leaky {leaky_fraction:.0%} of the "
        f"sampled weights; {why}."
    )
    if first_layer:
        shown = ", ".join(f"{ACTIVATIONS.get(a, a)} {f:.0%}" for a, f in sorted(first_layer.items()))
        reason += f" First layer (not judged, see the section): {shown}."
    dead = "" if dead_inputs is None else f" ({dead_inputs:.1%} of the input pixels are 0 on every slice image here)"
    text = (
        "Deterministic networks (`--guide mle`) trained on MNIST images; the likelihood of those training images as "
        "one sampled weight varies (`pyro-bnn diagnose --slices`), flagged when it has a flat plateau. The first "
        "layer is shown but not judged: a weight on an input pixel that is 0 on every image has an exactly flat "
        f"likelihood under any activation{dead}, which is a property of the data, not of ReLU; the paper's "
        "mechanism (Proposition 1: inputs h >= 0 from a ReLU) acts on the layers after it."
    )
    header = ["model", "activation", "weight tensor", "sampled weights with a plateau"]
    table = markdown_table(header, rows, "lllr")
    title = "Flat plateaus of the likelihood (the paper's section 2.1)"
    section = Section(title, text, [table], ["plateaus.png"], ["plateaus.csv"])
    return section, Headline("ReLU networks have flat likelihood plateaus and Leaky ReLU ones do not", verdict, reason)
