"""``clip_norm`` (``--clip-norm``): the run option behind the divergence advice "gradient clipping". A run's optimiser
clips with it (the clipping itself: tests/infer/test_optim.py, test_trainer.py), a bad value is one line, a clipped
run trains alone, a sampled run warns that it is unused, and the CLI's divergence advice names the flag."""

import dataclasses

import pyro.optim
import pytest

from pyro_bnn.cli import main
from pyro_bnn.infer import ParamGroups
from pyro_bnn.infer.divergence import DIVERGENCE_ADVICE
from pyro_bnn.runs import RunConfig
from pyro_bnn.runs.batched_runs import batch_key
from pyro_bnn.runs.optimisation import run_optimizer
from pyro_bnn.runs.sgmcmc_run import SamplerOptions, sample_config

MOONS = ["--dataset", "moons", "--model", "tanh-small", "--device", "cpu", "--quiet"]


def test_the_run_optimiser_clips_with_clip_norm_under_adam_and_sgd():
    adam = run_optimizer(RunConfig(clip_norm=2.5), 1000)
    assert isinstance(adam, pyro.optim.PyroOptim) and adam.pt_clip_args == {"clip_norm": 2.5}
    assert run_optimizer(RunConfig(), 1000).pt_clip_args == {}
    for config in (RunConfig(node_noise=True, clip_norm=2.5), RunConfig(weight_decay=1e-4, clip_norm=2.5)):
        groups = run_optimizer(config, 1000)
        assert isinstance(groups, ParamGroups) and groups.clip_norm == 2.5
    assert run_optimizer(RunConfig(node_noise=True), 1000).clip_norm is None


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf")])
def test_a_bad_clip_norm_is_refused_in_one_line(value, tmp_path, capsys):
    with pytest.raises(ValueError, match=r"^clip_norm must be a finite number > 0, got "):
        RunConfig(clip_norm=value)
    assert main(["train", *MOONS, "--clip-norm", str(value), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pyro-bnn train: error: --clip-norm must be a finite number > 0") and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_a_clipped_run_trains_alone_and_keeps_the_run_ids_of_unclipped_ones():
    base = RunConfig(dataset="moons", model="tanh-small", guide="flat:0.05")
    assert batch_key(base) is not None
    assert batch_key(dataclasses.replace(base, clip_norm=1.0)) is None  # batches clip no gradients
    from pyro_bnn.reproduce.planned import RunSpec

    # An option added with the default None leaves every earlier run's id as it was.
    assert RunSpec(base, label="x").run_id == RunSpec(dataclasses.replace(base, clip_norm=None), label="x").run_id
    assert RunSpec(base, label="x").run_id != RunSpec(dataclasses.replace(base, clip_norm=1.0), label="x").run_id


def test_a_sampled_run_warns_that_clip_norm_is_unused():
    config, warnings = sample_config(RunConfig(dataset="moons", model="tanh-small", clip_norm=1.0), SamplerOptions())
    assert config.clip_norm is None
    assert "--clip-norm is unused: sampling does not train a guide" in warnings


def test_the_divergence_advice_names_the_flag(tmp_path, monkeypatch, capsys):
    from pyro_bnn.infer import NonFiniteLossError, Trainer

    def diverging_fit(self, *args, **kwargs):
        raise NonFiniteLossError(f"loss became nan at epoch 1, step 3. {DIVERGENCE_ADVICE}")

    monkeypatch.setattr(Trainer, "fit", diverging_fit)
    assert main(["train", *MOONS, "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert err.endswith("or gradient clipping (clip_norm; --clip-norm on the command line, in a run started again).\n")


def test_a_clipped_run_trains_and_records_its_clip_norm(tmp_path):
    import json

    out = tmp_path / "run"
    args = ["--epochs", "1", "--num-samples", "4", "--num-val-samples", "4", "--clip-norm", "0.5"]
    assert main(["train", *MOONS, *args, "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["clip_norm"] == 0.5
