"""Deep ensembles trained as a grid: M point networks as M ordinary runs on any executor (Ray included), then
their equally weighted mixture scored as one more run of the grid.

``pyro-bnn ensemble`` and :func:`train_ensemble` are the user-facing form; a reproduction lists the same specs in
its plan (:attr:`~pyro_bnn.reproduce.planned.RunSpec.members`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from pyro_bnn.checks import positive_int
from pyro_bnn.data.seeding import MAX_SEED
from pyro_bnn.guides.spec import GuideKind, parse_guide
from pyro_bnn.reproduce.executors import Executor, make_executor
from pyro_bnn.reproduce.grid import GRID, run_grid
from pyro_bnn.reproduce.planned import IGNORED_IN_RUN_ID, RunRecord, RunSpec
from pyro_bnn.reproduce.record_files import spec_to_dict
from pyro_bnn.runs.config import RunConfig

DEFAULT_MEMBERS = 5
"""Members of a deep ensemble unless told otherwise (Lakshminarayanan et al. use 5)."""


def ensemble_specs(
    config: RunConfig,
    members: int = DEFAULT_MEMBERS,
    *,
    measures: tuple[str, ...] = (),
    other_data: tuple[tuple[str, str | None], ...] = (),
    label: str = "ensemble",
) -> list[RunSpec]:
    """The grid of a deep ensemble: ``members`` runs of ``config`` with seeds ``config.seed + i`` on the examples of
    ``config``'s data seed (so they differ in initialisation and batch order only), then the ensemble (last).

    Args:
        config: A point network's run (guide ``mle`` or ``map``; None means ``map``).
        members: M >= 1.
        measures: Measurements of the ensemble (:data:`pyro_bnn.reproduce.measures.MEASURES`).
        other_data: Data sets those measurements read, as in :class:`~pyro_bnn.reproduce.planned.RunSpec`.
        label: Prefix of the run folders' names.

    Raises:
        ValueError: ``members`` is not an int >= 1, a member seed ``seed + i`` above 2**32 - 1, a guide that is not
            a point network, or an invalid config.
    """
    positive_int(members, "members")
    if config.seed + members - 1 > MAX_SEED:  # member i trains under seed + i, which Pyro must take too
        raise ValueError(
            f"seed={config.seed} with members={members} gives member seeds up to {config.seed + members - 1}, above "
            f"{MAX_SEED} (2**32 - 1, the largest seed Pyro takes); pass a seed in [0, {MAX_SEED - members + 1}]"
        )
    guide = "map" if config.guide is None else config.guide
    kind = parse_guide(guide).kind
    if kind not in (GuideKind.MLE, GuideKind.MAP):
        raise ValueError(f"an ensemble member must be a point network (guide mle or map), got guide {guide!r}")
    data_seed = config.seed if config.data_seed is None else config.data_seed
    base = dataclasses.replace(config, guide=guide, data_seed=data_seed, num_samples=1)
    runs = tuple(
        RunSpec(dataclasses.replace(base, seed=config.seed + i), label=f"{label}-member{i}") for i in range(members)
    )
    combined = dataclasses.replace(base, num_samples=members)
    return [*runs, RunSpec(combined, label=label, measures=measures, other_data=other_data, members=runs)]


def check_same_ensemble(out: str | os.PathLike, specs: list[RunSpec]) -> None:
    """Refuses ``out`` when its ``grid.json`` plans another ensemble than ``specs`` (:func:`ensemble_specs`): other
    options than the member count, whose runs would stay beside the new ones, or a grid that is no ensemble. More
    (or fewer) members of the same options are the same ensemble grown (or cut): its finished members are kept.

    Raises:
        ValueError: one line naming the first option that differs.
    """
    grid = Path(out) / GRID
    try:
        runs = json.loads(grid.read_text())["runs"]
        old = runs[-1]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return  # no grid yet (or one the grid run rewrites): nothing to keep apart
    if not isinstance(old, dict) or "members" not in old or not isinstance(old.get("config"), dict):
        raise ValueError(f"{out} holds a grid that is no ensemble ({GRID}); pass another --out")
    new = spec_to_dict(specs[-1])["config"]
    # The fields both name (a field added since the old grid ran is none of its options), but those a run id leaves
    # out so that a grid resumes on another machine (the device, the data's folder).
    ignored = {"num_samples", *IGNORED_IN_RUN_ID}
    differ = [k for k in sorted(set(new) & set(old["config"])) if k not in ignored and new[k] != old["config"][k]]
    if differ:
        name = differ[0]
        raise ValueError(
            f"{out} holds an ensemble of other options ({name} {old['config'].get(name)!r}, here {new.get(name)!r}"
            f"{f', and {len(differ) - 1} more' if len(differ) > 1 else ''}); its member runs would stay beside the "
            "new ones: pass another --out"
        )


def train_ensemble(
    config: RunConfig,
    out: str | os.PathLike,
    members: int = DEFAULT_MEMBERS,
    *,
    executor: str | Executor = "local",
    workers: int | None = None,
    retry_failed: bool = False,
    progress: bool = True,
) -> list[RunRecord]:
    """Trains a deep ensemble of ``members`` point networks into ``out/runs`` and scores it.

    The members run as a grid on ``executor`` (``local``, ``ray`` or an executor), so an interrupted call resumes
    where it stopped and a finished member is never trained again. The ensemble's test metrics (``accuracy``,
    ``nll``, ``ece``, ... of the M-member mixture) are in its record and in ``out/runs/<ensemble id>/metrics.json``;
    :func:`pyro_bnn.runs.load_ensemble` reads the members back for :func:`pyro_bnn.predict.predict`.

    Members always predict with one sample and the mixture with M (sample i is member i mod M), whatever
    ``config.num_samples`` says. ``retry_failed`` trains failed members (and a failed ensemble) again.

    Returns:
        The records of the members, then the ensemble's.
    """
    specs = ensemble_specs(config, members)
    check_same_ensemble(out, specs)
    runner = make_executor(executor, workers) if isinstance(executor, str) else executor
    return run_grid(specs, out, runner, progress=progress, retry_failed=retry_failed, name="ensemble")


__all__ = ["DEFAULT_MEMBERS", "check_same_ensemble", "ensemble_specs", "train_ensemble"]
