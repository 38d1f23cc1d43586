"""Which guide for which model: one short run per guide on the same network and data, from Python as a notebook user
would write it (``python -m pyro_bnn.reproduce.studies.guide_table --out results/guide-table``).

The setting is the one the guide-swapping report measured: an MLP of three hidden layers of 50 units (N(0, 1) prior
on every weight) on scikit-learn's digits, Adam 3e-3, batch 128, a few epochs, the guide the only change; the
node-noise row puts the mixture guide on the same network with latent noise on each layer's inputs. Every row is
passed to :class:`~pyro_bnn.infer.Trainer` as a user would pass it: a spec string, or a Pyro ``AutoGuide`` builder.
Writes ``table.md`` and ``table.json`` (per-seed values too).

``--suite`` measures the candidates for the default guide (:data:`CANDIDATES`) on every yardstick of
:data:`YARDSTICKS` (where people start: digits at 45 and 450 steps, two moons; and the papers' setting: a 3FC and a
LeNet on 10 000 Fashion-MNIST images) and picks the default by :func:`choose_default`'s rule; it writes
``suite.md`` and ``suite.json``.
"""

from __future__ import annotations

import json
import shlex
import statistics
import sys
import warnings
from dataclasses import replace
from pathlib import Path

from pyro_bnn._io import write_json_atomically
from pyro_bnn.checks import positive_int
from pyro_bnn.commands.verb import ArgumentParser, positive_int_arg
from pyro_bnn.data import load_dataset
from pyro_bnn.evaluation import mean_sd
from pyro_bnn.guides import parse_guide
from pyro_bnn.reproduce.studies.guide_rows import BLEND as BLEND
from pyro_bnn.reproduce.studies.guide_rows import CANDIDATES as CANDIDATES
from pyro_bnn.reproduce.studies.guide_rows import POINT_ESTIMATES as POINT_ESTIMATES
from pyro_bnn.reproduce.studies.guide_rows import REFERENCE as REFERENCE
from pyro_bnn.reproduce.studies.guide_rows import ROWS as ROWS
from pyro_bnn.reproduce.studies.guide_rows import YARDSTICKS as YARDSTICKS
from pyro_bnn.reproduce.studies.guide_rows import Row as Row
from pyro_bnn.reproduce.studies.guide_rows import Setting as Setting
from pyro_bnn.reproduce.studies.guide_rows import Yardstick as Yardstick
from pyro_bnn.reproduce.studies.guide_rows import _train as _train
from pyro_bnn.reproduce.studies.guide_rows import choose_default as choose_default
from pyro_bnn.reproduce.studies.guide_rows import measure as measure
from pyro_bnn.reproduce.studies.guide_rows import measure_yardstick as measure_yardstick
from pyro_bnn.runs.run_folder import check_writable

COMMAND = "python -m pyro_bnn.reproduce.studies.guide_table"
SUITE_GUIDES = (*CANDIDATES, "map")
"""The guides ``--suite`` measures by default."""


def suite_guides(guides: tuple[str, ...]) -> tuple[str, ...]:
    """``guides`` with :data:`REFERENCE` added (the mutual-information check is against it), each parsed up front.

    Raises:
        ValueError: A spec that does not parse (``unknown guide 'nosuch'; ...``), or no weight-space candidate among
            them (all point estimates): before any data is read or ``cells/`` made.
    """
    for guide in guides:
        parse_guide(guide)
    if REFERENCE not in guides:
        guides = (*guides, REFERENCE)
    if all(guide in POINT_ESTIMATES for guide in guides):
        raise ValueError(f"--guides {' '.join(guides)}: no weight-space candidate (all are point estimates)")
    return guides


