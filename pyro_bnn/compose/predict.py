"""Posterior predictive draws of a user's model with random functions inside, as plain ``(S, ...)`` tensors.

The draws are made here rather than by ``pyro.infer.Predictive``: with ``parallel=True``, Pyro 1.9's ``Predictive``
reshapes each guide draw to ``(S, 1, ..., *value_shape)`` with one 1 per plate *less the value's own dimensions*, so
a weight matrix (two event dimensions) in a model with one plate lands with its sample dimension out of line with the
plates. Here the guide itself runs under the sample plate, and the model is replayed on its trace, so every draw
keeps the layout the guide gave it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyro
import torch
from pyro import poutine
from pyro.poutine.util import site_is_subsample

from pyro_bnn.checks import positive_int
from pyro_bnn.compose.random_function import PREDICTIVE_PLATE


def _sample_sites(trace) -> dict[str, torch.Tensor]:
    return {
        name: node["value"]
        for name, node in trace.nodes.items()
        if node["type"] == "sample" and not site_is_subsample(node)
    }


def _plate_nesting(trace) -> int:
    dims = [
        -frame.dim for node in trace.nodes.values() if node["type"] == "sample" for frame in node["cond_indep_stack"]
    ]
    return max(dims, default=0)


@torch.no_grad()
def predict_model(
    model: Callable,
    guide: Callable,
    *args,
    num_samples: int,
    return_sites: Sequence[str] | None = None,
    parallel: bool = True,
    **kwargs,
) -> dict[str, torch.Tensor]:
    """Draws ``num_samples`` sets of latents from ``guide`` and runs ``model`` on each (what Pyro's ``Predictive``
    does, see the module docstring for why not through it).

    Args:
        model: The user's model; called as ``model(*args, **kwargs)`` (leave its observations out, ``y=None``, to
            draw new ones; observed values come back repeated S times).
        guide: Its trained guide (e.g. :func:`~pyro_bnn.compose.model_guide`'s).
        *args: The model's arguments.
        num_samples: S.
        return_sites: The sites to return; default every sample site of the model: the network weights
            (``"f.0.weight"``), the outputs of each recording random function (``"f"``), the user's latents and
            observations.
        parallel: Draw all S at once under a sample plate left of the model's plates (and never nearer than
            ``dim=-2``, the slot a random function's rows need); the model must broadcast, as one written with plates
            does. False runs guide and model S times.
        **kwargs: The model's keyword arguments.

    Returns:
        ``{site: (S, *shape)}`` where ``shape`` is the site's value in one run of the model (the sample plate's
        singleton slots are removed): a random function's outputs ``(S, B, *out)``, a global scalar ``(S,)``, a
        data site ``(S, B)``.
    """
    num_samples = positive_int(num_samples, "num_samples")
    guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
    model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args, **kwargs)
    shapes = {name: value.shape for name, value in _sample_sites(model_trace).items()}
    names = list(shapes) if return_sites is None else list(return_sites)
    unknown = [name for name in names if name not in shapes]
    if unknown:
        raise ValueError(f"the model has no sample site(s) {unknown[:3]}; its sites: {list(shapes)[:8]}")

    if not parallel:
        draws = []
        for _ in range(num_samples):
            guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
            values = _sample_sites(poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args, **kwargs))
            draws.append({name: values[name] for name in names})
        return {name: torch.stack([draw[name] for draw in draws]) for name in names}

    plate = pyro.plate(PREDICTIVE_PLATE, num_samples, dim=-max(_plate_nesting(model_trace), 1) - 1)
    with plate:
        guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
    with plate:
        values = _sample_sites(poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args, **kwargs))
    result = {}
    for name in names:
        value, shape = values[name], torch.Size((num_samples, *shapes[name]))
        # an observed value has no sample dimension: the same for every draw
        result[name] = value.reshape(shape) if value.numel() == shape.numel() else value.expand(shape)
    return result
