"""Batched runs against separate runs, in one process: ``python bench/batched.py [--device cuda]``.

A *run* here is what a grid trains: a fresh :class:`~pyro_bnn.infer.Trainer` (its own seed, guide, Adam and
history) fitted for a fixed number of steps, with the objective ``--elbo auto`` picks for the default flat guide
(the fused mean-field ELBO) and no per-epoch validation. Separate runs go one after another through
``Trainer.fit``; a batch of R runs goes through :func:`pyro_bnn.batched.fit_batched`. Throughput is runs per hour;
the ratio is batched over separate throughput at the same R. Workloads:

- ``moons``: the 2-5-5-2 tanh net on 700 two-moons points, full batch, 300 steps (the ``priors`` grid's runs);
- ``3fc``: the 3FC (784-1200-1200-10, ReLU) on Fashion-MNIST, batch 128, 20 steps;
- ``lenet``: LeNet (42 k weights) on Fashion-MNIST, batch 128, 20 steps.

Each R is timed in 3 rounds after a warm-up round; a round trains 2 runs alone, then R runs as one batch, so that a
drift of the machine's speed hits both; the medians are kept. Writes ``bench/batched-<device>.json`` and
``bench/BATCHED.md`` (from both devices' saved files, each section titled with its own file's machine);
``--render-only`` rewrites ``BATCHED.md`` from the saved files without measuring.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import pyro
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import flags  # noqa: E402
import run as bench_run  # noqa: E402  (bench/run.py: machine, commit)

from pyro_bnn import BNN  # noqa: E402
from pyro_bnn.batched import adam as batched_adam  # noqa: E402
from pyro_bnn.batched import fit_batched  # noqa: E402
from pyro_bnn.data import BatchLoader, load_dataset  # noqa: E402
from pyro_bnn.guides import Capability, parse_guide  # noqa: E402
from pyro_bnn.infer import ObjectiveOptions, RuntimeOptions, Trainer  # noqa: E402
from pyro_bnn.likelihoods import Categorical  # noqa: E402
from pyro_bnn.models import build_model  # noqa: E402
from pyro_bnn.node_noise import NodeNoisePrior, add_node_noise  # noqa: E402
from pyro_bnn.priors import nothing, parse_prior  # noqa: E402

RUN_COUNTS = (1, 4, 8, 32)
GOALS = {("cpu", "moons", 32): 10.0, ("cpu", "3fc", 4): 1.3, ("cuda", "3fc", 8): 4.0}
"""The issue's throughput goals: (device, workload, R) -> batched / separate."""


def _images(count: int) -> tuple[torch.Tensor, torch.Tensor, str]:
    """``count`` Fashion-MNIST training images and labels, or random ones where the data set is not installed."""
    try:
        fashion = load_dataset("fashion-mnist", val_size=0, seed=0)
        return fashion.train.x[:count], fashion.train.y[:count], "Fashion-MNIST"
    except (FileNotFoundError, OSError, ValueError):
        generator = torch.Generator().manual_seed(0)
        x, y = torch.rand(count, 1, 28, 28, generator=generator), torch.randint(0, 10, (count,))
        return x, y, "random images (Fashion-MNIST not installed)"


def _workloads(device: torch.device, long_steps: int = 0) -> dict[str, dict]:
    """The benchmark's runs; with ``long_steps`` also 3FC and LeNet runs of that many steps (``3fc-long``,
    ``lenet-long``), where the fixed cost of setting a run up weighs less."""
    moons = load_dataset("moons", val_size=0, train_subset=700, seed=0, noise=0.4, n_samples=5000)
    fx, fy, source = _images(128 * max(20, long_steps))
    short = (fx[: 128 * 20], fy[: 128 * 20])
    works = {
        "moons": {
            "model": ("mlp:5,5", (2,), 2, "tanh"),
            "data": (moons.train.x, moons.train.y),
            "batch": 700,
            "epochs": 300,
            "lr": 0.05,
            "what": "2-5-5-2 tanh, 700 two-moons points full batch, 300 steps",
        },
        "3fc": {
            "model": ("3fc", (1, 28, 28), 10, "relu"),
            "data": short,
            "batch": 128,
            "epochs": 1,
            "lr": 1e-3,
            "what": f"3FC on {source}, batch 128, 20 steps",
        },
        "lenet": {
            "model": ("lenet", (1, 28, 28), 10, "relu"),
            "data": short,
            "batch": 128,
            "epochs": 1,
            "lr": 1e-3,
            "what": f"LeNet (42 k weights) on {source}, batch 128, 20 steps",
        },
    }
    for name in ("3fc", "lenet") if long_steps else ():
        works[f"{name}-long"] = {
            **works[name],
            "data": (fx[: 128 * long_steps], fy[: 128 * long_steps]),
            "what": works[name]["what"].replace("20 steps", f"{long_steps} steps"),
        }
    return works


