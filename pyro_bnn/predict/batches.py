"""The data a prediction reads: a tensor of inputs, an ``(x, y)`` pair or a loader, as a list of batches."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

Data = torch.Tensor | tuple[torch.Tensor, torch.Tensor] | Iterable
"""Inputs ``(N, *input_shape)``, a pair of inputs and targets ``(N, ...)``, or a re-iterable loader of ``(x, y)``
(or ``x``) batches."""

Batch = tuple[torch.Tensor, torch.Tensor | None]


def _is_pair(data: object) -> bool:
    return isinstance(data, tuple) and len(data) == 2 and isinstance(data[0], torch.Tensor)


def _split(x: torch.Tensor, y: torch.Tensor | None, size: int | None) -> list[Batch]:
    if size is None:
        return [(x, y)]
    xs = x.split(size)
    return list(zip(xs, [None] * len(xs) if y is None else y.split(size), strict=True))


def _looks_like_inputs_and_targets(data: object) -> bool:
    """A list of two tensors of one length, the second with fewer dimensions than the first or integer labels
    beside floating inputs: ``[x, y]`` meant as a pair (two input batches have alike dimensions and dtypes)."""
    if not (isinstance(data, list) and len(data) == 2 and all(isinstance(t, torch.Tensor) for t in data)):
        return False
    x, y = data
    if x.dim() == 0 or y.dim() == 0 or len(x) != len(y):
        return False
    return y.dim() < x.dim() or (x.is_floating_point() and not y.is_floating_point())


def _batch(batch: object, index: int, who: str) -> Batch:
    """One loader batch as ``(x, y_or_None)``, or a one-line error naming what it is."""
    if isinstance(batch, torch.Tensor):
        return batch, None
    if isinstance(batch, (tuple, list)) and len(batch) == 2 and isinstance(batch[0], torch.Tensor):
        x, y = batch
        if y is not None and not isinstance(y, torch.Tensor):
            raise ValueError(f"{who}: batch {index} has targets of type {type(y).__name__}; expected a tensor")
        if y is not None and len(x) != len(y):
            raise ValueError(f"{who}: batch {index} has {len(x)} inputs but {len(y)} targets")
        return x, y
    kind = f"a {type(batch).__name__} of {len(batch)}" if isinstance(batch, (tuple, list)) else type(batch).__name__
    raise ValueError(f"{who}: batch {index} is {kind}; expected inputs x or an (x, y) pair of tensors")


def data_batches(data: Data, batch_size: int | None, who: str, *, split_loader: bool = False) -> list[Batch]:
    """The ``(x, y_or_None)`` batches of ``data``: a tensor or an ``(x, y)`` pair cut into batches of ``batch_size``
    (None: one batch), or one pass over a loader, kept (every chunk of draws must see the examples in the same
    order, and a shuffling loader would reorder them on each pass), its batches cut too where ``split_loader``.

    Batches of no rows are left out. Raises a one-line ValueError (starting with ``who``) for no data (a tensor or
    pair of no rows, a loader of no batches or only empty ones), an iterator (it cannot be read twice), a pair of
    unequal lengths or whose targets are no tensor, a batch that is neither inputs nor a pair, and a list ``[x, y]``
    of two tensors of one length that reads as inputs and targets (the second with fewer dimensions, or integer
    labels beside floating inputs), which a loader would read as two input batches. A list of two tensors alike in
    dimensions and dtype cannot be told from two input batches and is read as those; batches of a loader may differ
    in shape (inputs of varying length).
    """
    if isinstance(data, torch.Tensor):
        return _nonempty(_split(data, None, batch_size), who)
    if _is_pair(data):
        x, y = data
        if not isinstance(y, torch.Tensor):
            raise ValueError(f"{who}: the targets y are a {type(y).__name__}; expected a tensor of {len(x)} targets")
        if len(x) != len(y):
            raise ValueError(f"{who}: x has {len(x)} examples but y has {len(y)}")
        return _nonempty(_split(x, y, batch_size), who)
    if isinstance(data, Iterator):
        raise ValueError(f"{who} needs data it can iterate more than once (a tensor, an (x, y) pair or a loader)")
    if not isinstance(data, Iterable):
        raise ValueError(f"{who}: data of type {type(data).__name__}; expected a tensor, an (x, y) pair or a loader")
    if _looks_like_inputs_and_targets(data):
        x, y = data
        raise ValueError(
            f"{who}: data is a list of two tensors of shapes {tuple(x.shape)} and {tuple(y.shape)}, read as two input "
            "batches; pass inputs and targets as a tuple (x, y)"
        )
    batches = _nonempty([_batch(batch, i, who) for i, batch in enumerate(data)], who)
    return split_batches(batches, batch_size) if split_loader else batches


def _nonempty(batches: list[Batch], who: str) -> list[Batch]:
    """``batches`` without those of no rows, or a one-line error when none is left.

    A batch of no rows holds nothing to predict, yet the first batch sizes the chunks of draws and checks the
    network (a division by its row count, a reshape of 0 elements): leaving them out changes no prediction."""
    batches = [(x, y) for x, y in batches if x.shape[:1] != (0,)]
    if not batches:
        raise ValueError(f"{who} got no data (an empty tensor or loader)")
    return batches


def split_batches(batches: list[Batch], size: int | None) -> list[Batch]:
    """``batches`` with each cut into batches of at most ``size`` examples (None: left whole)."""
    return [part for x, y in batches for part in _split(x, y, size)]


__all__ = ["Batch", "Data", "data_batches", "split_batches"]
