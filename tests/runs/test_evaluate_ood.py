"""``pyro-bnn evaluate RUN --ood NAME`` and ``evaluate_ood``: tiny runs against another data set and against a
corruption, the files written, the preprocessing of the OOD set, and one-line errors for bad values.

The image runs train on tiny stand-ins for Fashion-MNIST and MNIST written on the fly (``make_tiny``); no test reads
the real data sets."""

import json
from dataclasses import replace

import pytest
import torch

from pyro_bnn.cli import main
from pyro_bnn.data import DataContentWarning, load_dataset
from pyro_bnn.data.images import FASHION_MNIST_MEAN_STD, MNIST_MEAN_STD
from pyro_bnn.evaluation import DETECTION_KEYS, OodScore
from pyro_bnn.runs import train_run
from pyro_bnn.runs.ood_scoring import evaluate_ood, load_ood_evaluation, parse_ood


@pytest.fixture
def tiny_images(tiny_moons):
    return replace(tiny_moons, model="mlp:16", activation="relu", val_size=8, batch_size=32)


pytestmark = pytest.mark.filterwarnings(f"ignore::{DataContentWarning.__module__}.{DataContentWarning.__name__}")


@pytest.fixture
def image_sets(tmp_path, make_tiny):
    """Stand-ins for Fashion-MNIST and MNIST (40 training, 20 test images each, different pixels)."""
    return {
        name: str(make_tiny(n_train=40, n_test=20, seed=seed).write(tmp_path / name))
        for seed, name in enumerate(("fashion-mnist", "mnist"))
    }


@pytest.fixture
def moons_run(tmp_path, tiny_moons):
    train_run(tiny_moons, tmp_path / "moons", progress=False)
    return tmp_path / "moons"


@pytest.fixture(scope="module")
def shared_moons_run(tmp_path_factory, tiny_moons):
    """One run for the tests that only read it (moons: no data files, no cache, so safe outside a test)."""
    out = tmp_path_factory.mktemp("shared") / "moons"
    train_run(tiny_moons, out, progress=False)
    return out


def _check_record(record, *, ood, in_distribution, num_in, num_out, num_samples):
    assert record["ood"] == ood and record["in_distribution"] == in_distribution
    assert (record["num_in"], record["num_out"], record["num_samples"]) == (num_in, num_out, num_samples)
    assert list(record["metrics"]) == [score.value for score in OodScore]
    for name, values in record["metrics"].items():
        assert set(values) == {*DETECTION_KEYS, "mean_in", "mean_out"}, name
        for key in DETECTION_KEYS:
            assert 0.0 <= values[key] <= 1.0, (name, key)
        assert values["mean_in"] >= 0.0 and values["mean_out"] >= 0.0, name


def test_cli_fashion_mnist_run_against_mnist(tmp_path, capsys, image_sets):
    run = tmp_path / "fmnist-run"
    args = ["train", "--dataset", "fashion-mnist", "--data-dir", image_sets["fashion-mnist"], "--model", "mlp:16"]
    args += ["--epochs", "1", "--val-size", "8", "--num-samples", "4", "--num-val-samples", "2", "--device", "cpu"]
    assert main([*args, "--quiet", "--out", str(run)]) == 0
    capsys.readouterr()

    evaluate = ["evaluate", str(run), "--ood", "mnist", "--data-dir", f"mnist={image_sets['mnist']}"]
    assert main([*evaluate, "--num-samples", "3"]) == 0
    out = capsys.readouterr().out
    assert "OOD detection: fashion-mnist test (20) against mnist (20), 3 posterior samples" in out
    assert "AUROC" in out and "FPR@95TPR" in out and "mutual_information" in out
    assert f"wrote {run / 'ood-mnist.json'}, ood-mnist.png" in out
    record = json.loads((run / "ood-mnist.json").read_text())
    _check_record(record, ood="mnist", in_distribution="fashion-mnist", num_in=20, num_out=20, num_samples=3)
    assert (run / "ood-mnist.png").stat().st_size > 1_000
    assert not (run / "evaluation.json").exists()  # --ood does OOD detection only


def test_python_api_against_corruptions_and_another_2d_set(moons_run):
    record = evaluate_ood(moons_run, "Gaussian:1", num_samples=5)
    _check_record(record, ood="gaussian:1.0", in_distribution="moons", num_in=200, num_out=200, num_samples=5)
    assert json.loads((moons_run / "ood-gaussian_1.0.json").read_text()) == record
    assert (moons_run / "ood-gaussian_1.0.png").stat().st_size > 1_000

    sp = evaluate_ood(moons_run, "sp:0.3")  # the alias is written under the canonical name
    assert sp["ood"] == "salt-pepper:0.3" and (moons_run / "ood-salt-pepper_0.3.json").is_file()
    circles = evaluate_ood(moons_run, "circles")
    _check_record(circles, ood="circles", in_distribution="moons", num_in=200, num_out=200, num_samples=4)
    assert (moons_run / "ood-circles.png").is_file()


def test_an_uncorrupted_ood_set_is_not_detected(moons_run):
    """gaussian:0 is the test set itself, predicted with other posterior samples: the scores barely separate."""
    record = evaluate_ood(moons_run, "gaussian:0", num_samples=64)
    for name in ("entropy", "max_probability"):
        assert record["metrics"][name]["auroc"] == pytest.approx(0.5, abs=0.1), name


