"""The built-in guide families (registered here) and :class:`GuideSpec`, a parsed ``--guide`` string."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from pyro.infer.autoguide import AutoGuide, AutoNormal
from pyro.infer.autoguide.initialization import init_to_median

from pyro_bnn.bnn import BNN
from pyro_bnn.guides.autonormal import RelativeScaleNormal, whole_data_plates
from pyro_bnn.guides.bbb import BayesByBackprop
from pyro_bnn.guides.capabilities import Capability
from pyro_bnn.guides.flat import FlatMeanField
from pyro_bnn.guides.flow import IAF_FAMILY
from pyro_bnn.guides.init import check_median_start, init_to_network
from pyro_bnn.guides.mixture import NodeNoiseMixture
from pyro_bnn.guides.multivariate import LOWRANK_FAMILY, MVN_FAMILY
from pyro_bnn.guides.point import MCDropout, PointEstimateGuide, check_dropout_probability
from pyro_bnn.guides.registry import GuideFamily, guide_families, guide_family, register_guide
from pyro_bnn.spec import Arg, Choice, Family, Form, Integer, Interval, ParsedSpec, Positive, Real, format_number


class GuideKind(str, Enum):
    """Guides (and point-estimate baselines) available by name; their grammar: :data:`GUIDE_FAMILY`."""

    AUTONORMAL = "autonormal"
    """Pyro's mean-field AutoNormal, initial scale INIT_SCALE or rel=C times each tensor's std. With ``rel=C`` the
    initial scale of each tensor is C times the std of its initial locations; the locations start where ``loc``
    says (:class:`LocInit`). Per-example latents get a q(z_i) per training example, which needs the whole training
    set in every batch: a smaller batch is refused (:class:`~pyro_bnn.guides.WholeDataPlates`; so are ``bbb``'s,
    ``map``'s and ``mle``'s)."""
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
    Normals over all noise scalars, means from N(1, S0^2), S0 >= 0 (:class:`~pyro_bnn.guides.NodeNoiseMixture`)."""


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


DEFAULT_GUIDE = "flat:0.01"
"""The guide the CLI and the demo use unless told otherwise: a mean-field Normal with locations at the network's own
initialisation and every sigma starting at 0.01, stored flat so that training takes the fused fast path (``--elbo
auto``; ``bench/RESULTS.md``). Chosen on the yardstick suite of ``results/guide-suite/suite.md`` (``python -m
pyro_bnn.reproduce.studies.guide_table --suite``: small nets and short runs as well as a 3FC and a LeNet on
Fashion-MNIST); it replaced ``flat:rel=1``, which starts sigma at each tensor's weight spread and stayed near chance
on digits after 45 steps. See docs/results.md."""


