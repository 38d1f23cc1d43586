"""A user's Pyro model around random functions, made trainable by :class:`~pyro_bnn.infer.Trainer` and predicted into
a :class:`~pyro_bnn.predict.Prediction`.

:class:`ComposedModel` states what a :class:`~pyro_bnn.BNN`'s likelihood states for it (the data set size N, the
observation site, the plates) and does what the likelihood does: it marks the observation site as the data term and
scales every site of the data plate by N/B, so that a minibatch estimates the full data set's ELBO. Its predictive
reads each posterior draw's distribution of the observation (a ``Normal``, ``StudentT`` or ``Categorical``) instead
of sampling it, as the library's own predictive does.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.poutine.util import site_is_subsample
from torch import nn

from pyro_bnn.checks import positive_int
from pyro_bnn.compose.random_function import PREDICTIVE_PLATE, RandomFunction
from pyro_bnn.compose.scaling import DATA_SCALE_TAG, DataPlateScale, ScaledGuide, data_plate_factor, same_scale
from pyro_bnn.predict import Prediction
from pyro_bnn.predict.batches import data_batches
from pyro_bnn.sites import LIKELIHOOD_TAG


class _DataTerm(DataPlateScale):
    """Tags the observation site as the likelihood's, scales every site in the data plate by N / (plate size), and
    refuses a per-example latent replayed from a guide that did not scale it alike.

    Pyro's ``replay`` hands the guide site's ``infer`` dict to the model's site, after this handler (the innermost)
    has processed it: a latent whose ``infer`` is no longer the one set here came from the guide, whose
    :class:`~pyro_bnn.compose.scaling.DataPlateScale` recorded its scale there (a guide sampled outside one recorded
    none).
    """

    def __init__(self, observation: str, data_plate: str, dataset_size: int) -> None:
        super().__init__(data_plate, dataset_size)
        self.observation = observation
        self.seen: dict[str, bool] = {}
        self._own_infer: dict[str, dict] = {}

    def _process_message(self, msg: dict) -> None:
        if msg["type"] != "sample":
            return
        factor = data_plate_factor(msg, self.data_plate, self.dataset_size)
        in_plate = factor is not None
        if msg["name"] == self.observation:
            if not in_plate:
                raise ValueError(
                    f"the observation site {self.observation!r} is not inside the data plate {self.data_plate!r}"
                )
            msg["infer"] = {**(msg.get("infer") or {}), LIKELIHOOD_TAG: True}
            self.seen["observation"] = True
        if in_plate:
            self.seen["plate"] = True
            super()._process_message(msg)
            # Only where this handler scales (a plate of B < N rows): a plate declared at its full size N with a
            # subsample is Pyro's own, which scales model and guide alike.
            if not msg["is_observed"] and not same_scale(factor, 1.0):
                self._own_infer[msg["name"]] = msg["infer"]

    def _postprocess_message(self, msg: dict) -> None:
        own = self._own_infer.pop(msg["name"], None) if msg["type"] == "sample" else None
        if own is None or msg["infer"] is own:  # not scaled, or sampled here rather than replayed from a guide
            return
        scale, guide_scale = own[DATA_SCALE_TAG], msg["infer"].get(DATA_SCALE_TAG)
        if guide_scale is None or not same_scale(guide_scale, scale):
            found = "not scaled" if guide_scale is None else f"scaled by {_number(guide_scale)}"
            raise ValueError(
                f"the guide's site {msg['name']!r} in the data plate {self.data_plate!r} is {found}, the model's by "
                f"N/B = {_number(scale)}: the minibatch ELBO needs both (log q as log p of each per-example latent); "
                "build the guide with model_guide(composed, ...) or wrap it as composed.scaled_guide(guide) (an "
                "autoguide with parameters per row, AutoNormal's, takes no minibatches: those refuse it)"
            )


def _number(scale: float | torch.Tensor) -> float | str:
    """A site scale for a message: the number, or a tensor's shape."""
    if isinstance(scale, torch.Tensor):
        return float(scale) if scale.numel() == 1 else f"a tensor of shape {tuple(scale.shape)}"
    return float(scale)


