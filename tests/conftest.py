"""Shared fixtures: a fresh Pyro state per test, a ``device`` fixture, tiny IDX files written on the fly, the
``conjugate`` Bayesian linear regression (a closed-form posterior, for SG-MCMC, SWAG, tempering and composition
tests), a callback that interrupts training after a given epoch, and isolation from the machine's own data.

No test may read the real data sets, the user's cache or the network, so an autouse fixture unsets
``PYRO_BNN_DATA``, points the default cache and the Debian Fashion-MNIST path into ``tmp_path`` and makes
torchvision's download raise.
"""

from __future__ import annotations

import gzip
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyro
import pytest
import torch
import torchvision.datasets
from torch import nn

import pyro_bnn  # noqa: F401  (applies pyro_bnn's Pyro settings)
from pyro_bnn import BNN
from pyro_bnn.data import sources
from pyro_bnn.infer import Callback
from pyro_bnn.likelihoods import Gaussian
from pyro_bnn.priors import NormalPrior

IMAGES_MAGIC = 2051
LABELS_MAGIC = 2049


def idx_bytes(array: np.ndarray, magic: int) -> bytes:
    """An IDX file's bytes: big-endian magic number, one 4-byte size per dimension, then the uint8 data."""
    header = magic.to_bytes(4, "big") + b"".join(size.to_bytes(4, "big") for size in array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def write_file(path: Path, content: bytes, *, compress: bool) -> Path:
    """Writes ``content`` to ``path``, or gzip-compressed to ``path + '.gz'``; returns the path written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if compress:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(content))
    else:
        path.write_bytes(content)
    return path


@dataclass
class TinyMnist:
    """A fake MNIST: ``n_train`` + ``n_test`` 28x28 uint8 images with known pixels and labels.

    Pixel ``[0, 0]`` of every image holds its index (training images 0.., test images 100..), so a test can
    tell which example ended up where after a split.
    """

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray

    def contents(self) -> dict[str, bytes]:
        """The four IDX files' (uncompressed) bytes, keyed by standard name."""
        return {
            "train-images-idx3-ubyte": idx_bytes(self.train_images, IMAGES_MAGIC),
            "train-labels-idx1-ubyte": idx_bytes(self.train_labels, LABELS_MAGIC),
            "t10k-images-idx3-ubyte": idx_bytes(self.test_images, IMAGES_MAGIC),
            "t10k-labels-idx1-ubyte": idx_bytes(self.test_labels, LABELS_MAGIC),
        }

    def write(self, folder: Path, *, compress: bool = True, skip: tuple[str, ...] = ()) -> Path:
        """Writes the four IDX files into ``folder`` (minus those named in ``skip``); returns ``folder``."""
        for name, content in self.contents().items():
            if name not in skip:
                write_file(folder / name, content, compress=compress)
        return folder


def make_tiny_mnist(n_train: int = 7, n_test: int = 3, seed: int = 0) -> TinyMnist:
    """A ``TinyMnist`` with random pixels from ``seed`` and labels cycling through 0..9."""
    rng = np.random.default_rng(seed)
    train = rng.integers(0, 256, size=(n_train, 28, 28), dtype=np.uint8)
    test = rng.integers(0, 256, size=(n_test, 28, 28), dtype=np.uint8)
    train[:, 0, 0] = np.arange(n_train)
    test[:, 0, 0] = 100 + np.arange(n_test)
    train_labels = (np.arange(n_train) * 3 + 1) % 10
    test_labels = (np.arange(n_test) * 7 + 2) % 10
    return TinyMnist(train, train_labels.astype(np.uint8), test, test_labels.astype(np.uint8))


@pytest.fixture
def tiny() -> TinyMnist:
    """Seven training and three test images."""
    return make_tiny_mnist()


@pytest.fixture
def make_tiny() -> Callable[..., TinyMnist]:
    """``make_tiny_mnist`` for tests that need other sizes."""
    return make_tiny_mnist


@pytest.fixture
def write_idx() -> Callable[..., Path]:
    """``write_idx(path, array, magic, *, compress)`` writes one IDX file and returns its path."""

    def write(path: Path, array: np.ndarray, magic: int, *, compress: bool = False) -> Path:
        return write_file(path, idx_bytes(array, magic), compress=compress)

    return write


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    """An empty cache folder (not yet created)."""
    return tmp_path / "cache"


@pytest.fixture
def debian_dir(_isolated_data_sources: None) -> Path:
    """Where the Debian Fashion-MNIST path points during the test (missing until a test fills it)."""
    return sources.DEBIAN_FASHION_MNIST_DIR


class NetworkDisabled(RuntimeError):
    """What torchvision's download raises in these tests."""


@pytest.fixture(autouse=True)
def _isolated_data_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sources.DATA_DIR_ENV, raising=False)
    monkeypatch.setenv("PYRO_BNN_CACHE", str(tmp_path / "default-cache"))
    monkeypatch.setattr(sources, "DEBIAN_FASHION_MNIST_DIR", tmp_path / "debian" / "fashion-mnist")

    def no_network(self: torchvision.datasets.MNIST) -> None:
        raise NetworkDisabled("the data tests never use the network")

    monkeypatch.setattr(torchvision.datasets.MNIST, "download", no_network)


