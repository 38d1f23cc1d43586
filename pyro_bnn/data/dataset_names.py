"""The data sets by name: :class:`DatasetName`, what a network for each must take and give (:func:`dataset_shape`),
and the train / validation / test sizes of a moons or circles pool (:func:`synthetic_split_sizes`), all known
without loading anything. ``pyro_bnn.data.datasets`` loads them (``load_dataset``).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pyro_bnn.checks import positive_int
from pyro_bnn.data.cifar import CIFAR_CLASSES, CIFAR_IMAGE_SHAPE
from pyro_bnn.data.idx_layout import FASHION_MNIST_SPEC, MNIST_SPEC
from pyro_bnn.data.partition import holdout_count
from pyro_bnn.data.splits import Task

SYNTHETIC_TEST_FRACTION = 0.2
"""Share of a moons / circles pool that forms the test part."""

DEFAULT_VAL_FRACTION = 0.2
"""Default validation share of the training part for the digits, moons and circles."""


class DatasetName(str, Enum):
    """The data sets ``load_dataset`` knows; :attr:`task` says which are regression sets."""

    MNIST = "mnist"
    """Handwritten digits, 28x28 grey, 60 000 train / 10 000 test, 10 classes."""

    FASHION_MNIST = "fashion-mnist"
    """Zalando's clothing images in MNIST's format, 10 classes; also spelled ``"fmnist"``."""

    DIGITS = "digits"
    """scikit-learn's bundled 8x8 digits (1797 images, pixel values 0..16), the offline image set."""

    MOONS = "moons"
    """Two interleaving half circles in 2-D (scikit-learn ``make_moons``), 2 classes."""

    CIRCLES = "circles"
    """Two concentric circles in 2-D (scikit-learn ``make_circles``), 2 classes."""

    CUBIC = "cubic"
    """Regression: the implicit-BNN paper's ``y = x**3 + 2 eps`` on ``[-3, -1) ∪ [1, 3)`` (``cubic_regression``)."""

    HETEROSCEDASTIC = "heteroscedastic"
    """Regression: ``y = x sin(x) + eps``, ``eps ~ N(0, (0.1 + 0.2 |x|)^2)`` on ``[-4, 4]``, a known noise function
    (``pyro_bnn.data.regression_sets``)."""

    CIFAR10 = "cifar10"
    """32x32 colour images, 50 000 train / 10 000 test, 10 classes, through torchvision (``pyro_bnn.data.cifar``)."""

    CIFAR100 = "cifar100"
    """CIFAR-10's format with 100 classes (the fine labels)."""

    @property
    def task(self) -> Task:
        """Classification or regression, known from the name alone (before any data is loaded)."""
        return Task.REGRESSION if self in _REGRESSION_SETS else Task.CLASSIFICATION

    @property
    def reads_data_dir(self) -> bool:
        """Whether ``data_dir`` means anything: MNIST, Fashion-MNIST and CIFAR are read from files; digits ships
        with scikit-learn and the others are generated."""
        return self in (DatasetName.MNIST, DatasetName.FASHION_MNIST, DatasetName.CIFAR10, DatasetName.CIFAR100)

    @classmethod
    def _missing_(cls, value: object) -> DatasetName:
        if isinstance(value, str):
            key = value.strip().lower()
            key = _ALIASES.get(key, key)
            for member in cls:
                if member.value == key:
                    return member
        known = ", ".join(repr(m.value) for m in cls)
        aliases = ", ".join(f"{alias!r} for {target!r}" for alias, target in _ALIASES.items())
        raise ValueError(f"unknown dataset name {value!r}; expected one of {known} (aliases: {aliases})")


_ALIASES = {"fmnist": DatasetName.FASHION_MNIST.value}

_REGRESSION_SETS = (DatasetName.CUBIC, DatasetName.HETEROSCEDASTIC)

_GENERATOR_KWARGS = {
    DatasetName.MOONS: ("n_samples", "noise"),
    DatasetName.CIRCLES: ("n_samples", "noise", "factor"),
    DatasetName.CUBIC: ("step", "noise_scale", "test_range", "test_step"),
    DatasetName.HETEROSCEDASTIC: ("n_samples",),
}


@dataclass(frozen=True)
class DatasetShape:
    """What a network for a data set must take and give, known from the name alone (see :func:`dataset_shape`).

    Attributes:
        input_shape: One example's shape without the batch dimension, as ``DatasetSplits.input_shape``.
        num_classes: Classes, or None for a regression set.
    """

    input_shape: tuple[int, ...]
    num_classes: int | None

    @property
    def output_dim(self) -> int:
        """Network outputs: ``num_classes`` logits, or 1 for the (one-dimensional) cubic regression."""
        return 1 if self.num_classes is None else self.num_classes


