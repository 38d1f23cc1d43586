"""The KL term of R runs at once: each run's own prior hyper-parameters, one ``(R,)`` result.

Each run's prior is read once, per weight site, from its model (``model.prior.distribution``) and stacked over the
runs: a site's prior parameters become ``(R, 1)`` (one number per run) or ``(R, n)`` tensors, and consecutive sites
with the same family and scalar parameters merge into one segment of the flat vectors. Normal priors get the
closed-form ``KL(Normal(mu, sigma) || Normal(m, s))``; Laplace, Cauchy, scale-mixture and flat priors (and Normal
ones with ``closed_form_kl=False``) get the Monte Carlo estimate ``log q(w) - log p(w)`` of the drawn weights, as
:class:`~pyro_bnn.infer.FastMeanFieldELBO` and ``Trace_ELBO`` do for one run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

import torch
from pyro.distributions import ImproperUniform
from torch.distributions import Cauchy, Distribution, Independent, Laplace, Normal

from pyro_bnn.bnn import BNN
from pyro_bnn.guides.flat import FlatSite
from pyro_bnn.priors import ScaleMixtureNormal, scale_mixture_log_density

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_LOG_PI = math.log(math.pi)


def _square_norm(a: torch.Tensor) -> torch.Tensor:
    """Row-wise sums of squares of an ``(R, n)`` tensor, ``(R,)``, in one pass without an ``(R, n)`` temporary
    (a batched product ``a @ a`` and ``torch.linalg.vecdot`` were both several times slower on a CPU)."""
    return torch.linalg.vector_norm(a, dim=1).square()


class Family(str, Enum):
    """The prior families a batch of runs can be trained under."""

    NORMAL = "normal"
    """Normal(loc, scale): the closed-form KL where asked."""
    LAPLACE = "laplace"
    """Laplace(loc, scale)."""
    CAUCHY = "cauchy"
    """Cauchy(loc, scale)."""
    MIXTURE = "mixture"
    """Bayes by Backprop's scale mixture ``pi N(0, sigma1^2) + (1 - pi) N(0, sigma2^2)``
    (:class:`~pyro_bnn.priors.ScaleMixtureNormal`)."""
    FLAT = "flat"
    """The improper flat prior (log density 0)."""


_TYPES = ((Normal, Family.NORMAL), (Laplace, Family.LAPLACE), (Cauchy, Family.CAUCHY))


def prior_family(prior: Distribution) -> tuple[Family, tuple[torch.Tensor, ...]]:
    """``(family, parameters)`` of a weight prior (``Independent`` wrappers removed): ``(loc, scale)`` for Normal,
    Laplace and Cauchy, ``(pi, sigma1, sigma2)`` for the scale mixture, ``()`` for flat.

    Raises:
        ValueError: Another family (a hierarchical prior's conditional, a user's distribution), which batched runs
            do not score.
    """
    base = prior
    while isinstance(base, Independent):
        base = base.base_dist
    if isinstance(base, ImproperUniform):
        return Family.FLAT, ()
    if isinstance(base, ScaleMixtureNormal):
        return Family.MIXTURE, (base.pi, base.sigma1, base.sigma2)
    for kind, family in _TYPES:
        if type(base) is kind or isinstance(base, kind):
            return family, (base.loc, base.scale)
    raise ValueError(
        f"batched runs take Normal, Laplace, Cauchy, scale-mixture or flat priors, got {type(base).__name__}; "
        "train this run alone"
    )


_UNUSED = (0.0, 1.0, 0.5, 1.0)
"""What :class:`PriorSegment` holds for ``(loc, scale, pi, scale2)`` where a run's family has no such parameter (finite
values that every family's log density can be evaluated at, then masked out)."""


def _site_parameters(family: Family, params: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor | None, ...]:
    """A prior's parameters in :class:`PriorSegment`'s order ``(loc, scale, pi, scale2)``, None where the family has
    none (:data:`_UNUSED`)."""
    if family is Family.FLAT:
        return None, None, None, None
    if family is Family.MIXTURE:
        pi, sigma1, sigma2 = params
        return None, sigma1, pi, sigma2
    loc, scale = params
    return loc, scale, None, None


