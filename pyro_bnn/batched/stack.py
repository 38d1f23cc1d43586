"""R runs of one architecture as stacked tensors, and the network run over all R in one vectorised pass.

A :class:`RunStack` takes R ordinary (model, guide) pairs, checks that they can share one vectorised computation
(the same network class and weight sites, the same likelihood, a mean-field guide, a point estimate or a node-noise
mixture of the same kind), and holds their trainable values stacked along a leading run dimension
(:mod:`pyro_bnn.sites`: runs sit left of every other dimension):

* ``loc`` and ``raw_scale``: ``(R, D)``, the guides' flat locations and raw scales (:mod:`.layout`; no raw scales
  for a point estimate; ``(R, K, D)`` for a K-component mixture over node noise);
* ``deterministic``: ``{name: (R, *shape)}``, the network's parameters the prior leaves deterministic.

:meth:`RunStack.outputs` runs the network of every run on its own inputs: a chain of linear layers and element-wise
activations (an MLP, the 3FC) as batched matrix products with the features before the batch (:func:`linear_chain`),
any other network with ``torch.vmap`` over ``torch.func.functional_call`` (grouped convolutions for conv layers), or
one run after another for large ones.
:meth:`RunStack.write_runs` copies runs' values back into their own guides and networks (:mod:`.exchange` does the
same for their Adam states), so that checkpoints, evaluation and diagnostics see an ordinary run.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import torch
from torch import nn
from torch.func import functional_call

from pyro_bnn.batched.dropout import DROPOUTS, DropoutLayer, MaskedDropout, find_dropout_layers, mask_dropout
from pyro_bnn.batched.layout import GuideLayout, ScaleMap, guide_layout
from pyro_bnn.bnn import BNN
from pyro_bnn.guides.flat import split_sites
from pyro_bnn.models.base import SequentialNet
from pyro_bnn.nn.leaky_relu import LeakyReLU
from pyro_bnn.nn.modes import has_batch_norm
from pyro_bnn.node_noise.convert import BIAS_NOISE, INPUT_NOISE

LOOP_MIN_WEIGHTS = 1 << 16
"""From this many weights per run, :meth:`RunStack.outputs` runs the R networks one after another rather than in
one ``torch.vmap`` pass. vmap turns a linear layer into a batched product that copies every run's transposed
weights, forward and backward: for the 3FC (2.8 M weights) four vmapped runs took longer than four separate passes on
a 2-core CPU, while for the 57 weights of the moons net vmap's single pass saves most of the per-run overhead
(``bench/BATCHED.md``)."""


_ELEMENTWISE = (nn.Tanh, nn.ReLU, nn.Sigmoid, nn.SiLU, nn.GELU, nn.ELU, nn.Softplus, nn.Identity, LeakyReLU)
"""Activation classes (exactly these, not subclasses) that act on each element alone, so that the stacked chain
(:func:`linear_chain`) applies them to its ``(R, features, B)`` activations as they are."""


class RunSlopeLeakyReLU(nn.Module):
    """A leaky ReLU whose slope is a buffer, so that vmapped runs each get their own (a Leaky slope sweep in one
    batch). The same function and gradient as :class:`~pyro_bnn.nn.LeakyReLU` (slope times the input below 0, the
    slope as the gradient at 0)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("slope", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x, self.slope * x)


def linear_chain(net: nn.Module) -> tuple[tuple[str, nn.Module], ...] | None:
    """The layers of ``net`` when it is a chain that :meth:`RunStack.outputs` computes with batched matrix products:
    an ``nn.Sequential`` (or the zoo's :class:`~pyro_bnn.models.base.SequentialNet`, whose forward is the same) of an
    optional leading ``Flatten``, ``Linear`` layers, element-wise activations (:data:`_ELEMENTWISE`, a
    :class:`RunSlopeLeakyReLU`), dropout with ``p = 0`` and :class:`MaskedDropout`; None for any other network (it goes
    through vmap).
    The chain calls no module hooks (vmap's ``functional_call`` would): it applies node noise
    (:mod:`pyro_bnn.node_noise`, whose hooks multiply a linear layer's inputs and bias) itself.
    """
    if not isinstance(net, nn.Sequential) or type(net).forward not in (nn.Sequential.forward, SequentialNet.forward):
        return None
    layers = []
    for index, (name, module) in enumerate(net.named_children()):
        kind = type(module)
        if kind is nn.Flatten and index == 0 and (module.start_dim, module.end_dim) == (1, -1):
            layers.append((name, module))  # the chain flattens its inputs itself
            continue
        if kind in DROPOUTS and module.p == 0:
            continue
        if kind not in (nn.Linear, RunSlopeLeakyReLU, MaskedDropout) and kind not in _ELEMENTWISE:
            return None
        layers.append((name, module))
    return tuple(layers)


