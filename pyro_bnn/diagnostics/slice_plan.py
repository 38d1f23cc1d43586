"""How :class:`~pyro_bnn.diagnostics.slice_evaluator.SliceEvaluator` splits an ``nn.Sequential`` network around the
layer that owns the varied tensor: what runs once, which column changes, where it re-enters as a rank-one update and
where a ReLU-type kink lets the next wide Linear be linearised (:class:`Plan`).

Only exact module types whose computation is known take part (:data:`ELEMENTWISE`, plain ``nn.Linear``); a module
with forward hooks (node noise scales a layer's inputs through one) is never treated as plain.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from pyro_bnn.nn.leaky_relu import LeakyReLU

LINEARISE_MIN_WIDTH = 32
"""A kinked activation is linearised only before a Linear at least this wide (below it, running it is as cheap)."""

ELEMENTWISE = (
    nn.ReLU,
    nn.LeakyReLU,
    LeakyReLU,
    nn.Tanh,
    nn.Sigmoid,
    nn.ELU,
    nn.CELU,
    nn.SELU,
    nn.GELU,
    nn.SiLU,
    nn.Mish,
    nn.Softplus,
    nn.Softsign,
    nn.Hardtanh,
    nn.ReLU6,
    nn.Hardsigmoid,
    nn.Hardswish,
    nn.Tanhshrink,
    nn.LogSigmoid,
    nn.Identity,
    nn.Dropout,  # the identity: slices run the network in eval mode
    nn.AlphaDropout,
)
"""Module types (exact types, not subclasses) that act on each feature alone, so one changed feature stays one."""


def _plain(module: nn.Module) -> bool:
    # A hook may change what the layer computes (node noise scales a layer's inputs through one), so a hooked
    # module is never treated as plain. torch has no public accessor for a module's registered hooks (only
    # register_*_hook, which returns removal handles), hence the private dicts; this is their one use in the package.
    return not (module._forward_hooks or module._forward_pre_hooks)


_IDENTITY = (nn.Identity, nn.Dropout, nn.AlphaDropout)
"""Module types that are the identity in eval mode."""


def _kink_slope(module: nn.Module) -> float | None:
    """The negative-side slope of a ReLU-type activation (kink at 0, identity above), or None for other modules."""
    if type(module) is nn.ReLU:
        return 0.0
    if type(module) is nn.LeakyReLU:
        return float(module.negative_slope)
    if type(module) is LeakyReLU:
        return float(module.slope)
    return None


@dataclass
class Plan:
    """How an ``nn.Sequential`` network splits around the layer that owns the varied tensor.

    ``prefix`` runs once. With ``sparse`` the owner is a plain Linear whose one output column changes; that column
    is carried through the elementwise ``chain`` and enters ``join`` (a plain Linear) as a rank-one update. When a
    ReLU-type activation (``kink``, with ``slope`` on its negative side) and another wide plain Linear (``join2``)
    follow, ``join2``'s output is linearised: the rank-one update times each unit's slope in the unperturbed
    network, plus exact corrections for the units whose sign the update flips. ``rest`` runs on the changed rows
    only. Without ``sparse``, ``rest`` runs under vmap after the owner.
    """

    prefix: list[tuple[str, nn.Module]]
    owner: tuple[str, nn.Module]
    attr: str
    sparse: bool = False
    chain: list[tuple[str, nn.Module]] = field(default_factory=list)
    join: tuple[str, nn.Module] | None = None
    kink: list[tuple[str, nn.Module]] = field(default_factory=list)
    slope: float = 0.0
    join2: tuple[str, nn.Module] | None = None
    rest: list[tuple[str, nn.Module]] = field(default_factory=list)

    @classmethod
    def build(cls, net: nn.Module, name: str) -> Plan | None:
        if not isinstance(net, nn.Sequential):
            return None
        children = list(net.named_children())
        head, _, attr = name.partition(".")
        names = [child for child, _ in children]
        if head not in names or not attr:
            return None
        position = names.index(head)
        owner = children[position]
        plan = cls(children[:position], owner, attr)
        if not (_linear(owner[1]) and attr in ("weight", "bias")):
            plan.rest = children[position + 1 :]
            return plan
        plan.sparse = True
        after = position + 1
        while after < len(children) and type(children[after][1]) in ELEMENTWISE and _plain(children[after][1]):
            plan.chain.append(children[after])
            after += 1
        if after < len(children) and _linear(children[after][1]):
            plan.join = children[after]
            after += 1
            kink, slopes, end = [], [], after
            while end < len(children) and _plain(children[end][1]):
                slope = _kink_slope(children[end][1])
                if slope is None and type(children[end][1]) not in _IDENTITY:
                    break
                kink.append(children[end])
                slopes += [] if slope is None else [slope]
                end += 1
            if (
                len(slopes) == 1
                and end < len(children)
                and _linear(children[end][1])
                and children[end][1].out_features >= LINEARISE_MIN_WIDTH
            ):
                plan.kink, plan.slope, plan.join2 = kink, slopes[0], children[end]
                after = end + 1
        plan.rest = children[after:]
        return plan

    def as_dense(self) -> Plan:
        modules = self.chain + ([self.join] if self.join else []) + self.kink + ([self.join2] if self.join2 else [])
        return Plan(self.prefix, self.owner, self.attr, rest=modules + self.rest)


def _linear(module: nn.Module) -> bool:
    return type(module) is nn.Linear and _plain(module)


__all__ = ["ELEMENTWISE", "LINEARISE_MIN_WIDTH", "Plan"]
