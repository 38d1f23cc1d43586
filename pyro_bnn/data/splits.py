"""What ``load_dataset`` returns: ``TensorSplit`` (one part) and ``DatasetSplits`` (all parts, metadata), and the
``Task`` that tells classification data from regression data."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch

from pyro_bnn.checks import positive_int
from pyro_bnn.data.loaders import BatchLoader
from pyro_bnn.data.normalization import Normalization


class Task(str, Enum):
    """What a data set's targets are; code that must treat the two differently asks ``DatasetSplits.task``."""

    CLASSIFICATION = "classification"
    """``y`` holds int64 class labels ``(N,)`` in ``0 .. num_classes - 1``; the net outputs one logit per class."""

    REGRESSION = "regression"
    """``y`` holds float32 targets ``(N, D)``; the net outputs ``D`` means of a Gaussian likelihood."""


@dataclass(frozen=True, eq=False)
class TensorSplit:
    """One part of a data set, in memory.

    Attributes:
        x: ``(N, C, H, W)`` float32 images, ``(N, 2)`` float32 points or ``(N, 1)`` float32 regression inputs.
        y: ``(N,)`` int64 class labels (classification) or ``(N, D)`` float32 targets (regression).

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
    """A data set split into training, held-out validation and test parts.

    Classification and regression sets share this type; ``task`` says which one it is and ``output_dim`` how
    many outputs a network for it needs, so callers never guess from dtypes.

    Attributes:
        name: Canonical data set name (a ``DatasetName`` value, e.g. ``"fashion-mnist"``).
        train: Training part.
        val: Validation part, held out from the official training set (may be empty).
        test: Test part (the official test set where the data set has one; for cubic the dense grid).
        num_classes: Number of classes, labels lying in ``0 .. num_classes - 1``; ``None`` for regression.
        input_shape: Shape of one input without the batch dimension: ``(1, 28, 28)``, ``(1, 8, 8)``, ``(2,)``
            or ``(1,)``.
        normalization: The image scaling applied, or ``None`` for the synthetic sets, which have none.
        task: ``Task.CLASSIFICATION`` (the default) or ``Task.REGRESSION``.

    Raises:
        ValueError: If ``num_classes`` does not fit ``task`` (a positive int for classification, ``None`` for
            regression) or regression targets are not 2-D.
    """

    name: str
    train: TensorSplit
    val: TensorSplit
    test: TensorSplit
    num_classes: int | None
    input_shape: tuple[int, ...]
    normalization: Normalization | None
    task: Task = Task.CLASSIFICATION

    def __post_init__(self) -> None:
        object.__setattr__(self, "task", Task(self.task))
        if self.task is Task.REGRESSION:
            if self.num_classes is not None:
                raise ValueError(
                    f"a regression data set has no classes: num_classes must be None, got {self.num_classes!r}"
                )
            parts = (self.train, self.val, self.test)
            if any(part.y.dim() != 2 for part in parts) or len({part.y.shape[1] for part in parts}) != 1:
                shapes = [tuple(part.y.shape) for part in parts]
                raise ValueError(f"regression targets must be (N, D) with one D in every part, got {shapes}")
        else:
            positive_int(self.num_classes, "num_classes of a classification data set")

    @property
    def output_dim(self) -> int:
        """Network outputs the data set needs: ``num_classes`` logits, or the ``D`` of regression targets."""
        if self.task is Task.REGRESSION:
            return int(self.train.y.shape[1])
        return self.num_classes

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
