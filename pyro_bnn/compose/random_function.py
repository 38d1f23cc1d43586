"""A BNN as a random function inside a user's own Pyro model: ``out = f(x)`` samples its weights under a prefix.

:class:`RandomFunction` wraps a :class:`~pyro_bnn.BNN`. Calling it inside a model samples every hyperprior and weight
site of the network from its prior, under the names ``prefix + "." + site`` (``"f.0.weight"``), runs the network on
``x`` with the sampled weights and returns the outputs; the user's own latents and likelihood go around it. The BNN's
own likelihood is not used (its ``dataset_size`` and noise scale play no part).

The renaming is one small :class:`PrefixMessenger` rather than ``pyro.contrib.autoname.scope``: ``scope`` joins names
with ``"/"`` and also renames ``param`` sites and counts repeated scopes, whereas the network's sites are already
dotted module paths (``"0.weight"``) and a dotted prefix keeps them readable as one path (``"f.0.weight"``); the
messenger renames sample sites only and is the single place where the prefix is applied, in model and guide alike.

Dimensions (:mod:`pyro_bnn.sites`): the weights are global sites, sampled outside every plate of the model except
the sample plates that Pyro opens for vectorised ELBO particles or parallel predictive draws. Under such a plate of
size P at ``dim=-(K+1)`` (K = ``max_plate_nesting``) the outputs are ``(P, 1, ..., 1, B, *out)``, whose batch shape
is aligned with the model's plates with the rows of ``x`` at ``dim=-1``: open the data plate over those rows at
``dim=-1`` (the default for a plate entered on its own).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import pyro
import torch
from pyro.distributions import constraints
from pyro.infer.autoguide import AutoGuide
from pyro.poutine.messenger import Messenger
from pyro.poutine.runtime import effectful
from torch import nn

from pyro_bnn.bnn import BNN
from pyro_bnn.guides import DEFAULT_GUIDE, GuideSpec
from pyro_bnn.sites import SAMPLE_PLATE

PREDICTIVE_PLATE = "_num_predictive_samples"
"""The plate of parallel predictive draws: Pyro's ``Predictive`` names it so, and :func:`predict_model` too."""

SAMPLE_PLATES = frozenset({"num_particles_vectorized", PREDICTIVE_PLATE, SAMPLE_PLATE})
"""Plates under which a :class:`RandomFunction` may be called: Pyro's vectorised ELBO particles, Pyro's parallel
``Predictive`` draws and pyro_bnn's own sample plate. Any other plate would make the weights per-row or per-group."""


def _param_site(name: str, value: torch.Tensor) -> torch.Tensor:
    """A ``param`` message carrying ``value`` as is (what a ``PyroModule`` with module-local parameters emits)."""
    return effectful(type="param")(lambda *_, **__: value)(name, value, constraint=constraints.real, name=name)


def prefixed(prefix: str, name: str) -> str:
    """``prefix + "." + name``: a network site's name inside the user's model."""
    return f"{prefix}.{name}"


class PrefixMessenger(Messenger):
    """Renames every sample site inside it to ``prefix + "." + name``; with ``check_plates``, refuses a site sampled
    inside any plate but the sample plates of :data:`SAMPLE_PLATES`.

    Renaming happens in ``_process_message``, which runs before any handler outside this one (trace, condition,
    replay, block) sees the message, so all of them see only the prefixed name.
    """

    def __init__(self, prefix: str, *, check_plates: bool = False) -> None:
        super().__init__()
        self.prefix = prefix
        self.check_plates = check_plates

    def _process_message(self, msg: dict) -> None:
        if msg["type"] == "sample":
            msg["name"] = prefixed(self.prefix, msg["name"])

    def _postprocess_message(self, msg: dict) -> None:
        if not (self.check_plates and msg["type"] == "sample"):
            return
        plates = [frame.name for frame in msg["cond_indep_stack"] if frame.name not in SAMPLE_PLATES]
        if plates:
            raise ValueError(
                f"{msg['name']!r} is a network weight, a global site, but it was sampled inside plate(s) {plates}: "
                "call the random function outside the model's plates and open the data plate over its outputs "
                "(rows at dim=-1) afterwards"
            )


def leaf_reference(leaf: nn.Parameter) -> torch.Tensor:
    """A view of ``leaf`` whose ``unconstrained()`` returns ``leaf``: the value a ``param`` site needs for Pyro's
    ``SVI`` to find and optimise ``leaf`` (``SVI`` collects ``value.unconstrained()`` of every param site it
    traces). The parameter itself gets no attribute, so it still pickles."""
    value = leaf.view_as(leaf)
    value.unconstrained = weakref.ref(leaf)
    return value