def dataset_shape(name: str | DatasetName) -> DatasetShape:
    """A data set's input shape and classes without loading it, so that a model can be checked against the data
    before anything is read (``RunConfig.validate``). Every set has a fixed shape: the IDX readers refuse files of
    another image size, and the synthetic sets are generated at these sizes.

    Raises:
        ValueError: ``name`` is not a data set.
    """
    dataset = DatasetName(name)
    if dataset in (DatasetName.MNIST, DatasetName.FASHION_MNIST):
        spec = MNIST_SPEC if dataset is DatasetName.MNIST else FASHION_MNIST_SPEC
        return DatasetShape((1, *spec.image_shape), spec.num_classes)
    return _SHAPES[dataset]


_SHAPES = {
    DatasetName.DIGITS: DatasetShape((1, 8, 8), 10),
    DatasetName.MOONS: DatasetShape((2,), 2),
    DatasetName.CIRCLES: DatasetShape((2,), 2),
    DatasetName.CUBIC: DatasetShape((1,), None),
    DatasetName.HETEROSCEDASTIC: DatasetShape((1,), None),
    DatasetName.CIFAR10: DatasetShape(CIFAR_IMAGE_SHAPE, CIFAR_CLASSES["cifar10"]),
    DatasetName.CIFAR100: DatasetShape(CIFAR_IMAGE_SHAPE, CIFAR_CLASSES["cifar100"]),
}


def _check_generator_kwargs(dataset: DatasetName, kwargs: dict[str, Any]) -> None:
    accepted = _GENERATOR_KWARGS.get(dataset, ())
    unexpected = sorted(set(kwargs) - set(accepted))
    if unexpected:
        takes = f"takes only {', '.join(accepted)}" if accepted else "takes no generator keyword arguments"
        every = "; ".join(f"{name.value}: {', '.join(keys)}" for name, keys in _GENERATOR_KWARGS.items())
        raise TypeError(
            f"load_dataset({dataset.value!r}) got unexpected keyword argument(s) {', '.join(unexpected)}: "
            f"{dataset.value!r} {takes} ({every})"
        )


def synthetic_split_sizes(
    n_samples: int, val_size: float | None = None, *, dataset: str = "moons", name: str = "n_samples"
) -> tuple[int, int, int]:
    """The train / validation / test sizes of a moons or circles pool of ``n_samples`` points as
    :func:`load_dataset` splits it (before any ``train_subset``), known without generating it.

    Args:
        n_samples: The pool's size, test part included.
        val_size: The validation part, as :func:`load_dataset` takes it (None: 20 % of what the test part leaves).
        dataset: The data set's name, for the message.
        name: What the message calls ``n_samples`` (``"data_samples"`` for a run config).

    Returns:
        ``(train, val, test)``.

    Raises:
        ValueError: ``n_samples`` is not a positive int, ``val_size`` is malformed (see ``holdout_count``), or a
            part would be empty: the training or test part, or the validation part unless ``val_size`` is 0. One
            line naming the three sizes, ``n_samples`` and the smallest pool that fills every part.
    """
    n_samples = positive_int(n_samples, name)
    holdout_count(val_size, available=2**62, default=0)  # its form only; the count is checked below
    wants_val = val_size is None or val_size != 0

    def sizes(n: int) -> tuple[int, int, int, int]:
        test = round(SYNTHETIC_TEST_FRACTION * n)
        rest = n - test
        size = DEFAULT_VAL_FRACTION if val_size is None else val_size
        # numbers.Integral as in holdout_count, so a NumPy integer is a count too (bool was refused above)
        asked = int(size) if isinstance(size, numbers.Integral) else round(float(size) * rest)
        val = min(asked, rest)
        return rest - val, val, test, asked

    def filled(train: int, val: int, test: int) -> bool:
        return train > 0 and test > 0 and (val > 0 or not wants_val)

    train, val, test, asked = sizes(n_samples)
    if filled(train, val, test):
        return train, val, test
    empty = [part for part, size in (("train", train), ("validation", val), ("test", test)) if size == 0]
    if not wants_val:
        empty.remove("validation")
    shown_val = f"{val} (of {asked} asked for)" if asked > val else str(val)
    rule = f"{DEFAULT_VAL_FRACTION * 100:g} %" if val_size is None else f"val_size={val_size!r}"
    smallest = next((n for n in range(n_samples + 1, n_samples + 10**6) if filled(*sizes(n)[:3])), None)
    fixes = [] if smallest is None else [f"{name} >= {smallest}"]
    if "validation" in empty and val_size is None:
        fixes.append("val_size=0 (no validation part)")
    if "train" in empty and val_size is not None:
        fixes.append("a smaller val_size")
    raise ValueError(
        f"{dataset} with {name}={n_samples} splits into train / validation / test sizes {train} / {shown_val} / "
        f"{test}, leaving the {' and '.join(empty)} part{'s' if len(empty) > 1 else ''} empty (the test part is "
        f"{SYNTHETIC_TEST_FRACTION * 100:g} % of the points, the validation part {rule} of the rest); pass "
        f"{' or '.join(fixes)}"
    )