@dataclass(frozen=True)
class GuideSpec:
    """A parsed ``--guide`` option: which registered family (:func:`~pyro_bnn.guides.register_guide`), with what
    options; what the family can do is :attr:`capabilities`.

    The built-in families keep their options in the named fields below; a family registered elsewhere keeps them in
    :attr:`options`.

    Attributes:
        kind: The family: a :class:`GuideKind` for a built-in one, else its registered name.
        init_scale: AutoNormal's initial scale (absolute).
        relative_scale: AutoNormal's initial scale relative to the std of each tensor's initial locations; None
            for an absolute ``init_scale``.
        loc: Where AutoNormal's locations start.
        map_epochs: Length of the MAP warm start when ``loc`` is ``map``.
        rho_init: Bayes by Backprop's rho initialisation interval.
        dropout: Dropout probability the network must be built with (MC dropout only, else 0).
        num_components: K of the mixture guide.
        init_loc_std: The mixture guide's sigma0 >= 0 (component means start at N(1, sigma0^2); 0: all at 1).
        options: A registered family's own parsed options, by argument name; those not given take the defaults
            of the family's form, as when parsed (``GuideSpec("lowrank").options["rank"]`` is 10).
    """

    kind: GuideKind | str
    init_scale: float = 0.1
    relative_scale: float | None = None
    loc: LocInit = LocInit.NETWORK
    map_epochs: int = 1
    rho_init: tuple[float, float] = (-5.0, -4.0)
    dropout: float = 0.0
    num_components: int = 4
    init_loc_std: float = 0.5
    options: Mapping[str, object] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        # A family that keeps its options in `options` gets its form's defaults for those not given, as parsing its
        # bare name gives them: GuideSpec("lowrank") equals parse_guide("lowrank") and builds, where its build read
        # a key that was not there. (An unknown name is left for `family` to refuse when it is used.)
        try:
            family = guide_family(self.kind)
        except ValueError:
            return
        if family.parse is None:
            form = family.form
            defaults = {arg.name: arg.default for arg in (*form.args, *form.options) if not arg.required}
            object.__setattr__(self, "options", {**defaults, **self.options})

    @property
    def family(self) -> GuideFamily:
        """The registry entry of :attr:`kind`."""
        return guide_family(self.kind)

    @property
    def name(self) -> str:
        """The family's ``--guide`` name."""
        return self.family.name

    @property
    def capabilities(self) -> frozenset[Capability]:
        """What the family declares it can do."""
        return self.family.capabilities

    def offers(self, *capabilities: Capability) -> bool:
        """Whether the family declares every one of ``capabilities``."""
        return self.family.offers(*capabilities)

    @property
    def random_weights(self) -> bool:
        """False for a deterministic guide (the MLE baseline), whose model must select no parameter."""
        return not self.offers(Capability.DETERMINISTIC)

    @property
    def map_warm_start_epochs(self) -> int:
        """Epochs of MAP training to run before the guide is built (0: none)."""
        return self.map_epochs if self.loc is LocInit.MAP else 0

    @property
    def samples_multiple(self) -> int:
        """Posterior draws for prediction must be a multiple of this (1 unless the family says otherwise)."""
        rule = self.family.samples_multiple
        return rule(self) if rule is not None else 1

    def build(self, bnn: BNN) -> AutoGuide:
        """Builds the guide for ``bnn`` (call after moving ``bnn`` to its device, and after the MAP warm start when
        ``loc`` is ``map``: it starts from the network's current initial values)."""
        if self.offers(Capability.DETERMINISTIC) and bnn.sites:
            raise ValueError(
                f"the {self.name!r} guide needs a deterministic network: build the BNN with "
                f"select=pyro_bnn.priors.nothing (this one has {len(bnn.sites)} random parameter tensors)"
            )
        if self.offers(Capability.RANDOM) and not bnn.sites and not bnn.local_latents:
            raise ValueError(
                f"the {self.name!r} guide draws random weights, but the model has no random parameter (its prior's "
                "select chose none): check select, or use map or mle for a deterministic network"
            )
        return self.family.build(self, bnn)

    def __str__(self) -> str:
        family = self.family
        return family.format(self) if family.format is not None else _format_options(family.form, self.options)


def _format_value(value: object) -> str:
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, float):
        return format_number(value)
    return str(value)


def _format_options(form: Form, options: Mapping[str, object]) -> str:
    """``name:a,b,key=value`` from parsed values: positional arguments when any differs from its default, then the
    options that differ from theirs (parsing the result gives the same values)."""
    positional = [options.get(arg.name, arg.default) for arg in form.args]
    required = [arg for arg in form.args if arg.required]
    if not required and all(value == arg.default for value, arg in zip(positional, form.args, strict=True)):
        positional = []
    parts = [_format_value(value) for value in positional]
    for option in form.options:
        value = options.get(option.name, option.default)
        if value != option.default:
            parts.append(f"{option.name}={_format_value(value)}")
    return f"{form.name}:{','.join(parts)}" if parts else form.name


