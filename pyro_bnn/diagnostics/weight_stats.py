"""Per-layer statistics of a mean-field Normal posterior: histograms of mu, sigma and the signal-to-noise ratio.

The signal-to-noise ratio of a weight is ``|mu| / sigma`` (Blundell et al. 2015, "Weight Uncertainty in Neural
Networks", section 5.1), the score their pruning experiment ranks weights by (:mod:`pyro_bnn.diagnostics.pruning`).
Its histogram is kept in decibels, ``10 log10(|mu| / sigma)``, as in their Figure 5: the ratio spans orders of
magnitude and a linear histogram puts nearly every weight in the first bin.

Weights and biases of a layer are summarised separately (:class:`LayerStats` ``weights`` and ``biases``): a random
parameter whose attribute name is ``bias`` is a bias, every other random parameter of the layer (``weight``, a
convolution's kernel, ...) counts as a weight. Deterministic parameters (those the prior did not select) have no
posterior and are left out.

:class:`WeightStatsRecorder` is a training callback that records these statistics after every epoch, as plain
JSON-ready dicts, and carries them through a checkpoint and resume.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from pyro_bnn._io import JsonListText, write_text_atomically
from pyro_bnn.checks import positive_int
from pyro_bnn.guides.inspect import posterior_loc_scale
from pyro_bnn.infer.callbacks import Callback

if TYPE_CHECKING:
    from pyro_bnn.bnn import BNN
    from pyro_bnn.infer.trainer import Trainer
    from pyro_bnn.priors.base import ParameterSite

BIAS_ATTR = "bias"
"""Attribute name of the parameters counted as biases (never pruned, summarised apart from the weights)."""

DEFAULT_BINS = 50
"""Histogram bins when the caller does not say."""


@dataclass(frozen=True)
class Histogram:
    """Counts of values in equal-width bins.

    Attributes:
        counts: ``bins`` integers; they sum to the number of values (the last bin includes its right edge).
        edges: ``bins + 1`` increasing bin edges.
    """

    counts: list[int]
    edges: list[float]

    def to_dict(self) -> dict[str, list]:
        return {"counts": list(self.counts), "edges": list(self.edges)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Histogram:
        return cls(counts=[int(c) for c in data["counts"]], edges=[float(e) for e in data["edges"]])


@dataclass(frozen=True)
class TensorStats:
    """Statistics over a set of scalar weights (all weights, or all biases, of one layer).

    Attributes:
        count: Number of scalar weights.
        mu: Histogram of the variational locations.
        sigma: Histogram of the variational scales.
        snr_db: Histogram of the signal-to-noise ratio in decibels, ``10 log10(|mu| / sigma)``; a weight with
            ``mu = 0`` (minus infinity dB) is counted in the lowest bin.
        mean_sigma: Mean of sigma.
        median_snr: Median of ``|mu| / sigma`` (the lower middle value for an even count, as ``torch.median``).
        fraction_snr_below_1: Fraction of the weights with ``|mu| / sigma < 1``.
    """

    count: int
    mu: Histogram
    sigma: Histogram
    snr_db: Histogram
    mean_sigma: float
    median_snr: float
    fraction_snr_below_1: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "mu": self.mu.to_dict(),
            "sigma": self.sigma.to_dict(),
            "snr_db": self.snr_db.to_dict(),
            "mean_sigma": self.mean_sigma,
            "median_snr": self.median_snr,
            "fraction_snr_below_1": self.fraction_snr_below_1,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TensorStats:
        return cls(
            count=int(data["count"]),
            mu=Histogram.from_dict(data["mu"]),
            sigma=Histogram.from_dict(data["sigma"]),
            snr_db=Histogram.from_dict(data["snr_db"]),
            mean_sigma=float(data["mean_sigma"]),
            median_snr=float(data["median_snr"]),
            fraction_snr_below_1=float(data["fraction_snr_below_1"]),
        )


@dataclass(frozen=True)
class LayerStats:
    """One layer's statistics, weights and biases apart.

    Attributes:
        weights: Over every random non-bias parameter of the layer, or None when it has none.
        biases: Over the layer's random ``bias``, or None when it has none (or it is deterministic).
    """

    weights: TensorStats | None
    biases: TensorStats | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "weights": None if self.weights is None else self.weights.to_dict(),
            "biases": None if self.biases is None else self.biases.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LayerStats:
        return cls(
            weights=None if data.get("weights") is None else TensorStats.from_dict(data["weights"]),
            biases=None if data.get("biases") is None else TensorStats.from_dict(data["biases"]),
        )


def weight_posteriors(
    guide, bnn: BNN, *, caller: str = "weight_statistics"
) -> list[tuple[ParameterSite, torch.Tensor, torch.Tensor]]:
    """Each random parameter site of ``bnn`` with its variational location and scale, in network order.

    Args:
        guide: A mean-field Normal guide that :func:`~pyro_bnn.guides.posterior_loc_scale` reads (flat,
            autonormal, bbb; AutoDelta reads with scale 0), run at least once.
        bnn: Its model.
        caller: Named in error messages.

    Returns:
        ``[(site, loc, scale)]`` with ``loc`` and ``scale`` of ``site.shape``, detached copies.

    Raises:
        ValueError: The guide is of another kind, has not run, or lacks one of the model's weight sites, or a
            site's mu or sigma has a NaN or infinite entry (one line: the site and how many entries).
    """
    try:
        pairs = posterior_loc_scale(guide)
    except ValueError as err:
        raise ValueError(
            f"{caller} needs a mean-field Normal guide (flat, autonormal, bbb) that has run; {err}"
        ) from None
    missing = [site.name for site in bnn.sites if site.name not in pairs]
    if missing:
        raise ValueError(f"{caller}: the guide has no posterior for the model's weight sites {missing[:5]}")
    for site in bnn.sites:
        for what, value in zip(("mu", "sigma"), pairs[site.name], strict=True):
            bad = int((~torch.isfinite(value)).sum())
            if bad:
                raise ValueError(
                    f"{caller}: site {site.name!r} has non-finite {what} ({bad} of {value.numel()} entries); "
                    "expected finite values"
                )
    return [(site, *pairs[site.name]) for site in bnn.sites]


def _histogram(values: torch.Tensor, bins: int) -> Histogram:
    """Equal-width histogram of ``values`` (1-D, float64) over their finite range; infinite values go to the
    end bins, so the counts always sum to ``len(values)``."""
    finite = values[torch.isfinite(values)]
    low, high = (float(finite.min()), float(finite.max())) if finite.numel() else (0.0, 0.0)
    if not high > low:  # one value (or none): a unit-wide range around it, so the bins have a width
        low, high = low - 0.5, high + 0.5
    counts = torch.histc(values.clamp(low, high), bins=bins, min=low, max=high)
    edges = torch.linspace(low, high, bins + 1, dtype=torch.float64)
    return Histogram(counts=[int(c) for c in counts.round().tolist()], edges=edges.tolist())


def _tensor_stats(loc: torch.Tensor, scale: torch.Tensor, bins: int) -> TensorStats:
    loc, scale = loc.double(), scale.double()
    snr = loc.abs() / scale
    return TensorStats(
        count=loc.numel(),
        mu=_histogram(loc, bins),
        sigma=_histogram(scale, bins),
        snr_db=_histogram(10 * snr.log10(), bins),
        mean_sigma=float(scale.mean()),
        median_snr=float(snr.median()),
        fraction_snr_below_1=float((snr < 1).double().mean()),
    )


@torch.no_grad()
def weight_statistics(guide, bnn: BNN, *, bins: int = DEFAULT_BINS) -> dict[str, LayerStats]:
    """Histograms and summaries of mu, sigma and ``|mu| / sigma`` for each layer's random weights.

    Args:
        guide: A trained mean-field Normal guide (flat, autonormal, bbb: what
            :func:`~pyro_bnn.guides.posterior_loc_scale` reads). Every scale must be positive.
        bnn: Its model; a layer is a module that owns random parameters (:attr:`ParameterSite.layer`).
        bins: Bins of every histogram.

    Returns:
        ``{layer name: LayerStats}`` in network order; ``{}`` for a model without random parameters.

    Raises:
        ValueError: ``bins`` is not a positive int; the guide is of another kind; some mu or sigma is NaN or
            infinite; some sigma is 0 (a point estimate has no signal-to-noise ratio).
    """
    bins = positive_int(bins, "bins")
    groups: dict[str, dict[str, list[tuple[torch.Tensor, torch.Tensor]]]] = {}
    for site, loc, scale in weight_posteriors(guide, bnn):
        if not bool((scale > 0).all()):
            raise ValueError(
                f"weight_statistics: site {site.name!r} has sigma = 0 (a point-estimate guide?); the signal-to-noise "
                "ratio needs sigma > 0"
            )
        kind = "biases" if site.attr == BIAS_ATTR else "weights"
        groups.setdefault(site.layer, {"weights": [], "biases": []})[kind].append((loc.flatten(), scale.flatten()))
    result = {}
    for layer, kinds in groups.items():
        stats = {}
        for kind, pairs in kinds.items():
            stats[kind] = (
                _tensor_stats(torch.cat([p[0] for p in pairs]), torch.cat([p[1] for p in pairs]), bins)
                if pairs
                else None
            )
        result[layer] = LayerStats(**stats)
    return result


def statistics_to_dict(stats: Mapping[str, LayerStats]) -> dict[str, dict[str, Any]]:
    """``{layer: LayerStats}`` as plain JSON-ready dicts (lists, numbers, None)."""
    return {layer: layer_stats.to_dict() for layer, layer_stats in stats.items()}


def statistics_from_dict(data: Mapping[str, Mapping[str, Any]]) -> dict[str, LayerStats]:
    """Inverse of :func:`statistics_to_dict`."""
    return {layer: LayerStats.from_dict(value) for layer, value in data.items()}


class WeightStatsRecorder(Callback):
    """Records :func:`weight_statistics` of the trainer's guide after every epoch.

    The history is a list of plain dicts, ``{"epoch": n, "layers": statistics_to_dict(...)}``, one per completed
    epoch; it is the callback's checkpoint state, so a resumed run continues it. Reading the statistics uses no
    random numbers, so recording does not change training.

    Args:
        path: Where to write the whole history as indented JSON after every record (atomically, synced to disk only
            when training ends), e.g. ``run_dir / "weight_stats.json"``; None writes nothing.
        bins: Bins of every histogram.
        every: Record after every ``every``-th epoch only (and always after the first, and after the last when
            training ends: early stopping or an epoch count that is no multiple of ``every``).

    Attributes:
        history: The records so far.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, bins: int = DEFAULT_BINS, every: int = 1) -> None:
        bins = positive_int(bins, "bins")
        every = positive_int(every, "every")
        self.path = None if path is None else Path(path)
        self.bins, self.every = bins, every
        self.history: list[dict[str, Any]] = []
        self._text = JsonListText(indent=2)
        self._state_text = JsonListText()  # the checkpoint's copy: one line, json's C encoder

    def on_epoch_end(self, trainer: Trainer, record: dict[str, Any]) -> None:
        epoch = int(record["epoch"])
        if epoch != 1 and epoch % self.every != 0 and not trainer.stop_training:
            return
        self._record(trainer, epoch)

    def on_train_end(self, trainer: Trainer) -> None:
        # The last epoch, when `every` skipped it: the statistics of the network training returns.
        if trainer.epoch and (not self.history or self.history[-1]["epoch"] != trainer.epoch):
            self._record(trainer, trainer.epoch, sync=True)
        elif self.path is not None and trainer.epoch:
            self._write(sync=True)  # the writes during training were not synced

    def _record(self, trainer: Trainer, epoch: int, sync: bool = False) -> None:
        stats = weight_statistics(trainer.guide, trainer.bnn, bins=self.bins)
        self.history.append({"epoch": epoch, "layers": statistics_to_dict(stats)})
        self._write(sync)

    def _write(self, sync: bool) -> None:
        # Each snapshot is encoded once; the file is for watching (the checkpoint carries the history), so only the
        # write when training ends is synced.
        if self.path is not None:
            write_text_atomically(self.path, self._text.text(self.history), sync=sync)

    def state_dict(self) -> dict[str, Any]:
        # The history as one JSON string (each snapshot encoded once): as nested lists, the checkpoint written after
        # every epoch passed each number of every snapshot through torch.save's per-object pickling (57 000 objects
        # a checkpoint after 30 epochs of a small run), most of a small run's checkpoint time.
        return {"history_json": self._state_text.text(self.history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "history_json" in state:
            self.history = json.loads(state["history_json"])
        else:  # a checkpoint written before the history was one string
            self.history = list(state["history"])

    def statistics(self, index: int = -1) -> dict[str, LayerStats]:
        """The recorded statistics of one entry (the last by default) as :class:`LayerStats`."""
        return statistics_from_dict(self.history[index]["layers"])


__all__ = [
    "BIAS_ATTR",
    "Histogram",
    "LayerStats",
    "TensorStats",
    "WeightStatsRecorder",
    "statistics_from_dict",
    "statistics_to_dict",
    "weight_posteriors",
    "weight_statistics",
]
