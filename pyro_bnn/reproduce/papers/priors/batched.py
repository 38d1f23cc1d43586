"""How the two cells of a ``priors`` gain trained, batched (:mod:`pyro_bnn.batched`) or singly, and the offset
batching was measured to make (:data:`BATCHED_OFFSET`), which a gain's interval does not include. Re-exported by
:mod:`.verdicts`, where they were first defined.
"""

from __future__ import annotations

from pyro_bnn.reproduce.papers.priors.cells import Cells
from pyro_bnn.reproduce.planned import RunRecord

BATCHED_CHECK = "bench/BATCHED_CHECK.md"
"""Where batched training was measured against training one run at a time (the same cells and seeds)."""

BATCHED_OFFSET = {("moons", "high"): 0.003, ("moons", "low"): 0.0006, ("circles", "high"): -0.0038,
                  ("circles", "low"): -0.0006}  # fmt: skip
"""Test accuracy of batched minus one-by-one training per panel, the median over its 15 fixed-scale cells (5 seeds
each, the ``cpu`` profile's 1 000 steps) in :data:`BATCHED_CHECK`: the offset a gain of singly trained hierarchical
cells over batched fixed-scale ones may carry (moons high: batched higher in 13 of 15 cells; circles high: lower in
11 of 15; the cells of a panel share seeds, so their signs are correlated)."""


def training_path(runs: list[RunRecord]) -> tuple[str, str]:
    """How a cell's runs trained: its kind (``singly``, ``batched`` or ``mixed``) and that in words (``singly``,
    ``batched (32 to a batch)``, ``mixed (3 of 5 batched, 32 to a batch)``)."""
    sizes = [int(r.metrics.get("batched_runs", 1)) for r in runs]
    batched = [n for n in sizes if n > 1]
    if not batched:
        return "singly", "singly"
    size = f"{min(batched)}" if min(batched) == max(batched) else f"{min(batched)}-{max(batched)}"
    if len(batched) == len(sizes):
        return "batched", f"batched ({size} to a batch)"
    return "mixed", f"mixed ({len(batched)} of {len(sizes)} batched, {size} to a batch)"


def gain_paths(
    cells: Cells, dataset: str, noise: str, hyper: tuple[str, str], fixed: tuple[str, str]
) -> tuple[bool, list[str]]:
    """Whether the two cells of a gain trained differently (one batched, the other singly or mixed: batch sizes
    aside), and how each did in words, ``[hierarchical, fixed]`` (:func:`training_path`)."""
    paths = [training_path(cells.runs.get((dataset, noise, *c), [])) for c in (hyper, fixed)]
    return paths[0][0] != paths[1][0], [words for _, words in paths]


def batched_offset_text(dataset: str, noise: str, *, brief: bool = False) -> str:
    """The offset batching was measured to make in a panel (:data:`BATCHED_OFFSET`), in words: ``batched - single
    +0.003`` (``brief``, a table cell) or with its source; where none was measured, that."""
    offset = BATCHED_OFFSET.get((dataset, noise))
    if offset is None:
        return "not measured" if brief else f"no batched-against-single measurement for this panel in `{BATCHED_CHECK}`"
    if brief:
        return f"batched - single {offset:+.3f}"
    return (
        f"batched minus single test accuracy {offset:+.3f} (median over this panel's fixed-scale cells, "
        f"`{BATCHED_CHECK}`, cpu profile)"
    )


def crossing_note(cells: Cells, dataset: str, noise: str, hyper: tuple[str, str], fixed: tuple[str, str]) -> str:
    """Empty when the two cells of a gain trained the same way; else how each trained and the offset batching was
    measured to make (:func:`batched_offset_text`), which the gain's interval does not include."""
    crossed, paths = gain_paths(cells, dataset, noise, hyper, fixed)
    if not crossed:
        return ""
    return (
        f"hierarchical trained {paths[0]}, fixed scale {paths[1]}: {batched_offset_text(dataset, noise)}, "
        "an offset the gain's interval does not account for"
    )