def _structure(net: nn.Module) -> list[tuple[str, type, str]]:
    """Each module's name, class and settings (``extra_repr``), a leaky ReLU's slope left out (it may differ)."""
    return [
        (name, type(module), "" if isinstance(module, LeakyReLU) else module.extra_repr())
        for name, module in net.named_modules()
    ]


def _check_models(models: Sequence[BNN]) -> None:
    """One-line ValueErrors for models that cannot share a vectorised computation."""
    first = models[0]
    for run, model in enumerate(models):
        if not isinstance(model, BNN):
            raise ValueError(f"run {run}: batched runs train pyro_bnn.BNN models, got {type(model).__name__}")
        if type(model).forward is not BNN.forward:
            raise ValueError(f"run {run}: a BNN that overrides forward cannot be batched")
        if model.hyper_site_names:
            raise ValueError(
                f"run {run} has a hierarchical prior (sites {model.hyper_site_names[:2]}): batched runs take fixed "
                "priors; train it alone"
            )
        if model.local_latents:
            raise ValueError(f"run {run} has per-example latent sites {model.local_site_names[:2]}: train it alone")
        if has_batch_norm(model.net):
            raise ValueError(f"run {run}'s network has batch normalisation, whose statistics batched runs do not keep")
        trainable = [n for n, p in model.named_parameters() if p.requires_grad and not n.startswith("net.")]
        if trainable:
            raise ValueError(f"run {run} trains parameters outside the network {trainable[:3]}: train it alone")
        if _structure(model.net) != _structure(first.net):
            raise ValueError(f"run {run}'s network differs from run 0's (its layers or their settings)")
        shapes = [(s.name, tuple(s.shape)) for s in model.sites]
        if shapes != [(s.name, tuple(s.shape)) for s in first.sites]:
            raise ValueError(f"run {run}'s weight sites differ from run 0's")
        if not _same_likelihood(model.likelihood, first.likelihood):
            raise ValueError(
                f"run {run}'s likelihood ({model.likelihood!r}) differs from run 0's ({first.likelihood!r}) in its "
                "class, data set size, KL scaling or parameters (a Gaussian's noise scale): batch runs that share it"
            )
        for (name, a), (_, b) in zip(_net_buffers(model), _net_buffers(first), strict=True):
            if a.shape != b.shape or not torch.equal(a, b):
                raise ValueError(f"run {run}'s network buffer {name!r} differs from run 0's; batch runs that share it")


def _mc_dropout(guides: Sequence[nn.Module]) -> bool:
    """Whether the guides keep dropout on when predicting (``mc_dropout``), which all of them must agree on."""
    flags = {bool(getattr(g, "mc_dropout", False)) for g in guides}
    if len(flags) != 1:
        raise ValueError("some runs' guides are MC dropout and others are not: batch one kind")
    return flags.pop()


def _same_likelihood(a: nn.Module, b: nn.Module) -> bool:
    """The same likelihood class, settings (data set size, KL scaling) and parameters and buffers."""
    if type(a) is not type(b) or repr(a) != repr(b):
        return False
    if (a.dataset_size, a.kl_scale) != (b.dataset_size, b.kl_scale):
        return False
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(sa[k].shape == sb[k].shape and torch.equal(sa[k], sb[k]) for k in sa)


def _net_buffers(model: BNN) -> list[tuple[str, torch.Tensor]]:
    """The network's buffers that are not weight sites (shared by the runs of a batch)."""
    sites = set(model.site_names)
    return [(name, b) for name, b in model.net.named_buffers() if name not in sites]


