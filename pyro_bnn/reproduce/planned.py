"""What a reproduction is made of, as data: run specs, profiles, headlines and verdicts.

A paper's reproduction (one module under :mod:`pyro_bnn.reproduce.papers`) describes

* its **profiles** (:class:`Profile`): ``quick`` (a smoke run of about a minute), ``cpu`` (the largest scale that
  finishes in a few hours on 2 cores) and ``paper`` (the published scale, for a GPU). A profile changes sizes only
  (data, epochs, grid density, seeds, posterior samples), never the method;
* its **grid** (:meth:`Experiment.plan`): a list of :class:`RunSpec`, one per (config, seed);
* its **analysis** (:meth:`Experiment.analyse`): tables, figures and one :class:`Headline` per claim, each judged
  :attr:`Verdict.HOLDS`, :attr:`Verdict.DOES_NOT_HOLD`, :attr:`Verdict.INCONCLUSIVE` or
  :attr:`Verdict.NOT_COMPARABLE` by a rule written in the paper's module.

The runner (:mod:`.grid`), the executors (:mod:`.executors`) and the report (:mod:`.report`) know no paper by name.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from decimal import ROUND_UP, Decimal
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from pyro_bnn.runs.config import RunConfig

IGNORED_IN_RUN_ID = ("device", "data_dir")
"""Config keys that do not change what a run computes (where it runs, where its data lies): left out of its id, so
a grid started on one machine resumes on another."""

RUN_ID_BASE = {
    "dataset": "fashion-mnist", "model": "3fc", "activation": "relu", "prior": None, "noise_scale": 1.0,
    "guide": None, "elbo": "auto", "node_noise": False, "bias_noise": False, "samples_per_example": 2,
    "epochs": 10, "batch_size": 128, "optimizer": None, "lr": None, "lr_variational": None, "weight_decay": None,
    "lr_schedule": "constant", "lr_variational_schedule": "constant", "num_particles": 1, "kl_anneal": "constant",
    "kl_weighting": "uniform", "kl_scale": "dataset", "seed": 0, "train_subset": None, "test_subset": None,
    "val_size": None, "normalization": "unit", "num_samples": 100, "num_val_samples": 16, "n_bins": 15, "patience": 0,
}  # fmt: skip
"""The config a run id is measured against: ``RunConfig()``'s values when ids were introduced, frozen here. A run's
id hashes how its config differs from these, so a ``RunConfig`` field added later at its default leaves every id
(and so every finished run of a grid) as it was, and a default changed later changes the ids of the runs that
relied on it."""

PLANNED_VI_GUIDE = "flat:rel=1"
"""The weight-space guide of the grids that planned "the library's default" (implicit-bnn's VI, posterior-families'
mean-field family and the configs of its other families, priors' CNN): the default when they ran, named in their
plans so that a later default changes neither their method nor their run ids."""


@functools.cache
def _default_config_values() -> dict[str, Any]:
    """``RunConfig()``'s values as JSON reads them, built once (a plan of thousands of runs asked for them once per
    run id: half of a large plan's config checks). Read only."""
    return json.loads(RunConfig().to_json())


@dataclass(frozen=True)
class RunSpec:
    """One run of a grid: a training config, and what to measure on the trained run.

    Attributes:
        config: The training run (what ``pyro-bnn train`` would do).
        label: A readable prefix of the folder name, e.g. ``"3fc-mnist-relu-paper-s0"``.
        measures: Names of measurements taken after training (:data:`pyro_bnn.reproduce.measures.MEASURES`),
            with their arguments, e.g. ``("sampled_label_ece:10",)`` or ``("plateaus:25,6000",)``.
        tags: Facts the analysis groups by that the config does not say directly (e.g. ``{"objective":
            "paper"}``), as sorted ``(key, value)`` pairs.
        other_data: Data sets the measurements read besides the run's own (an out-of-domain test set), as
            ``(name, folder or None)`` pairs, None meaning the usual places. Like ``config.data_dir``, the folders
            are not part of the run's id; the names are, through the measures that use them.
        members: Makes this a **deep ensemble** of these runs (point networks, ``mle`` or ``map``, differing only
            in seed) instead of a training run: the grid trains the members first, as ordinary runs of the grid
            (on any executor), then this spec predicts with their equally weighted mixture
            (:func:`pyro_bnn.runs.load_ensemble`), scores it on ``config``'s test set with
            ``config.num_samples`` samples (sample i is member i mod M) and takes ``measures`` on it. ``config``
            is the members' (its seed seeds the measurements). With a :attr:`runner`, the runs it reads instead:
            it runs after them, and is told of them.
        runner: Makes this a run that is not a Trainer run (a sampler, a Laplace fit around a member's MAP, a
            posterior compared with a reference run): ``"package.module:function"``, called as
            ``function(spec, runs_dir, folder) -> RunResult`` once every member is done; ``measures`` are taken on
            what it returns. ``config`` is the data and network it works on.
        options: The runner's settings, as sorted ``(key, value)`` pairs (part of the run's id, unlike ``tags``).
    """

    config: RunConfig
    label: str
    measures: tuple[str, ...] = ()
    tags: tuple[tuple[str, str], ...] = ()
    other_data: tuple[tuple[str, str | None], ...] = ()
    members: tuple[RunSpec, ...] = ()
    runner: str = ""
    options: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        # The config with the mode's defaults filled in, as training writes it: the run's id hashes these values.
        object.__setattr__(self, "config", self.config.resolved())

    @property
    def run_id(self) -> str:
        """``<label>-<hash>``: the hash is of the config's differences from :data:`RUN_ID_BASE` (bar
        :data:`IGNORED_IN_RUN_ID`) and the measures, so the folder name says what ran and two specs with the same
        id are the same run."""
        values = json.loads(self.config.to_json())
        current = _default_config_values()
        differing = {
            key: value
            for key, value in values.items()
            if key not in IGNORED_IN_RUN_ID and value != RUN_ID_BASE.get(key, current.get(key))
        }
        content: dict[str, Any] = {"config": differing, "measures": list(self.measures)}
        if self.members:  # absent otherwise, so that the ids of training runs are as they were
            content["members"] = [member.run_id for member in self.members]
        if self.runner:  # likewise
            content["runner"] = self.runner
            content["options"] = dict(self.options)
        blob = json.dumps(content, sort_keys=True)
        return f"{self.label}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"

    def tag(self, key: str, default: str | None = None) -> str | None:
        return dict(self.tags).get(key, default)

    def option(self, key: str, default: str | None = None) -> str | None:
        return dict(self.options).get(key, default)

    @property
    def is_ensemble(self) -> bool:
        """Whether this spec combines trained runs (:attr:`members`) rather than training one."""
        return bool(self.members) and not self.runner

    @property
    def reads_runs(self) -> bool:
        """Whether this spec runs after other runs of the grid (an ensemble, or a runner with members)."""
        return bool(self.members)

    @property
    def trains(self) -> bool:
        """Whether this spec is a training run of its config (neither an ensemble nor a runner)."""
        return not self.members and not self.runner


def run_tags(**values: object) -> tuple[tuple[str, str], ...]:
    """``values`` as a spec's :attr:`RunSpec.tags`: sorted ``(key, str(value))`` pairs."""
    return tuple(sorted((key, str(value)) for key, value in values.items()))


class Status(str, Enum):
    """How a run of the grid ended."""

    DONE = "done"
    """Trained, scored and measured; its record holds the metrics."""
    FAILED = "failed"
    """Raised or diverged; its record holds the one-line reason, and the rest of the grid went on."""
    MISSING = "missing"
    """Not run (yet): the grid was interrupted or is still running elsewhere."""
    UNCOUNTED = "not counted"
    """Done, but from a tree with uncommitted changes: its code cannot be named, so no report counts it (set when a
    report is built, :func:`pyro_bnn.reproduce.code_state.counted`; never written to a record)."""
    DAMAGED = "damaged"
    """Its ``result.json`` exists but cannot be read (truncated, not JSON, no status); the record's reason says how.
    A grid that runs again runs it again (resuming its checkpoint); a report lists it as damaged, not as missing."""


@dataclass
class RunRecord:
    """What the report reads of one run: its spec, how it ended, and its numbers.

    Attributes:
        spec: The run.
        status: How it ended.
        metrics: ``metrics.json`` of the run (without the per-epoch history) plus the measurements' values.
        history: Per-epoch training history (loss, validation metrics), as in ``history.json``.
        reason: One line saying why a failed run failed.
        seconds: Wall time of the run (training, scoring and measurements).
        code: The code version that produced the run (``pyro_bnn <version> at <commit>``).
        threads: The torch threads it ran on (0: not recorded, a record older than the setting).
        retried: Why it ran a second time (its first worker was lost), or empty.
        training_code: The fingerprint of the training code it ran (:mod:`pyro_bnn.reproduce.code_state`); empty in
            records older than it, whose commit names it instead.
    """

    spec: RunSpec
    status: Status
    metrics: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""
    seconds: float = 0.0
    code: str = ""
    threads: int = 0
    retried: str = ""
    training_code: str = ""

    @property
    def config(self) -> RunConfig:
        return self.spec.config


@dataclass(frozen=True)
class Profile:
    """The sizes of one scale of an experiment.

    Attributes:
        name: ``quick``, ``cpu`` or ``paper``.
        summary: One line on what it is for and how long it takes.
        seeds: Seeds per cell when ``--seeds`` is not given.
        settings: Every size the plan uses, by name (printed in full in the report).
    """

    name: str
    summary: str
    seeds: int
    settings: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.settings[key]


class Verdict(str, Enum):
    """The plain answer for one headline claim."""

    HOLDS = "holds"
    DOES_NOT_HOLD = "does not hold"
    INCONCLUSIVE = "inconclusive at this scale"
    """The runs are comparable with the paper's, but their seeds' spread covers the effect."""
    NO_EFFECT = "no effect"
    """At a scale comparable with the paper's, the effect's interval is tight and covers zero: "no effect within
    ±x" (:attr:`Headline.interval` gives x)."""
    NOT_COMPARABLE = "not comparable at this scale"
    """The runs cannot be judged against the paper: they did not converge, or fall short of its accuracy
    (:mod:`pyro_bnn.reproduce.comparability`); never counted as *does not hold*."""


@dataclass(frozen=True)
class Headline:
    """One claim of the paper and what our runs say about it.

    Attributes:
        claim: The paper's claim, in one sentence.
        verdict: The answer.
        reason: The numbers behind the verdict, in one or two sentences.
        interval: For :attr:`Verdict.NO_EFFECT`, the half-width x of the interval the effect lies in.
    """

    claim: str
    verdict: Verdict
    reason: str
    interval: float | None = None

    @property
    def label(self) -> str:
        """The verdict as the report prints it (``no effect within ±0.016`` for :attr:`Verdict.NO_EFFECT`)."""
        if self.verdict is Verdict.NO_EFFECT and self.interval is not None:
            return no_effect_text(self.interval)
        return self.verdict.value


def no_effect_text(width: float) -> str:
    """``no effect within ±x`` for an effect whose interval lies within ±``width``, x being ``width`` to 3
    significant digits rounded up (:func:`bound_text`: never below the interval's end, ``±0.0101`` for 0.0100098,
    ``±0.00601`` where the interval's ends print to 3 decimals): one format for every verdict, cell and headline."""
    return f"{Verdict.NO_EFFECT.value} within ±{bound_text(width)}"


def bound_text(value: float, significant: int = 3, *, decimals: int | None = None) -> str:
    """``value`` (a bound, >= 0) rounded up, never down, to ``significant`` digits (``g`` format: ``0.0101`` for
    0.0100098, ``0.0125`` for 0.0125) or, given ``decimals``, to that many decimals (``f`` format); NaN and inf as
    they print. The digits are those of the shortest text that reads back as ``value`` (``repr``), so a value that
    prints exactly is not pushed up by the binary fraction under it."""
    if not math.isfinite(value) or value == 0:
        return f"{value:.{significant}g}" if decimals is None else f"{value:.{decimals}f}"
    exact = Decimal(repr(value))
    exponent = -decimals if decimals is not None else exact.adjusted() - significant + 1
    rounded = exact.quantize(Decimal(1).scaleb(exponent), rounding=ROUND_UP)
    return f"{float(rounded):.{significant}g}" if decimals is None else f"{rounded:.{decimals}f}"


@dataclass
class Section:
    """One part of a report: a heading, text, Markdown tables, figures (file names in the output folder) and
    the CSV files written beside the report."""

    title: str
    text: str = ""
    tables: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    csv_files: list[str] = field(default_factory=list)


@dataclass
class Analysis:
    """What an experiment's analysis hands to the report writer."""

    sections: list[Section]
    headlines: list[Headline]


class Experiment(Protocol):
    """A paper's reproduction: a name, its profiles, its grid and its analysis."""

    name: str
    title: str
    summary: str
    profiles: dict[str, Profile]

    def plan(self, profile: Profile, seeds: int, data_dirs: dict[str, str]) -> list[RunSpec]:
        """The grid at ``profile`` with ``seeds`` seeds per cell (``data_dirs``: data folder per data set name)."""
        ...

    def analyse(self, records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
        """Tables, figures (written into ``out``) and headlines from the grid's records."""
        ...
