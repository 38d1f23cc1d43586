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
from typing import Any

import torch

from pyro_bnn.data.cifar import load_cifar_images
from pyro_bnn.data.dataset_names import (
    DEFAULT_VAL_FRACTION,
    SYNTHETIC_TEST_FRACTION,
    DatasetName,
    DatasetShape,
    _check_generator_kwargs,
    dataset_shape,
    synthetic_split_sizes,
)
from pyro_bnn.data.images import (
    FASHION_MNIST_MEAN_STD,
    MNIST_MEAN_STD,
    RawImages,
    load_digits_images,
    load_idx_images,
)
from pyro_bnn.data.normalization import Normalization, normalize_pixels
from pyro_bnn.data.partition import split_indices, train_val_indices
from pyro_bnn.data.regression_sets import heteroscedastic_regression
from pyro_bnn.data.seeding import STREAM_TEST_HOLDOUT, check_seed, seeded_generator
from pyro_bnn.data.sources import FASHION_MNIST_SPEC, MNIST_SPEC
from pyro_bnn.data.splits import DatasetSplits, Task, TensorSplit
from pyro_bnn.data.synthetic import cubic_regression, two_circles, two_moons

__all__ = [
    "CIFAR_DEFAULT_VAL_SIZE",
    "CUBIC_DEFAULT_VAL_SIZE",
    "DEFAULT_VAL_FRACTION",
    "MNIST_DEFAULT_VAL_SIZE",
    "SYNTHETIC_TEST_FRACTION",
    "DatasetName",
    "DatasetShape",
    "dataset_shape",
    "load_dataset",
    "synthetic_split_sizes",
]

CIFAR_DEFAULT_VAL_SIZE = 5_000
"""Default validation count for CIFAR-10 / CIFAR-100: 10 % of the training images."""

CUBIC_DEFAULT_VAL_SIZE = 0
"""Default validation count for cubic: none. The paper trains on all 400 points and scores the dense test grid;
a validation part would take points from the two data intervals, which are what define the fit."""

MNIST_DEFAULT_VAL_SIZE = 10_000
"""Default validation count for MNIST and Fashion-MNIST (leaving 50 000 to train on, the common protocol)."""


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
        normalization: Image scaling (``Normalization`` or its value: ``"unit"``, ``"standard"``, ``"bbb"``,
            ``"mnist-standard"``).
            Validated for every data set but ignored by moons, circles, cubic and heteroscedastic, which are not
            images.
        val_size: Validation part held out from the training data: an ``int`` count, a ``float`` fraction in
            ``[0, 1)``, or ``None`` for the default (10 000 for MNIST / Fashion-MNIST, none for cubic and
            heteroscedastic, 20 % otherwise). ``0`` gives an empty validation part.
        train_subset: Keep only this many training examples (a seeded uniform subset, not class-balanced), for
            quick runs; ``None`` keeps all.
        seed: Non-negative int seeding the validation split, the subset and (moons, circles, cubic,
            heteroscedastic) the generated data.
        download: MNIST / Fashion-MNIST / CIFAR only: whether torchvision may download the data if no local
            copy exists.
        cache_dir: MNIST / Fashion-MNIST / CIFAR only: cache folder, default ``$PYRO_BNN_CACHE`` or
            ``~/.cache/pyro_bnn``.
        **synthetic_kwargs: moons: ``n_samples`` (default 1000, the whole pool), ``noise`` (0.2); circles
            also ``factor`` (0.5); cubic: ``step``, ``noise_scale`` (of the generated targets, 2.0),
            ``test_range``, ``test_step`` (see ``cubic_regression``); heteroscedastic: ``n_samples`` (400).

    Returns:
        The splits. Images: ``x`` float32 ``(N, C, H, W)`` (C = 3 for CIFAR, else 1); moons / circles: ``x``
        float32 ``(N, 2)``; ``y`` int64 ``(N,)``; ``task`` is ``Task.CLASSIFICATION``. Cubic and heteroscedastic: ``x``
        and ``y`` float32 ``(N, 1)``, ``num_classes`` None, ``output_dim`` 1 and ``task`` ``Task.REGRESSION``.

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
