"""The description of one training run: every choice the CLI exposes, checked when the config is made (before any
work starts) and immutable afterwards."""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyro_bnn.checks import Settings, enum_member, non_negative_int, optional_positive_int, positive_float, positive_int
from pyro_bnn.data import DatasetName, Normalization, Task
from pyro_bnn.data.datasets import synthetic_split_sizes
from pyro_bnn.data.partition import holdout_count
from pyro_bnn.data.seeding import check_seed
from pyro_bnn.data.synthetic import DEFAULT_N_SAMPLES
from pyro_bnn.guides import DEFAULT_GUIDE, parse_guide
from pyro_bnn.guides.mixture import samples_for_components
from pyro_bnn.infer import KLWeighting, parse_kl_schedule
from pyro_bnn.infer.lr_schedules import LR_SCHEDULE_FAMILY
from pyro_bnn.infer.objective_registry import check_objective
from pyro_bnn.infer.optim import OptimizerKind
from pyro_bnn.likelihoods import KLScale
from pyro_bnn.models import default_activation, parse_model_spec
from pyro_bnn.nn import parse_activation
from pyro_bnn.priors import parse_prior
from pyro_bnn.runs.config_checks import (
    _check_device_form,
    _random_weights,
    check_data_dir_form,
    check_generator_options,
    check_guide_start,
    check_node_noise_options,
    check_objective_choices,
    resolve_device,
)
from pyro_bnn.runs.config_checks import (
    check_corruption as check_corruption,
)
from pyro_bnn.runs.config_checks import (
    check_model_fits as check_model_fits,
)

DEFAULT_NUM_SAMPLES = 100
"""``num_samples`` left None: the test metrics' posterior samples (rounded up to a multiple of a mixture's K)."""
DEFAULT_NUM_VAL_SAMPLES = 16
"""``num_val_samples`` left None: the validation metrics' posterior samples (likewise rounded up)."""