def _compact(value: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``(1,)`` when ``value`` is one number over the site, else the site's values flat ``(n,)``."""
    value = value.detach().expand(shape).reshape(-1)
    if value.numel() and bool((value == value[0]).all()):
        return value[:1].clone()
    return value.clone()


@dataclass
class PriorSegment:
    """A run ``[start, stop)`` of the flat vectors where each run has one prior family.

    Attributes:
        families: Each run's family on the segment.
        loc, scale: ``(R, 1)`` (one number per run) or ``(R, stop - start)``; 0 and 1 for a flat prior; 0 and
            sigma1 for a scale mixture.
        closed: ``(R,)`` bool: the runs whose KL on this segment is analytic (Normal prior, closed form asked).
        pi, scale2: A scale mixture's weight of its first component and sigma2, shaped as ``loc``; 0.5 and 1 for
            the other families.

    The host-side facts below are read once here, so that a step reads nothing back from the device (a CUDA graph
    cannot capture a step that does).
    """

    start: int
    stop: int
    families: tuple[Family, ...]
    loc: torch.Tensor
    scale: torch.Tensor
    closed: torch.Tensor
    pi: torch.Tensor
    scale2: torch.Tensor
    any_closed: bool = field(init=False)
    """Whether some run's KL on this segment is analytic."""
    all_closed: bool = field(init=False)
    """Whether every run's KL on this segment is analytic."""
    zero_loc: bool = field(init=False)
    """Whether every prior mean on this segment is 0."""
    family_masks: dict[Family, torch.Tensor] = field(init=False)
    """``{family: (R,) bool}``, the runs with that prior family here."""

    def __post_init__(self) -> None:
        self.any_closed = bool(self.closed.any())
        self.all_closed = bool(self.closed.all())
        self.zero_loc = bool((self.loc == 0).all())
        self.family_masks = {
            family: torch.tensor([f is family for f in self.families], device=self.loc.device)
            for family in set(self.families)
        }

    @property
    def any_monte_carlo(self) -> bool:
        """Whether some run's KL on this segment is a Monte Carlo estimate."""
        return not self.all_closed

    def log_prob(self, w: torch.Tensor) -> torch.Tensor:
        """``sum log p(w)`` over the segment, each run under its own prior: ``w`` ``(R, stop - start)`` → ``(R,)``."""
        total = w.new_zeros(w.shape[0])
        families = set(self.families)
        z = (w - self.loc) / self.scale if families & {Family.NORMAL, Family.LAPLACE, Family.CAUCHY} else None
        for family in families:
            mask = self.family_masks[family]
            if family is Family.FLAT:
                continue
            if family is Family.NORMAL:
                per = -0.5 * z.square() - self.scale.log() - _HALF_LOG_2PI
            elif family is Family.LAPLACE:
                per = -z.abs() - (2 * self.scale).log()
            elif family is Family.MIXTURE:
                # The other runs' rows are scored at 0: at their own (large) weights the unused parameters could
                # overflow to a NaN whose gradient torch.where does not mask.
                at = w if len(families) == 1 else torch.where(mask[:, None], w, torch.zeros_like(w))
                per = scale_mixture_log_density(at, self.pi, self.scale, self.scale2)
            else:
                per = -torch.log1p(z.square()) - self.scale.log() - _LOG_PI
            total = torch.where(mask, per.sum(1), total)
        return total


class BatchedKL:
    """The per-run KL term of R models that share their weight sites (each run with its own prior).

    Args:
        models: The R models (same weight sites and shapes; priors may differ in family and hyper-parameters).
        sites: The flat layout of the weight sites.
        closed_form_kl: Use the analytic KL where a run's prior is Normal.
        device, dtype: Where the stacked prior parameters live.

    Raises:
        ValueError: A prior batched runs cannot score (one line naming it).
    """

    def __init__(
        self,
        models: Sequence[BNN],
        sites: Sequence[FlatSite],
        *,
        closed_form_kl: bool,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        segments: list[PriorSegment] = []
        for site, *model_sites in zip(sites, *(m.sites for m in models), strict=True):
            read = [prior_family(m.prior.distribution(s, {})) for m, s in zip(models, model_sites, strict=True)]
            families = tuple(family for family, _ in read)
            # Per run, (loc, scale, pi, scale2) compacted: (1,) where one number covers the site, else (n,).
            columns = zip(*(_site_parameters(family, params) for family, params in read), strict=True)
            compact = [
                [torch.full((1,), unused) if v is None else _compact(v, site.shape) for v in values]
                for unused, values in zip(_UNUSED, columns, strict=True)
            ]
            width = max(t.numel() for values in compact for t in values)
            # Each to the device before stacking: a family without a parameter gets a CPU filler, while the prior
            # parameters of the others live where their model does (runs with two prior families on CUDA).
            loc, scale, pi, scale2 = (torch.stack([t.to(device, dtype).expand(width) for t in v]) for v in compact)
            closed = torch.tensor([closed_form_kl and f is Family.NORMAL for f in families], device=device)
            last = segments[-1] if segments else None
            if (
                last is not None
                and last.stop == site.start
                and last.families == families
                and last.loc.shape[1] == loc.shape[1] == 1
                and all(
                    torch.equal(a, b)
                    for a, b in zip((last.loc, last.scale, last.pi, last.scale2), (loc, scale, pi, scale2), strict=True)
                )
            ):
                last.stop = site.stop  # one segment over consecutive sites with the same scalar priors
                continue
            segments.append(PriorSegment(site.start, site.stop, families, loc, scale, closed, pi, scale2))
        self.segments = segments
        self.closed_segments = [s for s in segments if s.any_closed]
        self.monte_carlo_segments = [s for s in segments if s.any_monte_carlo]

    def open_ranges(self, num_latents: int) -> list[tuple[int, int]]:
        """The ``[start, stop)`` ranges of ``[0, num_latents)`` outside every closed-form segment."""
        ranges, position = [], 0
        for seg in sorted(self.closed_segments, key=lambda s: s.start):
            if seg.start > position:
                ranges.append((position, seg.start))
            position = max(position, seg.stop)
        if position < num_latents:
            ranges.append((position, num_latents))
        return ranges

    def closed_form(self, loc: torch.Tensor, scale: torch.Tensor, log_scale: torch.Tensor) -> torch.Tensor:
        """``sum KL(Normal(mu, sigma) || prior)`` over each run's closed-form segments: ``(R, D)`` each → ``(R,)``
        (0 for the runs whose KL on a segment is a Monte Carlo one)."""
        kl = loc.new_zeros(loc.shape[0])
        for seg in self.closed_segments:
            mu, sigma, ls = (t[:, seg.start : seg.stop] for t in (loc, scale, log_scale))
            n = seg.stop - seg.start
            if seg.scale.shape[1] == 1:  # one prior per run: sum first, then scale
                s, m = seg.scale[:, 0], seg.loc[:, 0]
                diff = mu if seg.zero_loc else mu - m[:, None]
                quad = _square_norm(sigma) + _square_norm(diff)
                value = 0.5 * quad / s.square() - ls.sum(1) + n * (s.log() - 0.5)
            else:
                per = 0.5 * (sigma.square() + (mu - seg.loc).square()) / seg.scale.square() - ls + seg.scale.log() - 0.5
                value = per.sum(1)
            kl = kl + (value if seg.all_closed else torch.where(seg.closed, value, torch.zeros_like(value)))
        return kl

    def negative_log_prior(self, weights: torch.Tensor) -> torch.Tensor:
        """``-sum log p(w)`` of each run under its own prior, ``(R, D)`` → ``(R,)``: the latent term of a point
        estimate (``AutoDelta`` under ``Trace_ELBO``, whose guide density is 0); 0 for flat priors and for D = 0."""
        value = weights.new_zeros(weights.shape[0])
        for seg in self.segments:
            value = value - seg.log_prob(weights[:, seg.start : seg.stop])
        return value

    def monte_carlo(self, eps: torch.Tensor, log_scale: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """``log q(w) - log p(w)`` over each run's Monte Carlo segments: ``(R,)`` (0 where its KL is analytic).

        Args:
            eps: The standard normal draws behind the weights, ``(R, D)``.
            log_scale: ``(R, D)``, log sigma.
            weights: ``loc + sigma * eps``, ``(R, D)``.
        """
        kl = weights.new_zeros(weights.shape[0])
        for seg in self.monte_carlo_segments:
            sl = slice(seg.start, seg.stop)
            # log q(w) = -eps^2 / 2 - log sigma - log(2 pi) / 2 per weight, exactly.
            log_q = -0.5 * eps[:, sl].square().sum(1) - log_scale[:, sl].sum(1) - (seg.stop - seg.start) * _HALF_LOG_2PI
            value = log_q - seg.log_prob(weights[:, sl])
            kl = kl + (value if not seg.any_closed else torch.where(seg.closed, torch.zeros_like(value), value))
        return kl