class RunStack:
    """R compatible runs' trainable values, stacked.

    Args:
        models: The R models (the same network class, weight sites and likelihood; priors may differ).
        guides: Their set-up guides, of families that declare a batched layout
            (:class:`~pyro_bnn.guides.BatchedLayout`: ``flat``, ``bbb``, the point estimates ``map``, ``mle`` and
            ``mc-dropout``, the node-noise ``mixture:K``), all with one scale map (and one K).
        loop_runs: Run the networks one after another (True) or in one vmapped pass (False); default: by the
            number of weights (:data:`LOOP_MIN_WEIGHTS`). The outputs are the same either way.
        chain: Run a chain of linear layers and activations (:func:`linear_chain`) as batched matrix products
            (True: required; False: never; None: whenever the network is one). It takes precedence over
            ``loop_runs``; the outputs are the same.

    Attributes:
        loc, raw_scale: ``(R, D)`` leaves: the flat locations and raw scales (sigma = ``scale_map(raw_scale)``);
            raw_scale is None for point estimates (:attr:`point`), whose weights are ``loc``; ``(R, K, D)`` for
            mixture guides (:attr:`components`), over the network's node noise.
        deterministic: ``{name in the network: (R, *shape)}`` leaves.
        layouts: Each run's :class:`~pyro_bnn.batched.layout.GuideLayout`.

    Raises:
        ValueError: The runs cannot share one computation (one line naming the run and the reason).
    """

    def __init__(
        self,
        models: Sequence[BNN],
        guides: Sequence[nn.Module],
        *,
        loop_runs: bool | None = None,
        chain: bool | None = None,
    ) -> None:
        if not models or len(models) != len(guides):
            raise ValueError(f"a run stack needs as many guides as models (>= 1), got {len(models)} and {len(guides)}")
        _check_models(models)
        self.models, self.guides = list(models), list(guides)
        self.layouts: list[GuideLayout] = [guide_layout(g, m) for g, m in zip(guides, models, strict=True)]
        kinds = {layout.scale_map for layout in self.layouts}
        if len(kinds) != 1:
            names = ", ".join(sorted({type(g).__name__ for g in guides}))
            raise ValueError(f"the runs' guides differ in kind ({names}): batch one kind")
        self.scale_map: ScaleMap = kinds.pop()
        components = {layout.components for layout in self.layouts}
        if len(components) != 1:
            counts = ", ".join(sorted("no mixture" if k is None else f"K = {k}" for k in components))
            raise ValueError(f"the runs' guides differ in their mixture components ({counts}): batch one kind")
        self.components: int | None = components.pop()
        """K of the runs' mixture guides (``loc`` and ``raw_scale`` are ``(R, K, D)``), None for ``(R, D)``."""
        self.sites = self.layouts[0].sites
        with torch.no_grad():
            locs, raws = zip(*(layout.read() for layout in self.layouts), strict=True)
            self.loc = torch.stack(locs).requires_grad_()
            self.raw_scale = None if self.point else torch.stack(raws).requires_grad_()
            self.deterministic: dict[str, torch.Tensor] = {
                name: torch.stack([m.net.get_parameter(name).detach() for m in models]).requires_grad_()
                for name, p in models[0].net.named_parameters()
                if p.requires_grad
            }
        self._shared_buffers = dict(_net_buffers(models[0]))
        # Every stacked value counts: a maximum-likelihood network's parameters are all deterministic (D = 0).
        size = self.loc[0].numel() + sum(v[0].numel() for v in self.deterministic.values())
        self.loop_runs = size >= LOOP_MIN_WEIGHTS if loop_runs is None else bool(loop_runs)
        """Run the networks one after another instead of in one vmapped pass (see :data:`LOOP_MIN_WEIGHTS`)."""
        # A copy of run 0's network runs every run's values; a leaky ReLU whose slope differs between the runs
        # becomes one with a slope buffer, given per run like the weights.
        self.net = copy.deepcopy(models[0].net)
        self.per_run_buffers: dict[str, torch.Tensor] = {}
        for name, module in models[0].net.named_modules():
            if isinstance(module, LeakyReLU):
                slopes = [m.net.get_submodule(name).slope for m in models]
                if len(set(slopes)) > 1:
                    self.net.set_submodule(name, RunSlopeLeakyReLU())
                    prefix = f"{name}." if name else ""
                    self.per_run_buffers[prefix + "slope"] = torch.tensor(
                        slopes, dtype=self.loc.dtype, device=self.loc.device
                    )
        self.mc_dropout = _mc_dropout(guides)
        """Whether the guides keep dropout on when predicting (MC dropout): validation then draws masks too."""
        self._replace_dropout()
        self._dropout_layers: dict[tuple[int, ...], tuple[DropoutLayer, ...]] = {}
        self.chain = linear_chain(self.net) if chain is None or chain else None
        """The network's layers when :meth:`outputs` runs it as batched matrix products (:func:`linear_chain`),
        else None."""
        if chain and self.chain is None:
            raise ValueError(f"{type(self.net).__name__} is not a chain of linear layers and activations")

    def _replace_dropout(self) -> None:
        """Makes every dropout layer of the stacked network a :class:`~.dropout.MaskedDropout` (point estimates only:
        their step draws the masks; a run with random weights trains alone)."""
        masked = mask_dropout(self.net, self.loc.device)
        if masked and not self.point:
            raise ValueError(
                f"run 0's network has dropout ({masked[0]}), which batched runs draw for point estimates only (map, "
                "mc-dropout): train it alone"
            )

    def dropout_layers(self, input_shape: Sequence[int]) -> tuple[DropoutLayer, ...]:
        """The network's dropout layers, each with the shape of one example's input to it (found once per input
        shape by running run 0's network on zeros); () for a network without dropout.

        Args:
            input_shape: One example's shape, ``x.shape[2:]`` of the step's inputs ``(R, B, *input_shape)``.
        """
        key = tuple(int(n) for n in input_shape)
        if key not in self._dropout_layers:
            values = {
                **self._shared_buffers,
                **{name: value[0] for name, value in self.split(self.loc.detach()).items()},
                **{name: value[0].detach() for name, value in self.per_run_values().items()},
            }
            self._dropout_layers[key] = find_dropout_layers(self.net, values, self.loc.new_zeros((1, *key)))
        return self._dropout_layers[key]

    @property
    def num_runs(self) -> int:
        """R."""
        return self.loc.shape[0]

    @property
    def num_latents(self) -> int:
        """D, the random values of one run's network (weights, or node noise per example)."""
        return self.loc.shape[-1]

    @property
    def point(self) -> bool:
        """Whether the runs' guides are point estimates (no scales: ``raw_scale`` is None)."""
        return self.scale_map is ScaleMap.POINT

    @property
    def guide_leaves(self) -> list[torch.Tensor]:
        """The guides' stacked leaves: ``loc`` and ``raw_scale``, ``loc`` alone for point estimates, none without
        weight sites (a maximum-likelihood network, whose parameters are all deterministic)."""
        if not self.sites:
            return []
        return [self.loc] if self.raw_scale is None else [self.loc, self.raw_scale]

    @property
    def leaves(self) -> list[torch.Tensor]:
        """Every stacked leaf the optimiser updates: :attr:`guide_leaves`, then the deterministic parameters."""
        return [*self.guide_leaves, *self.deterministic.values()]

    def run_parameters(self, run: int) -> list[list[nn.Parameter]]:
        """Per leaf of :attr:`leaves`, the parameters of run ``run``'s own guide or network it holds."""
        segments = self.layouts[run].segments
        own = [[s.loc for s in segments], [s.raw_scale for s in segments]][: len(self.guide_leaves)]
        return own + [[self.models[run].net.get_parameter(name)] for name in self.deterministic]

    def split(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-site views ``{site: (*lead, *site_shape)}`` of ``flat`` ``(*lead, D)``."""
        return split_sites(self.sites, flat)

    def per_run_values(self) -> dict[str, torch.Tensor]:
        """Everything besides the weights that the network takes per run: ``{name: (R, *shape)}`` (the
        deterministic parameters, and the slopes of leaky ReLUs whose slope differs between the runs)."""
        return {**self.deterministic, **self.per_run_buffers}

    def outputs(
        self, x: torch.Tensor, weights: Mapping[str, torch.Tensor], per_run: Mapping[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Every run's network on its own inputs.

        Args:
            x: ``(R', B, *input_shape)``: run r's inputs at ``x[r]``.
            weights: ``{site: (R', *site_shape)}``.
            per_run: ``{name: (R', *shape)}``; default: :meth:`per_run_values` (then R' = R).

        Returns:
            ``(R', B, out)``.
        """
        per_run = self.per_run_values() if per_run is None else per_run
        if self.chain is not None and (x.dim() == 3 or type(self.chain[0][1]) is nn.Flatten):
            return self._chain_outputs(x, {**weights, **per_run})
        buffers = self._shared_buffers
        if self.loop_runs:
            # One ordinary pass per run on views of its values (unbind: one backward node per tensor).
            values = {name: value.unbind(0) for name, value in {**weights, **per_run}.items()}
            outputs = [
                functional_call(self.net, {**buffers, **{name: v[r] for name, v in values.items()}}, (x[r],))
                for r in range(x.shape[0])
            ]
            return torch.stack(outputs)

        def one(values, others, inputs):
            return functional_call(self.net, {**buffers, **values, **others}, (inputs,))

        return torch.vmap(one)(dict(weights), dict(per_run), x)

    def _chain_outputs(self, x: torch.Tensor, values: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """:meth:`outputs` of a :attr:`chain`, with activations held as ``(R', features, B)``: a linear layer is then
        ``W_r @ h_r`` with W as stored (out, in), which on a CPU runs several times faster for small layers than
        the ``(R', B, in) @ (R', in, out)`` products that vmap makes of ``F.linear`` (no transposed copies of W, and
        the long dimension B last)."""
        runs = x.shape[0]
        h = x.reshape(runs, x.shape[1], -1).transpose(1, 2)  # (R', in, B): flattened by a leading Flatten, or 2-D
        for name, module in self.chain:
            if type(module) is nn.Flatten:
                continue
            if type(module) is nn.Linear:
                weight = values.get(f"{name}.weight")
                weight = module.weight.expand(runs, -1, -1) if weight is None else weight
                bias = values.get(f"{name}.bias", module.bias)
                noise = values.get(f"{name}.{INPUT_NOISE}", getattr(module, INPUT_NOISE, None))
                if noise is not None:  # node noise on the inputs: (R', in) one per run, (R', B, in) one per row
                    h = h * (noise.unsqueeze(-1) if noise.dim() == 2 else noise.transpose(1, 2))
                if bias is not None:
                    bias = bias.expand(runs, -1).unsqueeze(-1)
                    scale = values.get(f"{name}.{BIAS_NOISE}", getattr(module, BIAS_NOISE, None))
                    if scale is not None:  # node noise on the bias: (R',) one per run, (R', B) one per row
                        bias = bias * (scale.reshape(runs, 1, 1) if scale.dim() <= 1 else scale.unsqueeze(1))
                h = torch.bmm(weight, h) if bias is None else torch.baddbmm(bias, weight, h)
            elif type(module) is MaskedDropout:
                mask = values.get(f"{name}.mask")
                if mask is not None:  # (R', B, features), the activations' transpose
                    h = h * mask.reshape(runs, mask.shape[1], -1).transpose(1, 2)
            elif type(module) is RunSlopeLeakyReLU:
                slope = values.get(f"{name}.slope", module.slope)
                h = torch.where(h > 0, h, slope.expand(runs).reshape(runs, 1, 1) * h)
            else:
                h = module(h)
        return h.transpose(1, 2)

    # ---------------------------------------------------------------------------------- exchange with the runs
    @torch.no_grad()
    def write_runs(self, runs: Sequence[int]) -> None:
        """Copies the stacked values of ``runs`` into their own guides and networks."""
        loc = self.loc.detach()
        raw = None if self.raw_scale is None else self.raw_scale.detach()
        for run in runs:
            self.layouts[run].copy_in(loc[run], None if raw is None else raw[run])
            for name, value in self.deterministic.items():
                self.models[run].net.get_parameter(name).copy_(value[run])
