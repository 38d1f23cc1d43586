"""Weight pruning by signal-to-noise ratio, the experiment of Blundell et al. 2015 ("Weight Uncertainty in Neural
Networks", section 5.1 and Table 1).

Every scalar weight of the model gets a score from its variational posterior N(mu, sigma^2): ``|mu| / sigma``
(:attr:`Ranking.SNR`) or ``|mu|`` (:attr:`Ranking.MAGNITUDE`, the paper's naive baseline). The scores are pooled
over all layers' weight tensors, biases excluded (a parameter whose attribute name is ``bias`` is never pruned), and
the given fraction with the lowest scores is removed: those weights are fixed to exactly 0 (mu = 0 and sigma = 0),
every other weight keeps its posterior.

Ties: exactly ``k = floor(fraction * n + 1/2)`` of the ``n`` pooled weights are pruned (fraction 0 prunes none,
fraction 1 all). The weights are sorted by score with a stable sort, so among equal scores the weight that comes
first in the pooled order (sites in network order, then elements in row-major order) is pruned first. This differs
from the paper's rule (prune every weight at or below the quantile) only when scores tie across the threshold.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import Enum
from typing import Any

import torch

from pyro_bnn.bnn import BNN
from pyro_bnn.checks import non_negative_int, probability
from pyro_bnn.diagnostics.weight_stats import BIAS_ATTR, weight_posteriors
from pyro_bnn.predict.predictive import Data, model_device, predict
from pyro_bnn.predict.sources import GuideSource, ParameterSource
from pyro_bnn.priors.base import ParameterSite


class Ranking(str, Enum):
    """How weights are scored for pruning; the lowest scores go first."""

    SNR = "snr"
    """Signal-to-noise ratio ``|mu| / sigma`` of the weight's posterior (needs sigma > 0 everywhere)."""

    MAGNITUDE = "magnitude"
    """Magnitude of the posterior mean, ``|mu|`` (the paper's "naive" baseline; works for point estimates too)."""


def _ranking(by: str | Ranking) -> Ranking:
    try:
        return Ranking(by)
    except ValueError:
        raise ValueError(f"by must be one of {[r.value for r in Ranking]}, got {by!r}") from None


def _check_fraction(fraction: float) -> float:
    return probability(fraction, "fraction")


def num_pruned(fraction: float, num_weights: int) -> int:
    """How many of ``num_weights`` pooled weights a ``fraction`` prunes: ``floor(fraction * n + 1/2)``."""
    return min(num_weights, math.floor(_check_fraction(fraction) * num_weights + 0.5))


class _PooledRanking:
    """The model's prunable weights scored and sorted once, from which masks for any fraction are cut."""

    def __init__(self, guide, bnn: BNN, by: str | Ranking) -> None:
        self.by = _ranking(by)
        posteriors = [entry for entry in weight_posteriors(guide, bnn, caller="prune") if entry[0].attr != BIAS_ATTR]
        self.sites: list[ParameterSite] = [site for site, _, _ in posteriors]
        scores = []
        for site, loc, scale in posteriors:
            if self.by is Ranking.SNR:
                if not bool((scale > 0).all()):
                    raise ValueError(
                        f"prune by 'snr' needs sigma > 0, but site {site.name!r} has sigma = 0 (a point-estimate "
                        "guide?); use by='magnitude'"
                    )
                scores.append((loc.abs() / scale).flatten())
            else:
                scores.append(loc.abs().flatten())
        device = scores[0].device if scores else torch.device("cpu")
        self.scores = torch.cat(scores).double() if scores else torch.zeros(0, dtype=torch.float64, device=device)
        self.order = torch.sort(self.scores, stable=True).indices  # ties: earlier in the pooled order first

    @property
    def num_weights(self) -> int:
        return self.scores.numel()

    def masks(self, k: int) -> dict[str, torch.Tensor]:
        """``{site: bool mask of site.shape}``, True for the ``k`` lowest-scored weights."""
        pooled = torch.zeros(self.num_weights, dtype=torch.bool, device=self.scores.device)
        pooled[self.order[:k]] = True
        masks, start = {}, 0
        for site in self.sites:
            size = math.prod(site.shape)
            masks[site.name] = pooled[start : start + size].reshape(site.shape)
            start += size
        return masks

    def threshold(self, k: int) -> float | None:
        """The largest pruned score, or None when nothing is pruned."""
        return float(self.scores[self.order[k - 1]]) if k > 0 else None


