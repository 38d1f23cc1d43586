"""Guides for a user's model that calls a :class:`~pyro_bnn.compose.RandomFunction`: the library's guide for the
network's prefixed sites, Pyro's autoguides (or the user's guide) for the rest, joined in an ``AutoGuideList``.

:class:`NetworkGuide` is an ``AutoGuide`` whose model is the random function's prefixed prior
(:meth:`RandomFunction.prior`). Inside it is a guide of the BNN itself, built by the library's builders (so the flat
mean-field default starts at the network's own initial weights, :class:`~pyro_bnn.guides.init_to_network`, and
every family of :func:`~pyro_bnn.guides.parse_guide` that covers global sites works); it runs that guide under the
prefix. The inner guide is set up on one row of the inputs the random function first saw, since a BNN's guide traces
the BNN; the user's own arguments are never passed to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from pyro import poutine
from pyro.infer.autoguide import AutoGuide, AutoGuideList, AutoNormal
from pyro.poutine.messenger import Messenger
from torch import nn

from pyro_bnn.bnn import BNN
from pyro_bnn.checks import positive_int
from pyro_bnn.compose.model import ComposedModel
from pyro_bnn.compose.random_function import PrefixMessenger, RandomFunction, leaf_reference, prefixed
from pyro_bnn.compose.scaling import run_scaled
from pyro_bnn.guides import DEFAULT_GUIDE, GuideSpec, parse_guide, posterior_loc_scale
from pyro_bnn.sites import is_likelihood_site


class _LeafReferences(Messenger):
    """Gives each plain ``nn.Parameter`` a guide reads the attribute ``unconstrained`` that Pyro's ``SVI`` looks for.

    With ``module_local_params`` (which importing pyro_bnn turns on) a ``PyroModule`` announces a plain
    ``nn.Parameter`` (:class:`~pyro_bnn.guides.FlatMeanField`'s ``loc``) by a ``param`` message whose value is the
    parameter itself, and ``SVI`` collects its leaves by calling ``value.unconstrained()``, which only Pyro's
    ``PyroParam`` values have: plain SVI would fail. The message's value becomes a view of the parameter that refers
    back to it (:func:`~pyro_bnn.compose.random_function.leaf_reference`).
    """

    def _process_message(self, msg: dict) -> None:
        if msg["type"] != "param" or msg["value"] is not None or len(msg["args"]) < 2:
            return
        leaf = msg["args"][1]
        if isinstance(leaf, nn.Parameter) and not hasattr(leaf, "unconstrained"):
            msg["value"] = leaf_reference(leaf)


def _build(guide: str | GuideSpec | Callable[[BNN], AutoGuide] | AutoGuide, bnn: BNN) -> AutoGuide:
    if isinstance(guide, AutoGuide):
        built = guide
    elif isinstance(guide, str):
        built = parse_guide(guide).build(bnn)
    elif isinstance(guide, GuideSpec):
        built = guide.build(bnn)
    elif callable(guide):
        built = guide(bnn)
    else:
        raise ValueError(f"guide must be a guide spec, a GuideSpec, a builder or an AutoGuide, got {guide!r}")
    if not isinstance(built, AutoGuide):
        raise ValueError(f"the guide builder returned {type(built).__name__}, not a Pyro AutoGuide of the BNN")
    return built


class NetworkGuide(AutoGuide):
    """The guide of a random function's prefixed sites: a guide of its BNN run under the prefix.

    Args:
        function: The random function whose sites it guides.
        guide: One of the library's guide specs (default ``"flat:0.01"``: mean-field Normal, locations at the
            network's initial weights, every scale 0.01), a :class:`~pyro_bnn.guides.GuideSpec`, a builder
            ``BNN -> AutoGuide`` or an AutoGuide already built on ``function.bnn``. Guides of per-example latents
            (the node-noise mixture) do not apply: a random function has none.
        example_input: One batch of the network's inputs ``(B, *input_shape)``, to set up the inner guide; by
            default the first inputs the random function was called on (so the model, or an ``AutoGuideList``
            holding this guide, must have run once first).

    Attributes:
        guide: The inner guide of the BNN, with unprefixed site names (``guide.loc_scale()`` where it has one).

    It takes any arguments (the user model's) and ignores them; it returns ``{prefixed site: value}``.
    """

    def __init__(
        self,
        function: RandomFunction,
        guide: str | GuideSpec | Callable[[BNN], AutoGuide] | AutoGuide = DEFAULT_GUIDE,
        *,
        example_input: torch.Tensor | None = None,
    ) -> None:
        if not isinstance(function, RandomFunction):
            raise ValueError(f"NetworkGuide guides a RandomFunction, got {type(function).__name__}")
        super().__init__(function.prior)
        self.prefix = function.prefix
        self._function = (function,)  # a tuple: the function is not a module and its BNN is no part of the guide
        self._example_input = example_input
        self._inner_arguments: tuple[torch.Tensor, torch.Tensor] | None = None
        self.guide = _build(guide, function.bnn)
        self.guide.master = None

    def _update_master(self, master_ref) -> None:
        # Pyro points every AutoGuide nested in an AutoGuideList at the list, whose plates and prototype it then
        # uses; the inner guide is a guide of the BNN alone, with its own prototype and unprefixed names, so it
        # keeps none.
        self.master = master_ref

    def _inner(self) -> AutoGuide:
        self.guide.master = None  # also after unpickling, where Pyro sets it on every nested AutoGuide
        return self.guide

    @property
    def function(self) -> RandomFunction:
        """The random function this guide belongs to."""
        return self._function[0]

    def _inner_args(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x, y)`` for the inner guide: one batch of inputs and targets drawn from the BNN's own prior
        predictive (observed, so that its likelihood's data site is no latent of the inner guide)."""
        if self._inner_arguments is None:
            x = self._example_input if self._example_input is not None else self.function.example_input
            if x is None:
                raise ValueError(
                    f"the guide of {self.prefix!r} is set up from the network's inputs: run the model once first "
                    "(an AutoGuideList does), or pass example_input="
                )
            with torch.no_grad():
                trace = poutine.block(poutine.trace(self.function.bnn).get_trace)(x)
            y = next(node["value"] for node in trace.nodes.values() if is_likelihood_site(node))
            self._inner_arguments = (x, y)
        return self._inner_arguments

    def _set_up(self) -> None:
        if self.prototype_trace is not None:
            return
        args = self._inner_args()
        if self._inner().prototype_trace is None:
            with poutine.block():
                self.guide(*args)
        self.prototype_trace = poutine.block(poutine.trace(self.model).get_trace)()

    def forward(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        """Draws every prefixed network site from the inner guide; returns ``{prefixed site: value}``."""
        self._set_up()
        with PrefixMessenger(self.prefix), _LeafReferences():
            values = self._inner()(*self._inner_args())
        return {prefixed(self.prefix, name): value for name, value in values.items()}

    @torch.no_grad()
    def median(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        """The inner guide's median of every network site, ``{prefixed site: tensor of the site's shape}``."""
        self._set_up()
        medians = self._inner().median(*self._inner_args())
        return {prefixed(self.prefix, name): value for name, value in medians.items()}

    @torch.no_grad()
    def quantiles(self, quantiles: Sequence[float] | torch.Tensor, *args, **kwargs) -> dict[str, torch.Tensor]:
        """The inner guide's quantiles, ``{prefixed site: (len(quantiles), *site_shape)}``."""
        self._set_up()
        values = self._inner().quantiles(quantiles, *self._inner_args())
        return {prefixed(self.prefix, name): value for name, value in values.items()}

    def loc_scale(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Each network site's variational location and scale in its unconstrained space, prefixed and detached
        (:func:`~pyro_bnn.guides.posterior_loc_scale` of the inner guide)."""
        self._set_up()
        return {prefixed(self.prefix, name): pair for name, pair in posterior_loc_scale(self.guide).items()}


class ModelGuide(AutoGuideList):
    """The ``AutoGuideList`` :func:`model_guide` returns; built on a
    :class:`~pyro_bnn.compose.ComposedModel`, it scales its sites in the data plate by N / (plate size) as the model
    scales its own (:class:`~pyro_bnn.compose.scaling.DataPlateScale`), and refuses in one line a part with
    parameters per row of a data plate of other than N rows (``AutoNormal`` of a per-example latent set up on a
    minibatch; :func:`~pyro_bnn.compose.scaling.refuse_per_row_guides`).

    Args:
        model: The user's model (what the list is set up on).
        dataset_size: N, or None for no scaling (a guide for plain ``SVI`` of the user's model).
        data_plate: Name of the plate over the minibatch rows.
    """

    def __init__(self, model: Callable, *, dataset_size: int | None = None, data_plate: str = "data") -> None:
        super().__init__(model)
        self.dataset_size = None if dataset_size is None else positive_int(dataset_size, "dataset_size")
        self.data_plate = str(data_plate)

    def forward(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        """Draws every part's sites, those in the data plate scaled when :attr:`dataset_size` is set; returns
        ``{site: value}``."""
        if self.dataset_size is None:
            return super().forward(*args, **kwargs)
        return run_scaled(super().forward, self.data_plate, self.dataset_size, *args, refuse_in=self, **kwargs)


def model_guide(
    model: Callable,
    functions: RandomFunction | Iterable[RandomFunction] | None = None,
    *,
    guide: str | GuideSpec | Callable[[BNN], AutoGuide] = DEFAULT_GUIDE,
    rest: Callable[[Callable], AutoGuide | Callable] | None = AutoNormal,
) -> ModelGuide:
    """A guide of the whole model: the library's guide of each random function's sites, ``rest`` for the others.

    Args:
        model: The user's model, which calls every function in ``functions`` once, or a
            :class:`~pyro_bnn.compose.ComposedModel` of it: the guide is then set up on the user's model and scales
            its sites in the data plate by N / (plate size) as the composed model does (without it a minibatch
            ELBO of per-example latents is biased, and the composed model refuses the guide on minibatches).
        functions: Its random function(s); by default a composed model's own.
        guide: The guide of each network (see :class:`NetworkGuide`); default ``"flat:0.01"``.
        rest: Builds the guide of the model's other latent sites from the model with the network sites hidden
            (``poutine.block(model, hide=...)``): Pyro's ``AutoNormal`` (the default), ``AutoDelta``,
            ``functools.partial(AutoNormal, init_scale=0.01)``, or a builder returning the user's own guide, a
            function or module ``guide(x, y=None)`` that opens its own plates (an amortised guide of per-example
            latents: ``with pyro.plate("data", x.shape[0]): pyro.sample("z", ...)``), which guides every other
            latent site and is called after the networks' guides. None when there are no other latents.

    Returns:
        A :class:`ModelGuide`, an ``AutoGuideList`` of ``[NetworkGuide of each function, rest]``: the guide for
        ``SVI(model, guide, ...)`` or ``Trainer(composed, guide, ...)``.
        A user's own guide is its last part, wrapped in Pyro's ``AutoCallable``; the list is then set up on the
        network sites alone, so that it opens none of the model's plates, which the user's guide opens itself.
    """
    scaling = {}
    if isinstance(model, ComposedModel):
        scaling = {"dataset_size": model.dataset_size, "data_plate": model.data_plate}
        functions = model.functions if functions is None else functions
        model = model.model
    functions = [functions] if isinstance(functions, RandomFunction) else list(functions or [])
    if not functions:
        raise ValueError("model_guide needs at least one RandomFunction")
    prefixes = [f.prefix for f in functions]
    if len(set(prefixes)) != len(prefixes):
        raise ValueError(f"the random functions share a prefix: {prefixes}; each needs its own")
    network_sites = [name for function in functions for name in function.site_names]
    hidden = [*network_sites, *(function.output_site for function in functions)]
    rest_guide = None if rest is None else rest(poutine.block(model, hide=hidden))
    if rest_guide is not None and not callable(rest_guide):
        raise ValueError(f"rest must build an AutoGuide or a callable guide(x, y=None), got {rest_guide!r}")
    # An AutoGuideList opens the plates of the sites it is set up on (a sample site per plate, named after it)
    # before it runs its parts: a user's guide that opens the model's data plate itself would open it twice. Such
    # a guide takes every site but the networks', so the list is set up on the networks' sites alone.
    user_guide = rest_guide is not None and not isinstance(rest_guide, AutoGuide)
    guide_list = ModelGuide(poutine.block(model, expose=network_sites) if user_guide else model, **scaling)
    for function in functions:
        guide_list.append(function.guide(guide))
    if rest_guide is not None:
        guide_list.append(rest_guide)
    return guide_list
