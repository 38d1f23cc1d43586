"""bench/epoch.py: one epoch of the default BNN and of the deterministic network, on a stand-in Fashion-MNIST of two
batches."""

import time
import warnings

import epoch as bench_epoch
import pytest
import torch

import pyro_bnn.infer.trainer as trainer_module
from pyro_bnn.cli import build_parser
from pyro_bnn.data import load_dataset
from pyro_bnn.data.sources import DataContentWarning
from pyro_bnn.guides.movement import UnmovedPosteriorWarning

SLOW_CHECK_S = 1.0


@pytest.fixture
def two_batches(make_tiny, tmp_path, monkeypatch):
    """Fashion-MNIST replaced by 256 training images (two batches of 128); returns the keywords epoch.py asked for."""
    folder = make_tiny(n_train=2 * bench_epoch.BATCH, n_test=3).write(tmp_path / "fashion-mnist")
    asked = {}

    def tiny_dataset(name, **kwargs):
        asked.update(kwargs, name=name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DataContentWarning)  # the stand-in is not the published data, knowingly
            return load_dataset(name, data_dir=folder, **kwargs)

    monkeypatch.setattr(bench_epoch, "load_dataset", tiny_dataset)
    return asked


def test_the_bnns_epoch_counts_the_checks_a_fit_makes_once(two_batches, monkeypatch):
    # The unmoved-posterior check after fit() made 1 s slower: the epoch's wall time includes it, its time_s not.
    unmoved = trainer_module.warn_if_unmoved

    def slow_warn_if_unmoved(guide, start):
        time.sleep(SLOW_CHECK_S)
        unmoved(guide, start)

    monkeypatch.setattr(trainer_module, "warn_if_unmoved", slow_warn_if_unmoved)
    with pytest.warns(UnmovedPosteriorWarning):  # two steps leave it at its start: the check ran, in the timing
        times = bench_epoch.epoch_times(torch.device("cpu"))
    assert times["num_train"] == 256 and times["cuda_graph"] is False
    assert times["bnn_s"] >= times["bnn_steps_s"] + SLOW_CHECK_S
    assert times["ratio"] == times["bnn_s"] / times["deterministic_s"]


def test_the_epoch_scales_the_pixels_as_pyro_bnn_train_does(two_batches, tmp_path):
    train_default = build_parser().parse_args(["train", "--out", str(tmp_path)]).normalization
    with pytest.warns(UnmovedPosteriorWarning):
        times = bench_epoch.epoch_times(torch.device("cpu"))
    assert train_default == "unit"  # pixels / 255 (it said "standardised" and asked for "standard")
    assert two_batches["name"] == "fashion-mnist" and two_batches["normalization"] == train_default
    assert times["normalization"] == train_default