def run_suite(
    out: Path,
    guides: tuple[str, ...] = SUITE_GUIDES,
    yardsticks: tuple[Yardstick, ...] = YARDSTICKS,
    seeds: tuple[int, ...] = (0, 1, 2),
    command: str | None = None,
) -> dict:
    """Measures ``guides`` on every yardstick over ``seeds``, applies :func:`choose_default` to the candidates among
    them and writes ``suite.md`` and ``suite.json`` to ``out``; returns what ``suite.json`` holds. ``command``: the
    command line to record (default: the one that asks for ``out`` and ``guides``)."""
    if command is None:
        given = [] if guides == SUITE_GUIDES else ["--guides", *guides]
        command = f"{COMMAND} {shlex.join(['--suite', '--out', str(out), *given])}"
    guides = suite_guides(guides)
    check_writable(out)
    candidates = [guide for guide in guides if guide not in POINT_ESTIMATES]
    cell_folder = out / "cells"
    cell_folder.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, list[dict]]] = {guide: {} for guide in guides}
    for yardstick in yardsticks:
        data = None
        for guide in guides:
            runs = []
            for seed in seeds:
                # One file per measurement: an interrupted suite resumes where it stopped (a changed yardstick
                # measures again; after a change to the training code, delete OUT/cells).
                path = cell_folder / f"{_slug(yardstick.name)}--{_slug(guide)}--s{seed}.json"
                key = {"yardstick": vars(yardstick), "guide": guide, "seed": seed}
                stored = _read_cell(path)
                if stored is None or stored.get("key") != key:
                    if data is None:
                        data = load_dataset(yardstick.dataset, seed=0, train_subset=yardstick.train_subset)
                    stored = {"key": key, "result": measure_yardstick(guide, yardstick, seed, data)}
                    write_json_atomically(path, stored)
                runs.append(stored["result"])
            rows[guide][yardstick.name] = runs
            shown = _cell([r["accuracy"] for r in rows[guide][yardstick.name]])
            print(f"{yardstick.name} | {guide}: accuracy {shown}", flush=True)
    names = [y.name for y in yardsticks]
    means = {
        guide: {name: {k: statistics.fmean(r[k] for r in rows[guide][name]) for k in rows[guide][name][0]}
                for name in names}
        for guide in candidates
    }  # fmt: skip
    reference_stick = next((n for n in names if n.startswith("3FC")), names[-1])
    choice = choose_default(means, names, reference_stick)
    lines = [
        "# The default guide on a suite of yardsticks",
        "",
        f"Command: `{command}` (each measurement is kept in `cells/`; an interrupted suite resumes). N(0, 1) "
        f"prior on every weight and bias, the full-data ELBO, Adam, mean ± sd over seeds {list(seeds)}; mutual "
        f"information (MI, nats) on the test inputs blended with `{BLEND}` noise.",
        "",
        "| yardstick | data | model | epochs | batch | Adam lr | test images | posterior samples |",
        "|---|---|---|---:|---:|---:|---:|---:|",
        *(f"| {y.name} | {y.dataset}{'' if y.train_subset is None else f' ({y.train_subset} training)'} | "
          f"`{y.model}` | {y.epochs} | {y.batch_size} | {y.lr:g} | {y.test_subset or 'all'} | {y.num_samples} |"
          for y in yardsticks),
        "",
        f"Rule (`choose_default`): within 0.02 of the best candidate's accuracy and ECE on every yardstick; on "
        f"*{reference_stick}* also mean σ ≥ 0.01 and MI at least twice `{REFERENCE}`'s. Chosen: "
        f"**`{choice['default']}`**"
        + (" (passes every check)." if choice["all_pass"] else
           " (no candidate passes every check; it keeps σ and MI and misses the accuracy and ECE tolerances by the "
           f"least in total, {choice['excess'][choice['default']]:.4f}: "
           f"{'; '.join(choice['failures'][choice['default']])})."),
        "",
    ]  # fmt: skip
    for name in names:
        lines += [f"## {name}", "", "| guide | accuracy | ECE | NLL | mean σ | MI (blended) | seconds |",
                  "|---|---|---|---|---|---|---:|"]  # fmt: skip
        for guide in guides:
            runs = rows[guide][name]
            shown = [_cell([r[k] for r in runs], 4 if k in ("sigma", "mutual_information") else 3)
                     for k in ("accuracy", "ece", "nll", "sigma", "mutual_information")]  # fmt: skip
            label = f"**{guide}**" if guide == choice["default"] else guide
            seconds = statistics.fmean(r["seconds"] for r in runs)
            lines.append(f"| {label} | {' | '.join(shown)} | {seconds:.1f} |")
        lines.append("")
    lines += ["## Checks each candidate fails", ""]
    lines += [f"- `{g}` (total excess {choice['excess'][g]:.4f}): {'; '.join(f) if f else 'none'}"
              for g, f in choice["failures"].items()]  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    (out / "suite.md").write_text("\n".join(lines) + "\n")
    result = {"command": command, "seeds": list(seeds), "yardsticks": [vars(y) for y in yardsticks],
              "rows": rows, "choice": choice}  # fmt: skip
    (out / "suite.json").write_text(json.dumps(result, indent=2))
    return result


