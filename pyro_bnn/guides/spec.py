"""Guides by name: the ``--guide`` option strings and the builders behind them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pyro.infer.autoguide import AutoDelta, AutoGuide, AutoNormal
from pyro.infer.autoguide.initialization import init_to_median

from pyro_bnn.bnn import BNN
from pyro_bnn.guides.autonormal import RelativeScaleNormal
from pyro_bnn.guides.bbb import BayesByBackprop
from pyro_bnn.guides.flat import FlatMeanField
from pyro_bnn.guides.init import init_to_network
from pyro_bnn.guides.mixture import NodeNoiseMixture
from pyro_bnn.guides.point import MCDropout
from pyro_bnn.spec import Arg, Choice, Family, Form, Integer, Interval, ParsedSpec, Positive, Real


class GuideKind(str, Enum):
    """Guides (and point-estimate baselines) available by name; their grammar: :data:`GUIDE_FAMILY`."""

    AUTONORMAL = "autonormal"
    """Pyro's mean-field AutoNormal, initial scale INIT_SCALE or rel=C times each tensor's std. With ``rel=C`` the
    initial scale of each tensor is C times the std of its initial locations; the locations start where ``loc``
    says (:class:`LocInit`)."""
    FLAT = "flat"
    """The same mean-field Normal as ``autonormal`` (same options, same starting values) stored as one flat
    location and one flat scale vector over all weights (:class:`~pyro_bnn.guides.FlatMeanField`): the guide of the
    fast objective (``--elbo fast``)."""
    BBB = "bbb"
    """Bayes by Backprop: sigma = softplus(rho), mu ~ U(-0.2, 0.2), rho ~ U(RHO_LOW, RHO_HIGH)."""
    MAP = "map"
    """A point estimate (AutoDelta) maximising log prior + log likelihood."""
    MLE = "mle"
    """A deterministic network (no random weights), trained by maximum likelihood."""
    MC_DROPOUT = "mc-dropout"
    """MAP with dropout probability P kept on at prediction time."""
    MIXTURE = "mixture"
    """Node-noise BNNs only (``--node-noise``): the implicit-BNN "variational ensemble", a mixture of K diagonal
    Normals over all noise scalars, means from N(1, S0^2) (:class:`~pyro_bnn.guides.NodeNoiseMixture`)."""


class LocInit(str, Enum):
    """Where AutoNormal's locations start (the ``loc=`` option)."""

    NETWORK = "network"
    """The network's own initial weights (:class:`~pyro_bnn.guides.init_to_network`)."""
    MEDIAN = "median"
    """The median of 15 prior draws (Pyro's ``init_to_median``, the default of ``AutoDiagonalNormal``; for a
    N(0, 1) prior the values spread with std ~0.32)."""
    MAP = "map"
    """The network's weights after a short MAP warm start (``map_epochs`` epochs of AutoDelta from the network's
    initialisation), which the training run performs before building the guide
    (:func:`pyro_bnn.infer.map_warm_start`)."""


DEFAULT_GUIDE = "flat:rel=1"
"""The guide the CLI and the demo use unless told otherwise: the family and initialisation chosen by the measurement
in ``results/guide-defaults/`` (``autonormal:rel=1`` there), stored flat so that training takes the fused fast path
(``--elbo auto``; ``bench/RESULTS.md``). See the README's results section."""


@dataclass(frozen=True)
class GuideSpec:
    """A parsed ``--guide`` option: what kind of guide, and what it needs from the model.

    Attributes:
        kind: The guide family.
        init_scale: AutoNormal's initial scale (absolute).
        relative_scale: AutoNormal's initial scale relative to the std of each tensor's initial locations; None
            for an absolute ``init_scale``.
        loc: Where AutoNormal's locations start.
        map_epochs: Length of the MAP warm start when ``loc`` is ``map``.
        rho_init: Bayes by Backprop's rho initialisation interval.
        dropout: Dropout probability the network must be built with (MC dropout only, else 0).
        num_components: K of the mixture guide.
        init_loc_std: The mixture guide's sigma0 (component means start at N(1, sigma0^2)).
    """

    kind: GuideKind
    init_scale: float = 0.1
    relative_scale: float | None = None
    loc: LocInit = LocInit.NETWORK
    map_epochs: int = 1
    rho_init: tuple[float, float] = (-5.0, -4.0)
    dropout: float = 0.0
    num_components: int = 4
    init_loc_std: float = 0.5

    @property
    def random_weights(self) -> bool:
        """False for the deterministic MLE baseline, whose model must select no parameter."""
        return self.kind is not GuideKind.MLE

    @property
    def map_warm_start_epochs(self) -> int:
        """Epochs of MAP training to run before the guide is built (0: none)."""
        mean_field = self.kind in (GuideKind.AUTONORMAL, GuideKind.FLAT)
        return self.map_epochs if mean_field and self.loc is LocInit.MAP else 0

    def build(self, bnn: BNN) -> AutoGuide:
        """Builds the guide for ``bnn`` (call after moving ``bnn`` to its device, and after the MAP warm start when
        ``loc`` is ``map``: it starts from the network's current initial values)."""
        if self.kind is GuideKind.MLE and bnn.sites:
            raise ValueError(
                "the 'mle' guide needs a deterministic network: build the BNN with select=pyro_bnn.priors.nothing "
                f"(this one has {len(bnn.sites)} random parameter tensors)"
            )
        init = init_to_network(bnn)
        if self.kind in (GuideKind.AUTONORMAL, GuideKind.FLAT) and self.loc is LocInit.MEDIAN:
            init = init_to_median(num_samples=15)
        if self.kind is GuideKind.FLAT:
            return FlatMeanField(bnn, init_loc_fn=init, init_scale=self.init_scale, relative_scale=self.relative_scale)
        if self.kind is GuideKind.AUTONORMAL:
            if self.relative_scale is not None:
                return RelativeScaleNormal(bnn, relative_scale=self.relative_scale, init_loc_fn=init)
            return AutoNormal(bnn, init_loc_fn=init, init_scale=self.init_scale)
        if self.kind is GuideKind.BBB:
            # mu ~ U(-0.2, 0.2); init_to_network only supplies the prototype values (a flat prior cannot be sampled)
            # and the starting mu of constrained sites.
            return BayesByBackprop(bnn, rho_init=self.rho_init, init_loc_fn=init)
        if self.kind is GuideKind.MC_DROPOUT:
            return MCDropout(bnn, init_loc_fn=init)
        if self.kind is GuideKind.MIXTURE:
            return NodeNoiseMixture(bnn, self.num_components, init_loc_std=self.init_loc_std)
        return AutoDelta(bnn, init_loc_fn=init)

    def __str__(self) -> str:
        if self.kind in (GuideKind.AUTONORMAL, GuideKind.FLAT):
            name = self.kind.value
            text = f"{name}:rel={self.relative_scale:g}" if self.relative_scale else f"{name}:{self.init_scale:g}"
            if self.loc is not LocInit.NETWORK:
                text += f",loc={self.loc.value}"
            if self.loc is LocInit.MAP and self.map_epochs != 1:
                text += f",map_epochs={self.map_epochs}"
            return text
        if self.kind is GuideKind.BBB:
            return f"bbb:{self.rho_init[0]:g},{self.rho_init[1]:g}"
        if self.kind is GuideKind.MC_DROPOUT:
            return f"mc-dropout:{self.dropout:g}"
        if self.kind is GuideKind.MIXTURE:
            return f"mixture:{self.num_components},loc_std={self.init_loc_std:g}"
        return self.kind.value