GUIDE = "flat:rel=1"
"""The guide of every run unless ``--guide`` names another (whose timings are printed, not written)."""

RUN_SETTINGS = {"guide": GUIDE, "prior": "normal:0,1", "particles": 1}
"""Every run's guide, prior and particles per step; timings under others (``--guide``, ``--prior``, ``--particles``,
e.g. Blundell et al.'s ``bbb``, a scale mixture and 2) are printed, not written."""


def _trainer(work: dict, seed: int, device: torch.device) -> tuple[Trainer, BatchLoader]:
    name, shape, classes, activation = work["model"]
    x, y = work["data"]
    pyro.set_rng_seed(seed)
    work = {**RUN_SETTINGS, **work}  # bench/profile_batched.py passes a bare workload
    guide = work["guide"]
    spec = parse_guide(guide)
    net = build_model(name, input_shape=shape, num_classes=classes, activation=activation, dropout=spec.dropout)
    if spec.offers(Capability.NODE_NOISE_ONLY):  # a mixture guide: node noise N(1, 0.1^2), deterministic weights
        bnn = BNN(add_node_noise(net), NodeNoisePrior(0.1), Categorical(len(x)))
    else:
        select = None if spec.random_weights else nothing  # mle: a network without weight sites
        bnn = BNN(net, parse_prior(work["prior"], select=select), Categorical(len(x)))
    trainer = Trainer(
        bnn,
        guide,
        optim=pyro.optim.Adam({"lr": work["lr"]}),
        objective=ObjectiveOptions("auto", num_particles=work["particles"]),
        runtime=RuntimeOptions(device=device, seed=seed, progress=False),
    )
    return trainer, BatchLoader(x, y, work["batch"], shuffle=True, seed=seed, device=device)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


ROUNDS = 3
"""Timed rounds per measurement, each timing separate runs and then the batch, so that a drift of this shared
machine's speed hits both alike; the medians are kept."""

SEPARATE_PER_ROUND = 2
"""Runs trained alone per round (runs of one workload take the same time)."""


def _separate(work: dict, seeds: range, device: torch.device) -> float:
    """Mean seconds of one run trained alone, over ``seeds``."""
    _sync(device)
    start = time.perf_counter()
    for seed in seeds:
        trainer, loader = _trainer(work, seed, device)
        trainer.fit(loader, work["epochs"])
    _sync(device)
    return (time.perf_counter() - start) / len(seeds)


def _batched(work: dict, seeds: range, device: torch.device) -> float:
    """Seconds to train one run per seed as one batch."""
    built = [_trainer(work, seed, device) for seed in seeds]
    _sync(device)
    start = time.perf_counter()
    outcomes = fit_batched([t for t, _ in built], [loader for _, loader in built], work["epochs"], progress=False)
    _sync(device)
    if any(o.failed for o in outcomes):
        raise RuntimeError(f"a batched benchmark run failed: {[o.error for o in outcomes if o.failed][0]}")
    return time.perf_counter() - start


def timings(work: dict, runs: int, device: torch.device) -> tuple[float, float]:
    """Median seconds of one run alone and of ``runs`` runs batched, over :data:`ROUNDS` rounds after a warm-up
    round."""
    alone, batched = [], []
    for round_ in range(ROUNDS + 1):
        a = _separate(work, range(1000 * round_, 1000 * round_ + SEPARATE_PER_ROUND), device)
        b = _batched(work, range(1000 * round_ + 100, 1000 * round_ + 100 + runs), device)
        if round_:  # round 0 warms up
            alone.append(a)
            batched.append(b)
    return statistics.median(alone), statistics.median(batched)


def measure(
    device: torch.device, names: list[str], counts: tuple[int, ...], long_steps: int = 0, settings: dict | None = None
) -> list[dict]:
    rows = []
    for name, work in _workloads(device, long_steps).items():
        if name not in names:
            continue
        work = {**work, **(settings or {})}  # _trainer fills in RUN_SETTINGS for what is not given
        for runs in counts:
            alone, seconds = timings(work, runs, device)
            separate_rate, batched_rate = 3600 / alone, 3600 * runs / seconds
            goal = GOALS.get((device.type, name.removesuffix("-long"), runs))
            rows.append(
                {
                    "workload": name,
                    "what": work["what"],
                    "runs": runs,
                    "separate_s_per_run": alone,
                    "batched_s": seconds,
                    "separate_runs_per_hour": separate_rate,
                    "batched_runs_per_hour": batched_rate,
                    "ratio": batched_rate / separate_rate,
                    "goal": goal,
                }
            )
            print(
                f"{name:6s} R={runs:2d}: separate {alone:.3f} s/run, batched {seconds:.3f} s for {runs} "
                f"-> {batched_rate / separate_rate:.2f}x" + (f" (goal {goal}x)" if goal else ""),
                flush=True,
            )
    return rows


