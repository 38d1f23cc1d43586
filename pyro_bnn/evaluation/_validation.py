"""Input checks shared by every metric, so that a bad input fails the same way whichever metric sees it first.

Every failure is a ``ValueError`` whose message names the value that was found (a shape, the offending entry
and its index, a row sum) next to what was expected.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ROW_SUM_TOLERANCE = 1e-3
"""How far a row of class probabilities may sum away from 1.

Rounding a row's probabilities to float32 moves its sum by at most 2^-24 ~ 6e-8 (each rounding error is
relative to its entry, and the entries sum to 1); adding up C entries costs at most about C * 6e-8 more. So a
float32 softmax over 1000 classes misses 1 by ~1e-4 at worst, and averaging over posterior samples adds
error of the same order. 1e-3 stays clear of that round-off, yet every mistake worth catching misses it by far
more: logits or unnormalised scores passed as probabilities, a dropped class, samples summed instead of
averaged. float16 probabilities (rounding 2^-11 ~ 5e-4) pass as well; bfloat16 ones (2^-8 ~ 4e-3) can fail
honestly, so compute their softmax in float32.
"""

_HALF_DTYPES = (torch.float16, torch.bfloat16)


@dataclass(frozen=True, eq=False)
class CheckedPredictive:
    """A validated predictive in the one layout every metric computes on.

    Attributes:
        samples: ``(num_samples, N, C)`` class probabilities; an ``(N, C)`` input becomes ``num_samples = 1``,
            so that the mixture NLL reduces to ``-log p(y)`` and the epistemic entropy to exactly 0 with no
            special case.
        mean: ``(N, C)`` posterior-mean probabilities ``samples.mean(0)``.
        labels: ``(N,)`` int64 labels on ``samples``' device, or ``None`` where the metric takes no labels.
    """

    samples: torch.Tensor
    mean: torch.Tensor
    labels: torch.Tensor | None


def _index_of_first(mask: torch.Tensor) -> tuple[int, ...]:
    """Index of the first ``True`` entry of ``mask`` (any rank), for error messages."""
    return tuple(int(i) for i in mask.nonzero()[0].tolist())


def _shape(tensor: torch.Tensor) -> tuple[int, ...]:
    return tuple(tensor.shape)


def check_probs(probs: torch.Tensor, *, ranks: tuple[int, ...] = (2, 3)) -> torch.Tensor:
    """Validates a tensor of class probabilities and returns it in the dtype the metrics compute in.

    Args:
        probs: ``(num_samples, N, C)`` posterior samples of class probabilities or their mean ``(N, C)``.
        ranks: the ranks the caller accepts.

    Returns:
        ``probs`` itself, or a float32 copy for half-precision input, so that sums and logs keep float32
        precision (and a clamped log(0) is -87 nats rather than float16's -9.7).

    Raises:
        ValueError: ``probs`` is not a floating tensor of an accepted rank with no empty dimension, or has a
            non-finite or negative entry, or a row that does not sum to 1 within ``ROW_SUM_TOLERANCE``.
    """
    if not isinstance(probs, torch.Tensor):
        raise ValueError(f"probs must be a torch.Tensor; got {type(probs).__name__}")
    if not probs.dtype.is_floating_point:
        raise ValueError(f"probs must be a floating-point tensor of probabilities; got dtype {probs.dtype}")
    if probs.dim() not in ranks:
        layouts = {2: "(N, C)", 3: "(num_samples, N, C)"}
        expected = " or ".join(f"rank {rank} {layouts[rank]}" for rank in ranks)
        raise ValueError(f"probs must have {expected}; got shape {_shape(probs)} (rank {probs.dim()})")
    if probs.numel() == 0:
        raise ValueError(f"probs must have at least one sample, data point and class; got shape {_shape(probs)}")
    input_dtype = probs.dtype
    if input_dtype in _HALF_DTYPES:
        probs = probs.float()

    not_finite = ~torch.isfinite(probs)
    if bool(not_finite.any()):
        index = _index_of_first(not_finite)
        raise ValueError(f"probs must be finite; found {probs[index].item()} at index {index}")
    negative = probs < 0
    if bool(negative.any()):
        index = _index_of_first(negative)
        raise ValueError(
            f"probs must be non-negative; found {probs[index].item():.6g} at index {index} "
            "(pass probabilities, not logits)"
        )
    deviation = (probs.sum(dim=-1) - 1.0).abs()
    worst = int(deviation.argmax())
    if deviation.flatten()[worst].item() > ROW_SUM_TOLERANCE:
        row = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), deviation.shape))
        row_sum = probs[row].sum().item()
        hint = (
            f"{input_dtype} rounding; compute the softmax in float32"
            if input_dtype in _HALF_DTYPES
            else "pass probabilities, not logits"
        )
        raise ValueError(
            f"probs must sum to 1 over the last (class) dimension within {ROW_SUM_TOLERANCE:g}; "
            f"found row sum {row_sum:.6g} at row {row} ({hint})"
        )
    return probs


def _check_integer_tensor(value: object, *, name: str, rank: int, layout: str) -> torch.Tensor:
    """Checks that ``value`` is an integer (not bool) tensor of the given rank; returns it."""
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor; got {type(value).__name__}")
    dtype = value.dtype
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor of class indices; got dtype {dtype}")
    if value.dim() != rank:
        raise ValueError(f"{name} must have rank {rank} {layout}; got shape {_shape(value)} (rank {value.dim()})")
    return value


def _check_class_range(indices: torch.Tensor, *, name: str, num_classes: int) -> None:
    """Checks that every entry of ``indices`` lies in ``[0, num_classes)``."""
    out_of_range = (indices < 0) | (indices >= num_classes)
    if bool(out_of_range.any()):
        index = _index_of_first(out_of_range)
        where = index[0] if len(index) == 1 else index
        raise ValueError(
            f"{name} must lie in [0, {num_classes}) for C={num_classes} classes; "
            f"found {indices[index].item()} at index {where}"
        )


def check_labels(labels: torch.Tensor, *, num_points: int, num_classes: int, device: torch.device) -> torch.Tensor:
    """Validates class labels against the probabilities they score.

    Args:
        labels: ``(N,)`` integer class labels.
        num_points: N of the probabilities.
        num_classes: C of the probabilities.
        device: the probabilities' device; labels are moved there.

    Returns:
        ``(N,)`` int64 labels on ``device``.

    Raises:
        ValueError: ``labels`` is not an integer tensor of shape ``(num_points,)`` with values in
            ``[0, num_classes)``.
    """
    labels = _check_integer_tensor(labels, name="labels", rank=1, layout="(N,)")
    if labels.shape[0] != num_points:
        raise ValueError(f"labels has N={labels.shape[0]} entries but probs has N={num_points} data points")
    labels = labels.to(device=device, dtype=torch.int64)
    _check_class_range(labels, name="labels", num_classes=num_classes)
    return labels


def check_sampled_labels(sampled_labels: torch.Tensor, *, num_classes: int) -> torch.Tensor:
    """Validates labels drawn once per posterior sample.

    Args:
        sampled_labels: ``(num_samples, N)`` integer class labels.
        num_classes: number of classes C.

    Returns:
        ``(num_samples, N)`` int64 labels.

    Raises:
        ValueError: ``sampled_labels`` is not a non-empty rank-2 integer tensor with values in
            ``[0, num_classes)``.
    """
    sampled_labels = _check_integer_tensor(sampled_labels, name="sampled_labels", rank=2, layout="(num_samples, N)")
    if sampled_labels.numel() == 0:
        raise ValueError(f"sampled_labels must not be empty; got shape {_shape(sampled_labels)}")
    sampled_labels = sampled_labels.to(torch.int64)
    _check_class_range(sampled_labels, name="sampled_labels", num_classes=num_classes)
    return sampled_labels


def check_predictive(probs: torch.Tensor, labels: torch.Tensor | None = None) -> CheckedPredictive:
    """Validates probabilities (and labels, where given) and lays them out as ``CheckedPredictive``.

    Args:
        probs: ``(num_samples, N, C)`` or ``(N, C)`` class probabilities.
        labels: ``(N,)`` integer labels, or ``None``.

    Returns:
        The validated predictive.

    Raises:
        ValueError: see ``check_probs`` and ``check_labels``.
    """
    probs = check_probs(probs)
    samples = probs if probs.dim() == 3 else probs.unsqueeze(0)
    if labels is not None:
        labels = check_labels(labels, num_points=samples.shape[1], num_classes=samples.shape[2], device=samples.device)
    return CheckedPredictive(samples=samples, mean=samples.mean(dim=0), labels=labels)
