"""The minibatch scaling of a composed model's data plate, on the guide's side as on the model's.

A minibatch of B of the N training rows estimates the data set's ELBO when every term of the data plate, the
model's ``log p(y_i, z_i | ...)`` and the guide's ``log q(z_i)`` of each per-example latent alike, is multiplied by
N/B. Pyro weighs each site's log density by that site's own scale, in the model and in the guide separately, so
:class:`~pyro_bnn.compose.ComposedModel` scaling its data plate leaves the guide's per-example sites at 1 unless the
guide is scaled too: the ELBO then holds ``(N/B) log p(z_i)`` against ``1 log q(z_i)``, and its optimum shrinks
``q(z_i)`` (for ``z ~ N(0, 1)``, ``y ~ N(f(x) + z, 0.5^2)`` on batches of 10 of 40 rows, a q(z) sd of 0.22 against
the exact 0.447).

:class:`DataPlateScale` multiplies every sample site inside the data plate by N / (the plate's full size) and
records the site's resulting scale in its ``infer`` dict under :data:`DATA_SCALE_TAG` (Pyro's ``replay`` hands a
guide site's ``infer`` to the model's site, where :class:`~pyro_bnn.compose.ComposedModel` compares the two scales).
A plate declared at its full size with a ``subsample`` is scaled by Pyro itself, full size / subsample, and gets
N / full size (1 where the full size is N) here. A site already tagged, by a handler inside this one, is left as it
is, so a guide wrapped twice is scaled once.

:class:`ScaledGuide` runs any guide under it; :func:`refuse_per_row_guides` refuses an autoguide with parameters per
row of a data plate that is not the whole data set.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from pyro.infer.autoguide import AutoCallable, AutoGuide, AutoGuideList
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample
from torch import nn

from pyro_bnn.checks import positive_int

DATA_SCALE_TAG = "pyro_bnn_data_scale"
"""Key of a data-plate site's ``infer`` dict holding its scale after :class:`DataPlateScale` (a number or tensor)."""


def data_plate_factor(msg: dict, data_plate: str, dataset_size: int) -> float | None:
    """N / (full size) of the plate named ``data_plate`` around a sample site; None outside it."""
    frames = [frame for frame in msg["cond_indep_stack"] if frame.name == data_plate]
    if not frames:
        return None
    return dataset_size / (frames[0].full_size or frames[0].size)


def same_scale(first: float | torch.Tensor, second: float | torch.Tensor) -> bool:
    """Whether two site scales (numbers or tensors) are equal up to float rounding."""
    first, second = torch.as_tensor(first, dtype=torch.float64), torch.as_tensor(second, dtype=torch.float64)
    return bool(torch.allclose(first, second, rtol=1e-6, atol=0.0))


class DataPlateScale(Messenger):
    """Scales every sample site inside the plate ``data_plate`` by N / (the plate's full size) and tags it with its
    resulting scale (see the module docstring).

    Args:
        data_plate: Name of the plate over the minibatch rows.
        dataset_size: N.
    """

    def __init__(self, data_plate: str, dataset_size: int) -> None:
        super().__init__()
        self.data_plate = str(data_plate)
        self.dataset_size = positive_int(dataset_size, "dataset_size")

    def _process_message(self, msg: dict) -> None:
        infer = msg.get("infer") or {}
        if msg["type"] != "sample" or DATA_SCALE_TAG in infer or site_is_subsample(msg):
            return
        factor = data_plate_factor(msg, self.data_plate, self.dataset_size)
        if factor is None:
            return
        msg["scale"] = msg["scale"] * factor
        msg["infer"] = {**infer, DATA_SCALE_TAG: msg["scale"]}