@pytest.fixture
def leftover_files() -> Callable[[Path], list[str]]:
    """Lists temporary or staging files left anywhere under a folder (there should be none)."""

    def find(root: Path) -> list[str]:
        if not root.exists():
            return []
        return sorted(
            str(path.relative_to(root))
            for path in root.rglob("*")
            if path.name.endswith(".part") or path.name.startswith(".download-")
        )

    return find


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Every test runs on one torch thread (its count put back after). The suite's networks and batches are small:
    on this project's 2-core machines, shared with other jobs, two OpenMP threads spent most of their time waiting
    on each other (a 2-weight regression's 600 steps: 47 s on two threads, 12 s on one, on the loaded machine). A
    reproduction run sets its own count (``threads``, default 1) and a test that needs another sets it itself."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _fresh_pyro_state():
    """Every test starts with an empty param store, validation on and fixed seeds."""
    pyro.clear_param_store()
    pyro.enable_validation(True)
    pyro.set_rng_seed(0)
    yield
    pyro.enable_validation(False)


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    """Runs a test on the CPU and, where a GPU exists, on CUDA too."""
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch.device(request.param)


CONJUGATE_N, CONJUGATE_SIGMA = 40, 1.0


@dataclass
class Conjugate:
    """y ~ N(x w + b, sigma^2) with (w, b) ~ N(0, I), and the exact posterior of (w_1, w_2, b).

    Attributes:
        bnn: The model, ``nn.Linear(2, 1)`` with a ``NormalPrior(0, 1)`` and a ``Gaussian(N, sigma)`` likelihood.
        x: Inputs ``(N, 2)``; y: targets ``(N, 1)``.
        mean: Posterior mean ``(3,)``; var: posterior variances ``(3,)`` (float64).
        precision: The posterior precision of every coefficient, ``1 + N / sigma^2``.
    """

    bnn: BNN
    x: torch.Tensor
    y: torch.Tensor
    mean: torch.Tensor
    var: torch.Tensor
    precision: float


@pytest.fixture
def conjugate() -> Conjugate:
    """The design has orthogonal columns of squared norm N, each orthogonal to the intercept's column of ones, so
    the posterior is N(mean, I / (1 + N / sigma^2)) (N = CONJUGATE_N): isotropic, which makes one step size equally
    good for every coordinate."""
    g = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.cat([torch.ones(CONJUGATE_N, 1), torch.randn(CONJUGATE_N, 2, generator=g)], 1))
    x = q[:, 1:] * CONJUGATE_N**0.5
    y = (x @ torch.tensor([1.0, -2.0]) + 0.3 + CONJUGATE_SIGMA * torch.randn(CONJUGATE_N, generator=g)).unsqueeze(-1)
    features = torch.cat([x, torch.ones(CONJUGATE_N, 1)], 1).double()
    cov = torch.linalg.inv(torch.eye(3, dtype=torch.float64) + features.T @ features / CONJUGATE_SIGMA**2)
    mean = cov @ features.T @ y.double().squeeze(-1) / CONJUGATE_SIGMA**2
    precision = 1.0 + CONJUGATE_N / CONJUGATE_SIGMA**2
    torch.testing.assert_close(cov, torch.eye(3, dtype=torch.float64) / precision)
    torch.manual_seed(0)
    bnn = BNN(nn.Linear(2, 1), NormalPrior(0.0, 1.0), Gaussian(CONJUGATE_N, scale=CONJUGATE_SIGMA))
    return Conjugate(bnn, x, y, mean, cov.diagonal(), precision)


class InterruptAfter(Callback):
    """Stands in for Ctrl-C (or a killed process) after ``epoch``: raises ``error`` at that epoch's end, after the
    callbacks listed before it (a checkpoint, the history) have run."""

    def __init__(self, epoch: int, error: type[BaseException] = KeyboardInterrupt) -> None:
        self.epoch, self.error = epoch, error

    def on_epoch_end(self, trainer, record) -> None:
        if record["epoch"] == self.epoch:
            raise self.error


@pytest.fixture
def interrupt_after() -> type[InterruptAfter]:
    """``interrupt_after(epoch, error=KeyboardInterrupt)``: a callback that interrupts training there."""
    return InterruptAfter


def registry_state() -> tuple:
    """Every registry's entries (guides, objectives, models, papers, measurements, runners), compared by identity
    (guides, papers, measurements, runners) or value (objectives, models), in order: what a test that installs
    plugins must leave as it found."""
    from pyro_bnn.guides.registry import guide_families
    from pyro_bnn.infer.objective_registry import objective_entries
    from pyro_bnn.models.registry import model_registrations
    from pyro_bnn.reproduce.measures import MEASURES
    from pyro_bnn.reproduce.papers import EXPERIMENTS
    from pyro_bnn.reproduce.runners import RUNNERS

    return (
        [(family.name, id(family)) for family in guide_families()],
        list(objective_entries()),
        list(model_registrations().items()),
        [(name, id(paper)) for name, paper in EXPERIMENTS.items()],
        [(name, id(function)) for name, function in MEASURES.items()],
        [(name, id(function)) for name, function in RUNNERS.items()],
    )


@pytest.fixture
def registries() -> Callable[[], tuple]:
    """:func:`registry_state`, for the tests that compare the registries before and after."""
    return registry_state


PLUGIN_MODULES = ("toy_plugin", "broken_plugin", "measfail_plugin", "sneaky_plugin", "sneaky_interrupt")
"""The modules the plugin tests write: forgotten by ``sys.modules`` before each test."""


@pytest.fixture
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A folder on ``sys.path`` to install plugins into, with plugins enabled and none loaded; every registration
    they make is undone afterwards (checked: :func:`registry_state`)."""
    from pyro_bnn.plugins import DISABLE_ENV, unload_plugins

    monkeypatch.delenv(DISABLE_ENV, raising=False)
    unload_plugins()
    before = registry_state()
    root = tmp_path / "site"
    root.mkdir()
    for module in PLUGIN_MODULES:
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.syspath_prepend(str(root))
    yield root
    unload_plugins()
    assert registry_state() == before