# ----------------------------------------------------------------------------------------- built-in families
def _plates(spec: GuideSpec, bnn: BNN):
    """The model's data plate for a guide that gives every training example its own parameters, refusing
    minibatches where the model has per-example latents (:class:`~pyro_bnn.guides.WholeDataPlates`); else None."""
    return whole_data_plates(bnn, f"the {spec.name!r} guide")


def _point(spec: GuideSpec, bnn: BNN) -> PointEstimateGuide:
    return PointEstimateGuide(bnn, init_loc_fn=init_to_network(bnn), create_plates=_plates(spec, bnn))


def _mc_dropout(spec: GuideSpec, bnn: BNN) -> MCDropout:
    check_dropout_probability(bnn.net, spec.dropout)
    return MCDropout(bnn, init_loc_fn=init_to_network(bnn), create_plates=_plates(spec, bnn))


def _mean_field_init(spec: GuideSpec, bnn: BNN):
    if spec.loc is LocInit.MEDIAN:
        check_median_start(str(spec), bnn.prior, f"the prior {type(bnn.prior).__name__}")
        return init_to_median(num_samples=15)
    return init_to_network(bnn)


def _build_autonormal(spec: GuideSpec, bnn: BNN) -> AutoGuide:
    init = _mean_field_init(spec, bnn)
    plates = _plates(spec, bnn)
    if spec.relative_scale is not None:
        return RelativeScaleNormal(bnn, relative_scale=spec.relative_scale, init_loc_fn=init, create_plates=plates)
    return AutoNormal(bnn, init_loc_fn=init, init_scale=spec.init_scale, create_plates=plates)


def _build_flat(spec: GuideSpec, bnn: BNN) -> AutoGuide:
    init = _mean_field_init(spec, bnn)
    return FlatMeanField(bnn, init_loc_fn=init, init_scale=spec.init_scale, relative_scale=spec.relative_scale)


def _build_bbb(spec: GuideSpec, bnn: BNN) -> AutoGuide:
    # mu ~ U(-0.2, 0.2); init_to_network only supplies the prototype values (a flat prior cannot be sampled) and the
    # starting mu of constrained sites.
    return BayesByBackprop(
        bnn, rho_init=spec.rho_init, init_loc_fn=init_to_network(bnn), create_plates=_plates(spec, bnn)
    )


def _format_mean_field(spec: GuideSpec) -> str:
    name = spec.name
    scale = f"rel={format_number(spec.relative_scale)}" if spec.relative_scale else format_number(spec.init_scale)
    text = f"{name}:{scale}"
    if spec.loc is not LocInit.NETWORK:
        text += f",loc={spec.loc.value}"
    if spec.loc is LocInit.MAP and spec.map_epochs != 1:
        text += f",map_epochs={spec.map_epochs}"
    return text


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


def _parse_mean_field(parsed: ParsedSpec) -> GuideSpec:
    return GuideSpec(
        parsed.kind,
        init_scale=parsed["init scale"],
        relative_scale=parsed["rel"],
        loc=parsed["loc"],
        map_epochs=parsed["map_epochs"],
    )


_MEAN_FIELD = {Capability.RANDOM, Capability.NORMAL_SCALES}