@dataclass(frozen=True)
class RunConfig(Settings):
    """One training run. Field names match the ``pyro-bnn train`` options.

    A config is checked once, when it is made (``RunConfig(...)``, :func:`dataclasses.replace`,
    :meth:`from_dict`, :meth:`~pyro_bnn.checks.Settings.from_args`; :meth:`check` says how): a bad option raises a
    one-line ``ValueError`` naming it, its value and what is expected.
    It is frozen: vary one with ``dataclasses.replace(config, seed=1)``. Options left None whose default depends
    on the mode or the model (``activation``, ``prior``, ``guide``, ``optimizer``, ``lr``, ``lr_variational``,
    ``weight_decay``, ``num_samples``, ``num_val_samples``) stay None;
    :meth:`resolved` returns the config with them filled, which is what a run trains with and writes. Whether the
    ``device`` exists is checked where a run starts (:func:`resolve_device`), so that a run trained on a GPU can be
    read on a machine without one.

    The data set decides the task (``DatasetName.task``): classification sets train with a Categorical
    likelihood, ``cubic`` with a Gaussian one of fixed scale ``noise_scale``. Options of the other task are
    ignored (``noise_scale`` for classification; ``normalization`` and ``n_bins`` for regression).

    Attributes:
        dataset: ``mnist``, ``fashion-mnist``, ``digits``, ``moons``, ``circles`` or ``cubic`` (regression).
        model: A registered model name, or a model string with arguments such as ``mlp:256,256``
            (``pyro_bnn.models.parse_model_spec``; ``pyro-bnn list`` shows the forms).
        activation: ``relu``, ``leaky:-0.5``, ``tanh``, ... (``pyro_bnn.nn.parse_activation``). None: the model's
            own (:func:`~pyro_bnn.models.default_activation`: ``tanh`` for ``tanh-small`` and ``tanh-cnn``,
            ``relu`` for the other zoo models).
        prior: ``normal:0,1``, ``mixture``, ``hierarchical:normal,halfcauchy,1``, ... (``parse_prior``). None: the
            mode's default, ``normal:0,1`` on the weights, ``normal:1,0.1`` on node noise.
        noise_scale: Regression only: the fixed standard deviation of the Gaussian likelihood (1.0 as in the
            implicit-BNN authors' code); a finite number > 0.
        guide: ``autonormal:1e-3``, ``bbb``, ``map``, ``mle``, ``mc-dropout:0.1``, ``mixture:4`` (``parse_guide``).
            None: the mode's default, :data:`~pyro_bnn.guides.DEFAULT_GUIDE` or, with node noise, ``mixture:4``.
        node_noise: Make the network an implicit BNN (:mod:`pyro_bnn.node_noise`): latent noise N(1, s^2) on the
            inputs of every Linear and Conv layer, deterministic weights; the prior applies to the noise.
        bias_noise: With ``node_noise``: one more noise scalar per layer, multiplying its bias.
        samples_per_example: With ``node_noise`` and the ``mixture`` guide: copies of every example per step, each
            on its own component (S, 2 in the authors' training); a value other than 2 needs ``node_noise``.
        optimizer: ``adam`` or ``sgd`` (Nesterov momentum 0.9). None: ``adam`` on the weights, ``sgd`` with node
            noise (the authors'). SGD learning rates are per training example: the step applies ``lr / N`` to the
            summed full-data loss (and ``weight_decay`` to the mean), which is the authors' mean-loss SGD exactly.
        elbo: ``auto`` (``fast`` for the flat guide where it applies, else ``trace``), ``trace``, ``meanfield``,
            ``fast``, ``fast-single``, ``fast-local`` or ``fast-flipout`` (:class:`~pyro_bnn.infer.ElboKind`).
        epochs: Maximum number of epochs.
        batch_size: Minibatch size.
        lr: Learning rate of the model's parameters (the guide's too, unless ``lr_variational`` is set). None:
            1e-3 with Adam, 0.05 with SGD.
        lr_variational: Learning rate of the guide's (variational) parameters; None: ``lr``, or 0.3 with SGD and node
            noise.
            The authors use 1.2-4.8 on VGG16/WRN (base times K); on LeNet 1.2 diverged in 2 of 3 ten-epoch runs
            and 0.3 in none (``results/node-noise/sweep.md``).
        weight_decay: L2 weight decay of the model's deterministic parameters (never of the guide's). None: 0, or
            5e-4 with node noise.
        lr_schedule: Schedule of the model's learning rate, ``constant`` or ``decay:RATIO[,START,END]``
            (:mod:`pyro_bnn.infer.lr_schedules`; the authors decay to 0.01 between 50 % and 90 % of training).
        lr_variational_schedule: Schedule of the guide's learning rate (the authors keep it constant).
        num_particles: ELBO particles per step (vectorised).
        kl_anneal: KL schedule, ``constant``, ``linear:EPOCHS`` or ``cyclical:PERIOD[,RAMP]``.
        temperature: The likelihood temperature T of a tempered posterior ``p(D | w)^(1/T) p(w)`` (T < 1: cold);
            it multiplies every step's KL weight (docs/tempering.md).
        kl_weighting: ``uniform`` or ``blundell`` minibatch KL weights.
        kl_scale: ``dataset`` (the full-data ELBO: minibatch log-likelihood times N/B) or ``paper`` (the One Simple
            Trick objective: unscaled minibatch log-likelihood plus the KL on every step; not with ``blundell``).
        seed: Seeds the network's initialisation and training, and the split unless ``data_seed`` is set.
        data_seed: Seeds the validation split and the training subset instead of ``seed`` (None: ``seed``), so that
            runs differing only in ``seed`` see the same examples: the members of a deep ensemble, which differ in
            initialisation and minibatch order only.
        data_noise: Moons and circles only: the generator's noise standard deviation (None: its default, 0.2).
        data_samples: Moons and circles only: the size of the generated pool, test part included (None: 1000).
        device: ``cpu``, ``cuda``, ``cuda:1`` or ``auto``.
        train_subset: Train on this many examples (None: all).
        test_subset: Score on this many test examples (None: all): a fixed uniform subset, the same for every seed.
        val_size: Validation examples held out of the training set (None: the data set's default).
        normalization: ``unit`` (/255), ``standard`` (the data set's mean/std), ``bbb`` (/126) or
            ``mnist-standard`` (MNIST's mean/std on any data set).
        data_dir: Where MNIST / Fashion-MNIST IDX files are (None: the usual places).
        num_samples: Posterior samples for the test metrics. None: 100, rounded up to a multiple of the guide's
            components K (``mixture:3``: 102), so that each component gives the same number; a number given must be
            a multiple of K.
        num_val_samples: Posterior samples for the per-epoch validation metrics. None: 16, rounded up to a multiple
            of K likewise (``mixture:3``: 18); a number given must be a multiple of K.
        n_bins: Calibration bins.
        patience: Early stopping after this many epochs without improvement of the validation accuracy
            (regression: the validation NLL); 0: off.
        clip_norm: Clip the gradient of all trained parameters together to this norm before every step (None:
            no clipping). The loss is the summed full-data one (N times the mean per example), so its gradient norm
            grows with N. A run with clipping trains alone, never in a batch of runs.
    """

    dataset: str = "fashion-mnist"
    model: str = "3fc"
    activation: str | None = None
    prior: str | None = None
    noise_scale: float = 1.0
    guide: str | None = None
    elbo: str = "auto"
    node_noise: bool = False
    bias_noise: bool = False
    samples_per_example: int = 2
    epochs: int = 10
    batch_size: int = 128
    optimizer: str | None = None
    lr: float | None = None
    lr_variational: float | None = None
    weight_decay: float | None = None
    lr_schedule: str = "constant"
    lr_variational_schedule: str = "constant"
    num_particles: int = 1
    kl_anneal: str = "constant"
    temperature: float = 1.0
    kl_weighting: str = "uniform"
    kl_scale: str = "dataset"
    seed: int = 0
    data_seed: int | None = None
    data_noise: float | None = None
    data_samples: int | None = None
    device: str = "auto"
    train_subset: int | None = None
    test_subset: int | None = None
    val_size: float | None = None
    normalization: str = "unit"
    data_dir: str | None = None
    num_samples: int | None = None
    num_val_samples: int | None = None
    n_bins: int = 15
    patience: int = 0
    clip_norm: float | None = None

    def check(self) -> None:
        """Checks every option, with the mode's defaults filled in (:meth:`resolved`); called when the config is
        made. Raises a one-line ``ValueError`` naming the option, its value and what is expected."""
        self._filled()._check_resolved()

    def _filled(self) -> RunConfig:
        """This config with the mode's defaults filled in, made without checking it again (its values are the ones
        :meth:`_check_resolved` checks); self where none is missing."""
        node_noise = self.node_noise is True
        filled: dict[str, Any] = {}
        if self.activation is None:
            try:
                parse_model_spec(self.model)
            except (TypeError, ValueError):  # a bad model: left None, for _check_resolved to name the model
                pass
            else:  # a good model whose factory declares a bad default_activation says so itself
                filled["activation"] = default_activation(self.model)
        if self.prior is None:
            filled["prior"] = "normal:1,0.1" if node_noise else "normal:0,1"
        if self.guide is None:
            filled["guide"] = "mixture:4" if node_noise else DEFAULT_GUIDE
        optimizer = self.optimizer
        if optimizer is None:
            optimizer = filled["optimizer"] = "sgd" if node_noise else "adam"
        sgd = optimizer == "sgd"
        if self.lr is None:
            filled["lr"] = 0.05 if sgd else 1e-3
        if self.lr_variational is None and sgd and node_noise:
            filled["lr_variational"] = 0.3
        if self.weight_decay is None:
            filled["weight_decay"] = 5e-4 if node_noise else 0.0
        if self.num_samples is None or self.num_val_samples is None:
            # A default takes the same number of samples from each of a mixture guide's K components.
            multiple = parse_guide(filled.get("guide", self.guide)).samples_multiple
            for name, default in (("num_samples", DEFAULT_NUM_SAMPLES), ("num_val_samples", DEFAULT_NUM_VAL_SAMPLES)):
                if getattr(self, name) is None:
                    filled[name] = samples_for_components(default, multiple)
        if not filled:
            return self
        copy = object.__new__(RunConfig)
        for item in dataclasses.fields(self):
            object.__setattr__(copy, item.name, filled.get(item.name, getattr(self, item.name)))
        return copy

    def resolved(self) -> RunConfig:
        """The config with the options whose default depends on the mode (weight space or node noise) or the model
        (the activation) filled in: a new frozen config (self where none is missing), what a run trains with and
        writes to ``config.json``."""
        return self._filled()

    def resolve_defaults(self) -> RunConfig:
        """Deprecated: use :meth:`resolved`. Returns the resolved config; self is no longer changed (it is
        frozen), so use the return value."""
        warnings.warn(
            "RunConfig.resolve_defaults() is deprecated and no longer fills self (a RunConfig is frozen); "
            "use the config that RunConfig.resolved() returns",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.resolved()

    def validate(self) -> RunConfig:
        """Deprecated: a config is checked when it is made. Returns :meth:`resolved`, after checking that its
        ``device`` exists here (:func:`resolve_device`)."""
        resolve_device(self.device)
        return self.resolved()

    def _check_resolved(self) -> None:
        """Parses every option once so a typo fails before data loading or training (self: a resolved config)."""
        dataset = DatasetName(self.dataset)
        check_data_dir_form(self.data_dir)
        Normalization(self.normalization)
        parse_model_spec(self.model)
        if (
            isinstance(self.noise_scale, bool)
            or not isinstance(self.noise_scale, numbers.Real)
            or not (math.isfinite(self.noise_scale) and self.noise_scale > 0)
        ):
            raise ValueError(
                f"noise_scale must be a finite number > 0 (the Gaussian likelihood's standard deviation), "
                f"got {self.noise_scale!r}"
            )
        parse_activation(self.activation)
        parse_prior(self.prior)
        guide = parse_guide(self.guide)
        # The weights are counted in weight space only: with node noise they are deterministic.
        counted = None if self.node_noise else self.prior
        weights = _random_weights(self.model, dataset, self.activation, guide.dropout, counted, guide.random_weights)
        if weights is not None:
            # The guide family's size limit (a full covariance, a flow), from the weights the prior will select.
            guide.family.check_network(guide, weights)
        parse_kl_schedule(self.kl_anneal)
        self._set("temperature", positive_float(self.temperature, "temperature"))
        weighting = enum_member(KLWeighting, self.kl_weighting, "KL weighting")
        if enum_member(KLScale, self.kl_scale, "KL scale") is KLScale.PAPER and weighting is KLWeighting.BLUNDELL:
            raise ValueError(
                "kl_scale 'paper' (unscaled minibatch likelihood) does not combine with kl_weighting 'blundell', "
                "whose weights assume the N/B scaling; use kl_weighting 'uniform'"
            )
        check_node_noise_options(self, guide)
        check_guide_start(self, guide)
        check_objective(self.elbo, parse_guide(self.guide))
        for name in ("epochs", "batch_size", "num_particles", "num_samples", "num_val_samples", "n_bins"):
            value = getattr(self, name)
            # epochs >= 1 too: a run of 0 epochs would write an untrained guide's checkpoint as if it were a result.
            positive_int(value, name)
        check_objective_choices(self, guide)  # the objective's options, and the guide and prior it trains
        for name in ("lr", "lr_variational"):
            value = getattr(self, name)
            if value is None and name == "lr_variational":
                continue
            if isinstance(value, bool) or not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        wd = self.weight_decay
        if isinstance(wd, bool) or not (isinstance(wd, (int, float)) and math.isfinite(wd) and wd >= 0):
            raise ValueError(f"weight_decay must be a finite number >= 0, got {wd!r}")
        enum_member(OptimizerKind, self.optimizer, "optimizer")
        if enum_member(KLScale, self.kl_scale, "KL scale") is KLScale.PAPER and (self.optimizer == "sgd" or wd):
            raise ValueError(
                "kl_scale 'paper' (unscaled minibatch likelihood) does not combine with sgd or weight_decay, whose "
                "per-example rates assume the full-data loss; use kl_scale 'dataset' or adam without weight decay"
            )
        LR_SCHEDULE_FAMILY.parse(self.lr_schedule)
        LR_SCHEDULE_FAMILY.parse(self.lr_variational_schedule)
        non_negative_int(self.patience, "patience")
        if self.clip_norm is not None:
            self._set("clip_norm", positive_float(self.clip_norm, "clip_norm"))
        check_seed(self.seed)
        if self.data_seed is not None:
            check_seed(self.data_seed, name="data_seed")
        check_generator_options(self, dataset)
        optional_positive_int(self.train_subset, "train_subset")
        optional_positive_int(self.test_subset, "test_subset")
        if self.val_size is not None:
            # The count's upper bound depends on the data, checked when it loads (moons, circles: below); the form
            # is checked here.
            holdout_count(self.val_size, available=2**62, default=0)
        if dataset in (DatasetName.MOONS, DatasetName.CIRCLES):
            # A generated pool's parts are known from its size: one left empty is refused before anything runs.
            pool = DEFAULT_N_SAMPLES if self.data_samples is None else self.data_samples
            synthetic_split_sizes(pool, self.val_size, dataset=dataset.value, name="data_samples")
        if self.patience and self.val_size == 0:
            raise ValueError(f"patience={self.patience} needs a validation split, but val_size is 0")
        if self.patience and self.val_size is None and dataset.task is Task.REGRESSION:
            raise ValueError(
                f"patience={self.patience} needs a validation split, but {dataset.value!r} holds none out by "
                "default; pass val_size (--val-size)"
            )
        _check_device_form(self.device)

    def generator_options(self) -> dict[str, float | int]:
        """The ``load_dataset`` keyword arguments of ``data_noise`` and ``data_samples`` that are set."""
        options: dict[str, float | int] = {}
        if self.data_noise is not None:
            options["noise"] = float(self.data_noise)
        if self.data_samples is not None:
            options["n_samples"] = self.data_samples
        return options

    def unused_options(self) -> list[str]:
        """One line per option that is set but cannot affect this run, for the CLI to warn about: an option
        ignored without a word looks as if it had been used.

        ``data_dir`` for a data set not read from files is the one so far (``normalization`` and ``n_bins`` of
        the other task keep their defaults in practice and are not reported).
        """
        dataset = DatasetName(self.dataset)
        if self.data_dir is not None and not dataset.reads_data_dir:
            return [
                f"--data-dir {self.data_dir} is unused: dataset {dataset.value!r} is not read from files "
                "(only mnist, fashion-mnist, cifar10 and cifar100 are)"
            ]
        return []

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
        """Reads a ``config.json``.

        Raises:
            ValueError: the file is not JSON, not an object, or holds unknown options (naming the file).
        """
        try:
            values = json.loads(Path(path).read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{path} is not valid JSON ({err})") from None
        if not isinstance(values, dict):
            raise ValueError(f"{path} must hold a JSON object of run options, found {type(values).__name__}")
        try:
            return cls.from_dict(values)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{path}: {err}") from None
