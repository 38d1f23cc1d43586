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
from pyro_bnn.runs.evaluate import check_data_dirs, load_evaluation
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


def test_an_ensemble_takes_members_trained_under_either_spelling_of_the_data_set(moved_run, tmp_path):
    # the members differed "in dataset: 'fashion-mnist' vs 'fmnist'", one data set written two ways
    run, moved, _ = moved_run
    canonical = tmp_path / "canonical"
    train_run(replace(TINY_FMNIST, dataset="fashion-mnist", seed=1, data_dir=moved), canonical, progress=False)
    _, ensemble = load_ensemble([run, canonical], data_dirs={"fashion-mnist": moved})
    assert ensemble.num_members == 2


def test_cli_evaluates_an_alias_run_with_the_canonical_data_dir(moved_run, capsys):
    run, moved, _ = moved_run
    assert main(["evaluate", str(run), "--data-dir", f"fashion-mnist={moved}", "--num-samples", "2"]) == 0
    assert (run / "evaluation.json").is_file()


def test_an_unused_entry_names_the_canonical_data_set_read(moved_run):
    run, _, mnist = moved_run
    with pytest.raises(ValueError, match=rf"^--data-dir mnist={mnist} is unused: this evaluation reads fashion-mnist$"):
        load_evaluation(run, data_dirs={"mnist": mnist})


# ------------------------------------------------------------------------------------------------ repeated entries


@pytest.mark.parametrize(
    "entries",
    [
        [("mnist", "/a"), ("mnist", "/b")],  # as the command line gives them, in order
        [("mnist", "/a"), (" MNIST", "/b")],
        {"mnist": "/a", " MNIST": "/b"},  # a mapping's keys differ only in spelling
    ],
    ids=["pairs", "pairs-spellings", "mapping-spellings"],
)
def test_a_data_set_given_two_folders_is_refused_naming_both(entries):
    pairs = list(entries.items()) if isinstance(entries, dict) else entries
    (first, a), (second, b) = pairs
    with pytest.raises(ValueError) as error:
        check_data_dirs(entries)
    both = f"--data-dir {first}={a} and --data-dir {second}={b}"
    assert str(error.value) == f"{both} both name mnist's folder; give it one"


def test_an_entry_repeated_with_the_same_folder_is_one_entry():
    assert check_data_dirs([("fmnist", "/f"), ("fashion-mnist", "/f"), ("mnist", "/m")]) == {
        "fashion-mnist": "/f",
        "mnist": "/m",
    }


@pytest.mark.parametrize("bad", ["mnist=/a", [("mnist",)], [("mnist", "/a", "/b")]])
def test_data_dirs_that_are_no_entries_are_refused_in_one_line(bad):
    with pytest.raises(ValueError, match=r"^data_dirs (must map|entries must be)"):
        check_data_dirs(bad)


def test_the_loaders_take_the_pairs_the_command_line_gives(moved_run):
    run, moved, mnist = moved_run
    torch.testing.assert_close(
        load_evaluation(run, data_dirs=[("fmnist", moved)]).x,
        load_dataset("fashion-mnist", data_dir=moved, val_size=8).test.x,
    )
    with pytest.raises(ValueError, match="both name fashion-mnist's folder"):
        load_ood_evaluation(run, "mnist", data_dirs=[("fmnist", moved), ("mnist", mnist), ("fashion-mnist", mnist)])


def test_cli_refuses_two_spellings_of_one_data_set_in_one_line(moved_run, capsys, no_data):
    run, moved, mnist = moved_run
    args = ["evaluate", str(run), "--data-dir", f"fmnist={moved}", "--data-dir", f"fashion-mnist={mnist}"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"pyro-bnn evaluate: error: --data-dir fmnist={moved} and --data-dir fashion-mnist={mnist} both name "
        "fashion-mnist's folder; give it one"
    )


def test_one_folder_written_two_ways_is_one_folder(tmp_path):
    folder = tmp_path / "fm"
    folder.mkdir()
    entries = [("fmnist", str(folder)), ("fashion-mnist", f"{folder}/"), ("FMNIST", str(tmp_path / "." / "fm"))]
    assert check_data_dirs(entries) == {"fashion-mnist": str(folder)}


def test_cli_refuses_one_spelling_given_twice_with_two_folders(moved_run, capsys, no_data):
    """The command line's pairs reach the check as given (a dict of them kept the last folder silently)."""
    run, moved, mnist = moved_run
    args = ["evaluate", str(run), "--data-dir", f"mnist={moved}", "--data-dir", f"mnist={mnist}"]
    assert main(args) == 2
    assert capsys.readouterr().err.strip() == (
        f"pyro-bnn evaluate: error: --data-dir mnist={moved} and --data-dir mnist={mnist} both name mnist's folder; "
        "give it one"
    )
