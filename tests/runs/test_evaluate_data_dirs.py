"""``--data-dir DATASET=PATH`` of ``pyro-bnn evaluate`` (and of the loaders behind it: plain, ``--temperature``,
``--ood`` and ensembles) for a run whose config spells its data set with an alias (``fmnist``, as typed at
training): the entry is matched by canonical name, in any spelling, and repeated entries are refused.

The run trains on a tiny Fashion-MNIST stand-in whose folder is then removed, so only the ``--data-dir`` entry can
find its data."""

import shutil
from dataclasses import replace

import pytest
import torch

from pyro_bnn.cli import main
from pyro_bnn.data import DataContentWarning, load_dataset
from pyro_bnn.runs import RunConfig, train_run
from pyro_bnn.runs.ensemble import load_ensemble
from pyro_bnn.runs.evaluate import load_evaluation
from pyro_bnn.runs.ood_scoring import load_ood_evaluation
from pyro_bnn.runs.temperature_scaling import load_temperature_evaluation

pytestmark = pytest.mark.filterwarnings(f"ignore::{DataContentWarning.__module__}.{DataContentWarning.__name__}")

TINY_FMNIST = RunConfig(
    dataset="fmnist",
    model="mlp:16",
    guide="mle",
    prior="normal:0,1",
    epochs=1,
    batch_size=32,
    lr=0.01,
    val_size=8,
    num_samples=2,
    num_val_samples=2,
    device="cpu",
)


@pytest.fixture
def moved_run(tmp_path, make_tiny):
    """A run trained as ``--dataset fmnist`` whose data folder has moved: ``(run, new folder, mnist folder)``."""
    fashion = make_tiny(n_train=40, n_test=20, seed=0)
    trained_on = fashion.write(tmp_path / "old")
    train_run(replace(TINY_FMNIST, data_dir=str(trained_on)), tmp_path / "run", progress=False)
    shutil.rmtree(trained_on)
    moved = fashion.write(tmp_path / "moved")
    mnist = make_tiny(n_train=40, n_test=20, seed=1).write(tmp_path / "mnist")
    return tmp_path / "run", str(moved), str(mnist)


@pytest.mark.parametrize("spelling", ["fashion-mnist", "fmnist", " FMNIST"])
def test_an_alias_run_reads_the_data_dir_given_under_any_spelling(moved_run, spelling):
    run, moved, mnist = moved_run
    expected = load_dataset("fashion-mnist", data_dir=moved, val_size=8)
    dirs = {spelling: moved}
    torch.testing.assert_close(load_evaluation(run, data_dirs=dirs).x, expected.test.x)
    tempered = load_temperature_evaluation(run, data_dirs=dirs)
    torch.testing.assert_close(tempered.val.x, expected.val.x)
    ood = load_ood_evaluation(run, "mnist", data_dirs={**dirs, "mnist": mnist})
    torch.testing.assert_close(ood.in_x, expected.test.x)
    torch.testing.assert_close(ood.out_x, load_dataset("mnist", data_dir=mnist, val_size=0).test.x)
    bnn, ensemble = load_ensemble([run], data_dirs=dirs)
    assert ensemble.num_members == 1 and bnn is ensemble.bnn


def test_cli_evaluates_an_alias_run_with_the_canonical_data_dir(moved_run, capsys):
    run, moved, _ = moved_run
    assert main(["evaluate", str(run), "--data-dir", f"fashion-mnist={moved}", "--num-samples", "2"]) == 0
    assert (run / "evaluation.json").is_file()


def test_an_unused_entry_names_the_canonical_data_set_read(moved_run):
    run, _, mnist = moved_run
    with pytest.raises(ValueError, match=rf"^--data-dir mnist={mnist} is unused: this evaluation reads fashion-mnist$"):
        load_evaluation(run, data_dirs={"mnist": mnist})
