"""Guides by name: the ``--guide`` option strings and the builders behind them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pyro.infer.autoguide import AutoDelta, AutoGuide, AutoNormal

from pyro_bnn._spec import enum_member, floats, split_spec
from pyro_bnn.bnn import BNN
from pyro_bnn.guides.bbb import BayesByBackprop
from pyro_bnn.guides.init import init_to_network
from pyro_bnn.guides.point import MCDropout


class GuideKind(str, Enum):
    """Guides (and point-estimate baselines) available by name."""

    AUTONORMAL = "autonormal"
    """``autonormal[:INIT_SCALE]``: Pyro's mean-field AutoNormal (init scale default 0.1), locs from the network's
    initial weights."""
    BBB = "bbb"
    """``bbb[:RHO_LOW,RHO_HIGH]``: Bayes by Backprop, sigma = softplus(rho), mu ~ U(-0.2, 0.2), rho ~ U(-5, -4)."""
    MAP = "map"
    """``map``: a point estimate (AutoDelta) maximising log prior + log likelihood."""
    MLE = "mle"
    """``mle``: a deterministic network (no random weights), trained by maximum likelihood."""
    MC_DROPOUT = "mc-dropout"
    """``mc-dropout[:P]``: MAP with dropout (default p = 0.1) kept on at prediction time."""


@dataclass(frozen=True)
class GuideSpec:
    """A parsed ``--guide`` option: what kind of guide, and what it needs from the model.

    Attributes:
        kind: The guide family.
        init_scale: AutoNormal's initial scale.
        rho_init: Bayes by Backprop's rho initialisation interval.
        dropout: Dropout probability the network must be built with (MC dropout only, else 0).
    """

    kind: GuideKind
    init_scale: float = 0.1
    rho_init: tuple[float, float] = (-5.0, -4.0)
    dropout: float = 0.0

    @property
    def random_weights(self) -> bool:
        """False for the deterministic MLE baseline, whose model must select no parameter."""
        return self.kind is not GuideKind.MLE

    def build(self, bnn: BNN) -> AutoGuide:
        """Builds the guide for ``bnn`` (call after moving ``bnn`` to its device)."""
        if self.kind is GuideKind.MLE and bnn.sites:
            raise ValueError(
                "the 'mle' guide needs a deterministic network: build the BNN with select=pyro_bnn.priors.nothing "
                f"(this one has {len(bnn.sites)} random parameter tensors)"
            )
        init = init_to_network(bnn)
        if self.kind is GuideKind.AUTONORMAL:
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
            return f"autonormal:{self.init_scale:g}"
        if self.kind is GuideKind.BBB:
            return f"bbb:{self.rho_init[0]:g},{self.rho_init[1]:g}"
        if self.kind is GuideKind.MC_DROPOUT:
            return f"mc-dropout:{self.dropout:g}"
        return self.kind.value


def parse_guide(spec: str) -> GuideSpec:
    """Parses a ``--guide`` string (see :class:`GuideKind`).

    Raises:
        ValueError: naming the spec and what was expected.
    """
    name, args = split_spec(spec, "guide")
    kind = enum_member(GuideKind, name, "guide")
    if kind is GuideKind.AUTONORMAL:
        values = floats(args, (0, 1), spec, "guide")
        init_scale = values[0] if values else 0.1
        if not init_scale > 0:
            raise ValueError(f"guide {spec!r}: init scale must be > 0, got {init_scale}")
        return GuideSpec(kind, init_scale=init_scale)
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
