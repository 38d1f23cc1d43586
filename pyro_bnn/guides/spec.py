"""Guides by name: the ``--guide`` option strings and the builders behind them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from pyro.infer.autoguide import AutoDelta, AutoGuide, AutoNormal
from pyro.infer.autoguide.initialization import init_to_median

from pyro_bnn._spec import enum_member, floats, split_options, split_spec
from pyro_bnn.bnn import BNN
from pyro_bnn.guides.autonormal import RelativeScaleNormal
from pyro_bnn.guides.bbb import BayesByBackprop
from pyro_bnn.guides.init import init_to_network
from pyro_bnn.guides.point import MCDropout


class GuideKind(str, Enum):
    """Guides (and point-estimate baselines) available by name."""

    AUTONORMAL = "autonormal"
    """``autonormal[:SCALE][,rel=C][,loc=network|median|map]``: Pyro's mean-field AutoNormal with initial scale
    SCALE (default 0.1) or, with ``rel=C``, C times the std of each tensor's initial locations; locations from
    ``loc`` (:class:`LocInit`, default ``network``)."""
    BBB = "bbb"
    """``bbb[:RHO_LOW,RHO_HIGH]``: Bayes by Backprop, sigma = softplus(rho), mu ~ U(-0.2, 0.2), rho ~ U(-5, -4)."""
    MAP = "map"
    """``map``: a point estimate (AutoDelta) maximising log prior + log likelihood."""
    MLE = "mle"
    """``mle``: a deterministic network (no random weights), trained by maximum likelihood."""
    MC_DROPOUT = "mc-dropout"
    """``mc-dropout[:P]``: MAP with dropout (default p = 0.1) kept on at prediction time."""


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


_AUTONORMAL_OPTIONS = ("rel", "loc", "map_epochs")

DEFAULT_GUIDE = "autonormal:0.001"
"""The guide the CLI and the demo use unless told otherwise, chosen by the measurement in
``results/guide-defaults/`` (see the README's results section)."""


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
    """

    kind: GuideKind
    init_scale: float = 0.1
    relative_scale: float | None = None
    loc: LocInit = LocInit.NETWORK
    map_epochs: int = 1
    rho_init: tuple[float, float] = (-5.0, -4.0)
    dropout: float = 0.0

    @property
    def random_weights(self) -> bool:
        """False for the deterministic MLE baseline, whose model must select no parameter."""
        return self.kind is not GuideKind.MLE

    @property
    def map_warm_start_epochs(self) -> int:
        """Epochs of MAP training to run before the guide is built (0: none)."""
        return self.map_epochs if self.kind is GuideKind.AUTONORMAL and self.loc is LocInit.MAP else 0

    def build(self, bnn: BNN) -> AutoGuide:
        """Builds the guide for ``bnn`` (call after moving ``bnn`` to its device, and after the MAP warm start when
        ``loc`` is ``map``: it starts from the network's current initial values)."""
        if self.kind is GuideKind.MLE and bnn.sites:
            raise ValueError(
                "the 'mle' guide needs a deterministic network: build the BNN with select=pyro_bnn.priors.nothing "
                f"(this one has {len(bnn.sites)} random parameter tensors)"
            )
        init = init_to_network(bnn)
        if self.kind is GuideKind.AUTONORMAL:
            if self.loc is LocInit.MEDIAN:
                init = init_to_median(num_samples=15)
            if self.relative_scale is not None:
                return RelativeScaleNormal(bnn, relative_scale=self.relative_scale, init_loc_fn=init)
            return AutoNormal(bnn, init_loc_fn=init, init_scale=self.init_scale)
        if self.kind is GuideKind.BBB:
            # mu ~ U(-0.2, 0.2); init_to_network only supplies the prototype values (a flat prior cannot be sampled)
            # and the starting mu of constrained sites.
            return BayesByBackprop(bnn, rho_init=self.rho_init, init_loc_fn=init)
        if self.kind is GuideKind.MC_DROPOUT:
            return MCDropout(bnn, init_loc_fn=init)
        return AutoDelta(bnn, init_loc_fn=init)

    def __str__(self) -> str:
        if self.kind is GuideKind.AUTONORMAL:
            text = (
                f"autonormal:rel={self.relative_scale:g}" if self.relative_scale else f"autonormal:{self.init_scale:g}"
            )
            if self.loc is not LocInit.NETWORK:
                text += f",loc={self.loc.value}"
            if self.loc is LocInit.MAP and self.map_epochs != 1:
                text += f",map_epochs={self.map_epochs}"
            return text
        if self.kind is GuideKind.BBB:
            return f"bbb:{self.rho_init[0]:g},{self.rho_init[1]:g}"
        if self.kind is GuideKind.MC_DROPOUT:
            return f"mc-dropout:{self.dropout:g}"
        return self.kind.value


def _positive(value: str, spec: str, what: str) -> float:
    number = floats([value], (1,), spec, "guide")[0]
    if not (number > 0 and math.isfinite(number)):
        raise ValueError(f"guide {spec!r}: {what} must be a finite number > 0, got {value}")
    return number


def _parse_autonormal(spec: str, args: list[str]) -> GuideSpec:
    positional, options = split_options(args, spec, "guide", _AUTONORMAL_OPTIONS)
    floats(positional, (0, 1), spec, "guide")
    if positional and "rel" in options:
        raise ValueError(f"guide {spec!r}: give an absolute init scale or rel=C, not both")
    init_scale = _positive(positional[0], spec, "init scale") if positional else 0.1
    relative = _positive(options["rel"], spec, "rel") if "rel" in options else None
    loc = enum_member(LocInit, options.get("loc", "network").lower(), "location init")
    map_epochs = 1
    if "map_epochs" in options:
        if loc is not LocInit.MAP:
            raise ValueError(f"guide {spec!r}: map_epochs needs loc=map")
        try:
            map_epochs = int(options["map_epochs"])
        except ValueError:
            map_epochs = 0
        if map_epochs < 1:
            raise ValueError(f"guide {spec!r}: map_epochs must be an int >= 1, got {options['map_epochs']!r}")
    return GuideSpec(
        GuideKind.AUTONORMAL, init_scale=init_scale, relative_scale=relative, loc=loc, map_epochs=map_epochs
    )


def parse_guide(spec: str) -> GuideSpec:
    """Parses a ``--guide`` string (see :class:`GuideKind`).

    Raises:
        ValueError: naming the spec and what was expected.
    """
    name, args = split_spec(spec, "guide")
    kind = enum_member(GuideKind, name, "guide")
    if kind is GuideKind.AUTONORMAL:
        return _parse_autonormal(spec, args)
    if kind is GuideKind.BBB:
        values = floats(args, (0, 2), spec, "guide")
        rho_init = (values[0], values[1]) if values else (-5.0, -4.0)
        if not rho_init[0] <= rho_init[1]:
            raise ValueError(f"guide {spec!r}: rho interval must have low <= high, got {rho_init}")
        return GuideSpec(kind, rho_init=rho_init)
    if kind is GuideKind.MC_DROPOUT:
        values = floats(args, (0, 1), spec, "guide")
        p = values[0] if values else 0.1
        if not 0.0 < p < 1.0:
            raise ValueError(f"guide {spec!r}: dropout probability must lie in (0, 1), got {p}")
        return GuideSpec(kind, dropout=p)
    floats(args, (0,), spec, "guide")
    return GuideSpec(kind)
