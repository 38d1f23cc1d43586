"""AutoNormal with per-tensor initial scales relative to the spread of the initial locations, and the plates of a
guide that gives every training example its own parameters."""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter

import pyro
import torch
from pyro.infer.autoguide import AutoNormal
from pyro.infer.autoguide.utils import deep_setattr
from pyro.nn import PyroParam

from pyro_bnn.bnn import BNN
from pyro_bnn.checks import positive_float32


class RelativeScaleNormal(AutoNormal):
    """Pyro's :class:`~pyro.infer.autoguide.AutoNormal` whose initial scale of each latent tensor is
    ``relative_scale * std(initial locations of that tensor)``.

    With locations at the network's initialisation this gives every layer a standard deviation in proportion to
    its own weights (Kaiming-uniform weights of a 1000-wide layer have std ~0.018; a 784-wide input layer ~0.021),
    instead of one absolute number for all layers. Everything else is AutoNormal's: the same parameters, sampling
    and ``locs`` / ``scales`` modules.

    Args:
        model: The Pyro model (a :class:`pyro_bnn.BNN`).
        relative_scale: c in ``sigma0 = c * std(loc0)`` (> 0, a normal float32).
        init_loc_fn: Initial locations (e.g. :class:`~pyro_bnn.guides.init_to_network`).
        fallback_scale: Initial scale of a tensor whose initial values are all equal (std 0), such as a single
            number (> 0, a normal float32).
        create_plates: As in AutoNormal.
    """

    def __init__(
        self,
        model: Callable,
        *,
        relative_scale: float,
        init_loc_fn: Callable,
        fallback_scale: float = 0.1,
        create_plates: Callable | None = None,
    ) -> None:
        # Both end up in float32 scales: a number float32 cannot hold would become a scale of 0 or inf.
        self.relative_scale = positive_float32(relative_scale, "relative_scale")
        fallback_scale = positive_float32(fallback_scale, "fallback_scale")
        super().__init__(model, init_loc_fn=init_loc_fn, init_scale=fallback_scale, create_plates=create_plates)

    def _setup_prototype(self, *args, **kwargs) -> None:
        super()._setup_prototype(*args, **kwargs)
        for name, site in self.prototype_trace.iter_stochastic_nodes():
            loc = attrgetter(name)(self.locs).detach()
            spread = float(loc.std()) if loc.numel() > 1 else 0.0
            if spread == 0.0:
                continue  # AutoNormal already gave it the fallback scale
            event_dim = site["fn"].event_dim + loc.dim() - site["value"].dim()
            scale = torch.full_like(loc, self.relative_scale * spread)
            deep_setattr(self.scales, name, PyroParam(scale, self.scale_constraint, event_dim))


class WholeDataPlates:
    """``create_plates`` for a Pyro autoguide of a BNN with per-example latents that gives every training example its
    own parameters (``AutoNormal``, ``AutoDelta``, :class:`~pyro_bnn.guides.BayesByBackprop`): the model's own data
    plate, and a one-line refusal of a batch that is not the whole training set.

    Such a guide holds q(z_i) for each of the N training examples, but the Trainer's batches do not say which
    examples they hold: the model's data plate takes a batch's rows as examples 0 .. B-1, and the guide's default
    plate picks B random examples, so on minibatches each q(z_i) trains on other rows' data (measured on
    ``tests/test_local_latents.py``'s toy: the correlation of AutoNormal's loc_i with the per-example optimum was 0.86
    with all 40 rows in each batch and 0.08 with batches of 20, without a warning). Train such a guide with the whole
    training set in every batch, or take a guide of the latents that opens the data plate itself (module docstring of
    :mod:`pyro_bnn.local_latents`, docs/guides.md).

    Args:
        bnn: The model (a :class:`~pyro_bnn.BNN` with per-example latents).
        guide_name: How the refusal names the guide (``"the autonormal guide"``).

    Example:
        >>> guide = AutoNormal(bnn, init_loc_fn=init_to_network(bnn), create_plates=WholeDataPlates(bnn))
    """

    def __init__(self, bnn: BNN, guide_name: str = "this guide") -> None:
        self.likelihood = bnn.likelihood
        self.latents = bnn.local_site_names
        self.guide_name = guide_name

    def __call__(self, x: torch.Tensor, *args, **kwargs) -> pyro.plate:
        rows, size = x.shape[0], self.likelihood.dataset_size
        if rows < size and self.latents:
            raise ValueError(
                f"{self.guide_name} gives each of the N={size} training examples its own q(z_i) of the per-example "
                f"latent {self.latents[0]!r}, so it takes batches of the whole training set only, in that order (it "
                f"was called on {rows} rows, which do not say which examples they are): train, validate and predict "
                f"it on all {size} training rows at once, or, to train on minibatches or predict new inputs, guide the "
                "latents with a shared or amortised guide that opens the data plate itself (docs/guides.md)"
            )
        return self.likelihood.plate(rows, x.device)


def whole_data_plates(bnn: BNN, guide_name: str = "this guide") -> WholeDataPlates | None:
    """:class:`WholeDataPlates` of ``bnn``, or None (Pyro's own plates) for a model without per-example latents,
    whose sites lie in no plate."""
    return WholeDataPlates(bnn, guide_name) if bnn.local_latents else None
