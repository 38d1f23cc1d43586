"""RunConfig is checked when made and immutable afterwards; resolved() returns a new config with defaults filled."""

import dataclasses
import re

import pytest

from pyro_bnn.runs.config import RunConfig


def test_a_config_cannot_change_after_it_is_made():
    config = RunConfig(dataset="moons", model="mlp:8")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seed = 1  # type: ignore[misc]
    assert dataclasses.replace(config, seed=1).seed == 1 and config.seed == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"lr": float("inf")}, "lr must be a finite number > 0, got inf"),
        ({"epochs": 0}, "epochs"),
        ({"noise_scale": -1.0}, "noise_scale must be a finite number > 0"),
        ({"device": "tpu:x"}, "unknown device 'tpu:x'"),
    ],
)
def test_a_bad_option_is_refused_when_the_config_is_made(change, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        RunConfig(dataset="moons", model="mlp:8", **change)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        dataclasses.replace(RunConfig(dataset="moons", model="mlp:8"), **change)


def test_resolved_fills_the_modes_defaults_in_a_new_config():
    config = RunConfig(dataset="moons", model="mlp:8", node_noise=True)
    resolved = config.resolved()
    assert config.guide is None and config.lr is None  # unchanged
    assert (resolved.guide, resolved.optimizer, resolved.lr, resolved.lr_variational) == ("mixture:4", "sgd", 0.05, 0.3)
    assert resolved.resolved() is resolved
    assert config.validate() == resolved  # the deprecated alias returns the resolved config
    with pytest.warns(DeprecationWarning, match="resolved"):
        assert config.resolve_defaults() == resolved
    assert config.guide is None


def test_resolved_fills_the_models_own_activation():
    """activation None is the model's default: tanh for tanh-small and tanh-cnn (it was "relu" for every model, so
    both trained ReLU from the CLI and RunConfig), relu for the rest (so no run id changes); a named one stays."""
    assert RunConfig(dataset="moons", model="tanh-small").resolved().activation == "tanh"
    assert RunConfig(dataset="mnist", model="tanh-cnn").resolved().activation == "tanh"
    assert RunConfig().resolved().activation == "relu"
    assert RunConfig(dataset="moons", model="mlp:8").resolved().activation == "relu"
    assert RunConfig(dataset="moons", model="tanh-small", activation="relu").resolved().activation == "relu"
    assert RunConfig(dataset="moons", model="tanh-small").activation is None  # unresolved: left to the model
    with pytest.raises(ValueError, match="unknown model 'nope'"):  # a bad model is named, not its activation
        RunConfig(dataset="moons", model="nope")


def test_a_config_on_a_missing_gpu_can_still_be_read():
    """Whether the device exists is checked where a run starts, so a GPU run's config loads on a CPU machine."""
    config = RunConfig(dataset="moons", model="mlp:8", device="cuda:7")
    assert config.device == "cuda:7"


def test_samples_per_example_needs_node_noise_unless_it_is_the_default():
    # Only the node-noise mixture objective reads it; the default (2) is in every config written, so it stays.
    assert RunConfig(dataset="moons", model="mlp:8", samples_per_example=2).samples_per_example == 2
    assert RunConfig(dataset="moons", model="mlp:8", node_noise=True, samples_per_example=5).samples_per_example == 5
    message = (
        "samples_per_example (--samples-per-example) 5 needs node_noise (--node-noise): it sets the node-noise "
        "mixture objective's copies of every example"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        RunConfig(dataset="moons", model="mlp:8", samples_per_example=5)


def test_a_node_noise_config_with_particles_for_auto_still_loads():
    # The committed posterior-families grid planned moons node-noise runs with num_particles=8 (unused by the
    # mixture-mean KL): their configs must load; training says the option is unused (UnusedOptionWarning).
    config = RunConfig(dataset="moons", model="mlp:8", node_noise=True, num_particles=8)
    assert RunConfig.from_dict(dataclasses.asdict(config.resolved())).num_particles == 8
