"""Per-epoch validation of R runs at once: S posterior draws per run (weights, or MC dropout's masks), every run's
network on its own validation set in one vectorised pass, then each run's metrics as
:class:`~pyro_bnn.infer.Validation` computes them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from pyro_bnn.batched.dropout import dropout_masks
from pyro_bnn.batched.stack import RunStack
from pyro_bnn.batched.step import RunNoise
from pyro_bnn.evaluation import summarize_runs
from pyro_bnn.predict import Prediction

MAX_ACTIVATIONS = 1 << 24
"""About how many values (runs x draws x rows x widest layer) one chunk of the validation pass may hold: 64 MiB of
float32 activations, so a 3FC validation set of 10 000 images goes through in slices instead of 3 GB at once."""


def gather(loader: Iterable) -> tuple[torch.Tensor, torch.Tensor]:
    """A validation loader's batches as two tensors ``(N, *input_shape)`` and ``(N, ...)``."""
    xs, ys = zip(*((x, y) for x, y in loader), strict=True)
    return torch.cat(xs), torch.cat(ys)


def _widest(stack: RunStack) -> int:
    """The most outputs of one layer: the first dimension of its widest weight, random or deterministic."""
    shapes = [site.shape for site in stack.sites] + [v.shape[1:] for v in stack.deterministic.values()]
    return max([shape[0] for shape in shapes if len(shape)] + [1])


@torch.no_grad()
def validation_outputs(
    stack: RunStack, runs: Sequence[int], x: torch.Tensor, num_samples: int, noise: RunNoise
) -> torch.Tensor:
    """Network outputs of ``num_samples`` posterior draws of each run in ``runs`` on its inputs.

    Args:
        stack: The runs' stacked values.
        runs: Which runs (indices into the stack), R' of them.
        x: ``(R', N, *input_shape)``: run ``runs[i]``'s inputs at ``x[i]``.
        num_samples: S draws per run, from each run's own generator in ``noise``.

    Returns:
        ``(R', S, N, out)``.
    """
    # MC dropout draws a mask per draw, example and layer; other networks predict with dropout off.
    layers = stack.dropout_layers(x.shape[2:]) if stack.mc_dropout else ()
    if layers and len(runs) > 1:
        # One run at a time: its masks are drawn chunk by chunk, and chunks sized for one run do not depend on
        # which other runs validate with it.
        return torch.cat([validation_outputs(stack, [r], x[i : i + 1], num_samples, noise) for i, r in enumerate(runs)])
    index = torch.tensor(list(runs), device=stack.loc.device)
    loc = stack.loc[index]
    draws = num_samples
    if stack.point and not layers:  # every draw of a point estimate is its value: one pass, repeated below
        draws = 1
        weights = loc
    elif stack.point:
        weights = loc.repeat_interleave(draws, 0)
    else:
        scale, _ = stack.scale_map.scale_and_log(stack.raw_scale[index])
        eps = torch.stack(
            [
                torch.randn(
                    (num_samples, stack.num_latents), generator=noise.generators[r], dtype=loc.dtype, device=loc.device
                )
                for r in runs
            ]
        )
        if stack.components is not None:  # draw i from component i mod K, as the mixture guide's draw()
            component = torch.arange(num_samples, device=loc.device) % stack.components
            loc, scale = loc[:, component], scale[:, component]  # (R', S, D)
        else:
            loc, scale = loc[:, None], scale[:, None]
        weights = (loc + scale * eps).reshape(len(runs) * num_samples, -1)
    values = stack.split(weights)
    det = {k: v[index].repeat_interleave(draws, 0) for k, v in stack.per_run_values().items()}
    size = sum(layer.size for layer in layers)  # mask values per example (MC dropout), counted as activations
    rows = max(1, MAX_ACTIVATIONS // (len(runs) * draws * max(_widest(stack), size)))
    pieces = []
    for start in range(0, x.shape[1], rows):
        chunk = x[:, start : start + rows]
        n = chunk.shape[1]
        chunk = chunk[:, None].expand(-1, draws, *chunk.shape[1:]).reshape(-1, *chunk.shape[1:])
        per_run = det
        if layers:  # (R' S, n, M) draws, run r's from its own generator
            eps = torch.stack(
                [
                    torch.randn((draws, n, size), generator=noise.generators[r], dtype=loc.dtype, device=loc.device)
                    for r in runs
                ]
            )
            per_run = {**det, **dropout_masks(eps.reshape(len(runs) * draws, n, size), layers)}
        out = stack.outputs(chunk, values, per_run)
        pieces.append(out.reshape(len(runs), draws, *out.shape[1:]))
    outputs = torch.cat(pieces, dim=2)
    return outputs.expand(-1, num_samples, *outputs.shape[2:]) if draws != num_samples else outputs


def validation_metrics(
    stack: RunStack,
    runs: Sequence[int],
    data: Sequence[tuple[torch.Tensor, torch.Tensor]],
    num_samples: int,
    n_bins: int,
    noise: RunNoise,
) -> list[dict[str, float] | None]:
    """Each run's posterior predictive metrics on its validation data (``Prediction.metrics``), or None for a run
    whose predictions are NaN or infinite.

    Args:
        runs: Which runs of the stack.
        data: Per run in ``runs``, its validation ``(x (N, ...), y)`` (the same N for every run).
    """
    x = torch.stack([d[0] for d in data])
    outputs = validation_outputs(stack, runs, x, num_samples, noise)
    likelihood = stack.models[0].likelihood
    finite = torch.isfinite(outputs.reshape(len(runs), -1)).all(1).tolist()
    fields = likelihood.prediction_fields(outputs.flatten(0, 1))
    if "probs" in fields and all(finite):  # every classifier at once
        probs = fields["probs"].reshape(outputs.shape[:2] + fields["probs"].shape[1:])
        return summarize_runs(probs, torch.stack([y for _, y in data]), n_bins)
    results: list[dict[str, float] | None] = []
    for i, (_, y) in enumerate(data):
        fields = likelihood.prediction_fields(outputs[i])
        prediction = Prediction(**fields, targets=y)
        values = prediction.probs if prediction.is_classification else prediction.means
        results.append(prediction.metrics(n_bins=n_bins) if bool(torch.isfinite(values).all()) else None)
    return results
