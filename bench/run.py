"""``make bench``: training-step and predictive timings of pyro_bnn against a deterministic step and the competitors,
in one process, written to ``bench/results-<device type>.json`` (``results-cpu.json``, ``results-cuda.json``);
``bench/RESULTS.md`` is rendered from every such file present, so a CPU run keeps the GPU section a GPU machine
wrote (``python bench/run.py --device cuda``) and the reverse.

Training steps: the 3FC network (784-1000-1000-1000-10, 2.8 M weights) on real Fashion-MNIST batches where the data
is installed (random images otherwise, which the report says). Every variant takes one step per batch over the same
``--steps`` batches; the variants are timed in turn, round after round (``--rounds``), so that a slow spell of the
machine hits all of them. A variant's figure is the median over rounds of its time divided by the deterministic
step's time in the same round. pyro_bnn's rows run ``Trainer.fit`` and count its epoch's loop of steps (the epoch's
``time_s``: ``bench/steps.py``), not the checks a fit makes once, which the epoch timing includes; the competitors
run their own idiomatic step (``bench/competitors.py``).

Then the predictive (``bench/predictive.py``), one full Fashion-MNIST epoch of the default BNN and of the
deterministic network (``bench/epoch.py``), and a profile of one step of pyro_bnn's default path and of the default
before the performance issue (``bench/profile_step.py``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import competitors  # noqa: E402
import epoch  # noqa: E402
import flags  # noqa: E402
import predictive  # noqa: E402
import profile_step  # noqa: E402
import steps  # noqa: E402

NUM_DATA = 60_000
HERE = Path(__file__).resolve().parent


def load_batches(batch_size: int, count: int, device: torch.device) -> tuple[list, str]:
    """``count`` training batches of Fashion-MNIST (pixels / 255), or of random images when it is not installed:
    ``(x, y)`` pairs of ``(batch_size, 1, 28, 28)`` and ``(batch_size,)``, and where they come from.

    Raises:
        ValueError: Fashion-MNIST holds fewer than ``batch_size * count`` training images (the report would say
            ``count`` steps of ``batch_size`` where fewer, and a smaller last one, were timed).
    """
    from pyro_bnn.data import load_dataset

    try:
        data = load_dataset("fashion-mnist", val_size=0, seed=0)
    except (FileNotFoundError, OSError, ValueError) as err:
        data = None
        reason = str(err).splitlines()[0]
    if data is not None:
        available = len(data.train)
        if batch_size * count > available:
            raise ValueError(
                f"--steps {count} at batch size {batch_size} needs {batch_size * count} training images but "
                f"Fashion-MNIST has {available}; expected --steps <= {available // batch_size} at that batch size"
            )
        x, y = data.train.x[: batch_size * count], data.train.y[: batch_size * count]
        source = "Fashion-MNIST training images"
    else:
        print(f"Fashion-MNIST not found ({reason}); timing on random images", flush=True)
        generator = torch.Generator().manual_seed(0)
        x = torch.rand(batch_size * count, 1, 28, 28, generator=generator)
        y = torch.randint(0, 10, (batch_size * count,), generator=generator)
        source = "random images (Fashion-MNIST not installed)"
    x, y = x.to(device), y.to(device)
    return list(zip(x.split(batch_size), y.split(batch_size), strict=True)), source


def time_variants(builders: dict, batches: list, rounds: int, device: torch.device) -> dict[str, dict]:
    """Per variant: median ms per step and the median over rounds of its ratio to ``deterministic``.

    ``builders``: name -> ``build(x, y, num_data) -> run(batches) -> seconds`` (:data:`steps.Run`); a step's time is
    the seconds ``run`` reports over the number of batches (for pyro_bnn's rows the epoch's loop of steps, without
    a fit's once-per-fit checks: :func:`steps.fit_run`).
    """
    runs = {}
    for name, build in builders.items():
        runs[name] = build(*batches[0], NUM_DATA)
        runs[name](batches[:3])  # warm-up (and the trainers' set-up)
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(rounds):
        for name, run in runs.items():
            steps.sync(device)  # the previous variant's work is not this one's
            seconds[name].append(run(batches) / len(batches))
        print(f"  round {round_ + 1}/{rounds} done", flush=True)
    base = seconds[steps.DETERMINISTIC]
    return {
        name: {
            "ms_per_step": 1000 * statistics.median(values),
            "ratio": statistics.median(v / b for v, b in zip(values, base, strict=True)),
            "ratio_range": [
                min(v / b for v, b in zip(values, base, strict=True)),
                max(v / b for v, b in zip(values, base, strict=True)),
            ],
        }
        for name, values in seconds.items()
    }


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    text = f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)"
    if torch.cuda.is_available():  # the card the cuda rows ran on (a CPU-only machine has none to name)
        text += f", GPU {torch.cuda.get_device_name(0)}"
    return text


def _git_commit() -> str:
    if os.environ.get("BENCH_COMMIT"):  # a copy of the tree without its .git (a GPU machine) is told its commit
        return os.environ["BENCH_COMMIT"]
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True, cwd=HERE
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


DEVICE_TITLES = {"cpu": "CPU", "cuda": "GPU (CUDA)"}


def render(results: list[dict]) -> str:
    """bench/RESULTS.md from the result dictionaries of each device."""
    lines = ["# Benchmark results", ""]
    for result in results:
        lines += render_device(result)
    return "\n".join(lines) + "\n"


STEP_TIMING = "epoch time_s"
"""What a pyro_bnn row's time is, recorded in the results: the ``time_s`` of the fit's epoch (its loop of steps).
Results without the key timed the whole ``Trainer.fit`` call."""


def _fit_timing(result: dict) -> str:
    """What the pyro_bnn rows of ``result`` time, in a sentence."""
    if result.get("pyro_bnn_step_time") == STEP_TIMING:
        return (
            "pyro_bnn's rows: the `time_s` of the `Trainer.fit` epoch that takes a round's steps (the loop of steps "
            "with the trainer's per-step work), without the checks a fit makes once, which the epoch below includes."
        )
    return (
        "pyro_bnn's rows of this run were timed around a whole `Trainer.fit` call per round, so they include the "
        "checks that fit makes once (the parameters' finiteness after the epoch, its set-up checks) spread over the "
        f"round's {result['steps']} steps."
    )


def render_device(result: dict) -> list[str]:
    """One device's section of bench/RESULTS.md."""
    title = DEVICE_TITLES.get(result["device"].split(":")[0], result["device"])
    lines = [
        f"## {title}",
        "",
        f"Command: `{result['command']}`, {result['date']}, commit {result['commit']}.",
        f"Machine: {result['machine']}; device `{result['device']}`.",
        "",
        f"### Training step, 3FC on Fashion-MNIST ({title})",
        "",
        f"Batches: {result['data']}; {result['steps']} steps per round, {result['rounds']} rounds. Figures: the "
        "median over rounds of (time per step) / (deterministic step's time in the same round); the range over "
        "rounds in brackets. " + _fit_timing(result),
        "",
    ]
    sizes = list(result["training"])
    header = "| variant | " + " | ".join(f"ms/step @{b} | × det. @{b}" for b in sizes) + " |"
    lines += [header, "|---|" + "---:|---:|" * len(sizes)]
    names = list(result["training"][sizes[0]])
    for name in names:
        cells = []
        for b in sizes:
            row = result["training"][b].get(name)
            if row is None:
                cells += ["–", "–"]
            else:
                lo, hi = row["ratio_range"]
                cells += [f"{row['ms_per_step']:.1f}", f"**{row['ratio']:.2f}** ({lo:.2f}–{hi:.2f})"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if result["missing"]:
        lines += ["", "Not timed: " + "; ".join(f"{k}: {v}" for k, v in result["missing"].items())]
    default, before = steps.DEFAULT, steps.BEFORE
    lines += [
        "",
        "Speed-up of the default over the default before the performance issue (same process): "
        + ", ".join(
            f"{result['training'][b][before]['ms_per_step'] / result['training'][b][default]['ms_per_step']:.2f}x @{b}"
            for b in sizes
        )
        + ".",
    ]
    pred = result["predictive"]
    lines += [
        "",
        f"### Predictive ({title})",
        "",
        f"`predict(bnn, guide, x, num_samples=S)` with the default guide against the floor of S plain forward passes "
        f"of the deterministic network over the same inputs (batches of {predictive.BATCH}); peak memory beyond the "
        "returned `(S, N, C)` tensor, measured in a fresh process.",
        "",
        "| S | N | floor s | predict s | ratio | peak beyond result |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in pred:
        memory = row.get("peak_beyond_result_bytes")
        mem = f"{memory / 2**20:.0f} MiB" if memory is not None else "–"
        floor = f"{row['floor_s']:.2f}" if "floor_s" in row else "–"
        ours = f"{row['predict_s']:.2f}" if "predict_s" in row else "–"
        ratio = f"**{row['ratio']:.2f}**" if "ratio" in row else "–"
        lines.append(f"| {row['samples']} | {row['inputs']} | {floor} | {ours} | {ratio} | {mem} |")
    prof = result["profile"]
    components = ["objective", "backward", "optimizer", "matmul", "random draws", "total"]
    lines += [
        "",
        f"### Where a step's time goes ({title}; torch profiler, batch {prof['batch_size']}, ms per step)",
        "",
        "`objective`, `backward`, `optimizer`: wall time of the three phases of a trainer step (with the profiler's "
        "own overhead); `matmul`: operator self time in matrix products; `random draws`: the standard normal draw "
        "of all weights (`pyro_bnn::standard_normal`, its worker threads included). Pyro's path draws inside "
        "`torch.distributions` per site, which appears as `aten::normal_` in its objective.",
    ]
    if result["device"].startswith("cuda"):
        lines += [
            "On CUDA these are the phases of the step launched op by op (the `no CUDA graph` row); the default "
            "replays the whole step from a CUDA graph, in the default row's ms/step.",
        ]
    lines += [
        "",
        "| component | " + " | ".join(prof["variants"]) + " |",
        "|---|" + "---:|" * len(prof["variants"]),
    ]
    for component in components:
        cells = [f"{prof['variants'][v].get(component, 0.0):.1f}" for v in prof["variants"]]
        lines.append(f"| {component} | " + " | ".join(cells) + " |")
    if result.get("epoch"):
        e = result["epoch"]
        graph = " (steps replayed from a CUDA graph)" if e["cuda_graph"] else ""
        # Results before the scaling was recorded used standardised pixels (the time of a step is the same).
        scaling = " (pixels / 255, as `pyro-bnn train` does)" if e.get("normalization") == "unit" else ""
        if "bnn_steps_s" in e:
            bnn = (
                f"pyro_bnn's default BNN{graph}: the wall time of the `Trainer.fit` call that trains the second "
                f"epoch, its once-per-fit checks included, **{e['bnn_s']:.2f} s** (its loop of steps, the epoch's "
                f"`time_s`: {e['bnn_steps_s']:.2f} s)"
            )
        else:  # results timed before the fit's own checks were counted: the epoch's time_s alone
            bnn = f"pyro_bnn's default BNN (`Trainer.fit`){graph} **{e['bnn_s']:.2f} s**"
        lines += [
            "",
            f"### One Fashion-MNIST epoch ({title})",
            "",
            f"Training seconds of the second epoch over all {e['num_train']} training images{scaling}, batches of "
            f"{epoch.BATCH} (`bench/epoch.py`): {bnn}; the deterministic network {e['deterministic_s']:.2f} s; "
            f"ratio **{e['ratio']:.2f}**.",
        ]
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-sizes", type=flags.positive_int, nargs="+", default=[128, 512])
    parser.add_argument("--steps", type=flags.positive_int, default=10, help="batches (steps) per round")
    parser.add_argument("--rounds", type=flags.positive_int, default=5)
    parser.add_argument("--skip-competitors", action="store_true")
    parser.add_argument("--out", default=str(HERE))
    args = parser.parse_args()
    device = torch.device(args.device)
    missing = {} if args.skip_competitors else competitors.missing()
    builders = dict(steps.OURS)
    if device.type == "cuda":
        builders.update(steps.CUDA_ONLY)
    if not args.skip_competitors:
        for name, build_step in competitors.AVAILABLE.items():
            if name not in missing:
                builders[name] = lambda x, y, n, build_step=build_step: steps.from_step(build_step(x, y, n))
    for name, reason in missing.items():
        print(f"not timed: {name}: {reason}", flush=True)

    result = {
        "command": "python " + " ".join(["bench/run.py", *sys.argv[1:]]),
        "date": datetime.date.today().isoformat(),
        "commit": _git_commit(),
        "machine": machine(),
        "device": str(device),
        "steps": args.steps,
        "rounds": args.rounds,
        "pyro_bnn_step_time": STEP_TIMING,
        "missing": missing,
        "training": {},
    }
    try:  # every batch size's batches before any timing: --steps beyond the data is refused at once
        loaded = {batch_size: load_batches(batch_size, args.steps, device) for batch_size in args.batch_sizes}
    except ValueError as err:
        parser.error(str(err))
    for batch_size, (batches, result["data"]) in loaded.items():
        print(f"batch {batch_size}:", flush=True)
        torch.manual_seed(0)
        result["training"][batch_size] = time_variants(builders, batches, args.rounds, device)
        for name, row in result["training"][batch_size].items():
            print(f"  {name:<45} {row['ms_per_step']:8.1f} ms  {row['ratio']:.2f}x", flush=True)

    cuda = device.type == "cuda"
    settings = [(100, 10_000), (1000, 10_000)] if cuda else [(50, 2000), (400, 10_000)]
    result["predictive"] = []
    for samples, inputs in settings:
        row = predictive.timings_fresh(device, samples, inputs) if (samples, inputs) == settings[0] else {}
        row.update(predictive.peak_memory(device, samples, inputs))
        result["predictive"].append(row)
        print(f"predictive S={samples} N={inputs}: {row}", flush=True)

    batches, _ = load_batches(128, 4, device)
    variants = {
        steps.DEFAULT: {"guide": steps.DEFAULT_GUIDE},
        steps.BEFORE: {"guide": "autonormal:rel=1", "objective": "trace", "optim": steps._torch_adam},
    }
    result["profile"] = {"batch_size": 128, "variants": {}}
    for name, kwargs in variants.items():
        _, trainer = steps.trainer_run(*batches[0], NUM_DATA, **kwargs)
        result["profile"]["variants"][name] = profile_step.profile_trainer_step(trainer, batches)
        print(f"profile {name}: {result['profile']['variants'][name]}", flush=True)

    try:
        result["epoch"] = epoch.epoch_times(device)
        print(f"epoch: {result['epoch']}", flush=True)
    except FileNotFoundError as err:
        print(f"epoch not timed: Fashion-MNIST not found ({str(err).splitlines()[0]})", flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"results-{device.type}.json").write_text(json.dumps(result, indent=2) + "\n")
    found = [out / f"results-{kind}.json" for kind in DEVICE_TITLES]
    report = render([json.loads(path.read_text()) for path in found if path.exists()])
    (out / "RESULTS.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
