"""``load_dataset``: each data set by name, split into train / validation / test, normalised.

Splits:

* MNIST and Fashion-MNIST: the official 10 000-image test set; validation held out from the official 60 000
  training images (default 10 000).
* CIFAR-10 / CIFAR-100: the official 10 000-image test set; validation held out from the 50 000 training images
  (default 5 000).
* digits: a fixed 20 % test part (see ``images.DIGITS_TEST_SEED``); validation 20 % of the remaining 1438 by
  default.
* moons, circles: one pool of ``n_samples`` points generated with ``seed``; 20 % of it
  (``SYNTHETIC_TEST_FRACTION``) is the test part, then validation takes 20 % of the rest by default. With the
  default 1000 points that is 640 / 160 / 200; a pool too small to fill every part is refused
  (:func:`synthetic_split_sizes`).
* cubic (regression): the 400 training points of ``cubic_regression`` and its dense noiseless test grid (801
  points on [-4, 4], gap included); no validation part unless ``val_size`` asks for one.
* heteroscedastic (regression): ``n_samples`` (400) uniform training points and a noisy test grid (801 points on
  [-4, 4]) (``pyro_bnn.data.regression_sets``); no validation part by default. scikit-learn's diabetes set is
  :func:`~pyro_bnn.data.diabetes_regression`, not a name here: a run's regression figure plots one input.

The validation draw and the ``train_subset`` draw come from private generators seeded by ``seed``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch

from pyro_bnn.checks import positive_int
from pyro_bnn.data.cifar import CIFAR_CLASSES, CIFAR_IMAGE_SHAPE, load_cifar_images
from pyro_bnn.data.images import (
    FASHION_MNIST_MEAN_STD,
    MNIST_MEAN_STD,
    RawImages,
    load_digits_images,
    load_idx_images,
)
from pyro_bnn.data.normalization import Normalization, normalize_pixels
from pyro_bnn.data.partition import holdout_count, split_indices, train_val_indices
from pyro_bnn.data.regression_sets import heteroscedastic_regression
from pyro_bnn.data.seeding import STREAM_TEST_HOLDOUT, check_seed, seeded_generator
from pyro_bnn.data.sources import FASHION_MNIST_SPEC, MNIST_SPEC
from pyro_bnn.data.splits import DatasetSplits, Task, TensorSplit
from pyro_bnn.data.synthetic import cubic_regression, two_circles, two_moons

SYNTHETIC_TEST_FRACTION = 0.2
"""Share of a moons / circles pool that forms the test part."""

DEFAULT_VAL_FRACTION = 0.2
"""Default validation share of the training part for the digits, moons and circles."""

CIFAR_DEFAULT_VAL_SIZE = 5_000
"""Default validation count for CIFAR-10 / CIFAR-100: 10 % of the training images."""

CUBIC_DEFAULT_VAL_SIZE = 0
"""Default validation count for cubic: none. The paper trains on all 400 points and scores the dense test grid;
a validation part would take points from the two data intervals, which are what define the fit."""

MNIST_DEFAULT_VAL_SIZE = 10_000
"""Default validation count for MNIST and Fashion-MNIST (leaving 50 000 to train on, the common protocol)."""


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
        asked = int(size) if isinstance(size, int) else round(float(size) * rest)
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


def _load_two_d(
    dataset: DatasetName,
    *,
    val_size: float | None,
    train_subset: int | None,
    seed: int,
    generator_kwargs: dict[str, Any],
) -> DatasetSplits:
    make = two_moons if dataset is DatasetName.MOONS else two_circles
    x, y = make(seed=seed, **generator_kwargs)
    synthetic_split_sizes(len(y), val_size, dataset=dataset.value)  # an empty part, refused in one line
    pool, test = split_indices(
        len(y), round(SYNTHETIC_TEST_FRACTION * len(y)), seeded_generator(seed, STREAM_TEST_HOLDOUT)
    )
    train, val = train_val_indices(
        len(pool),
        val_size=val_size,
        default_val_size=DEFAULT_VAL_FRACTION,
        train_subset=train_subset,
        seed=seed,
    )
    train, val = pool[train], pool[val]
    return DatasetSplits(
        name=dataset.value,
        train=TensorSplit(x[train], y[train]),
        val=TensorSplit(x[val], y[val]),
        test=TensorSplit(x[test], y[test]),
        num_classes=2,
        input_shape=(2,),
        normalization=None,
    )


def _load_regression(
    dataset: DatasetName,
    *,
    val_size: float | None,
    train_subset: int | None,
    seed: int,
    generator_kwargs: dict[str, Any],
) -> DatasetSplits:
    make = {
        DatasetName.CUBIC: cubic_regression,
        DatasetName.HETEROSCEDASTIC: heteroscedastic_regression,
    }[dataset]
    data = make(seed=seed, **generator_kwargs)
    train, val = train_val_indices(
        len(data.x_train),
        val_size=val_size,
        default_val_size=CUBIC_DEFAULT_VAL_SIZE,
        train_subset=train_subset,
        seed=seed,
    )
    return DatasetSplits(
        name=dataset.value,
        train=TensorSplit(data.x_train[train], data.y_train[train]),
        val=TensorSplit(data.x_train[val], data.y_train[val]),
        test=TensorSplit(data.x_test, data.y_test),
        num_classes=None,
        input_shape=tuple(data.x_train.shape[1:]),
        normalization=None,
        task=Task.REGRESSION,
    )


def _load_images(
    dataset: DatasetName,
    raw: RawImages,
    normalization: Normalization,
    *,
    val_size: float | None,
    train_subset: int | None,
    seed: int,
) -> DatasetSplits:
    default_val = {DatasetName.DIGITS: DEFAULT_VAL_FRACTION, DatasetName.CIFAR10: CIFAR_DEFAULT_VAL_SIZE,
                   DatasetName.CIFAR100: CIFAR_DEFAULT_VAL_SIZE}.get(dataset, MNIST_DEFAULT_VAL_SIZE)  # fmt: skip
    n = len(raw.train_y)
    train, val = train_val_indices(
        n, val_size=val_size, default_val_size=default_val, train_subset=train_subset, seed=seed
    )
    mean_std = raw.mean_std
    if mean_std is None and normalization is Normalization.STANDARD:
        # Statistics of the whole training split (validation excluded, before any train_subset), so that a
        # quick run on a subset scales its inputs exactly like the full run.
        in_training_split = torch.ones(n, dtype=torch.bool)
        in_training_split[val] = False
        unit = raw.train_x[in_training_split].to(torch.float64) / raw.max_value
        mean_std = (float(unit.mean()), float(unit.std()))
    mean, std = mean_std if mean_std is not None else (None, None)

    def part(x: torch.Tensor, y: torch.Tensor) -> TensorSplit:
        return TensorSplit(normalize_pixels(x, normalization, max_value=raw.max_value, mean=mean, std=std), y)

    return DatasetSplits(
        name=dataset.value,
        train=part(raw.train_x[train], raw.train_y[train]),
        val=part(raw.train_x[val], raw.train_y[val]),
        test=part(raw.test_x, raw.test_y),
        num_classes=raw.num_classes,
        input_shape=tuple(raw.train_x.shape[1:]),
        normalization=normalization,
    )


def load_dataset(
    name: str,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    normalization: Normalization | str = Normalization.UNIT,
    val_size: float | None = None,
    train_subset: int | None = None,
    seed: int = 0,
    download: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    **synthetic_kwargs: Any,
) -> DatasetSplits:
    """Loads a data set, split into train / validation / test and normalised.

    See the module docstring for how each data set is split, and ``pyro_bnn.data.sources`` for where MNIST and
    Fashion-MNIST are looked for (``data_dir``, ``$PYRO_BNN_DATA``, Debian's package, the cache, a download).

    Args:
        name: A ``DatasetName`` value: ``"mnist"``, ``"fashion-mnist"`` (or ``"fmnist"``), ``"cifar10"``,
            ``"cifar100"``, ``"digits"``, ``"moons"``, ``"circles"``, or the regression sets ``"cubic"`` and
            ``"heteroscedastic"``; case is ignored.
        data_dir: MNIST / Fashion-MNIST: a folder of IDX files or a torchvision root; CIFAR: a torchvision root.
            When given, it is the only place looked.
        normalization: Image scaling (``Normalization`` or its value: ``"unit"``, ``"standard"``, ``"bbb"``).
            Validated for every data set but ignored by moons, circles and cubic, which are not images.
        val_size: Validation part held out from the training data: an ``int`` count, a ``float`` fraction in
            ``[0, 1)``, or ``None`` for the default (10 000 for MNIST / Fashion-MNIST, none for cubic, 20 %
            otherwise). ``0`` gives an empty validation part.
        train_subset: Keep only this many training examples (a seeded uniform subset, not class-balanced), for
            quick runs; ``None`` keeps all.
        seed: Non-negative int seeding the validation split, the subset and (moons, circles, cubic) the
            generated data.
        download: MNIST / Fashion-MNIST / CIFAR only: whether torchvision may download the data if no local
            copy exists.
        cache_dir: MNIST / Fashion-MNIST / CIFAR only: cache folder, default ``$PYRO_BNN_CACHE`` or
            ``~/.cache/pyro_bnn``.
        **synthetic_kwargs: moons: ``n_samples`` (default 1000, the whole pool), ``noise`` (0.2); circles
            also ``factor`` (0.5); cubic: ``step``, ``noise_scale`` (of the generated targets, 2.0),
            ``test_range``, ``test_step`` (see ``cubic_regression``); heteroscedastic: ``n_samples`` (400).

    Returns:
        The splits. Images: ``x`` float32 ``(N, C, H, W)`` (C = 3 for CIFAR, else 1); moons / circles: ``x``
        float32 ``(N, 2)``; ``y`` int64 ``(N,)``; ``task`` is ``Task.CLASSIFICATION``. Cubic: ``x`` and ``y``
        float32 ``(N, 1)``, ``num_classes`` None, ``output_dim`` 1 and ``task`` ``Task.REGRESSION``.

    Raises:
        ValueError: If ``name``, ``normalization``, ``val_size``, ``train_subset``, ``seed`` or a generator
            argument is invalid, or a data file is corrupt (naming the file, what was expected and what was
            found).
        TypeError: If ``synthetic_kwargs`` holds a keyword the data set does not take.
        FileNotFoundError: If MNIST / Fashion-MNIST / CIFAR cannot be found (listing every place looked and the
            fixes).
    """
    dataset = DatasetName(name)
    normalization = Normalization(normalization)
    seed = check_seed(seed)
    _check_generator_kwargs(dataset, synthetic_kwargs)
    if dataset.task is Task.REGRESSION:
        return _load_regression(
            dataset, val_size=val_size, train_subset=train_subset, seed=seed, generator_kwargs=synthetic_kwargs
        )
    if dataset in (DatasetName.MOONS, DatasetName.CIRCLES):
        return _load_two_d(
            dataset,
            val_size=val_size,
            train_subset=train_subset,
            seed=seed,
            generator_kwargs=synthetic_kwargs,
        )
    if dataset is DatasetName.DIGITS:
        raw = load_digits_images()
    elif dataset in (DatasetName.CIFAR10, DatasetName.CIFAR100):
        raw = load_cifar_images(dataset.value, data_dir=data_dir, cache_dir=cache_dir, download=download)
    else:
        spec, mean_std = (
            (MNIST_SPEC, MNIST_MEAN_STD)
            if dataset is DatasetName.MNIST
            else (FASHION_MNIST_SPEC, FASHION_MNIST_MEAN_STD)
        )
        raw = load_idx_images(spec, mean_std, data_dir=data_dir, cache_dir=cache_dir, download=download)
    return _load_images(dataset, raw, normalization, val_size=val_size, train_subset=train_subset, seed=seed)
