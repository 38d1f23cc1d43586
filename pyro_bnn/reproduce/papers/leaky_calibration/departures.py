"""Where ``leaky-calibration`` departs from the One Simple Trick authors' code (repository
KsawerySmoczynski/One-simple-trick-to-fix-your-bayesian-neural-network, branch ``dev``) in ways its committed grids
keep: their records cannot be recomputed without the checkpoints, which are not committed, and their run ids fix
their training settings. Each departure is stated with the authors' value, ours and the measured or expected size
of its effect; the Table 1 section of every report quotes them (:func:`departures`).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence

from pyro_bnn.reproduce.papers.leaky_calibration.plan import COMPARABLE, PUBLISHED_TABLE_1
from pyro_bnn.reproduce.planned import RunRecord

ECE_BINNING = (
    "*ECE bin edges.* The sampled-label ECE (10 bins) puts a confidence on a bin edge in the lower bin, (lower, "
    "upper] (`pyro_bnn.evaluation.calibration.assign_bins`); the authors' `src/metrics/classification/ece.py` takes "
    "bin `int((conf.double() - eps) * 10)` of the float32 label frequencies (eps the float64 machine epsilon), so the"
    " float32 values of 0.1, 0.2, 0.3, 0.4, 0.6 and 0.8, a hair above the exact edge, fall in the upper bin (0.5, "
    "0.7, 0.9 and 1 stay in the lower). With 50 sampled labels a confidence of 40/50 is such a value: two points at "
    "40/50 (correct) and 37/50 (wrong) score 0.270 here and 0.470 by the authors' rule. The committed records hold "
    "the ECE only. Measured on retrained copies of the 3FC runs of seed 0 (the full-data settings of `full-3fc` and "
    "`gpu`), over 200 label draws each, the authors' rule minus ours is +0.0001 (MNIST ReLU and Leaky, sd 0.0001), "
    "-0.0004 (Fashion-MNIST ReLU, sd 0.0004) and +0.0010 (Fashion-MNIST Leaky, sd 0.0003), below the seeds' spread in"
    " every committed cell (ECE sd 0.001-0.014); simulated predictives at the `gpu` CONV arms' accuracy (0.967) and "
    "ECE (0.034, 0.054) give means within ±0.00003 (sd 0.0002). Every comparable cell's verdict, recomputed with the "
    "measured differences (4 000 draws), is unchanged. The narrowest: `full-3fc`'s MNIST 3FC *no effect* turns "
    "*holds* if its gap moves 0.0012 toward Leaky (the MNIST copies moved both arms by the same +0.0001), and `gpu`'s"
    " MNIST CONV *holds* turns *inconclusive* if its gap moves 0.0014 toward zero (no CONV network was retrained; a "
    "full-data CONV run takes hours on a CPU)."
)
"""The sampled-label ECE of every committed grid is binned the library's way, not the authors' (the measure
``sampled_label_ece`` is kept: the records cannot be recomputed without checkpoints)."""


INPUT_SCALING = (
    '*Input scaling.* The runs scale pixels to [0, 1] (`normalization="unit"`, /255); the authors\' MNIST and '
    "Fashion-MNIST data modules both apply `transforms.Normalize([0.1307], [0.3081])` after `ToTensor()`, MNIST's "
    "constants on Fashion-MNIST too: inputs 3.25 times as wide, the background at -0.424 instead of 0. Under the N(0,"
    " 1) prior on every weight the scale of the inputs changes the posterior. Measured at the `cpu` scale (MNIST 3FC,"
    " 14 000 training images, the authors' objective, seed 0, both trained under the current code), /255 against the "
    "authors' scaling: Leaky accuracy 0.950 against 0.947 and sampled-label ECE 0.031 against 0.039, ReLU 0.960 "
    "against 0.949 and 0.020 against 0.018, so the ECE gap Leaky - ReLU +0.011 against +0.021: one seed, but an "
    "effect as large as the paper's gaps (-0.012 on MNIST 3FC) and the verdicts' margins. It also bears on the "
    "plateaus: the 15.7 % of input pixels that are 0 on every slice image, whose first-layer weights have exactly "
    "flat likelihoods here, are the constant -0.424 under the authors' scaling, and those weights are no longer flat."
    " A faithful rerun is a new grid (the normalisation is part of the run ids): `full-3fc-authors` trains Table "
    "1's 3FC cells at `full-3fc`'s settings with `normalization=\"mnist-standard\"` (MNIST's constants on both data "
    "sets, as the authors do); its report is `results/leaky-calibration-full-3fc-authors`. There, over 3 seeds "
    "at full data, the authors' scaling made every arm more accurate and lowered every arm's ECE (by 0.008-0.024), and"
    " the MNIST 3FC gap moved from -0.002 (`full-3fc`) to +0.000: the seed-0 doubling above did not recur."
)
"""The committed grids scale inputs /255 where the authors standardise them with MNIST's mean and sd."""