class PrunedSource(ParameterSource):
    """The guide's posterior with some weights fixed to exactly 0.

    Each draw is the guide's own draw (same random numbers as :class:`~pyro_bnn.predict.sources.GuideSource`, so
    under the same seed an empty mask reproduces the unpruned predictions exactly) with the masked weights
    replaced by 0, i.e. mu = 0 and sigma = 0 for them. Per-example latents, if any, come from the guide.

    Args:
        guide: The trained guide.
        masks: ``{site name: bool tensor of the site's shape}``, True where the weight is pruned; sites not named
            are kept whole.
        by, fraction, threshold: How the masks were chosen (for the record; see :func:`prune`).

    Attributes:
        num_pruned: Weights fixed to 0.
        num_weights: Weights that were candidates (every random non-bias weight).
    """

    def __init__(
        self,
        guide: Callable,
        masks: Mapping[str, torch.Tensor],
        *,
        by: Ranking | None = None,
        fraction: float | None = None,
        threshold: float | None = None,
        num_weights: int | None = None,
    ) -> None:
        self.guide_source = GuideSource(guide)
        self.guide = guide
        self.masks = {name: mask.bool() for name, mask in masks.items()}
        self.mc_dropout = self.guide_source.mc_dropout
        self.by, self.fraction, self.threshold = by, fraction, threshold
        self.num_pruned = sum(int(mask.sum()) for mask in self.masks.values())
        self.num_weights = num_weights if num_weights is not None else sum(m.numel() for m in self.masks.values())

    def prepare(self, bnn: BNN, x: torch.Tensor) -> None:
        shapes = {site.name: tuple(site.shape) for site in bnn.sites}
        for name, mask in self.masks.items():
            if name not in shapes:
                raise ValueError(f"the pruning mask names {name!r}, which is not a weight site of the model")
            if tuple(mask.shape) != shapes[name]:
                raise ValueError(f"the pruning mask of {name!r} has shape {tuple(mask.shape)}, expected {shapes[name]}")
        self.guide_source.prepare(bnn, x)

    def draw_globals(self, bnn: BNN, start: int, num_samples: int, x: torch.Tensor) -> dict[str, torch.Tensor]:
        values = self.guide_source.draw_globals(bnn, start, num_samples, x)
        for name, mask in self.masks.items():
            # values (S, 1, *shape), mask (*shape): broadcasting zeroes the weight in every draw.
            values[name] = values[name].masked_fill(mask.to(values[name].device), 0.0)
        return values

    def draw_locals(self, bnn, globals_, num_samples, x):
        return self.guide_source.draw_locals(bnn, globals_, num_samples, x)

    def __repr__(self) -> str:
        how = f", by={self.by.value!r}, fraction={self.fraction}" if self.by is not None else ""
        return f"PrunedSource({self.num_pruned} of {self.num_weights} weights pruned{how})"


def prune(guide, bnn: BNN, fraction: float, *, by: str | Ranking = "snr") -> PrunedSource:
    """Removes the ``fraction`` of weights with the lowest signal-to-noise ratio (or magnitude).

    Pass the result to :func:`~pyro_bnn.predict.predict` in place of the guide.

    Args:
        guide: A trained mean-field Normal guide that :func:`~pyro_bnn.guides.posterior_loc_scale` reads (flat,
            autonormal, bbb); AutoDelta-style point estimates only with ``by="magnitude"``.
        bnn: Its model.
        fraction: Share of the pooled weights to prune, in [0, 1]; exactly ``floor(fraction * n + 1/2)`` are
            pruned, ties broken by pooled order (module docstring).
        by: ``"snr"`` (``|mu| / sigma``) or ``"magnitude"`` (``|mu|``).

    Returns:
        A :class:`PrunedSource`.

    Raises:
        ValueError: ``fraction`` outside [0, 1], an unknown ``by``, a guide of another kind (or not yet run), a
            site with a NaN or infinite mu or sigma, or ``by="snr"`` with some sigma = 0.
    """
    fraction = _check_fraction(fraction)
    ranking = _PooledRanking(guide, bnn, by)
    return _pruned_source(guide, ranking, fraction)


def _pruned_source(guide, ranking: _PooledRanking, fraction: float) -> PrunedSource:
    k = num_pruned(fraction, ranking.num_weights)
    return PrunedSource(
        guide,
        ranking.masks(k),
        by=ranking.by,
        fraction=fraction,
        threshold=ranking.threshold(k),
        num_weights=ranking.num_weights,
    )


