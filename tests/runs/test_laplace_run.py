"""``check_laplace_run``: which MAP runs a Laplace approximation is fitted around. A KL schedule whose weight is not 1
at the steps that trained the checkpoint's weights is the tempered posterior at T = weight (the trainer's KL weight
is schedule x T), refused as a temperature other than 1 is."""

import dataclasses

import pytest

from pyro_bnn.infer.checkpoint import load_checkpoint, save_checkpoint
from pyro_bnn.laplace import LaplaceOptions, import_laplace
from pyro_bnn.runs import RunConfig, runs, train_run
from pyro_bnn.runs.laplace_run import check_laplace_run
from pyro_bnn.runs.run_folder import CHECKPOINT

try:
    import_laplace()
except ImportError:
    pytest.skip("laplace-torch comes with the laplace extra: pip install -e '.[laplace]'", allow_module_level=True)

# 300 moons points: 240 training examples in batches of 128, two steps an epoch (progress e + 0 and e + 0.5)
MAP_RUN = RunConfig(
    dataset="moons",
    model="tanh-small",
    activation="tanh",
    guide="map",
    data_samples=300,
    epochs=1,
    batch_size=128,
    num_samples=2,
    num_val_samples=2,
    device="cpu",
)


def _run(tmp_path, name, **changes):
    out = tmp_path / name
    train_run(dataclasses.replace(MAP_RUN, **changes), out, progress=False, figures=False)
    return out


def _refusal(run):
    """The one-line refusal of ``run``, given before any data is loaded."""

    def refuse(*args, **kwargs):
        raise AssertionError("data was loaded although the run could be refused without it")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(ValueError) as caught:
        patch.setattr(runs, "load_data", refuse)
        check_laplace_run(run, LaplaceOptions())
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("anneal", "epochs", "where"),
    [
        # constant:0.5 is temperature 0.5 by another name (the same guide tensors): 0.5 at every step
        ("constant:0.5", 1, "step 1/2 of epoch 1/1 is 0.5, not 1"),
        # a warm-up as long as the run: the last epoch starts at progress 1 of 2, weight 1/2
        ("linear:2", 2, "step 1/2 of epoch 2/2 is 0.5, not 1"),
        # a warm-up of 100 epochs, one run: weight 0 at the first step (the run was almost an MLE)
        ("linear:100", 1, "step 1/2 of epoch 1/1 is 0, not 1"),
        # a period of 2 epochs: the third epoch starts a new cycle at weight 0
        ("cyclical:2,0.5", 3, "step 1/2 of epoch 3/3 is 0, not 1"),
    ],
)
def test_a_run_whose_kl_schedule_is_not_1_in_its_last_epoch_is_refused(tmp_path, anneal, epochs, where):
    message = _refusal(_run(tmp_path, "annealed", kl_anneal=anneal, epochs=epochs))
    assert f"was trained with --kl-anneal {anneal}: its KL weight at {where}" in message, message
    assert message.endswith("or with --kl-anneal constant (weight 1)"), message


@pytest.mark.parametrize(
    ("anneal", "epochs"),
    [
        ("constant", 1),
        ("constant:1", 1),
        ("linear:1", 2),  # the warm-up ended with the first epoch: weight 1 at progress 1 and 1.5
        ("cyclical:2,0.5", 2),  # progress 1 and 1.5: phases 0.5 and 0.75 of the period, past the ramp
    ],
)
def test_a_schedule_at_weight_1_throughout_the_last_epoch_is_accepted(tmp_path, anneal, epochs):
    laplace = check_laplace_run(_run(tmp_path, "map", kl_anneal=anneal, epochs=epochs), LaplaceOptions())
    assert laplace.config.kl_anneal == anneal


def test_an_early_stopped_run_is_judged_by_the_epoch_whose_weights_it_restored(tmp_path):
    # The weights are the best epoch's (EarlyStopping(restore_best=True)): epoch 1 of a linear:1 warm-up was at
    # weights 0 and 0.5, though epochs 2 and 3 were at 1.
    run = _run(tmp_path, "stopped", kl_anneal="linear:1", epochs=3, patience=5)
    state = load_checkpoint(run / CHECKPOINT)
    (key,) = [key for key in state["callbacks"] if key.endswith(":EarlyStopping")]
    state["callbacks"][key]["best_epoch"] = 1
    save_checkpoint(state, run / CHECKPOINT)
    message = _refusal(run)
    assert "its KL weight at step 1/2 of epoch 1/3 (its best, restored epoch: 1) is 0, not 1" in message, message
    state["callbacks"][key]["best_epoch"] = 2
    save_checkpoint(state, run / CHECKPOINT)
    check_laplace_run(run, LaplaceOptions())


def test_a_tempered_run_is_still_refused_by_its_temperature(tmp_path):
    message = _refusal(_run(tmp_path, "tempered", temperature=0.5))
    assert "was trained at temperature 0.5" in message, message
