"""Data layer: classification data sets and the regression sets (cubic, heteroscedastic) with train / validation /
test splits (``DatasetSplits.task`` tells them apart), scikit-learn's diabetes set (``diabetes_regression``), fast
batch loaders and input corruptions for shift experiments.

Typical use::

    from pyro_bnn.data import load_dataset

    splits = load_dataset("fashion-mnist", normalization="standard", train_subset=5000, seed=1)
    train_loader, val_loader, test_loader = splits.loaders(batch_size=128, device="cuda")

MNIST and Fashion-MNIST are read from ``data_dir`` / ``$PYRO_BNN_DATA``, Debian's ``dataset-fashion-mnist``,
the cache (``$PYRO_BNN_CACHE`` or ``~/.cache/pyro_bnn``) or torchvision's download; see
``pyro_bnn.data.sources``. A named folder holding anything but the published data set is loaded with a
``DataContentWarning`` and never becomes what a load naming no folder returns (``pyro_bnn.data.cache``).
"""

from pyro_bnn.data.corruptions import gaussian_blend, parse_corruption, salt_and_pepper
from pyro_bnn.data.datasets import DatasetName, DatasetShape, dataset_shape, load_dataset
from pyro_bnn.data.loaders import BatchLoader
from pyro_bnn.data.normalization import Normalization
from pyro_bnn.data.regression_sets import (
    diabetes_regression,
    heteroscedastic_mean,
    heteroscedastic_noise_sd,
    heteroscedastic_regression,
)
from pyro_bnn.data.sources import DataContentWarning
from pyro_bnn.data.splits import DatasetSplits, Task, TensorSplit
from pyro_bnn.data.synthetic import RegressionData, cubic_regression

__all__ = [
    "BatchLoader",
    "DataContentWarning",
    "DatasetName",
    "DatasetShape",
    "DatasetSplits",
    "Normalization",
    "RegressionData",
    "Task",
    "TensorSplit",
    "cubic_regression",
    "dataset_shape",
    "diabetes_regression",
    "gaussian_blend",
    "heteroscedastic_mean",
    "heteroscedastic_noise_sd",
    "heteroscedastic_regression",
    "load_dataset",
    "parse_corruption",
    "salt_and_pepper",
]
