"""Do batched runs change a grid's numbers? ``python bench/batched_check.py SEPARATE BATCHED``.

Compares two folders of the same grid (``pyro-bnn reproduce ... --out``), one trained run by run and one with
batched runs (the same run ids; each run's seed is the same, its noise is not), cell by cell: a cell is the runs
that differ only in their seed. For each cell with batched runs it gives the mean test accuracy and NLL of both,
their difference and the difference over its standard error (Welch), and counts the cells beyond 2 and 3 standard
errors. Writes ``bench/BATCHED_CHECK.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _records(folder: Path) -> dict[str, dict]:
    out = {}
    for path in sorted((folder / "runs").glob("*/result.json")):
        record = json.loads(path.read_text())
        if record.get("status") == "done":
            out[path.parent.name] = record
    return out


def _cell(record: dict) -> str:
    """The run's label without its seed."""
    label = record["spec"]["label"]
    return label.rsplit("-s", 1)[0]


def _welch(a: list[float], b: list[float]) -> tuple[float, float]:
    diff = statistics.fmean(b) - statistics.fmean(a)
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b)) if len(a) > 1 else math.nan
    return diff, diff / se if se > 0 else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("separate", type=Path)
    parser.add_argument("batched", type=Path)
    args = parser.parse_args()
    separate, batched = _records(args.separate), _records(args.batched)
    cells: dict[str, list[tuple[dict, dict]]] = {}
    for run_id, record in batched.items():
        if record["metrics"].get("batched_runs", 1) > 1 and run_id in separate:
            cells.setdefault(_cell(record), []).append((separate[run_id], record))
    if not cells:
        sys.exit("no run of the batched folder was batched and also done in the separate one")
    rows, z_scores = [], []
    for cell, pairs in sorted(cells.items()):
        line = [cell, str(len(pairs))]
        for metric in ("accuracy", "nll"):
            a = [p[0]["metrics"][metric] for p in pairs]
            b = [p[1]["metrics"][metric] for p in pairs]
            diff, z = _welch(a, b)
            line += [f"{statistics.fmean(a):.4f}", f"{statistics.fmean(b):.4f}", f"{diff:+.4f}", f"{z:+.2f}"]
            z_scores.append(z)
        rows.append("| " + " | ".join(line) + " |")
    finite = [z for z in z_scores if math.isfinite(z)]
    beyond2 = sum(abs(z) > 2 for z in finite)
    beyond3 = sum(abs(z) > 3 for z in finite)
    speed = [(p[0]["seconds"], p[1]["seconds"]) for pairs in cells.values() for p in pairs if p[0]["seconds"] > 0]
    text = [
        "# Batched runs against runs trained one by one: the same grid's numbers",
        "",
        f"`python bench/batched_check.py {args.separate} {args.batched}`: {sum(map(len, cells.values()))} runs in "
        f"{len(cells)} cells (a cell: the runs that differ only in their seed), trained one by one in the first "
        "folder and in batches in the second (the same seeds, other noise). Test accuracy and NLL, mean over the "
        "cell's seeds; z is the difference over its standard error (Welch).",
        "",
        f"- |z| > 2 in {beyond2} and |z| > 3 in {beyond3} of {len(finite)} comparisons (by chance alone about "
        f"{0.046 * len(finite):.1f} and {0.0027 * len(finite):.1f}: z from 5 seeds has heavier tails than a normal).",
        f"- Time per run (training, scoring, measures and files): {statistics.fmean(s for s, _ in speed):.2f} s one "
        f"by one, {statistics.fmean(b for _, b in speed):.2f} s batched.",
        "",
        "| cell | seeds | accuracy, one by one | accuracy, batched | difference | z | NLL, one by one | NLL, batched "
        "| difference | z |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
    ]
    (HERE / "BATCHED_CHECK.md").write_text("\n".join(text))
    print("\n".join(text[4:7]))


if __name__ == "__main__":
    main()
