"""The report of ``priors`` put together: the sections and verdicts of :mod:`.analysis` (tables), :mod:`.figures`
(maps, losses, sparsity) and :mod:`.cnn` (the MNIST CNN), in the report's order. It imports them; none of them imports
it, so that the analysis and the figures built on it form no import circle."""

from __future__ import annotations

from pathlib import Path

from pyro_bnn.reproduce.papers.priors.analysis import (
    Cells,
    _comparability_section,
    _gain_table,
    _hierarchical_headline,
    _noise_headline,
    _noise_text,
    _results_section,
    _tuning_section,
    absences_by_panel,
    add_validation_scores,
    gain_arms,
    panel_notes,
)
from pyro_bnn.reproduce.papers.priors.cnn import cnn_section
from pyro_bnn.reproduce.papers.priors.figures import SHARED_SCALE, loss_section, map_section, sparsity_section
from pyro_bnn.reproduce.planned import Analysis, Profile, RunRecord
from pyro_bnn.reproduce.report import select, write_csv


def analyse(records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
    """The report of ``priors``: the synthetic tables, figures and verdicts (:mod:`.analysis`, :mod:`.figures`),
    then the CNN's (:mod:`.cnn`)."""
    for record in select(records, part="synthetic"):
        if "val_accuracy" not in record.metrics:
            add_validation_scores(record)
    cells = Cells(records, profile)
    sections, headlines = [], []
    if cells.profile["datasets"]:
        sections.append(_noise_text(cells))
    if cells.panels():
        sections.append(_tuning_section(cells, out))
        results, csv_rows = _results_section(cells, out)
        write_csv(out / "synthetic.csv", csv_rows)
        table, per_panel, checks = _gain_table(cells)
        results.tables.append(
            "**Gain of the best hierarchical prior over the best tuned fixed scale** (both chosen by validation "
            "accuracy), test accuracy, per-seed differences on the same points; each cell's training state and the "
            "verdict on the panel (comparability and rules: the next section)\n\n" + table
        )
        sparsity_cells = {("laplace", SHARED_SCALE): "sparsity", ("cauchy", SHARED_SCALE): "sparsity"}
        judged = {(d, n): sparsity_cells for d, n in cells.panels() if n == "high"}
        sections += [results, _comparability_section(cells, judged), loss_section(cells, out), map_section(cells, out)]
        sparsity, sparsity_headline = sparsity_section(cells, out)
        sections.append(sparsity)
        absent, notes, arms = absences_by_panel(cells), panel_notes(cells), gain_arms(cells)
        headlines += [
            _hierarchical_headline(per_panel, checks, profile["datasets"], absent, notes, arms),
            _noise_headline(per_panel, checks, profile["datasets"], absent, notes, tuple(profile["noises"]), arms),
            sparsity_headline,
        ]
    cnn, cnn_headline = cnn_section(select(records, part="cnn"), out)
    sections.append(cnn)
    headlines.append(cnn_headline)
    return Analysis(sections, headlines)