ACCURACY_GATE = (
    "*Accuracy gate.* Table 1's comparability reads the mean predictive's accuracy (`accuracy`: the argmax of the "
    "mean of the 50 samples' probabilities); the authors' accuracy is the sampled-label predictive's (their "
    '`Accuracy` with `input_type="samples"`: the argmax of the 50 sampled labels\' frequencies, recorded here as '
    "`accuracy_sampled`). In the committed grids the two cell means differ by at most 0.0012 (`cpu` Fashion-MNIST 3FC"
    " ReLU, 0.7991 against 0.7979). The borderline `gpu` Fashion-MNIST 3FC Leaky arm is 0.8103 by ours and 0.8104 by "
    "theirs, inside the 0.02 tolerance of 0.83 either way; the one arm on the other side of the tolerance by theirs, "
    "`gpu` Fashion-MNIST CONV ReLU (0.8093 against 0.8101), is in a cell whose Leaky arm (0.788) is not comparable "
    "either way. No cell's comparability changes."
)
"""Table 1's accuracy gate reads the mean predictive where the authors report the sampled-label mode."""


def _accuracy_gate_measured(runs: Sequence[RunRecord]) -> str:
    """The accuracy-gate departure measured on ``runs``' own records: how far each cell's mean accuracy by the mean
    predictive lies from the authors' sampled-label one, and whether the paper's tolerance would judge any cell's
    arm differently (empty when no run recorded both)."""
    cells: dict[tuple, list[RunRecord]] = defaultdict(list)
    for r in runs:
        if "accuracy" in r.metrics and "accuracy_sampled" in r.metrics:
            cells[(r.spec.tag("objective"), r.config.dataset, r.config.model, r.config.activation)].append(r)
    if not cells:
        return ""
    gaps, flips = [], []
    for (_, dataset, model, activation), cell in sorted(cells.items()):
        ours = statistics.fmean(r.metrics["accuracy"] for r in cell)
        theirs = statistics.fmean(r.metrics["accuracy_sampled"] for r in cell)
        gaps.append((abs(ours - theirs), f"{dataset} {model} {activation}, {ours:.4f} against {theirs:.4f}"))
        published = PUBLISHED_TABLE_1.get((dataset, model))
        if published is not None:
            target = published[0] if activation != "relu" else published[1]
            tolerance = COMPARABLE.accuracy_tolerance
            if (abs(ours - target) <= tolerance) != (abs(theirs - target) <= tolerance):
                flips.append(f"{dataset} {model} {activation}")
    widest = max(gaps)
    flipped = (
        f"judged by theirs, these arms would change sides of the {COMPARABLE.accuracy_tolerance:g} tolerance: "
        + ", ".join(flips)
        if flips
        else "no arm changes sides of the tolerance"
    )
    return (
        "*Accuracy gate.* Table 1's comparability reads the mean predictive's accuracy (`accuracy`); the authors' "
        "accuracy is the sampled-label predictive's (`accuracy_sampled`). In this grid the two cell means differ by at "
        f"most {widest[0]:.4f} ({widest[1]}); {flipped}."
    )


def departures(runs: Sequence[RunRecord]) -> str:
    """The departures from the authors' code that ``runs`` (a grid's Table 1 runs) carry, in words, or empty. A grid
    measured and scaled as the authors' (``full-3fc-authors``) is left with the accuracy gate, measured on its own
    records."""
    parts = [ECE_BINNING] if any("sampled_label_ece:10" in r.spec.measures for r in runs) else []
    if any(r.config.normalization == "unit" for r in runs):
        parts.append(INPUT_SCALING)
    if parts:
        return " **Departures from the authors' code** (kept for the committed grids): " + " ".join(
            [*parts, ACCURACY_GATE]
        )
    measured = _accuracy_gate_measured(runs)
    return f" **Departure from the authors' code**: {measured}" if measured else ""