def render(saved: dict) -> str:
    """One device's section of ``BATCHED.md`` from its saved result (``batched-<device>.json``: ``device``,
    ``machine``, ``commit``, ``rows``). The title names the machine the file records, not the one rendering it: the
    page is rebuilt from both devices' files wherever either one is measured."""
    device = saved["device"]
    lines = [
        f"### {bench_run.DEVICE_TITLES.get(device, device)}: {saved['machine']}",
        "",
        "| workload | R | separate: s per run | batched: s for R runs | runs / hour, separate | runs / hour, batched "
        "| ratio | goal |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    rows = saved["rows"]
    for row in rows:
        goal = row["goal"]
        verdict = "" if goal is None else f"{goal:g}x: {'met' if row['ratio'] >= goal else 'not met'}"
        lines.append(
            f"| {row['workload']} | {row['runs']} | {row['separate_s_per_run']:.3f} | {row['batched_s']:.3f} "
            f"| {row['separate_runs_per_hour']:,.0f} | {row['batched_runs_per_hour']:,.0f} | {row['ratio']:.2f}x "
            f"| {verdict} |"
        )
    lines += ["", "Workloads: " + "; ".join(sorted({f"`{r['workload']}`: {r['what']}" for r in rows})) + "."]
    return "\n".join(lines) + f"\n\nCommit {saved['commit']}."


def write_page(folder: Path = HERE, stamp: str | None = None) -> Path:
    """Writes ``folder/BATCHED.md`` from the saved ``folder/batched-cpu.json`` and ``batched-cuda.json`` (a section
    saying how to add a device whose file is missing), measuring nothing; ``stamp``: the time it names (default
    now). Returns the page's path."""
    stamp = stamp or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sections = []
    for kind in ("cpu", "cuda"):
        path = folder / f"batched-{kind}.json"
        if path.exists():
            sections.append(render(json.loads(path.read_text())))
        else:
            sections.append(
                f"### {bench_run.DEVICE_TITLES[kind]}: not measured yet (no such device where this ran); "
                f"`python bench/batched.py --device {kind}` adds it."
            )
    page = folder / "BATCHED.md"
    page.write_text(
        "# Batched runs against separate runs\n\n"
        f"Written by `python bench/batched.py` (last: {stamp}). A run: a fresh Trainer (seed, default flat guide, "
        "Adam, fused ELBO, no validation) fitted for a fixed number of steps (medians over rounds); separate runs go "
        "one after another "
        "through `Trainer.fit`, batched ones through `pyro_bnn.batched.fit_batched`. The ratio is batched over "
        "separate throughput; the goals are the issue's.\n\n" + "\n\n".join(sections) + "\n"
    )
    return page


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--workloads", default="moons,3fc,lenet,3fc-long,lenet-long")
    parser.add_argument(
        "--long-steps",
        type=flags.non_negative_int,
        default=0,
        help="also time 3FC and LeNet runs of this many steps (0: none)",
    )
    parser.add_argument("--runs", type=flags.positive_ints, default=",".join(map(str, RUN_COUNTS)))
    parser.add_argument(
        "--adam",
        choices=("auto", "stacked", "rows"),
        default="auto",
        help="force the batched Adam update (default: by the stack's size); with another than auto, print only",
    )
    for option, kind in (("guide", str), ("prior", str), ("particles", flags.positive_int)):
        default = RUN_SETTINGS[option]
        help_text = f"every run's {option} (default %(default)s); with another, print only"
        parser.add_argument(f"--{option}", type=kind, default=default, help=help_text)
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="measure nothing: rewrite BATCHED.md from the saved batched-<device>.json files",
    )
    args = parser.parse_args()
    if args.render_only:
        print(f"wrote {write_page()}")
        return
    device = torch.device(args.device)
    counts = args.runs
    if args.adam != "auto":
        batched_adam.STACKED_MAX_ELEMENTS = 1 << 62 if args.adam == "stacked" else 0
    settings = {option: getattr(args, option) for option in RUN_SETTINGS}
    rows = measure(device, args.workloads.split(","), counts, args.long_steps, settings)
    if args.adam != "auto" or settings != RUN_SETTINGS:
        return
    result = {"device": device.type, "machine": bench_run.machine(), "commit": bench_run._git_commit(), "rows": rows}
    (HERE / f"batched-{device.type}.json").write_text(json.dumps(result, indent=1))
    print(f"wrote {write_page()}")


if __name__ == "__main__":
    main()
