"""``BatchLoader``: mini-batches sliced from in-memory tensors, the shuffle order fixed by (seed, epoch).

``DataLoader(TensorDataset(x, y))`` fetches one example at a time and stacks them, which costs far more than
the forward pass of a small BNN on MNIST. Indexing the whole tensor once per batch does the same job in one
copy.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterator

import torch
from torch.utils.data import TensorDataset

from pyro_bnn.checks import positive_int
from pyro_bnn.data.seeding import STREAM_SHUFFLE, check_seed, seeded_generator

DEVICE_COPY_MAX_BYTES = 1 << 30
"""A loader whose tensors live on the CPU and whose batches go to another device (a GPU) moves the whole data set
there once, on its first epoch, if it takes at most this many bytes; larger ones go batch by batch. A copy from
pageable host memory waits for the work queued before it, so one per batch and run stalls every training step."""

_device_copies: dict[int, dict[torch.device, torch.Tensor]] = {}
"""``{id(host tensor): {device: its copy there}}``, so that the loaders of a batch of runs (one per run, the same
data) share one copy, which lives as long as the host tensor (a finaliser drops it; keyed by id, since a tensor's
``==`` compares values)."""


def _on_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    key = id(tensor)
    if key not in _device_copies:
        _device_copies[key] = {}
        weakref.finalize(tensor, _device_copies.pop, key, None)
    copies = _device_copies[key]
    if device not in copies:
        copies[device] = tensor.to(device)
    return copies[device]


class BatchLoader:
    """Iterates over ``(x_batch, y_batch)`` mini-batches of two aligned tensors.

    The shuffle order of an epoch depends only on ``(seed, epoch)``, drawn from a private ``torch.Generator``,
    never from the global RNG: a run resumed at epoch ``e`` (``set_epoch(e)``) sees the same batches as the
    original run, whatever else consumed random numbers meanwhile. Each ``iter(loader)`` uses the current
    epoch and then advances it by one, so a training loop that never calls ``set_epoch`` still gets a fresh
    order every epoch (epochs 0, 1, 2, ... from a new loader).

    Args:
        x: ``(N, ...)`` inputs, any dtype and device.
        y: ``(N, ...)`` targets aligned with ``x``.
        batch_size: Examples per batch (positive int); the last batch may be smaller unless ``drop_last``.
        shuffle: Whether to visit the examples in a fresh random order each epoch.
        seed: Non-negative integer seeding the shuffle orders.
        drop_last: Whether to skip a final batch smaller than ``batch_size``.
        device: Where to move each batch; ``None`` keeps the tensors' own device. Host tensors bound for another
            device of at most :data:`DEVICE_COPY_MAX_BYTES` are copied there whole, once (shared by the loaders of
            the same tensors), and the batches are gathered there (each a tensor of its own); modify ``x`` or ``y``
            in place afterwards and that copy is stale.

    Attributes:
        dataset: ``TensorDataset(x, y)``, so ``len(loader.dataset)`` is ``N`` as for a ``DataLoader``.
        batch_size: Examples per batch.
        shuffle: Whether batches are shuffled.
        seed: The shuffle seed.
        drop_last: Whether a short final batch is skipped.
        device: Target device of the batches, or ``None``.

    Raises:
        ValueError: If ``x`` and ``y`` differ in length, ``batch_size`` is not a positive int, or ``seed`` is
            not a non-negative int.

    Yields:
        ``(x_batch, y_batch)`` of shapes ``(B, ...)`` with ``B <= batch_size``, same dtypes as ``x`` and
        ``y``, on ``device``. Unshuffled batches that stay on the tensors' own device are views into ``x`` and
        ``y``: copy before modifying them in place.
    """

    def __init__(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        batch_size: int,
        *,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        if len(x) != len(y):
            raise ValueError(f"x and y must hold the same number of examples, got {len(x)} and {len(y)}")
        self.batch_size = positive_int(batch_size, "batch_size")
        self.dataset = TensorDataset(x, y)
        self.shuffle = bool(shuffle)
        self.seed = check_seed(seed)
        self.drop_last = bool(drop_last)
        self.device = None if device is None else torch.device(device)
        self._epoch = 0

    @property
    def epoch(self) -> int:
        """The epoch whose order the next ``iter()`` uses."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Pins the epoch used by the next iteration (then advanced by one per iteration as usual).

        Args:
            epoch: Non-negative int.

        Raises:
            ValueError: If ``epoch`` is not a non-negative int.
        """
        self._epoch = check_seed(epoch, name="epoch")

    def __len__(self) -> int:
        """Number of batches per epoch."""
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def epoch_order(self, epoch: int) -> torch.Tensor | None:
        """The permutation that epoch ``epoch`` visits, or ``None`` when not shuffling.

        Args:
            epoch: Non-negative int.

        Returns:
            ``(N,)`` int64 permutation of ``range(N)`` on the CPU, or ``None``.
        """
        if not self.shuffle:
            return None
        generator = seeded_generator(self.seed, STREAM_SHUFFLE, check_seed(epoch, name="epoch"))
        # On the CPU whatever torch's default device is (laplace-torch's calls run under the model's device).
        return torch.randperm(len(self.dataset), generator=generator, device="cpu")

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        # The order is fixed and the epoch advanced here, at iter() time, not lazily at the first next().
        order = self.epoch_order(self._epoch)
        self._epoch += 1
        return self._batches(order)

    def _tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` and ``y``, or their copies on :attr:`device` (see :data:`DEVICE_COPY_MAX_BYTES`)."""
        x, y = self.dataset.tensors
        device = self.device
        if device is None or device.type == "cpu" or x.device.type != "cpu" or y.device.type != "cpu":
            return x, y
        if x.numel() * x.element_size() + y.numel() * y.element_size() > DEVICE_COPY_MAX_BYTES:
            return x, y
        return _on_device(x, device), _on_device(y, device)

    def _batches(self, order: torch.Tensor | None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        x, y = self._tensors()
        shared = x is not self.dataset.tensors[0]  # the device copy that other loaders may read too
        if order is not None:
            order = order.to(x.device)
        for batch in range(len(self)):
            start = batch * self.batch_size
            stop = start + self.batch_size
            if order is None:
                x_batch, y_batch = x[start:stop], y[start:stop]
                if shared:  # a batch of its own, as a copy to the device would be, not a view of the shared copy
                    x_batch, y_batch = x_batch.clone(), y_batch.clone()
            else:
                index = order[start:stop]
                x_batch, y_batch = x.index_select(0, index), y.index_select(0, index.to(y.device))
            if self.device is not None:
                x_batch, y_batch = x_batch.to(self.device), y_batch.to(self.device)
            yield x_batch, y_batch

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(N={len(self.dataset)}, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, seed={self.seed}, drop_last={self.drop_last}, device={self.device})"
        )
