"""What a guide can do, declared once: the :class:`Capability` flags of a guide family, and the small protocols that
the fast training paths, prediction and the ArviZ export look for on a guide instance.

Two views of the same facts:

* A registered guide family (:func:`~pyro_bnn.guides.register_guide`) *declares* its capabilities, so that the CLI,
  run validation and diagnostics can decide from a ``--guide`` string alone, before any data is loaded.
* Code that holds a built guide *finds* the protocol on it (``isinstance(guide, FlatNormalPosterior)``: a
  structural check of the methods below, never of a concrete class). A test builds every registered family and
  checks that the two views agree.

A family whose runs batched runs (:mod:`pyro_bnn.batched`) can stack declares *how* as data, a
:class:`BatchedLayout` (which parameters hold the locations and raw scales, and how a raw scale becomes sigma), on its
registry entry (:attr:`GuideFamily.batched_layout <pyro_bnn.guides.GuideFamily.batched_layout>`, which adds
:attr:`Capability.BATCHED`) and on its guide class (:class:`BatchedPosterior`); :mod:`pyro_bnn.batched` interprets it.

Shapes follow :mod:`pyro_bnn.sites`: a draw of S samples is ``{site: (S, 1, *site_shape)}`` (the 1 is the data
plate's slot), a flat vector over all latents is ``(D,)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from pyro_bnn.guides.flat import FlatSite


class Capability(str, Enum):
    """What a guide family offers, declared when it is registered."""

    DRAWS = "draws"
    """Draws S posterior samples of every latent site directly, without Pyro (:class:`DrawsPosterior`); prediction
    and the ArviZ export use it instead of tracing the guide."""
    FLAT_NORMAL = "flat-normal"
    """One diagonal Normal over all latents stored as two flat parameters (:class:`FlatNormalPosterior`): the fused
    objectives (``--elbo fast``, ``fast-single``) train it."""
    LOCAL_REPARAMETERIZATION = "local-reparameterization"
    """With :attr:`FLAT_NORMAL`: the fused objective may move the noise of linear layers to their pre-activations
    (``--elbo fast-local``, ``fast-flipout``)."""
    NORMAL_MIXTURE = "normal-mixture"
    """An equal-weight mixture of K flat diagonal Normals (:class:`NormalMixturePosterior`): the implicit-BNN
    mixture-mean KL objective (``--elbo mixture``) trains it."""
    NORMAL_SCALES = "normal-scales"
    """A Normal location and scale per latent scalar (:func:`~pyro_bnn.guides.posterior_loc_scale` reads them):
    weight statistics, pruning by signal-to-noise and the NUTS comparison need it."""
    RANDOM = "random"
    """Its draws vary (not a point estimate): posterior-shape diagnostics need it."""
    NODE_NOISE_ONLY = "node-noise-only"
    """Only for node-noise BNNs (``--node-noise``)."""
    DETERMINISTIC = "deterministic"
    """Trains a network with no random parameter at all (the model must select none)."""
    JACOBIAN_DELTA = "jacobian-delta"
    """Samples each constrained latent site (a hierarchical prior's per-layer scale) as a ``Delta`` at the transformed
    value whose ``log_density`` carries the log-Jacobian, as Pyro's ``AutoNormal`` and ``AutoContinuous`` guides do:
    right for ``Trace_ELBO``, but the analytic KL of ``--elbo meanfield`` would drop the Jacobian, so that objective
    refuses such a guide under a prior with constrained sites (a restriction, like :attr:`NODE_NOISE_ONLY`; a test
    builds every family and checks the flag against the sites its guide samples)."""
    BATCHED = "batched"
    """Its runs can train as one batch (:mod:`pyro_bnn.batched`): the family declares a :class:`BatchedLayout`
    (:attr:`GuideFamily.batched_layout <pyro_bnn.guides.GuideFamily.batched_layout>`, which sets this flag) and its
    guides carry it (:class:`BatchedPosterior`)."""


def capability_set(values: Iterable[object], refusal: str) -> frozenset[Capability]:
    """``values`` as Capability members (their names or members), or a one-line ValueError
    ``"{refusal} 'x'; expected some of ..."`` for the first that names none (``refusal`` says whose, e.g. ``"guide
    'g': no capability"``)."""
    capabilities = set()
    for value in values:
        try:
            capabilities.add(Capability(value))
        except ValueError:
            known = ", ".join(c.value for c in Capability)
            raise ValueError(f"{refusal} {value!r}; expected some of {known}") from None
    return frozenset(capabilities)


class ScaleMap(str, Enum):
    """How a guide turns its raw scale parameter into the standard deviation sigma."""

    EXP = "exp"
    """``sigma = exp(raw)`` (:class:`~pyro_bnn.guides.FlatMeanField`'s ``log_scale``)."""
    SOFTPLUS = "softplus"
    """``sigma = softplus(raw)`` (:class:`~pyro_bnn.guides.BayesByBackprop`'s ``rho``)."""
    POINT = "point"
    """No scale: a point estimate (``AutoDelta``'s value, the MAP and MLE guides), whose weights are its locations
    and whose "KL" under ``Trace_ELBO`` is ``-log p(w)``."""

    def scale_and_log(self, raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(sigma, log sigma)`` of ``raw``, any shape.

        Raises:
            ValueError: A point estimate, which has no scale.
        """
        if self is ScaleMap.POINT:
            raise ValueError("a point estimate has no scale")
        if self is ScaleMap.EXP:
            return raw.exp(), raw
        scale = F.softplus(raw)
        return scale, scale.log()


@dataclass(frozen=True)
class BatchedLayout:
    """Where a mean-field Normal guide (or a point estimate) keeps what batched runs stack: its locations and raw
    scales, read into and written back from the flat ``(D,)`` rows of the ``(R, D)`` stack (the model's weight
    sites in order).

    Attributes:
        scale_map: How a raw scale becomes sigma (:attr:`ScaleMap.POINT`: there is none).
        loc: The name (in ``guide.named_parameters()``) of the locations: one flat ``(D,)`` parameter over every
            weight site, or, holding ``{site}``, a template naming one parameter of the site's shape per site
            (``{site}`` is replaced by the site's name).
        raw_scale: The raw scales, named the same way; None for a point estimate (and only for one).
        components: The two parameters are ``(K, D)``, the K components of a mixture over the flat latents (flat
            parameters only), stacked as ``(R, K, D)``.
    """

    scale_map: ScaleMap
    loc: str
    raw_scale: str | None = None
    components: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale_map", ScaleMap(self.scale_map))
        if self.raw_scale is not None and self.scale_map is ScaleMap.POINT:
            raise ValueError(f"raw_scale {self.raw_scale!r}: a point estimate has no scale")
        if self.raw_scale is None and self.scale_map is not ScaleMap.POINT:
            raise ValueError(f"raw_scale None: a Normal guide ({self.scale_map.value} scales) needs one")
        if self.raw_scale is not None and ("{site}" in self.loc) != ("{site}" in self.raw_scale):
            raise ValueError(f"loc {self.loc!r} and raw_scale {self.raw_scale!r}: both per site or both flat")
        if self.components and (self.per_site or self.point):
            raise ValueError(f"loc {self.loc!r}: mixture components are flat (K, D) locations with raw scales")

    @property
    def point(self) -> bool:
        """Whether the guide is a point estimate (no scales: :attr:`ScaleMap.POINT`)."""
        return self.scale_map is ScaleMap.POINT

    @property
    def per_site(self) -> bool:
        """Whether every site has parameters of its own (else one flat location, and scale, covers all of them)."""
        return "{site}" in self.loc


@runtime_checkable
class DrawsPosterior(Protocol):
    """A guide that draws posterior samples itself (:attr:`Capability.DRAWS`)."""

    def draw(self, num_samples: int, *, start: int = 0) -> dict[str, torch.Tensor]:
        """Samples ``start .. start + num_samples`` of every latent site, ``{site: (S, 1, *site_shape)}``.

        ``start`` matters to guides whose i-th sample is not exchangeable with the others (a mixture draws sample i
        from component ``i mod K``); independent draws ignore it. The guide must have run once."""
        ...


@runtime_checkable
class FlatNormalPosterior(DrawsPosterior, Protocol):
    """``q(z) = Normal(loc, exp(log_scale))`` over D flat latents (:attr:`Capability.FLAT_NORMAL`).

    Attributes:
        sites: Where each latent site lives in the flat vectors (:class:`~pyro_bnn.guides.FlatSite`), in order.
    """

    sites: tuple[FlatSite, ...]

    @property
    def site_names(self) -> list[str]:
        """The sites' names, in the order of :attr:`sites`."""
        ...

    def flat_parameters(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The trained leaves ``(loc, log_scale)``, both ``(D,)`` (the fused objective differentiates them)."""
        ...

    def split(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-site views ``{site: (*lead, *site_shape)}`` of a flat tensor ``(*lead, D)``."""
        ...


@runtime_checkable
class NormalMixturePosterior(DrawsPosterior, Protocol):
    """An equal-weight mixture of K diagonal Normals over D flat latents (:attr:`Capability.NORMAL_MIXTURE`).

    Attributes:
        sites: Where each latent site lives in a flat vector, in order.
        num_components: K.
    """

    sites: tuple[FlatSite, ...]
    num_components: int

    def component_loc_scale(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every component's means and standard deviations, both ``(K, D)`` and live."""
        ...

    def split(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-site views ``{site: (*lead, *site_shape)}`` of a flat tensor ``(*lead, D)``."""
        ...


@runtime_checkable
class BatchedPosterior(Protocol):
    """A guide whose runs batched runs stack (:attr:`Capability.BATCHED`).

    Attributes:
        batched_layout: Where its locations and raw scales live (the family's
            :attr:`~pyro_bnn.guides.GuideFamily.batched_layout`, the same object).
    """

    batched_layout: BatchedLayout


PROTOCOLS: dict[Capability, type] = {
    Capability.DRAWS: DrawsPosterior,
    Capability.FLAT_NORMAL: FlatNormalPosterior,
    Capability.NORMAL_MIXTURE: NormalMixturePosterior,
    Capability.BATCHED: BatchedPosterior,
}
"""The protocol a guide instance implements when its family declares the capability."""