for _family in (
    GuideFamily(
        Form(GuideKind.AUTONORMAL, *_MEAN_FIELD_GRAMMAR, check=_check_autonormal, example="autonormal:0.01,loc=median"),
        build=_build_autonormal,
        capabilities={*_MEAN_FIELD, Capability.JACOBIAN_DELTA},  # Pyro's AutoNormal
        parse=_parse_mean_field,
        format=_format_mean_field,
    ),
    GuideFamily(
        Form(GuideKind.FLAT, *_MEAN_FIELD_GRAMMAR, check=_check_autonormal, example="flat:0.1,loc=median"),
        build=_build_flat,
        capabilities={*_MEAN_FIELD, Capability.DRAWS, Capability.FLAT_NORMAL, Capability.LOCAL_REPARAMETERIZATION},
        parse=_parse_mean_field,
        format=_format_mean_field,
        batched_layout=FlatMeanField.batched_layout,
    ),
    GuideFamily(
        Form(
            GuideKind.BBB,
            (Arg("rho low", Real(), -5.0), Arg("rho high", Real(), -4.0)),
            check=_check_rho_interval,
            example="bbb:-6,-5",
        ),
        build=_build_bbb,
        capabilities=_MEAN_FIELD,
        parse=lambda parsed: GuideSpec(parsed.kind, rho_init=(parsed["rho low"], parsed["rho high"])),
        format=lambda spec: f"bbb:{format_number(spec.rho_init[0])},{format_number(spec.rho_init[1])}",
        batched_layout=BayesByBackprop.batched_layout,
    ),
    GuideFamily(
        Form(GuideKind.MAP),
        build=_point,
        parse=lambda parsed: GuideSpec(parsed.kind),
        format=lambda spec: spec.name,
        batched_layout=PointEstimateGuide.batched_layout,
    ),
    GuideFamily(
        Form(GuideKind.MLE),
        build=_point,
        capabilities={Capability.DETERMINISTIC},
        parse=lambda parsed: GuideSpec(parsed.kind),
        format=lambda spec: spec.name,
        batched_layout=PointEstimateGuide.batched_layout,
    ),
    GuideFamily(
        Form(
            GuideKind.MC_DROPOUT,
            (Arg("dropout probability", Interval(0.0, 1.0, closed="neither"), 0.1, metavar="P"),),
            example="mc-dropout:0.2",
        ),
        build=_mc_dropout,
        parse=lambda parsed: GuideSpec(parsed.kind, dropout=parsed["dropout probability"]),
        format=lambda spec: f"mc-dropout:{format_number(spec.dropout)}",
        batched_layout=MCDropout.batched_layout,
    ),
    GuideFamily(
        Form(
            GuideKind.MIXTURE,
            (Arg("components", Integer(minimum=1), 4, metavar="K"),),
            # as NodeNoiseMixture: 0 starts all at 1
            (Arg("loc_std", Real(minimum=0.0, float32=True), 0.5, metavar="S0"),),
            example="mixture:4,loc_std=0.75",
        ),
        build=lambda spec, bnn: NodeNoiseMixture(bnn, spec.num_components, init_loc_std=spec.init_loc_std),
        capabilities={Capability.RANDOM, Capability.DRAWS, Capability.NORMAL_MIXTURE, Capability.NODE_NOISE_ONLY},
        parse=lambda parsed: GuideSpec(
            parsed.kind,
            num_components=parsed["components"],
            init_loc_std=abs(parsed["loc_std"]),  # -0: 0
        ),
        format=lambda spec: f"mixture:{spec.num_components},loc_std={format_number(spec.init_loc_std)}",
        samples_multiple=lambda spec: spec.num_components,
        batched_layout=NodeNoiseMixture.batched_layout,
    ),
    LOWRANK_FAMILY,
    MVN_FAMILY,
    IAF_FAMILY,
):
    register_guide(_family)

BUILT_IN_GUIDES = frozenset(family.name for family in guide_families())
"""The families pyro_bnn registers on import; any other was registered from outside (a plugin, a notebook), and a
worker process that imports pyro_bnn afresh lacks it (:mod:`pyro_bnn.reproduce.registries`)."""


GUIDE_FAMILY = Family("guide", lambda: [family.form for family in guide_families()], example=DEFAULT_GUIDE)
"""The ``--guide`` grammar: every registered family's form (the registry can grow after import)."""


def parse_guide(spec: str) -> GuideSpec:
    """Parses a ``--guide`` string into a :class:`GuideSpec` (forms: every registered family; ``pyro-bnn list``
    shows them).

    Raises:
        ValueError: One line naming the spec and what was expected.
    """
    parsed = GUIDE_FAMILY.parse(spec)
    family = guide_family(parsed.name)
    if family.parse is not None:
        return family.parse(parsed)
    return GuideSpec(parsed.name, options=dict(parsed.values))