def _read_cell(path: Path) -> dict | None:
    """A stored measurement, or None when there is none or it cannot be read (measured again)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _slug(text: str) -> str:
    """``text`` as a file-name part: letters, digits, '.', '=' and '-' kept, anything else '-'."""
    return "".join(c if c.isalnum() or c in ".=-" else "-" for c in text)


def _cell(values: list[float], digits: int = 3) -> str:
    """``mean ± sd`` over the seeds' values, ``n/a`` when one is not finite (a guide without a sigma, say)."""
    mean, spread, n = mean_sd(values)
    if n < len(values):
        return "n/a"
    return f"{mean:.{digits}f} ± {spread:.{digits}f}"


def run(out: Path, setting: Setting = Setting(), command: str | None = None) -> list[dict]:  # noqa: B008 (frozen)
    """Measures every row over the seeds and writes ``table.md`` and ``table.json`` to ``out``. ``command``: the
    command line to record (default: the one that asks for ``out`` and ``setting.epochs``)."""
    positive_int(setting.epochs, "epochs")  # 0 epochs would write a table of untrained networks
    if command is None:
        given = [] if setting.epochs == Setting.epochs else ["--epochs", str(setting.epochs)]
        command = f"{COMMAND} {shlex.join(['--out', str(out), *given])}"
    check_writable(out)  # before the runs: a bad --out is one line, not a lost measurement
    data = load_dataset("digits", seed=0)
    steps = len(data.loaders(setting.batch_size, seed=0)[0])
    # The first fit in a process pays one-off costs (lazy imports, first calls): 2.3 s for flat:0.01's 45 steps
    # against 0.2 s once warm, which the seconds column charged to whichever row came first. One untimed epoch of
    # the first row pays them before any row is timed.
    with warnings.catch_warnings():  # its short run warns that the posterior has not moved: not a row
        warnings.simplefilter("ignore")
        measure(ROWS[0], setting.seeds[0], replace(setting, epochs=1), data)
    results = []
    for row in ROWS:
        per_seed = [measure(row, seed, setting, data) for seed in setting.seeds]
        results.append({"guide": row.label, "model": row.model, "caveat": row.caveat, "per_seed": per_seed})
        print(f"{row.label}: accuracy {_cell([r['accuracy'] for r in per_seed])}", flush=True)
    lines = [
        "# Which guide for which model",
        "",
        f"Command: `{command}`. Digits (scikit-learn, {len(data.train)} training images), an MLP of three hidden",
        f"layers of {setting.width} units, N(0, 1) prior, Adam {setting.lr:g}, batch {setting.batch_size},",
        f"{setting.epochs} epochs ({setting.epochs * steps} steps), {setting.num_samples} posterior samples; "
        "mean ± sd over seeds "
        f"{list(setting.seeds)}. A short run: it says how a guide behaves out of the box, not how good it gets.",
        "",
        "| model | guide | test accuracy | ECE | mean σ | seconds | caveat |",
        "|---|---|---|---|---|---|---|",
    ]
    for result in results:
        rows = result["per_seed"]
        cells = [_cell([r[key] for r in rows]) for key in ("accuracy", "ece", "sigma")]
        seconds = statistics.fmean(r["seconds"] for r in rows)
        lines.append(
            f"| {result['model']} | {result['guide']} | {' | '.join(cells)} | {seconds:.1f} | {result['caveat']} |"
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "table.json").write_text(
        json.dumps({"command": command, "setting": vars(setting), "rows": results}, indent=2)
    )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/guide-table")
    parser.add_argument("--epochs", type=positive_int_arg, default=None, help=f"(default {Setting.epochs})")
    parser.add_argument("--suite", action="store_true", help="the default guide's yardstick suite (suite.md)")
    parser.add_argument("--guides", nargs="+", default=None, help="--suite: the guides measured (default: all)")
    args = parser.parse_args(argv)
    # the arguments given (from the shell, argv is None), quoted so that the line can be pasted back
    command = f"{COMMAND} {shlex.join(sys.argv[1:] if argv is None else argv)}"
    guides = tuple(args.guides) if args.guides else SUITE_GUIDES
    with (
        parser.refusing()
    ):  # one line and exit status 2 before any data is read: a bad --out or guide, an option the mode ignores
        if args.suite and args.epochs is not None:
            raise ValueError("--epochs sets the table's runs; --suite trains each yardstick for its own epochs")
        if not args.suite and args.guides:
            raise ValueError("--guides chooses the guides of --suite; the table's rows are fixed")
        if args.suite:
            suite_guides(guides)
        check_writable(args.out)
    if args.suite:
        run_suite(Path(args.out), guides, command=command)
    else:
        run(Path(args.out), Setting(epochs=args.epochs or Setting.epochs), command=command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
