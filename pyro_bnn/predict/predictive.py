"""Posterior predictive sampling, vectorised over posterior samples and chunked to bound memory."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping

import torch

from pyro_bnn.bnn import BNN
from pyro_bnn.checks import optional_positive_int, positive_int
from pyro_bnn.nn.modes import network_mode
from pyro_bnn.predict.batches import Data, data_batches
from pyro_bnn.predict.prediction import Prediction
from pyro_bnn.predict.sources import ParameterSource, PointEstimate, as_source

Source = ParameterSource | Callable | Mapping[str, torch.Tensor]

# Memory for one vectorised call (weight samples plus activations) when the chunk size is chosen automatically.
DEFAULT_CHUNK_BYTES = 256 * 2**20
# On a GPU each vectorised call costs launch overhead more than arithmetic, so larger chunks pay: 3FC, S = 100,
# N = 10 000, batches of 1000 on an H100 took 0.20 s in chunks of 10 (this budget's choice: 256 MiB) and 0.15 s in
# chunks of 25, against 0.18 s for S plain forward passes. Peak use stays well under the budget (96 MiB at 256 MiB).
DEFAULT_CHUNK_BYTES_CUDA = 512 * 2**20


def model_device(module: torch.nn.Module) -> torch.device:
    """The device of a module's first parameter or buffer (CPU for a module with neither)."""
    tensors = itertools.chain(module.parameters(), module.buffers())
    return next((t.device for t in tensors), torch.device("cpu"))


def _activation_bytes(bnn: BNN, x: torch.Tensor) -> int:
    """Bytes of all leaf-module outputs in one forward pass of the examples ``x`` (a conservative activation
    size)."""
    total = 0

    def count(module, inputs, output):
        nonlocal total
        if isinstance(output, torch.Tensor):
            total += output.numel() * output.element_size()

    leaves = [m for m in bnn.net.modules() if next(m.children(), None) is None]
    handles = [m.register_forward_hook(count) for m in leaves]
    try:
        bnn.apply_parameters(x, bnn.initial_values())
    finally:
        for handle in handles:
            handle.remove()
    return total