class RandomFunction:
    """A :class:`~pyro_bnn.BNN` used as a random function in a user-written Pyro model.

    Args:
        bnn: The network and its prior. Its likelihood is ignored; a BNN with per-example latents
            (:class:`~pyro_bnn.local_latents.LocalLatent` sites) is refused, as their sites belong to the BNN's own
            data plate. Node noise has none (its noise scalars are global sites) and is accepted.
        prefix: Prepended with a dot to every site of the network (``"f"`` gives ``"f.0.weight"``); no dot inside.
        record: Also record the outputs as a deterministic site named ``prefix`` (so :func:`predict_model` and
            Pyro's ``Predictive`` return them); its value is ``(*S, B, *out)`` with the sample dimensions ``*S``
            aligned with the model's plates (see the module docstring).

    Parameters of the network that the prior does not select (a deterministic first layer, say) stay ordinary
    ``nn.Parameter`` s; each call announces them as ``param`` sites named ``prefix + "." + name`` (without using
    Pyro's global parameter store), so that Pyro's ``SVI`` trains them as point estimates, as the library's trainer
    does.

    Call it once per model run (its sites can be sampled once per trace); for several sets of inputs, concatenate
    them. It keeps a one-row copy of the first inputs it sees (:attr:`example_input`), from which a guide of the
    network is set up (:meth:`guide`).

    Shapes:
        ``f(x)``: inputs ``(B, *input_shape)`` to outputs ``(B, *out)``, or ``(P, 1, ..., 1, B, *out)`` under a
        vectorised particle (or predictive sample) plate of size P.

    Example:
        >>> f = RandomFunction(BNN(nn.Linear(3, 1), NormalPrior(0.0, 1.0), Gaussian(1)), prefix="f")
        >>> def model(x, y=None):
        ...     sigma = pyro.sample("sigma", dist.LogNormal(0.0, 1.0))
        ...     mean = f(x).squeeze(-1)
        ...     with pyro.plate("data", x.shape[0]):
        ...         return pyro.sample("y", dist.Normal(mean, sigma), obs=y)
    """

    def __init__(self, bnn: BNN, prefix: str = "f", *, record: bool = True) -> None:
        if not isinstance(bnn, BNN):
            raise ValueError(f"RandomFunction wraps a pyro_bnn BNN, got {type(bnn).__name__}")
        if bnn.local_latents:
            raise ValueError(
                f"RandomFunction takes weight-space models; this one has per-example latents "
                f"{bnn.local_site_names[:3]}, which live in the BNN's own data plate"
            )
        if not bnn.sites:
            raise ValueError("the BNN has no random parameter: its prior selects none, so there is nothing to sample")
        if not isinstance(prefix, str) or not prefix or "." in prefix:
            raise ValueError(f"prefix must be a non-empty name without dots, got {prefix!r}")
        self.bnn = bnn
        self.prefix = prefix
        self.record = record
        self.example_input: torch.Tensor | None = None

    @property
    def site_names(self) -> list[str]:
        """Every site the network samples in the user's model: hyperpriors then weights, prefixed."""
        return [prefixed(self.prefix, name) for name in (*self.bnn.hyper_site_names, *self.bnn.site_names)]

    @property
    def weight_site_names(self) -> list[str]:
        """The prefixed weight sites, in network order."""
        return [prefixed(self.prefix, name) for name in self.bnn.site_names]

    @property
    def output_site(self) -> str:
        """Name of the deterministic site of the outputs (when ``record``): the prefix itself."""
        return self.prefix

    def sample_parameters(self) -> dict[str, torch.Tensor]:
        """Samples the network's hyperprior and weight sites under the prefix; returns the weights by the BNN's own
        (unprefixed) site names, as :meth:`BNN.sample_parameters` does."""
        with PrefixMessenger(self.prefix, check_plates=True):
            return self.bnn.sample_parameters()

    def prior(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        """A Pyro model of the network's prefixed sites alone, ignoring its arguments: what :class:`NetworkGuide`
        guides, and a model any Pyro autoguide can be built on (``AutoNormal(f.prior)``)."""
        return self.sample_parameters()

    def guide(self, guide: str | GuideSpec | Callable[[BNN], AutoGuide] | AutoGuide = DEFAULT_GUIDE, **kwargs):
        """A guide of the network's prefixed sites, for an ``AutoGuideList`` beside the guides of the user's sites.

        Args:
            guide: One of the library's guide specs (``"flat:0.01"``, the default; ``"autonormal:rel=0.1"``), a
                :class:`~pyro_bnn.guides.GuideSpec`, a builder ``BNN -> AutoGuide`` or a guide built on the BNN.
            **kwargs: Passed to :class:`~pyro_bnn.compose.NetworkGuide` (``example_input``).

        Returns:
            A :class:`~pyro_bnn.compose.NetworkGuide`.
        """
        from pyro_bnn.compose.guides import NetworkGuide  # the guide module imports this one

        return NetworkGuide(self, guide, **kwargs)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Samples the weights and returns the network's outputs on ``x`` (see the class's Shapes)."""
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"a random function takes a tensor of inputs (B, ...), got {type(x).__name__}")
        if self.example_input is None:
            self.example_input = x[:1].detach()
        for name, leaf in self.bnn.net.named_parameters():
            _param_site(prefixed(self.prefix, name), leaf_reference(leaf))
        params = self.sample_parameters()
        output = self.bnn.apply_parameters(x, params)
        if self.record:
            site = self.bnn.sites[0]
            sample_dims = max(params[site.name].dim() - len(site.shape) - 1, 0)
            # The rows of x are a batch dimension at dim=-1 with no plate of their own yet, so they are recorded
            # as part of the event, behind a 1 in the data plate's slot: the batch shape (*S, 1) stays aligned with
            # the model's plates, the particle plate's P where Pyro put it.
            value = output.unsqueeze(sample_dims) if sample_dims else output
            pyro.deterministic(self.output_site, value, event_dim=output.dim() - sample_dims)
        return output

    def __repr__(self) -> str:
        return f"RandomFunction(prefix={self.prefix!r}, {self.bnn.extra_repr()})"
