"""Does a cold posterior predict better? A temperature sweep of mean-field VI on a 3FC and a Fashion-MNIST subset.

``python -m pyro_bnn.reproduce.studies.cold_posterior --out results/cold-posterior`` trains one run per temperature
T and seed (the tempered posterior ``p(D | w)^(1/T) p(w)``: every step's KL weight times T, see docs/tempering.md)
with the run engine, each into ``OUT/runs/T<T>-s<seed>`` (a finished run is read back, not retrained, so an
interrupted sweep resumes; one whose ``config.json`` asks other settings is refused, naming them, or resumed from its
checkpoint where only its epochs or scoring differ), and writes ``table.md``, ``table.json`` and ``sweep.png``: test
accuracy, NLL and ECE against T (mean ± sd over seeds), and a verdict on the question the cold-posterior literature
asks (Wenzel et al., 2020): is some T < 1 better than T = 1 on test NLL, by more than the seeds' spread?
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from pyro_bnn.commands.verb import ArgumentParser, existing_dir_arg, positive_float_arg, positive_int_arg
from pyro_bnn.evaluation import mean_sd
from pyro_bnn.reproduce.records import code_version, training_code
from pyro_bnn.runs import RunConfig, train_run
from pyro_bnn.runs.config_compare import normalized_config
from pyro_bnn.runs.run_folder import CHECKPOINT, check_writable
from pyro_bnn.runs.runs import RESUME_MAY_CHANGE

TEMPERATURES = (0.01, 0.1, 0.3, 1.0, 3.0)
METRICS = ("accuracy", "nll", "ece")


def base_config(data_dir: str | None, epochs: int, train_subset: int) -> RunConfig:
    """The fixed part of every run: the library's default guide and objective on a 3FC (ReLU), N(0, 1) prior,
    Adam 1e-3, batch 128, ``train_subset`` training images, a 5 000-image test subset, 50 posterior samples."""
    return RunConfig(
        dataset="fashion-mnist",
        model="3fc",
        prior="normal:0,1",
        epochs=epochs,
        batch_size=128,
        lr=1e-3,
        train_subset=train_subset,
        test_subset=5_000,
        num_samples=50,
        data_dir=data_dir,
        device="cpu",
    )


READ_BACK_ANYWHERE = ("device", "data_dir")
"""Config keys a finished run is read back across: where it ran and where its data lay change neither what it
trained nor how it was scored."""


class OtherRunError(RuntimeError):
    """A run folder holds a run this sweep cannot read back or resume as the one it asks for."""


def _differences(saved: dict, wanted: dict, ignore: Sequence[str]) -> list[str]:
    keys = sorted((set(saved) | set(wanted)) - set(ignore))
    missing = "<missing>"
    return [
        f"{key} {saved.get(key, missing)!r} there, {wanted.get(key, missing)!r} now"
        for key in keys
        if saved.get(key, missing) != wanted.get(key, missing)
    ]


def _needs_training(folder: Path, config: RunConfig) -> bool:
    """Whether the run in ``folder`` must (still) train: it has not finished, or it finished with fewer epochs or
    another scoring (a resume from its checkpoint extends or re-scores it).

    Raises:
        OtherRunError: it finished at other settings, ones a resume cannot change (another train subset, guide, ...,
            or more epochs than asked), or at other epochs or scoring with no checkpoint to resume from.
    """
    if not (folder / "metrics.json").exists():
        return True
    path = folder / "config.json"
    if not path.exists():
        raise OtherRunError(f"{folder} holds metrics.json but no config.json, so its settings cannot be told apart "
                            "from this sweep's: delete the folder to train it anew")  # fmt: skip
    try:
        saved = normalized_config(json.loads(path.read_text()), path)
    except ValueError as err:
        raise OtherRunError(f"{folder} cannot be read back: {err}") from None
    wanted = json.loads(config.to_json())
    fixed = _differences(saved, wanted, RESUME_MAY_CHANGE)
    if saved["epochs"] > wanted["epochs"]:  # a resume only extends a run
        fixed.append(f"epochs {saved['epochs']} there, {wanted['epochs']} now")
    if fixed:
        raise OtherRunError(
            f"{folder} holds a run at other settings ({'; '.join(fixed)}); it is not read back as this one: delete "
            "the folder to train it at these settings, or pass another --out"
        )
    resumable = _differences(saved, wanted, READ_BACK_ANYWHERE)
    if resumable and not (folder / CHECKPOINT).exists():
        raise OtherRunError(
            f"{folder} holds a run at other settings ({'; '.join(resumable)}) and no {CHECKPOINT} to extend or "
            "re-score it from: delete the folder to train it at these settings, or pass another --out"
        )
    return bool(resumable)


def run_one(base: RunConfig, temperature: float, seed: int, runs: Path) -> dict:
    """Trains (or reads back) the run at ``temperature`` and ``seed``; its test metrics and train time.

    A finished run is read back only where its ``config.json`` asks what this sweep asks (where it ran and its data
    folder aside); one with fewer epochs or another scoring is resumed from its checkpoint; any other difference is
    refused (:class:`OtherRunError`), as is a run started by other code."""
    folder = runs / f"T{temperature:g}-s{seed}"
    metrics_file = folder / "metrics.json"
    code_file = folder / "code.json"
    config = RunConfig.from_dict({**json.loads(base.to_json()), "temperature": temperature, "seed": seed}).resolved()
    if _needs_training(folder, config):
        code = {"code": code_version(), "training_code": training_code()}
        if code_file.exists() and json.loads(code_file.read_text()) != code:
            raise OtherRunError(
                f"{folder} was started by other code ({json.loads(code_file.read_text())['code']}); a run resumes "
                f"only at the code that started it (this is {code['code']}): delete the folder to train it anew"
            )
        folder.mkdir(parents=True, exist_ok=True)
        code_file.write_text(json.dumps(code) + "\n")
        train_run(config, folder, resume=True, progress=False)  # an interrupted run continues from its checkpoint
    metrics = json.loads(metrics_file.read_text())
    code = json.loads(code_file.read_text()) if code_file.exists() else {}
    return {"temperature": temperature, "seed": seed, **{m: metrics[m] for m in METRICS},
            "train_time_s": metrics["train_time_s"], "code": code.get("code", "not recorded"),
            "training_code": code.get("training_code", "not recorded")}  # fmt: skip


def summarise(rows: Sequence[dict], temperatures: Sequence[float]) -> list[dict]:
    """Mean and sd over seeds of each metric, per temperature."""
    table = []
    for t in temperatures:
        mine = [r for r in rows if r["temperature"] == t]
        entry: dict = {"temperature": t, "seeds": len(mine)}
        for metric in METRICS:
            entry[metric] = mean_sd([r[metric] for r in mine])
        table.append(entry)
    return table


def verdict(rows: Sequence[dict], temperatures: Sequence[float]) -> str:
    """The plain answer: the best T < 1 on mean test NLL against T = 1, over the seeds that ran every T.

    *Yes* when that T beats T = 1 on every seed, and its mean gain exceeds both the seeds' sd at T = 1 and twice
    the standard error of the per-seed differences (so at least 2 seeds); *no* when it does not beat T = 1 on
    average; otherwise *not settled*. (The best T is chosen on the test NLL it is judged on, which favours "yes";
    the per-seed differences are listed so that a reader can see by how much.)
    """
    cold = [t for t in temperatures if t < 1]
    if 1.0 not in temperatures or not cold:
        return "No verdict: the sweep needs T = 1 and at least one T < 1."
    by = {(r["temperature"], r["seed"]): r["nll"] for r in rows}
    seeds = sorted(s for s in {r["seed"] for r in rows} if all((t, s) in by for t in temperatures))
    if not seeds:
        return "No verdict yet: no seed has run every temperature."

    def mean_nll(t: float) -> float:
        return sum(by[(t, s)] for s in seeds) / len(seeds)

    best = min(cold, key=mean_nll)
    diffs = [by[(best, s)] - by[(1.0, s)] for s in seeds]
    spread = mean_sd([by[(1.0, s)] for s in seeds])[1]
    gain, sd_diff, n = -mean_sd(diffs)[0], mean_sd(diffs)[1], len(diffs)
    standard_error = sd_diff / math.sqrt(n) if n > 1 else math.inf
    if all(d < 0 for d in diffs) and gain > spread and gain > 2 * standard_error:
        answer = "yes"
    elif gain <= 0:
        answer = "no"
    else:
        answer = "not settled (the gain is within the seeds' noise)"
    listed = ", ".join(f"{d:+.3f}" for d in diffs)
    error = f"{standard_error:.3f}" if n > 1 else "unknown with one seed"
    sd = f"is {spread:.3f}" if n > 1 else "is unknown with one seed"
    return (
        f"**Does a cold posterior predict better? {answer}.** The best T < 1 on mean test NLL is T = {best:g}: NLL "
        f"{mean_nll(best):.3f} against {mean_nll(1.0):.3f} at T = 1, a gain of {gain:.3f} (standard error "
        f"{error}; difference per seed {listed}; the seeds' sd at T = 1 {sd}), over {n} seed(s). T is "
        "chosen on the test NLL it is judged on, so the gain is an upper estimate."
    )


def _cell(value: tuple[float, float, int], digits: int = 3) -> str:
    mean, sd, n = value
    if n == 0:
        return "—"
    return f"{mean:.{digits}f} ± {sd:.{digits}f}" if n > 1 else f"{mean:.{digits}f}"


def write_outputs(out: Path, rows: list[dict], temperatures: Sequence[float], command: str, setting: str) -> None:
    """``table.json``, ``table.md`` and ``sweep.png`` in ``out``."""
    table = summarise(rows, temperatures)
    answer = verdict(rows, temperatures)
    (out / "table.json").write_text(json.dumps({"command": command, "runs": rows, "table": table}, indent=2) + "\n")
    lines = [
        "# Cold posteriors: a temperature sweep of mean-field VI",
        "",
        f"Command: `{command}`",
        "",
        setting,
        "",
        answer,
        "",
        "| T | seeds | accuracy | NLL | ECE |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for entry in table:
        cells = " | ".join(_cell(entry[m]) for m in METRICS)
        lines.append(f"| {entry['temperature']:g} | {entry['seeds']} | {cells} |")
    seconds = sum(r["train_time_s"] for r in rows)
    lines += ["", f"Train time of all {len(rows)} runs: {seconds / 60:.1f} min (one CPU thread each)."]
    states: dict[str, list[dict]] = {}
    for row in rows:
        states.setdefault(row.get("training_code", "not recorded"), []).append(row)
    described = "; ".join(
        f"{state}: {len(runs)} run(s) ({', '.join(sorted({r.get('code', 'not recorded') for r in runs}))})"
        for state, runs in sorted(states.items())
    )
    plural = "one state" if len(states) == 1 else f"**{len(states)} states**"
    lines += ["", f"Training code (`pyro_bnn.reproduce.code_state`): {plural}, {described}."]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    _figure(out / "sweep.png", table)


def _figure(path: Path, table: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    temps = [e["temperature"] for e in table]
    for ax, metric in zip(axes, METRICS, strict=True):
        means = [e[metric][0] for e in table]
        sds = [e[metric][1] if e[metric][2] > 1 else 0.0 for e in table]
        ax.errorbar(temps, means, yerr=sds, marker="o", capsize=3)
        ax.axvline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_xlabel("temperature T")
        ax.set_title(f"test {metric}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    # Every bad value is one line and exit status 2 here, before a run loads data or trains (the types, then the
    # run configs and --out): a traceback minutes into a sweep loses the runs' work.
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder (runs/, table.md, table.json, sweep.png)")
    parser.add_argument("--temperatures", type=positive_float_arg, nargs="+", default=list(TEMPERATURES))
    parser.add_argument("--seeds", type=positive_int_arg, default=5, help="seeds per temperature (default %(default)s)")
    parser.add_argument("--epochs", type=positive_int_arg, default=10)
    parser.add_argument("--train-subset", type=positive_int_arg, default=10_000)
    parser.add_argument("--data-dir", type=existing_dir_arg, default=None,
                        help="Fashion-MNIST's folder (default: the usual places)")  # fmt: skip
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # as a reproduction grid's runs: a run's numbers depend on its thread count
    out = Path(args.out)
    with parser.refusing():
        base = base_config(args.data_dir, args.epochs, args.train_subset)
        for t in args.temperatures:
            RunConfig.from_dict({**json.loads(base.to_json()), "temperature": t}).resolved()
        check_writable(out)
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    temperatures = sorted(set(args.temperatures))
    command = "python -m pyro_bnn.reproduce.studies.cold_posterior " + " ".join(sys.argv[1:] if argv is None else argv)
    setting = (
        f"Fashion-MNIST, {args.train_subset:,} training images, a 5 000-image test subset; 3FC (ReLU), N(0, 1) prior "
        f"on every weight and bias, the default guide and objective, Adam 1e-3, batch 128, {args.epochs} epochs, "
        "50 posterior samples. T multiplies the KL weight of every step: the ELBO of the tempered posterior "
        "p(D | w)^(1/T) p(w), times T."
    )
    rows = []
    for seed in range(args.seeds):
        for t in temperatures:
            start = time.perf_counter()
            try:
                rows.append(run_one(base, t, seed, runs))
            except OtherRunError as err:
                parser.exit(2, f"{parser.prog}: error: {err}\n")
            print(f"T={t:g} seed={seed}: {rows[-1]} ({time.perf_counter() - start:.0f} s)", flush=True)
            write_outputs(out, rows, temperatures, command.strip(), setting)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
