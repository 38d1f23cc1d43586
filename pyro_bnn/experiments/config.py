"""The description of one training run: every choice the CLI exposes, validated before any work starts."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pyro_bnn._spec import enum_member
from pyro_bnn.data import DatasetName, Normalization, parse_corruption
from pyro_bnn.data.partition import holdout_count
from pyro_bnn.data.seeding import check_seed
from pyro_bnn.guides import parse_guide
from pyro_bnn.infer import ElboKind, KLWeighting, parse_kl_schedule
from pyro_bnn.models import available_models
from pyro_bnn.nn import parse_activation
from pyro_bnn.priors import parse_prior


@dataclass
class RunConfig:
    """One training run. Field names match the ``pyro-bnn train`` options.

    Attributes:
        dataset: ``mnist``, ``fashion-mnist``, ``digits``, ``moons`` or ``circles``.
        model: A registered model name (``pyro_bnn.models.available_models()``).
        activation: ``relu``, ``leaky:-0.5``, ``tanh``, ... (``pyro_bnn.nn.parse_activation``).
        prior: ``normal:0,1``, ``mixture``, ``hierarchical:normal,halfcauchy,1``, ... (``parse_prior``).
        guide: ``autonormal:1e-3``, ``bbb``, ``map``, ``mle``, ``mc-dropout:0.1`` (``parse_guide``).
        elbo: ``trace`` or ``meanfield``.
        epochs: Maximum number of epochs.
        batch_size: Minibatch size.
        lr: Adam learning rate.
        num_particles: ELBO particles per step (vectorised).
        kl_anneal: KL schedule, ``constant``, ``linear:EPOCHS`` or ``cyclical:PERIOD[,RAMP]``.
        kl_weighting: ``uniform`` or ``blundell`` minibatch KL weights.
        seed: Seeds the split, the network's initialisation and training.
        device: ``cpu``, ``cuda``, ``cuda:1`` or ``auto``.
        train_subset: Train on this many examples (None: all).
        val_size: Validation examples held out of the training set (None: the data set's default).
        normalization: ``unit`` (/255), ``standard`` (mean/std) or ``bbb`` (/126).
        data_dir: Where MNIST / Fashion-MNIST IDX files are (None: the usual places).
        num_samples: Posterior samples for the test metrics.
        num_val_samples: Posterior samples for the per-epoch validation metrics.
        n_bins: Calibration bins.
        patience: Early stopping on validation accuracy after this many epochs without improvement (0: off).
    """

    dataset: str = "fashion-mnist"
    model: str = "3fc"
    activation: str = "relu"
    prior: str = "normal:0,1"
    guide: str = "autonormal:0.001"
    elbo: str = "trace"
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    num_particles: int = 1
    kl_anneal: str = "constant"
    kl_weighting: str = "uniform"
    seed: int = 0
    device: str = "auto"
    train_subset: int | None = None
    val_size: float | None = None
    normalization: str = "unit"
    data_dir: str | None = None
    num_samples: int = 100
    num_val_samples: int = 16
    n_bins: int = 15
    patience: int = 0

    def validate(self) -> RunConfig:
        """Parses every option once so a typo fails before data loading or training; returns self."""
        DatasetName(self.dataset)
        Normalization(self.normalization)
        if self.model.lower() not in available_models():
            raise ValueError(f"unknown model {self.model!r}; expected one of {', '.join(available_models())}")
        parse_activation(self.activation)
        parse_prior(self.prior)
        parse_guide(self.guide)
        parse_kl_schedule(self.kl_anneal)
        enum_member(KLWeighting, self.kl_weighting, "KL weighting")
        enum_member(ElboKind, self.elbo, "ELBO")
        for name in ("epochs", "batch_size", "num_particles", "num_samples", "num_val_samples", "n_bins"):
            value = getattr(self, name)
            minimum = 0 if name == "epochs" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
        if not (isinstance(self.lr, (int, float)) and self.lr > 0):
            raise ValueError(f"lr must be a number > 0, got {self.lr!r}")
        if not (isinstance(self.patience, int) and self.patience >= 0):
            raise ValueError(f"patience must be an int >= 0, got {self.patience!r}")
        check_seed(self.seed)
        if self.train_subset is not None and (
            isinstance(self.train_subset, bool) or not isinstance(self.train_subset, int) or self.train_subset < 1
        ):
            raise ValueError(f"train_subset must be None or an int >= 1, got {self.train_subset!r}")
        if self.val_size is not None:
            # The count's upper bound depends on the data, checked when it loads; the form is checked here.
            holdout_count(self.val_size, available=2**62, default=0)
        if self.patience and self.val_size == 0:
            raise ValueError(f"patience={self.patience} needs a validation split, but val_size is 0")
        resolve_device(self.device)
        return self

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RunConfig:
        """Builds a config from a dict (e.g. a run's ``config.json``), refusing unknown keys."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown run options {unknown}; known: {sorted(known)}")
        return cls(**values)

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))


def resolve_device(device: str) -> torch.device:
    """``auto`` means CUDA where available, else the CPU; asking for CUDA without one is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError:
        raise ValueError(f"unknown device {device!r}; expected 'cpu', 'cuda', 'cuda:N' or 'auto'") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} was asked for but torch sees no CUDA device; use --device cpu")
    return resolved


def check_corruption(spec: str | None) -> None:
    """Validates a ``--corruption`` string early."""
    if spec is not None:
        parse_corruption(spec)
