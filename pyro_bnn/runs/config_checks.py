"""The checks a run config makes beyond its fields' own forms: that the model fits the data set (built on the
meta device, counting the weights a prior selects), that the device names one and exists here
(:func:`resolve_device`), that a corruption applies to the run, and the options of the data sets drawn afresh
(moons, circles)."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from typing import TYPE_CHECKING

import torch

from pyro_bnn.checks import optional_positive_int, positive_int
from pyro_bnn.data import DatasetName, Task, dataset_shape, parse_corruption
from pyro_bnn.guides import DEFAULT_GUIDE, Capability, GuideSpec, LocInit
from pyro_bnn.guides.init import check_median_start
from pyro_bnn.infer.objective_registry import make_objective, objective_entry
from pyro_bnn.models import build_model
from pyro_bnn.priors import nothing, parse_prior

if TYPE_CHECKING:
    from pyro_bnn.runs.config import RunConfig


@functools.lru_cache(maxsize=256)
def _random_weights(
    model: str, dataset: DatasetName, activation: str, dropout: float, prior: str | None, random_weights: bool
) -> int | None:
    """:func:`check_model_fits`, then the number of weights ``prior`` selects (None: no ``prior`` given, or a model
    that cannot be built on the meta device). Cached: plans make thousands of configs of a few networks, and
    building one (a VGG16) on the meta device takes a large part of a second; a refusal is not cached."""
    net = check_model_fits(model, dataset, activation=activation, dropout=dropout)
    if net is None or prior is None:
        return None
    sites = parse_prior(prior, select=None if random_weights else nothing).parameter_sites(net)
    return sum(math.prod(site.shape) for site in sites)


def check_model_fits(
    model: str, dataset: str | DatasetName, *, activation: str | None = None, dropout: float = 0.0
) -> torch.nn.Module | None:
    """Builds ``model`` for the data set's input shape and outputs (:func:`~pyro_bnn.data.dataset_shape`) on the
    meta device, which allocates nothing and reads no data, so that a model that cannot take the data (a LeNet on
    2-D points or on 8x8 digits) fails before anything is loaded, with the model's own message.

    Returns:
        The network on the meta device (its parameters' shapes are the real ones), or None for a user's model
        that cannot be built there.

    Raises:
        ValueError: The model refuses the data set's shape (or an option), naming both.
    """
    shape = dataset_shape(dataset)
    try:
        with torch.device("meta"):
            return build_model(
                model,
                input_shape=shape.input_shape,
                num_classes=shape.output_dim,
                activation=activation,
                dropout=dropout,
            )
    except (ValueError, TypeError) as err:
        raise ValueError(f"model {model!r} cannot take dataset {DatasetName(dataset).value!r}: {err}") from None
    except (RuntimeError, NotImplementedError):
        return None  # a user's model that cannot be built on the meta device: its real build will speak for it


EXPECTED_DEVICES = "expected 'cpu', 'cuda', 'cuda:N' or 'auto'"


def _parse_device(device: object) -> torch.device:
    """``device`` as a torch device, or a one-line ValueError naming the forms."""
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {device!r}; {EXPECTED_DEVICES}") from None


def _check_device_form(device: object) -> None:
    """Refuses a ``device`` that names no device; whether it exists here is :func:`resolve_device`'s check (a
    run's config names the device it trained on, and is read on machines without it)."""
    if device != "auto":
        _parse_device(device)


def resolve_device(device: str) -> torch.device:
    """``auto`` means CUDA where available, else the CPU. Asking for a device torch does not see here is an error
    (CUDA, or ``mps``, ``xpu``: the kinds with ``torch.<kind>.is_available()``), and so are ``meta`` (no data) and
    kinds torch cannot tell available (``xla``)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = _parse_device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} was asked for but torch sees no CUDA device; use --device cpu")
    if resolved.type == "cuda" and resolved.index is not None and resolved.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise ValueError(
            f"device {device!r} does not exist: torch sees {count} CUDA device(s), cuda:0..cuda:{count - 1}"
        )
    if resolved.type not in ("cpu", "cuda"):
        if resolved.type == "meta":
            raise ValueError(f"device {device!r} holds no data, so no run trains on it; {EXPECTED_DEVICES}")
        available = getattr(getattr(torch, resolved.type, None), "is_available", None)  # torch.mps, torch.xpu
        if available is None or not available():
            raise ValueError(
                f"device {device!r} was asked for but torch sees no {resolved.type} device here; {EXPECTED_DEVICES}"
            )
    return resolved


def check_samples_multiple(name: str, value: object, guide: str, multiple: int) -> None:
    """Refuses a sample count ``value`` (of option ``name``) that is no multiple of the ``multiple`` a guide's
    components need (a mixture of K takes as many samples from each); None (unset) and other guides pass."""
    if multiple > 1 and isinstance(value, int) and value % multiple:
        raise ValueError(
            f"{name}={value} is not a multiple of {multiple}: guide {guide!r} takes the same number "
            f"of prediction samples from each of its {multiple} components (e.g. {name}="
            f"{max(1, value // multiple) * multiple}, or leave it unset for a default that is one)"
        )


def check_generator_options(config: RunConfig, dataset: DatasetName) -> None:
    """``data_noise`` and ``data_samples``: the moons / circles generator's options, refused elsewhere."""
    for name in ("data_noise", "data_samples"):
        value = getattr(config, name)
        if value is not None and dataset not in (DatasetName.MOONS, DatasetName.CIRCLES):
            raise ValueError(f"{name}={value!r} applies to moons and circles only, not {dataset.value!r}")
    noise = config.data_noise
    if noise is not None and (
        isinstance(noise, bool) or not isinstance(noise, (int, float)) or not (math.isfinite(noise) and noise >= 0)
    ):
        raise ValueError(f"data_noise must be a finite number >= 0, got {noise!r}")
    optional_positive_int(config.data_samples, "data_samples")


def check_corruption(spec: str | None, config: RunConfig | None = None) -> None:
    """Validates a ``--corruption`` string early, and refuses one for a regression run (given its ``config``):
    the corruptions perturb images and 2-D points for classification shift experiments."""
    if spec is None:
        return
    if config is not None and DatasetName(config.dataset).task is Task.REGRESSION:
        raise ValueError(
            f"corruption {spec!r} does not apply to a regression run (dataset {config.dataset!r}); "
            "evaluate it without --corruption"
        )
    parse_corruption(spec)


def check_data_dir_form(data_dir: str | None) -> None:
    """Refuses ``DATASET=PATH``, the ``--data-dir`` form of ``evaluate`` and ``reproduce`` (which read several data
    sets), where a run takes its one folder (unless a folder of that very name exists)."""
    name, sep, path = (data_dir or "").partition("=")
    if not sep or os.path.exists(data_dir):
        return
    try:
        DatasetName(name)
    except ValueError:
        return
    raise ValueError(
        f"--data-dir {data_dir}: a run takes the data's folder itself (--data-dir {path}); DATASET=PATH is the form "
        "of evaluate and reproduce"
    )


def check_node_noise_options(config: RunConfig, guide: GuideSpec) -> None:
    """The node-noise options (``config`` resolved, ``guide`` its parsed ``--guide``): each needs ``node_noise``,
    a mixture guide's sample counts are multiples of its K, and its sites are real-valued node noise."""
    for name in ("node_noise", "bias_noise"):
        if not isinstance(getattr(config, name), bool):
            raise ValueError(f"{name} must be true or false, got {getattr(config, name)!r}")
    copies = positive_int(config.samples_per_example, "samples_per_example")
    for name in ("num_samples", "num_val_samples"):
        check_samples_multiple(name, getattr(config, name), config.guide, guide.samples_multiple)
    if guide.offers(Capability.NODE_NOISE_ONLY) and not config.node_noise:
        raise ValueError(
            f"guide {config.guide!r} is a node-noise guide; it needs --node-noise (weight-space BNNs: "
            f"e.g. {DEFAULT_GUIDE!r})"
        )
    if config.bias_noise and not config.node_noise:
        raise ValueError("bias_noise (--bias-noise) needs node_noise (--node-noise)")
    # Only the node-noise mixture objective reads it; the default is left alone (it is in every config written).
    default = {f.name: f.default for f in dataclasses.fields(config)}["samples_per_example"]
    if copies != default and not config.node_noise:
        raise ValueError(
            f"samples_per_example (--samples-per-example) {copies} needs node_noise (--node-noise): it sets the "
            "node-noise mixture objective's copies of every example"
        )
    if guide.offers(Capability.NORMAL_MIXTURE) and parse_prior(config.prior).layer_hyperpriors(""):
        raise ValueError(
            f"guide {config.guide!r} covers real-valued node-noise sites only, but prior {config.prior!r} adds a "
            "positive scale site per layer; use a Normal prior such as 'normal:1,0.1'"
        )


def check_guide_start(config: RunConfig, guide: GuideSpec) -> None:
    """Refuses a guide whose starting values the prior cannot give (``loc=median`` under a flat prior, which has no
    draws), before any data is loaded, as the guide build would after (``guide``: ``config.guide`` parsed)."""
    if guide.loc is LocInit.MEDIAN:
        check_median_start(config.guide, parse_prior(config.prior), f"prior {config.prior!r}")


def check_objective_choices(config: RunConfig, guide: GuideSpec) -> None:
    """Builds the run's objective (it refuses options it cannot take: flipout's one particle) and asks it whether it
    trains ``guide`` under ``config.prior`` (its ``choice_refusal``, where it has one), before any data is loaded:
    the fused objectives refuse a hierarchical prior, the mixture-mean KL a prior it has no closed form against."""
    objective = make_objective(config.elbo, config.num_particles, samples_per_example=config.samples_per_example)
    refusal = getattr(objective, "choice_refusal", None)
    reason = refusal(guide, config.prior) if callable(refusal) else None
    if reason is not None:
        raise ValueError(f"elbo {objective_entry(config.elbo).name!r} {reason}")