def _auto_chunk(bnn: BNN, num_samples: int, batches, max_bytes: int) -> int:
    """Weight sets per vectorised call so that weights plus activations of one batch stay under ``max_bytes``.

    A draw of the weights holds about three weight-sized tensors at once (the noise, the scaled noise, the
    weights), hence the factor 3."""
    weight_bytes = 3 * bnn.num_random_parameters() * 4
    batch_size = max(len(x) for x, _ in batches)
    # Two examples, halved: batch norm without running statistics normalises by the batch, and cannot on one.
    x_two = batches[0][0][:2].to(model_device(bnn))
    per_sample = weight_bytes + batch_size * _activation_bytes(bnn, x_two) // len(x_two)
    return max(1, min(num_samples, max_bytes // max(per_sample, 1)))


def _varies(bnn: BNN, source: ParameterSource) -> bool:
    """Whether S samples can differ at all: random sites, per-example latents or dropout left on."""
    return bool(bnn.sites or bnn.local_latents or source.mc_dropout) and not (
        isinstance(source, PointEstimate) and not source.mc_dropout
    )


@torch.no_grad()
def predict(
    bnn: BNN,
    source: Source,
    data: Data,
    *,
    num_samples: int | None = None,
    chunk_size: int | None = None,
    batch_size: int = 1000,
    max_chunk_bytes: int | None = None,
    point: bool = False,
) -> Prediction:
    """Posterior predictive for every input in ``data``.

    The same ``num_samples`` weight sets score every input (so per-sample quantities such as ensemble members'
    accuracies are consistent). Weights are drawn ``chunk_size`` sets at a time and the network runs on a whole
    chunk at once with ``torch.vmap``; memory is bounded by the chunk, not by S. Per-example latent sites, if the
    model has any, are drawn for every batch.

    Args:
        bnn: The model.
        source: Where the latent values come from (:mod:`pyro_bnn.predict.sources`): a trained guide (one with
            ``mc_dropout = True`` keeps dropout on), a dict of weight samples ``{site: (S, *param_shape)}`` (MCMC,
            an ensemble, a file), a point estimate ``{site: param_shape}``, or a ``ParameterSource``. A dict's
            floating values are cast to the network's dtype (float64 MCMC draws for a float32 network).
        data: Inputs ``(N, *input_shape)``, a pair ``(x, y)``, or a re-iterable loader of ``(x, y)`` batches.
        num_samples: S, posterior samples to draw (default: 100 from a guide, rounded up to a multiple of K for a
            mixture of K components such as :class:`~pyro_bnn.guides.NodeNoiseMixture`, whose sample i comes from
            component ``i mod K``; all of a dict of samples; 1 for a point estimate).
        chunk_size: Weight sets per vectorised call; by default as many as fit in ``max_chunk_bytes`` together with
            one batch's activations (measured with one example).
        batch_size: Batch size used when ``data`` is a tensor or a pair.
        max_chunk_bytes: Memory budget of one vectorised call when ``chunk_size`` is None; default
            :data:`DEFAULT_CHUNK_BYTES` (256 MiB), on CUDA :data:`DEFAULT_CHUNK_BYTES_CUDA` (512 MiB).
        point: Also run the source's point network (:meth:`~pyro_bnn.predict.ParameterSource.point`: a guide's
            posterior median, a point estimate's values) once, after the samples, and keep its prediction in
            :attr:`Prediction.point` (None for a source without one, such as a dict of samples). It costs one more
            forward pass over the data and no random numbers, so the samples are the same either way.

    Returns:
        A :class:`Prediction` with what the likelihood makes of the outputs (``probs (S, N, C)`` or ``means
        (S, N, D)``) and, when targets were given, ``log_likelihood (S, N)``.
    """
    source = as_source(bnn, source)
    if num_samples is None:
        num_samples = source.default_num_samples()
    num_samples = positive_int(num_samples, "num_samples")
    source.check_num_samples(num_samples)
    chunk_size = optional_positive_int(chunk_size, "chunk_size")
    max_chunk_bytes = optional_positive_int(max_chunk_bytes, "max_chunk_bytes")
    batches = data_batches(data, positive_int(batch_size, "batch_size"), "predict")
    device = model_device(bnn)
    x_first = batches[0][0].to(device)
    targets = _targets(batches, device)
    # Inputs of the wrong shape, labels >= C or targets of the wrong shape: one line, before any draw.
    if targets is None:
        bnn.validate_batch(x_first)
    else:
        bnn.validate_targets(x_first, targets)
    prediction = _sample(bnn, source, batches, targets, num_samples, chunk_size, max_chunk_bytes)
    if point:
        prediction.point = _point_prediction(bnn, source, batches, targets)
    return prediction


def _sample(
    bnn: BNN,
    source: ParameterSource,
    batches,
    targets: torch.Tensor | None,
    num_samples: int,
    chunk_size: int | None,
    max_chunk_bytes: int | None,
) -> Prediction:
    """The prediction of ``num_samples`` draws from ``source`` on every batch (see :func:`predict`)."""
    device = model_device(bnn)
    x_first = batches[0][0].to(device)
    # Dropout on for MC dropout, batch norm on its running statistics: no pass of a prediction trains the network.
    with network_mode(bnn, dropout=source.mc_dropout):
        source.prepare(bnn, x_first)
        if not _varies(bnn, source):
            # Every sample would be the same network: run it once and repeat the result (a view, no copy).
            params = source.draw_globals(bnn, 0, 1, x_first)
            results = _Results(bnn, 1, batches, targets)
            results.add(bnn, source, params, 0, 1, batches, device)
            return results.prediction(expand_to=num_samples)
        if max_chunk_bytes is None:
            max_chunk_bytes = DEFAULT_CHUNK_BYTES_CUDA if device.type == "cuda" else DEFAULT_CHUNK_BYTES
        chunk = chunk_size or _auto_chunk(bnn, num_samples, batches, max_chunk_bytes)
        results = _Results(bnn, num_samples, batches, targets)
        for start in range(0, num_samples, chunk):
            size = min(chunk, num_samples - start)
            params = source.draw_globals(bnn, start, size, x_first)
            results.add(bnn, source, params, start, size, batches, device)
    return results.prediction()


def _point_prediction(bnn: BNN, source: ParameterSource, batches, targets: torch.Tensor | None) -> Prediction | None:
    """The one-sample prediction of the source's point network, or None when the source has none.

    The point network runs as a :class:`PointEstimate` without MC dropout: dropout off, per-example latents at their
    point value."""
    values = source.point(bnn, batches[0][0].to(model_device(bnn)))
    if values is None:
        return None
    return _sample(bnn, PointEstimate(values), batches, targets, 1, None, None)


def _targets(batches, device) -> torch.Tensor | None:
    """All targets ``(N, ...)`` on ``device``, or None when the data has none."""
    if any(y is None for _, y in batches):
        return None
    return torch.cat([y.to(device) for _, y in batches])


class _Results:
    """The prediction's tensors, allocated once at their final size ``(S, N, ...)`` and filled block by block.

    Each block (one chunk of draws times one batch of inputs) is turned into the likelihood's prediction fields and
    log-likelihoods right away, so no ``(S, N, out)`` tensor of raw outputs is ever held beside the result."""

    def __init__(self, bnn: BNN, num_samples: int, batches, targets: torch.Tensor | None) -> None:
        self.likelihood = bnn.likelihood
        self.num_samples = num_samples
        self.num_inputs = sum(len(x) for x, _ in batches)
        self.targets = targets
        self.fields: dict[str, torch.Tensor] = {}
        self.log_likelihood: torch.Tensor | None = None

    def add(self, bnn: BNN, source: ParameterSource, params, start: int, size: int, batches, device) -> None:
        """Scores every batch under the chunk of ``size`` draws ``params`` (samples ``start .. start + size``)."""
        row = 0
        for x, _ in batches:
            x = x.to(device)
            local_values = source.draw_locals(bnn, params, size, x)
            output = bnn.apply_parameters(x, params, local_values, sample_shape=(size,))  # (size, B, out)
            block = (slice(start, start + size), slice(row, row + len(x)))
            for name, value in self.likelihood.prediction_fields(output).items():
                self._write(name, value, block, size, len(x))
            if self.targets is not None:
                log_lik = self.likelihood.log_likelihood(output, self.targets[row : row + len(x)])
                if self.log_likelihood is None:
                    self.log_likelihood = log_lik.new_empty(self.num_samples, self.num_inputs)
                self.log_likelihood[block] = log_lik
            row += len(x)

    def _write(self, name: str, value: torch.Tensor, block, size: int, rows: int) -> None:
        if value.dim() < 2 or value.shape[:2] != (size, rows):
            self.fields[name] = value  # not per sample and input (a Gaussian's noise scale)
            return
        if name not in self.fields:
            self.fields[name] = value.new_empty(self.num_samples, self.num_inputs, *value.shape[2:])
        self.fields[name][block] = value

    def prediction(self, expand_to: int | None = None) -> Prediction:
        fields, log_likelihood = dict(self.fields), self.log_likelihood
        if expand_to is not None:
            fields = {
                name: v.expand(expand_to, *v.shape[1:]) if v.dim() >= 2 and v.shape[0] == 1 else v
                for name, v in fields.items()
            }
            if log_likelihood is not None:
                log_likelihood = log_likelihood.expand(expand_to, -1)
        return Prediction(**fields, targets=self.targets, log_likelihood=log_likelihood)


@torch.no_grad()
def predict_posterior_mean(bnn: BNN, guide: Source, data: Data, *, batch_size: int = 1000) -> Prediction:
    """Prediction of the single point network of a parameter source: the guide's posterior median weights (the
    mean for Normal guides), or a point estimate's values.

    The same network as :attr:`Prediction.point` of ``predict(..., point=True)``, without drawing any samples.
    Per-example latents sit at their point value (the prior mean) and dropout is off.

    Args:
        bnn: The model.
        guide: A trained guide with a ``median()``, a point estimate ``{site: param_shape}`` or a
            :class:`~pyro_bnn.predict.ParameterSource` with a point network.
        data: Inputs ``(N, *input_shape)``, a pair ``(x, y)``, or a re-iterable loader of ``(x, y)`` batches.
        batch_size: Batch size used when ``data`` is a tensor or a pair.

    Returns:
        A :class:`Prediction` with one sample: ``probs (1, N, C)`` or ``means (1, N, D)``.

    Raises:
        ValueError: when the source has no point network (a dict of samples, a guide without ``median()``).
    """
    source = as_source(bnn, guide)
    batches = data_batches(data, positive_int(batch_size, "batch_size"), "predict_posterior_mean")
    bnn.validate_batch(batches[0][0].to(model_device(bnn)))
    prediction = _point_prediction(bnn, source, batches, _targets(batches, model_device(bnn)))
    if prediction is None:
        raise ValueError(
            f"the {type(source).__name__} source has no point network (a guide with median() or a point estimate)"
        )
    return prediction
