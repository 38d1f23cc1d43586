"""Posterior predictive sampling, vectorised over posterior samples and chunked to bound memory."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import pyro
import torch
from pyro import poutine
from pyro.infer.autoguide import AutoGuide

from pyro_bnn.bnn import BNN
from pyro_bnn.likelihoods import Categorical, Gaussian
from pyro_bnn.predict.prediction import Prediction

Data = torch.Tensor | tuple[torch.Tensor, torch.Tensor] | Iterable

# Memory for one vectorised call (weight samples plus activations) when the chunk size is chosen automatically.
DEFAULT_CHUNK_BYTES = 256 * 2**20


def _batches(data: Data, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """The ``(x, y_or_None)`` batches of a tensor, an ``(x, y)`` pair or one pass over a loader."""
    if isinstance(data, torch.Tensor):
        return [(x, None) for x in data.split(batch_size)]
    if isinstance(data, tuple) and len(data) == 2 and all(isinstance(t, torch.Tensor) for t in data):
        x, y = data
        if len(x) != len(y):
            raise ValueError(f"x has {len(x)} examples but y has {len(y)}")
        return list(zip(x.split(batch_size), y.split(batch_size), strict=True))
    if isinstance(data, Iterator):
        raise ValueError("predict needs data it can iterate more than once (a tensor, an (x, y) pair or a loader)")
    # One pass over the loader, kept: every chunk of weight samples must see the examples in the same order, and a
    # shuffling loader would reorder them on each pass.
    return [tuple(batch) if isinstance(batch, (tuple, list)) else (batch, None) for batch in data]


@contextmanager
def _network_mode(bnn: BNN, train: bool):
    was_training = bnn.training
    bnn.train(train)
    try:
        yield
    finally:
        bnn.train(was_training)


def _ensure_guide_ready(guide: AutoGuide, x: torch.Tensor) -> None:
    if getattr(guide, "prototype_trace", True) is None:
        with poutine.block():
            guide(x)


def draw_parameters(bnn: BNN, guide: AutoGuide, num_samples: int, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Draws ``num_samples`` weight sets from the guide in one vectorised call.

    Returns:
        ``{site name: (num_samples, 1, *param_shape)}``, the layout :meth:`BNN.apply_parameters` takes.
    """
    with poutine.block(), poutine.trace() as tracer, pyro.plate("_posterior_samples", num_samples, dim=-2):
        guide(x)
    nodes = tracer.trace.nodes
    missing = [name for name in bnn.site_names if name not in nodes]
    if missing:
        raise ValueError(f"the guide does not sample the model's weight sites {missing[:5]}")
    return {name: nodes[name]["value"] for name in bnn.site_names}


def model_device(module: torch.nn.Module) -> torch.device:
    """The device of a module's first parameter or buffer (CPU for a module with neither)."""
    tensors = itertools.chain(module.parameters(), module.buffers())
    return next((t.device for t in tensors), torch.device("cpu"))


def _activation_bytes(bnn: BNN, x_one: torch.Tensor) -> int:
    """Bytes of all leaf-module outputs in one forward pass of one example (a conservative activation size)."""
    total = 0

    def count(module, inputs, output):
        nonlocal total
        if isinstance(output, torch.Tensor):
            total += output.numel() * output.element_size()

    leaves = [m for m in bnn.net.modules() if next(m.children(), None) is None]
    handles = [m.register_forward_hook(count) for m in leaves]
    try:
        bnn.apply_parameters(x_one, bnn.initial_values())
    finally:
        for handle in handles:
            handle.remove()
    return total