@contextmanager
def _fixed_seed(seed: int | None, device: torch.device) -> Iterator[None]:
    """Seeds torch inside the block and restores the caller's random state after it (None: leaves it alone)."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


def pruning_table(
    bnn: BNN,
    guide,
    data: Data,
    *,
    fractions: Iterable[float] = (0.0, 0.25, 0.5, 0.75, 0.95),
    by: Sequence[str | Ranking] = ("snr", "magnitude"),
    num_samples: int = 100,
    seed: int | None = 0,
    batch_size: int = 1000,
) -> list[dict[str, Any]]:
    """Test error and NLL of the pruned posterior predictive for each fraction and ranking (the paper's Table 1).

    Args:
        bnn: A classifier.
        guide: Its trained guide (see :func:`prune`).
        data: Labelled test data: an ``(x, y)`` pair or a loader of pairs.
        fractions: Proportions of the weights to remove.
        by: Rankings to compare (:class:`Ranking` values).
        num_samples: Posterior samples per prediction.
        seed: Every cell predicts under this torch seed (common random numbers, so cells differ by the pruning
            alone and fraction 0 gives the same numbers for every ranking); the caller's random state is restored
            afterwards. None draws from the current state instead.
        batch_size: Inputs per forward pass when ``data`` is a pair.

    Returns:
        One row per fraction, in the order given: ``{"fraction", "num_pruned", "num_weights"}`` plus
        ``error_<by>`` (1 - accuracy of the mean predictive) and ``nll_<by>`` (its mean negative log-likelihood)
        for each ranking.

    Raises:
        ValueError: bad fractions or rankings, a seed that is neither None nor an int >= 0, a guide :func:`prune`
            refuses, data without labels or a regression model.
    """
    fractions = [_check_fraction(f) for f in fractions]
    rankings = [_ranking(b) for b in by]
    if seed is not None:
        seed = non_negative_int(seed, "seed")
    if not fractions or not rankings:
        raise ValueError("pruning_table needs at least one fraction and one ranking")
    pooled = {ranking: _PooledRanking(guide, bnn, ranking) for ranking in rankings}
    device = model_device(bnn)
    rows = []
    for fraction in fractions:
        num_weights = next(iter(pooled.values())).num_weights
        row: dict[str, Any] = {
            "fraction": fraction,
            "num_pruned": num_pruned(fraction, num_weights),
            "num_weights": num_weights,
        }
        for ranking, scores in pooled.items():
            source = _pruned_source(guide, scores, fraction)
            with _fixed_seed(seed, device):
                prediction = predict(bnn, source, data, num_samples=num_samples, batch_size=batch_size)
            if not prediction.is_classification:
                raise ValueError("pruning_table reports a test error, so it needs a classifier (class probabilities)")
            metrics = prediction.metrics()
            row[f"error_{ranking.value}"] = 1.0 - metrics["accuracy"]
            row[f"nll_{ranking.value}"] = metrics["nll"]
        rows.append(row)
    return rows


_RANKING_LABELS = {Ranking.SNR.value: "signal-to-noise", Ranking.MAGNITUDE.value: "magnitude"}


def format_pruning_table(rows: Sequence[Mapping[str, Any]], *, nll: bool = True) -> str:
    """A Markdown table of :func:`pruning_table` rows: proportion removed, weights removed, then the test error
    (in %) of each ranking and, with ``nll``, each ranking's NLL."""
    if not rows:
        raise ValueError("format_pruning_table needs at least one row")
    rankings = [key[len("error_") :] for key in rows[0] if key.startswith("error_")]
    header = ["Proportion removed", "Weights removed"]
    header += [f"Test error ({_RANKING_LABELS.get(r, r)})" for r in rankings]
    if nll:
        header += [f"NLL ({_RANKING_LABELS.get(r, r)})" for r in rankings]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    for row in rows:
        cells = [f"{100 * row['fraction']:g} %", f"{row['num_pruned']:,} / {row['num_weights']:,}"]
        cells += [f"{100 * row[f'error_{r}']:.2f} %" for r in rankings]
        if nll:
            cells += [f"{row[f'nll_{r}']:.4f}" for r in rankings]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


__all__ = ["PrunedSource", "Ranking", "format_pruning_table", "num_pruned", "prune", "pruning_table"]
