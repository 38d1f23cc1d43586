"""What ``load_dataset`` returns: ``TensorSplit`` (one part) and ``DatasetSplits`` (all parts, metadata)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pyro_bnn.data.loaders import BatchLoader
from pyro_bnn.data.normalization import Normalization


@dataclass(frozen=True, eq=False)
class TensorSplit:
    """One part of a classification data set, in memory.

    Attributes:
        x: ``(N, C, H, W)`` float32 images or ``(N, 2)`` float32 points.
        y: ``(N,)`` int64 class labels.

    Raises:
        ValueError: If ``x`` and ``y`` hold different numbers of examples.
    """

    x: torch.Tensor
    y: torch.Tensor

    def __post_init__(self) -> None:
        if len(self.x) != len(self.y):
            raise ValueError(f"x and y must hold the same number of examples, got {len(self.x)} and {len(self.y)}")

    def __len__(self) -> int:
        """Number of examples ``N``."""
        return len(self.y)


@dataclass(frozen=True, eq=False)
class DatasetSplits:
    """A classification data set split into training, held-out validation and test parts.

    Attributes:
        name: Canonical data set name (a ``DatasetName`` value, e.g. ``"fashion-mnist"``).
        train: Training part.
        val: Validation part, held out from the official training set (may be empty).
        test: Test part (the official test set where the data set has one).
        num_classes: Number of classes; labels lie in ``0 .. num_classes - 1``.
        input_shape: Shape of one input without the batch dimension: ``(1, 28, 28)``, ``(1, 8, 8)`` or
            ``(2,)``.
        normalization: The image scaling applied, or ``None`` for 2-D synthetic sets, which have none.
    """

    name: str
    train: TensorSplit
    val: TensorSplit
    test: TensorSplit
    num_classes: int
    input_shape: tuple[int, ...]
    normalization: Normalization | None

    def loaders(
        self,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        device: torch.device | str | None = None,
    ) -> tuple[BatchLoader, BatchLoader, BatchLoader]:
        """Batch loaders over the three parts.

        Args:
            batch_size: Examples per batch (positive int), the same for all three.
            shuffle: Whether the training loader shuffles (validation and test never do).
            seed: Seed of the training shuffle order (see ``BatchLoader``).
            device: Where batches are moved; ``None`` keeps them where the tensors are.

        Returns:
            ``(train, val, test)`` loaders; none drops a short last batch.

        Raises:
            ValueError: If ``batch_size`` is not a positive int or ``seed`` not a non-negative int.
        """
        train = BatchLoader(self.train.x, self.train.y, batch_size, shuffle=shuffle, seed=seed, device=device)
        val = BatchLoader(self.val.x, self.val.y, batch_size, device=device)
        test = BatchLoader(self.test.x, self.test.y, batch_size, device=device)
        return train, val, test