@pytest.mark.parametrize(
    "normalization, mean_std",
    [("unit", None), ("bbb", None), ("standard", FASHION_MNIST_MEAN_STD)],
)
def test_the_ood_set_gets_the_runs_own_preprocessing(tmp_path, image_sets, tiny_images, normalization, mean_std):
    config = replace(tiny_images, dataset="fashion-mnist", data_dir=image_sets["fashion-mnist"])
    train_run(replace(config, normalization=normalization), tmp_path / "run", progress=False)
    loaded = load_ood_evaluation(tmp_path / "run", "mnist", data_dirs={"mnist": image_sets["mnist"]})
    unit = load_dataset("mnist", data_dir=image_sets["mnist"], val_size=0).test.x
    if normalization == "unit":
        expected = unit
    elif normalization == "bbb":
        expected = unit * (255 / 126)
    else:  # Fashion-MNIST's statistics, the run's: not MNIST's own
        expected = (unit - mean_std[0]) / mean_std[1]
        assert MNIST_MEAN_STD != FASHION_MNIST_MEAN_STD
    torch.testing.assert_close(loaded.out_x, expected)
    in_unit = load_dataset("fashion-mnist", data_dir=image_sets["fashion-mnist"], val_size=0).test.x
    if normalization == "unit":
        torch.testing.assert_close(loaded.in_x, in_unit)


def test_a_test_subset_applies_to_the_ood_set_too(tmp_path, image_sets, tiny_images):
    config = replace(tiny_images, dataset="mnist", data_dir=image_sets["mnist"], test_subset=12)
    train_run(config, tmp_path / "run", progress=False)
    record = evaluate_ood(tmp_path / "run", "fmnist", data_dirs={"fashion-mnist": image_sets["fashion-mnist"]})
    assert (record["num_in"], record["num_out"], record["ood"]) == (12, 12, "fashion-mnist")


def test_parse_ood_names_the_forms():
    assert parse_ood("FMNIST").spec == "fashion-mnist" and parse_ood("mnist").corruption is None
    assert parse_ood(" salt-pepper:0.25 ").corruption == "salt-pepper:0.25"
    assert parse_ood("gaussian:0.5").file_stem == "ood-gaussian_0.5"


# ------------------------------------------------------------------------------------------------ bad values

BAD_OOD = [
    (
        ["--ood", "imagenet"],
        "--ood 'imagenet' is neither a data set (mnist, fashion-mnist, digits, moons, circles, cifar10, cifar100)",
    ),
    (["--ood", ""], "--ood must name a data set"),
    (["--ood", "cubic"], "'cubic' is a regression set"),
    (["--ood", "gaussian:2"], "--ood 'gaussian:2'"),
    (["--ood", "blur:3"], "unknown corruption 'blur'"),
    (["--ood", "none:"], "--ood 'none:'"),
    (["--ood", "digits"], "--ood digits: its inputs have shape (1, 8, 8), but the run's model takes moons's (2,)"),
    (["--ood", "mnist"], "its inputs have shape (1, 28, 28)"),
    (["--ood", "moons"], "--ood moons is the run's own data set"),
    (["--ood", "mnist", "--corruption", "gaussian:0.5"], "--ood and --corruption do not combine"),
    (["--ood", "circles", "--data-dir", "digits=/x"], "dataset 'digits' is not read from files"),
    (["--ood", "circles", "--data-dir", "mnist=/x"], "--data-dir mnist=/x is unused: this evaluation reads circles"),
    (["--ood", "circles", "--data-dir", "imagenet=/x"], "unknown dataset name 'imagenet'"),
    (["--ood", "circles", "--num-samples", "0"], "--num-samples must be an int >= 1, got 0"),
]


@pytest.mark.parametrize("extra, message", BAD_OOD, ids=[" ".join(case[0]) for case in BAD_OOD])
def test_bad_ood_values_fail_in_one_line_before_any_data(shared_moons_run, capsys, no_data, extra, message):
    assert main(["evaluate", str(shared_moons_run), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("pyro-bnn evaluate: error:") and message in err
    assert not any(path.name.startswith("ood-") for path in shared_moons_run.iterdir())


def test_the_ood_value_is_checked_before_the_run_folder(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path / "nowhere"), "--ood", "imagenet"]) == 2
    assert "--ood 'imagenet' is neither" in capsys.readouterr().err


def test_a_regression_run_is_refused_in_one_line(tmp_path, capsys, no_data, tiny_moons):
    cubic = replace(tiny_moons, dataset="cubic", model="mlp:8", batch_size=200, num_samples=2)
    data = load_dataset("cubic", seed=cubic.seed)  # no_data refuses runs.load_data
    train_run(cubic, tmp_path / "cubic", progress=False, data=data)
    assert main(["evaluate", str(tmp_path / "cubic"), "--ood", "gaussian:0.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--ood does not apply to a regression run (dataset 'cubic')" in err


def test_a_missing_ood_set_is_one_line(tmp_path, capsys, image_sets, tiny_images):
    config = replace(tiny_images, dataset="fashion-mnist", data_dir=image_sets["fashion-mnist"])
    train_run(config, tmp_path / "run", progress=False)
    assert main(["evaluate", str(tmp_path / "run"), "--ood", "mnist", "--data-dir", f"mnist={tmp_path}/none"]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and "none" in err


def test_a_malformed_data_dir_is_an_argparse_error(shared_moons_run, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["evaluate", str(shared_moons_run), "--ood", "circles", "--data-dir", "mnist"])
    assert exit_.value.code == 2
    assert "expected DATASET=PATH (e.g. mnist=/data/mnist), got 'mnist'" in capsys.readouterr().err