def _auto_chunk(bnn: BNN, num_samples: int, batches, max_bytes: int) -> int:
    """Weight sets per vectorised call so that weights plus activations of one batch stay under ``max_bytes``."""
    weight_bytes = bnn.num_random_parameters() * 4
    batch_size = max(len(x) for x, _ in batches)
    x_one = batches[0][0][:1].to(model_device(bnn))
    per_sample = weight_bytes + batch_size * _activation_bytes(bnn, x_one)
    return max(1, min(num_samples, max_bytes // max(per_sample, 1)))


def _outputs(bnn: BNN, params: dict[str, torch.Tensor], batches, device, num_samples: int):
    outputs, targets = [], []
    for x, y in batches:
        x = x.to(device)
        out = bnn.apply_parameters(x, params)
        if out.dim() == 2:  # no sample dimension: one weight set (or a deterministic network)
            out = out.unsqueeze(0).expand(num_samples, *out.shape)
        outputs.append(out)
        if y is not None:
            targets.append(y.to(device))
    return torch.cat(outputs, dim=1), (torch.cat(targets) if targets else None)


def _to_prediction(bnn: BNN, output: torch.Tensor, targets: torch.Tensor | None) -> Prediction:
    if isinstance(bnn.likelihood, Categorical):
        return Prediction(probs=bnn.likelihood.predictive(output), targets=targets)
    if isinstance(bnn.likelihood, Gaussian):
        return Prediction(means=output, noise_scale=bnn.likelihood.scale.detach(), targets=targets)
    raise ValueError(f"predict does not know the likelihood {type(bnn.likelihood).__name__}")


@torch.no_grad()
def predict(
    bnn: BNN,
    guide: AutoGuide,
    data: Data,
    *,
    num_samples: int = 100,
    chunk_size: int | None = None,
    batch_size: int = 1000,
    max_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> Prediction:
    """Posterior predictive for every input in ``data``.

    The same ``num_samples`` weight sets score every input (so per-sample quantities such as ensemble members'
    accuracies are consistent). Weights are drawn ``chunk_size`` sets at a time and the network runs on a whole
    chunk at once with ``torch.vmap``; memory is bounded by the chunk, not by S.

    Args:
        bnn: The model.
        guide: A trained guide for it. A guide with ``mc_dropout = True`` keeps dropout on while predicting.
        data: Inputs ``(N, *input_shape)``, a pair ``(x, y)``, or a re-iterable loader of ``(x, y)`` batches.
        num_samples: S, posterior samples to draw.
        chunk_size: Weight sets per vectorised call; by default as many as fit in ``max_chunk_bytes`` together with
            one batch's activations (measured with one example).
        batch_size: Batch size used when ``data`` is a tensor or a pair.
        max_chunk_bytes: Memory budget of one vectorised call when ``chunk_size`` is None.

    Returns:
        A :class:`Prediction` with ``probs (S, N, C)`` (classification) or ``means (S, N, D)`` (regression).
    """
    if not (isinstance(num_samples, int) and num_samples >= 1):
        raise ValueError(f"num_samples must be an int >= 1, got {num_samples!r}")
    batches = _batches(data, batch_size)
    if not batches:
        raise ValueError("predict got no data (an empty tensor or loader)")
    device = model_device(bnn)
    x_first = batches[0][0].to(device)
    mc_dropout = bool(getattr(guide, "mc_dropout", False))
    chunk = chunk_size or _auto_chunk(bnn, num_samples, batches, max_chunk_bytes)
    with _network_mode(bnn, train=mc_dropout):
        if not bnn.sites:
            output, targets = _outputs(bnn, {}, batches, device, num_samples if mc_dropout else 1)
            if not mc_dropout:
                output = output.expand(num_samples, *output.shape[1:])
            return _to_prediction(bnn, output, targets)
        _ensure_guide_ready(guide, x_first)
        chunks, targets = [], None
        for start in range(0, num_samples, chunk):
            size = min(chunk, num_samples - start)
            params = draw_parameters(bnn, guide, size, x_first)
            output, targets = _outputs(bnn, params, batches, device, size)
            chunks.append(output)
    return _to_prediction(bnn, torch.cat(chunks), targets)


@torch.no_grad()
def predict_posterior_mean(bnn: BNN, guide: AutoGuide, data: Data, *, batch_size: int = 1000) -> Prediction:
    """Prediction of the single network at the guide's posterior median weights (the mean for Normal guides).

    Returns:
        A :class:`Prediction` with one sample: ``probs (1, N, C)`` or ``means (1, N, D)``.
    """
    batches = _batches(data, batch_size)
    device = model_device(bnn)
    with _network_mode(bnn, train=False):
        params = {}
        if bnn.sites:
            _ensure_guide_ready(guide, batches[0][0].to(device))
            median = guide.median()
            params = {name: median[name] for name in bnn.site_names}
        output, targets = _outputs(bnn, params, batches, device, 1)
    return _to_prediction(bnn, output, targets)