def _per_row_autoguides(guide: Callable):
    """The autoguides inside ``guide`` whose parameters are laid out on the sites of their prototype trace (Pyro's
    ``AutoNormal``, ``AutoDelta``, ``AutoMultivariateNormal``, ...), once set up; not a list of guides or a wrapped
    callable, whose parts are checked on their own."""
    modules = guide.modules() if isinstance(guide, nn.Module) else ()
    for module in modules:
        if isinstance(module, AutoGuide) and not isinstance(module, (AutoGuideList, AutoCallable)):
            if module.prototype_trace is not None:
                yield module


def refuse_per_row_guides(guide: Callable, data_plate: str, dataset_size: int) -> None:
    """Refuses, in one line, an autoguide inside ``guide`` that guides a site of the data plate with parameters for
    a plate of other than N rows.

    Such a guide (``AutoNormal`` of a per-example latent) has one parameter per row of the plate it first saw; the
    trainer's loader yields rows without their indices, so on minibatches of B < N rows the same B parameters would
    stand for rows 0, B, 2B, ... alike. A plate declared at its full size N with a ``subsample`` passes.
    """
    for module in _per_row_autoguides(guide):
        for name, node in module.prototype_trace.iter_stochastic_nodes():
            if site_is_subsample(node):
                continue
            frames = [frame for frame in node["cond_indep_stack"] if frame.name == data_plate]
            rows = (frames[0].full_size or frames[0].size) if frames else dataset_size
            if rows != dataset_size:
                raise ValueError(
                    f"the guide's site {name!r} ({type(module).__name__}) has parameters for each of the {rows} rows "
                    f"of the data plate {data_plate!r} it was set up on, but the data set has N={dataset_size} rows "
                    f"and a loader yields no row indices: train it on the whole data set in every batch "
                    f"(batch_size={dataset_size}), or guide per-example latents on minibatches with an amortised "
                    "guide, a function of (x, y) (model_guide(..., rest=lambda model: encoder))"
                )


def run_scaled(guide: Callable, data_plate: str, dataset_size: int, *args, refuse_in: Callable | None = None, **kwargs):
    """Runs ``guide(*args, **kwargs)`` under :class:`DataPlateScale`, then :func:`refuse_per_row_guides` (of
    ``refuse_in``, by default the guide itself)."""
    with DataPlateScale(data_plate, dataset_size):
        result = guide(*args, **kwargs)
    refuse_per_row_guides(guide if refuse_in is None else refuse_in, data_plate, dataset_size)
    return result


class ScaledGuide(nn.Module):
    """A guide whose sites inside the data plate are scaled by N / (plate size), as a
    :class:`~pyro_bnn.compose.ComposedModel` scales its model's: the guide to train with it on minibatches
    (:meth:`ComposedModel.scaled_guide` builds it; :func:`~pyro_bnn.compose.model_guide` of a composed model scales
    its guide itself).

    Args:
        guide: The guide, a module or a function called with the model's arguments ``(x, y)``. A module's parameters
            are this module's (the trainer optimises them); a function's own ``pyro.param`` s stay in Pyro's
            parameter store (plain ``SVI`` trains them, the trainer does not).
        dataset_size: N.
        data_plate: Name of the plate over the minibatch rows.

    Attributes:
        guide: The guide it wraps.

    It returns what ``guide`` returns, and refuses an autoguide inside it with parameters per row of a data plate
    of other than N rows (:func:`refuse_per_row_guides`).
    """

    def __init__(self, guide: Callable, *, dataset_size: int, data_plate: str = "data") -> None:
        super().__init__()
        if not callable(guide):
            raise ValueError(f"guide must be a callable guide(x, y=None) or a guide module, got {guide!r}")
        self.guide = guide
        self.dataset_size = positive_int(dataset_size, "dataset_size")
        self.data_plate = str(data_plate)

    def forward(self, *args, **kwargs):
        """Runs the guide with its data-plate sites scaled; returns what it returns."""
        return run_scaled(self.guide, self.data_plate, self.dataset_size, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"dataset_size={self.dataset_size}, data_plate={self.data_plate!r}"


__all__ = ["DATA_SCALE_TAG", "DataPlateScale", "ScaledGuide", "refuse_per_row_guides"]
