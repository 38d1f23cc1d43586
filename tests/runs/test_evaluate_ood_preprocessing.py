"""``--ood NAME`` with another image data set: the OOD images reach the network through the run's own preprocessing.

The oracle is the run's own loader: for every image set, normalisation and OOD set that :func:`check_ood` accepts,
:func:`_as_run_inputs` applied to the run's own test images on the [0, 1] scale gives what ``load_dataset`` gives
under the run's normalisation. MNIST and Fashion-MNIST are tiny IDX stand-ins, CIFAR a stand-in for torchvision's
dataset class; digits ships with scikit-learn."""

import numpy as np
import pytest
import torch

from pyro_bnn.data import DataContentWarning, DatasetName, Normalization, Task, cifar, dataset_shape, load_dataset
from pyro_bnn.runs import RunConfig
from pyro_bnn.runs.ood_scoring import _as_run_inputs, check_ood, parse_ood

pytestmark = pytest.mark.filterwarnings(f"ignore::{DataContentWarning.__module__}.{DataContentWarning.__name__}")

IMAGE_SETS = [d for d in DatasetName if d.task is Task.CLASSIFICATION and len(dataset_shape(d).input_shape) == 3]
CLASSIFICATION_SETS = [d for d in DatasetName if d.task is Task.CLASSIFICATION]


class _FakeCifar:
    """torchvision's CIFAR10 / CIFAR100 interface: ``data (N, 32, 32, 3)`` uint8 and ``targets`` ints."""

    def __init__(self, root: str, train: bool, download: bool) -> None:
        rng = np.random.default_rng(0 if train else 1)
        self.data = rng.integers(0, 256, size=(40 if train else 20, 32, 32, 3), dtype=np.uint8)
        self.targets = [i % 10 for i in range(len(self.data))]


@pytest.fixture
def data_dirs(tmp_path, make_tiny, monkeypatch):
    """A folder per image set: IDX stand-ins for MNIST and Fashion-MNIST, any folder for the CIFAR stand-in."""
    monkeypatch.setattr(cifar, "_dataset_class", lambda name: _FakeCifar)
    return {
        DatasetName.MNIST: make_tiny(n_train=20, n_test=10, seed=0).write(tmp_path / "mnist"),
        DatasetName.FASHION_MNIST: make_tiny(n_train=20, n_test=10, seed=1).write(tmp_path / "fashion-mnist"),
        DatasetName.CIFAR10: tmp_path,
        DatasetName.CIFAR100: tmp_path,
        DatasetName.DIGITS: None,
    }


def _test_images(dataset: DatasetName, normalization: str, data_dir) -> torch.Tensor:
    return load_dataset(dataset.value, data_dir=data_dir, normalization=normalization, val_size=0, seed=0).test.x


@pytest.mark.parametrize("normalization", [n.value for n in Normalization])
@pytest.mark.parametrize("run_set", IMAGE_SETS, ids=[d.value for d in IMAGE_SETS])
def test_what_check_ood_accepts_is_preprocessed_as_the_runs_own_images(data_dirs, run_set, normalization):
    config = RunConfig(dataset=run_set.value, model="mlp:16", normalization=normalization)
    accepted = []
    for ood_set in CLASSIFICATION_SETS:
        try:
            check_ood(parse_ood(ood_set.value), config)
        except ValueError:
            continue
        accepted.append(ood_set)
    if run_set is DatasetName.DIGITS:  # no other set has 8x8 images
        assert accepted == []
        return
    assert len(accepted) == 1  # the other set of the same shape (MNIST <-> Fashion-MNIST, CIFAR-10 <-> CIFAR-100)
    unit = _test_images(run_set, "unit", data_dirs[run_set])
    expected = _test_images(run_set, normalization, data_dirs[run_set])
    torch.testing.assert_close(_as_run_inputs(unit, config), expected)


def test_a_cifar10_run_standardises_cifar100_with_cifar10s_channel_statistics():
    config = RunConfig(dataset="cifar10", model="conv", normalization="standard")
    check_ood(parse_ood("cifar100"), config)
    unit = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
    std = torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1)
    torch.testing.assert_close(_as_run_inputs(unit, config), (unit - mean) / std)