def _unwrap(fn: dist.Distribution) -> dist.Distribution:
    """The distribution under ``Independent`` / masking / expansion wrappers (its parameters broadcast later)."""
    while isinstance(fn, (dist.Independent, dist.MaskedDistribution, dist.ExpandedDistribution)):
        fn = fn.base_dist
    return fn


def _rows(value: torch.Tensor, num_samples: int, rows: int, what: str) -> torch.Tensor:
    """``value`` with its (sample, 1, ..., 1, row) batch layout flattened to ``(S, B, -1)``."""
    if value.numel() % (num_samples * rows):
        raise ValueError(
            f"the observation's {what} has shape {tuple(value.shape)}, which is not S={num_samples} draws of "
            f"B={rows} rows; a composed model's observation must have one row per input"
        )
    return value.reshape(num_samples, rows, -1)


def _one_df(df: torch.Tensor) -> torch.Tensor:
    """The one degrees of freedom of a Student-t observation, over every row and draw (a Prediction has one)."""
    if not bool((df == df[0]).all()):
        raise ValueError("a composed model's Student-t observation must have one degrees of freedom in every draw")
    return df[0]


class ComposedModel(nn.Module):
    """A user-written Pyro model ``model(x, y=None)`` around random functions, for :class:`~pyro_bnn.infer.Trainer`.

    The model draws its latents (the networks' weights through :class:`~pyro_bnn.compose.RandomFunction`, its own
    scales, offsets and per-example latents) and observes ``y`` at the site ``observation`` inside a plate named
    ``data_plate`` over the minibatch rows (``pyro.plate("data", x.shape[0])``). Wrapping it here makes it a
    :class:`~pyro_bnn.infer.trainable.TrainableModel`: every site of the data plate is scaled by N/B (a plate
    declared with ``size=N`` and a ``subsample`` is left to Pyro's own scaling), the observation becomes the
    ELBO's data term (the rest is the KL term, which annealing and tempering scale), the networks' deterministic
    parameters are this module's own (trained by the Trainer, saved in its checkpoints), and :meth:`predict` gives
    the posterior predictive as a :class:`~pyro_bnn.predict.Prediction`.

    A guide of per-example latents (sites in the data plate) must scale them by N/B too, or the minibatch ELBO
    weighs their ``log q`` B/N times too little: :func:`~pyro_bnn.compose.model_guide` of this model
    (``model_guide(composed, ...)``) scales its guide, :meth:`scaled_guide` wraps a guide of your own, and a
    minibatch on which such a latent comes from a guide scaled otherwise is refused in one line.

    Args:
        model: The user's model, called as ``model(x, y)``.
        functions: The random functions it calls.
        dataset_size: N, the training examples.
        observation: Name of the observation site.
        data_plate: Name of the plate over the minibatch rows.
        max_plate_nesting: How many plates the model opens (the data plate included); vectorised draws go left of
            them.
        parallel_draws: Draw the S predictive samples at once, under a sample plate (the model must broadcast, as
            one written with plates does); False runs the model once per draw, as a model must whose networks take
            per-example latents as inputs (a latent-input BNN, a decoder), whose inputs then differ between draws.

    Shapes:
        ``x``: ``(B, *input_shape)``; ``y``: ``(B,)`` labels or ``(B,)`` / ``(B, D)`` regression targets.
    """

    def __init__(
        self,
        model: Callable,
        functions: RandomFunction | Sequence[RandomFunction],
        *,
        dataset_size: int,
        observation: str = "y",
        data_plate: str = "data",
        max_plate_nesting: int = 1,
        parallel_draws: bool = True,
    ) -> None:
        super().__init__()
        if not callable(model):
            raise ValueError(f"model must be a callable model(x, y=None), got {type(model).__name__}")
        functions = [functions] if isinstance(functions, RandomFunction) else list(functions)
        if not functions or not all(isinstance(f, RandomFunction) for f in functions):
            raise ValueError("functions must be one or more pyro_bnn.compose.RandomFunction")
        self.model = model
        self.functions = functions
        # the networks, as submodules: their deterministic parameters train and save with the model
        self.networks = nn.ModuleDict({f.prefix: f.bnn for f in functions})
        self.dataset_size = positive_int(dataset_size, "dataset_size")
        self.max_plate_nesting = positive_int(max_plate_nesting, "max_plate_nesting")
        self.observation, self.data_plate = str(observation), str(data_plate)
        self.parallel_draws = bool(parallel_draws)

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None):
        """Runs the user's model on a minibatch, its data plate scaled by N/B and its observation tagged; refuses a
        per-example latent replayed from a guide that did not scale it by N/B too (see the class docstring)."""
        handler = _DataTerm(self.observation, self.data_plate, self.dataset_size)
        with handler:
            result = self.model(x, y)
        if "observation" not in handler.seen:
            raise ValueError(
                f"the model sampled no site {self.observation!r} inside a plate {self.data_plate!r}; name its "
                "observation and data plate with observation= and data_plate="
            )
        return result

    def scaled_guide(self, guide: Callable) -> ScaledGuide:
        """``guide`` with its sites in the data plate scaled by N / (plate size), as this model's are: the guide to
        train with it on minibatches when it has per-example latents (:class:`~pyro_bnn.compose.ScaledGuide`).

        Args:
            guide: A guide module or function ``guide(x, y=None)``.

        Returns:
            A module running ``guide`` with its data-plate sites scaled; ``x (B, ...)``, ``y (B, ...)`` as the model.
        """
        return ScaledGuide(guide, dataset_size=self.dataset_size, data_plate=self.data_plate)

    def validate_batch(self, x: torch.Tensor, y: torch.Tensor | None = None) -> None:
        """One-line errors for inputs and targets that are not a batch of rows."""
        if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.shape[0] < 1:
            raise ValueError(f"x must be a tensor of B >= 1 rows (B, ...), got {getattr(x, 'shape', type(x))}")
        if y is not None and (not isinstance(y, torch.Tensor) or y.shape[:1] != x.shape[:1]):
            raise ValueError(
                f"y must be a tensor with one row per input ({x.shape[0]}), got {getattr(y, 'shape', type(y))}"
            )

    def _global_draws(self, guide: Callable, x: torch.Tensor, y: torch.Tensor, num_samples: int) -> list:
        """Draws of every guide site outside the data plate, as ``[(plate or None, trace, draws in it)]``: one
        vectorised trace of S draws, or S traces of one (``parallel_draws=False``). Per-example latents of new inputs
        come from their prior in the model instead."""
        if self.parallel_draws:
            plate = pyro.plate(PREDICTIVE_PLATE, num_samples, dim=-self.max_plate_nesting - 1)
            with plate:
                traces = [(plate, poutine.trace(guide).get_trace(x, y), num_samples)]
        else:
            traces = [(None, poutine.trace(guide).get_trace(x, y), 1) for _ in range(num_samples)]
        for _, trace, _ in traces:
            for name, node in list(trace.nodes.items()):
                if node["type"] != "sample":
                    continue
                local = any(f.name == self.data_plate for f in node["cond_indep_stack"])
                if local or site_is_subsample(node):  # the new inputs have plates and latents of their own
                    trace.remove_node(name)
        return traces

    @torch.no_grad()
    def predict(self, guide: Callable, data: Iterable, *, num_samples: int = 100) -> Prediction:
        """The posterior predictive of ``guide`` on every input of ``data``.

        The guide's global latents are drawn ``num_samples`` times, once, and every batch is scored with the same
        draws; per-example latents inside the data plate are drawn from the model's prior for each input (new
        inputs have no posterior of their own). Each draw's observation distribution gives the prediction: class
        probabilities for a ``Categorical``; the mean and noise scale (and degrees of freedom) for a ``Normal`` or
        ``StudentT``; ``log_likelihood`` is its log density of the targets.

        Args:
            guide: The trained guide: a module, or a function of ``(x, y=None)`` (then the inputs run on the model's
                device, or where they are when the model holds no tensor).
            data: A re-iterable loader of ``(x, y)`` batches (or one ``(x, y)`` pair).
            num_samples: S.

        Returns:
            A :class:`~pyro_bnn.predict.Prediction`: ``probs (S, N, C)``, or ``means`` and ``noise_scale``
            ``(S, N, D)``; ``targets`` and ``log_likelihood (S, N)``.
        """
        num_samples = positive_int(num_samples, "num_samples")
        if isinstance(data, Iterator):  # read once, here: every draw scores the same batches
            data = list(data)
        batches = data_batches(data, None, "predict")
        if any(y is None for _, y in batches):
            raise ValueError("predict needs (x, y) batches: the targets are scored (log_likelihood)")
        device = self._device(guide, batches[0][0])
        x0, y0 = (t.to(device) for t in batches[0])
        self.validate_batch(x0, y0)
        draws = self._global_draws(guide, x0, y0, num_samples)
        fields: dict[str, list[torch.Tensor]] = {}
        targets, log_likelihood = [], []
        for x, y in batches:
            x, y = x.to(device), y.to(device)
            self.validate_batch(x, y)
            batch_fields: dict[str, list[torch.Tensor]] = {}
            batch_log_likelihood = []
            for plate, trace, count in draws:
                with plate if plate is not None else contextlib.nullcontext():
                    run = poutine.trace(poutine.replay(self.model, trace=trace)).get_trace(x, None)
                fn = run.nodes[self.observation]["fn"]
                for key, value in self._fields(fn, count, x.shape[0]).items():
                    batch_fields.setdefault(key, []).append(value)
                batch_log_likelihood.append(_rows(fn.log_prob(y), count, x.shape[0], "log density").squeeze(-1))
            for key, values in batch_fields.items():
                fields.setdefault(key, []).append(torch.cat(values))
            log_likelihood.append(torch.cat(batch_log_likelihood))
            targets.append(y)
        return self._prediction(fields, torch.cat(targets), torch.cat(log_likelihood, dim=1))

    def _device(self, guide: Callable, x: torch.Tensor) -> torch.device:
        """Where prediction runs: the first parameter of the guide, else of the model (a parameter or buffer), else
        the inputs ``x`` ``(B, ...)`` where they are. A function guide has no ``parameters()``, and a model of random
        functions alone may hold no tensor at all (its weights are sample sites)."""
        guide_parameters = guide.parameters() if isinstance(guide, nn.Module) else ()
        tensors = itertools.chain(guide_parameters, self.parameters(), self.buffers())
        return next((t.device for t in tensors), x.device)

    def _fields(self, fn: dist.Distribution, num_samples: int, rows: int) -> dict[str, torch.Tensor]:
        batch = fn.batch_shape
        if not batch or batch[-1] != rows or math.prod(batch[:-1]) != num_samples:
            raise ValueError(
                f"the observation {self.observation!r} has batch shape {tuple(batch)} for {num_samples} draw(s) of "
                f"{rows} rows; expected ({num_samples}, 1, ..., {rows}): does every latent broadcast against the "
                "data plate (a global scalar drawn S times has shape (S, 1))?"
            )
        base = _unwrap(fn)
        shape = fn.batch_shape + fn.event_shape
        if isinstance(base, dist.Categorical):
            probs = base.probs.expand(fn.batch_shape + base.probs.shape[-1:])
            return {"probs": _rows(probs, num_samples, rows, "probabilities")}
        if isinstance(base, (dist.Normal, dist.StudentT)):
            out = {
                "means": _rows(base.loc.expand(shape), num_samples, rows, "mean"),
                "noise_scale": _rows(base.scale.expand(shape), num_samples, rows, "scale"),
            }
            if isinstance(base, dist.StudentT):
                out["noise_df"] = base.df.expand(shape).reshape(-1)  # checked to be one value by _one_df
            return out
        raise ValueError(
            f"predict reads a Normal, StudentT or Categorical observation; {self.observation!r} is a "
            f"{type(base).__name__}"
        )

    @staticmethod
    def _prediction(fields: dict, targets: torch.Tensor, log_likelihood: torch.Tensor) -> Prediction:
        if "probs" in fields:
            return Prediction(probs=torch.cat(fields["probs"], dim=1), targets=targets, log_likelihood=log_likelihood)
        means = torch.cat(fields["means"], dim=1)
        return Prediction(
            means=means,
            noise_scale=torch.cat(fields["noise_scale"], dim=1),
            noise_df=_one_df(torch.cat(fields["noise_df"])) if "noise_df" in fields else None,
            targets=targets.reshape(targets.shape[0], -1) if targets.dim() == 1 else targets,
            log_likelihood=log_likelihood,
        )

    def extra_repr(self) -> str:
        prefixes = [f.prefix for f in self.functions]
        return f"functions={prefixes}, dataset_size={self.dataset_size}, observation={self.observation!r}"


__all__ = ["ComposedModel"]