def _check_autonormal(parsed: ParsedSpec) -> None:
    if {"init scale", "rel"} <= parsed.given:
        raise ValueError("give an absolute init scale or rel=C, not both")
    if "map_epochs" in parsed.given and parsed["loc"] is not LocInit.MAP:
        raise ValueError("map_epochs needs loc=map")


def _check_rho_interval(parsed: ParsedSpec) -> None:
    rho_init = (parsed["rho low"], parsed["rho high"])
    if not rho_init[0] <= rho_init[1]:
        raise ValueError(f"rho interval must have low <= high, got {rho_init}")


_SCALE = Positive(float32=True)

# autonormal and flat share one grammar: positional init scale, then rel=, loc=, map_epochs=.
_MEAN_FIELD_GRAMMAR = (
    (Arg("init scale", _SCALE, 0.1),),
    (
        Arg("rel", _SCALE, None, metavar="C"),
        Arg("loc", Choice(LocInit, "location init"), LocInit.NETWORK),
        Arg("map_epochs", Integer(minimum=1), 1, metavar="N"),
    ),
)

GUIDE_FAMILY = Family(
    "guide",
    [
        Form(GuideKind.AUTONORMAL, *_MEAN_FIELD_GRAMMAR, check=_check_autonormal, example="autonormal:0.01,loc=median"),
        Form(GuideKind.FLAT, *_MEAN_FIELD_GRAMMAR, check=_check_autonormal, example="flat:0.1,loc=median"),
        Form(
            GuideKind.BBB,
            (Arg("rho low", Real(), -5.0), Arg("rho high", Real(), -4.0)),
            check=_check_rho_interval,
            example="bbb:-6,-5",
        ),
        Form(GuideKind.MAP),
        Form(GuideKind.MLE),
        Form(
            GuideKind.MC_DROPOUT,
            (Arg("dropout probability", Interval(0.0, 1.0, closed="neither"), 0.1, metavar="P"),),
            example="mc-dropout:0.2",
        ),
        Form(
            GuideKind.MIXTURE,
            (Arg("components", Integer(minimum=1), 4, metavar="K"),),
            (Arg("loc_std", _SCALE, 0.5, metavar="S0"),),
            example="mixture:4,loc_std=0.75",
        ),
    ],
    enum=GuideKind,
    example=DEFAULT_GUIDE,
)
"""The ``--guide`` grammar."""


def _parse_mean_field(parsed: ParsedSpec) -> GuideSpec:
    return GuideSpec(
        parsed.kind,
        init_scale=parsed["init scale"],
        relative_scale=parsed["rel"],
        loc=parsed["loc"],
        map_epochs=parsed["map_epochs"],
    )


def parse_guide(spec: str) -> GuideSpec:
    """Parses a ``--guide`` string (forms: :data:`GUIDE_FAMILY`; ``pyro-bnn list`` shows them).

    Raises:
        ValueError: One line naming the spec and what was expected.
    """
    parsed = GUIDE_FAMILY.parse(spec)
    kind = parsed.kind
    if kind in (GuideKind.AUTONORMAL, GuideKind.FLAT):
        return _parse_mean_field(parsed)
    if kind is GuideKind.BBB:
        return GuideSpec(kind, rho_init=(parsed["rho low"], parsed["rho high"]))
    if kind is GuideKind.MC_DROPOUT:
        return GuideSpec(kind, dropout=parsed["dropout probability"])
    if kind is GuideKind.MIXTURE:
        return GuideSpec(kind, num_components=parsed["components"], init_loc_std=parsed["loc_std"])
    return GuideSpec(kind)
