"""Per-epoch validation: posterior predictive metrics on held-out data, written into each epoch's record."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch

from pyro_bnn.bnn import BNN
from pyro_bnn.checks import positive_int
from pyro_bnn.guides.mixture import samples_for_components
from pyro_bnn.infer.callbacks import Callback, last_checkpoint_text
from pyro_bnn.infer.divergence import DIVERGENCE_ADVICE, NonFiniteLossError, NonFiniteOutputError
from pyro_bnn.predict import predict
from pyro_bnn.predict.sources import GuideSource

if TYPE_CHECKING:
    from pyro_bnn.infer.trainer import Trainer

DEFAULT_VAL_SAMPLES = 16
"""Posterior samples per validation unless told otherwise."""


class Validation(Callback):
    """Adds ``val_<metric>`` to each epoch's record: the posterior predictive metrics of
    :meth:`~pyro_bnn.predict.Prediction.metrics` on :attr:`loader` (``val_accuracy``, ``val_nll``, ``val_brier``,
    ``val_ece``, ``val_mce`` for a classifier; ``val_rmse``, ``val_nll``, ``val_coverage`` for a regression;
    ``val_coverage`` is NaN for Student-t noise of ``df <= 2``, whose sd is infinite).

    A :class:`~pyro_bnn.infer.Trainer` builds one from its ``num_val_samples`` and ``n_bins``, sets :attr:`loader`
    to ``fit``'s ``val_loader`` and runs :meth:`on_epoch_end` after each epoch's last step, once the parameters are
    known to be finite, before the epoch is counted (``trainer.epoch`` is still the previous one) and before every
    other callback, so that early stopping and checkpoints see the metrics.

    Args:
        num_samples: Posterior samples per validation; None (the default): :data:`DEFAULT_VAL_SAMPLES`, rounded up
            to a multiple of a mixture guide's K (:meth:`samples_for`).
        n_bins: Calibration bins for the ECE and MCE.
        loader: The validation batches, or None (no metrics).
    """

    def __init__(self, num_samples: int | None = None, n_bins: int = 15, loader: Iterable | None = None) -> None:
        num_samples = None if num_samples is None else positive_int(num_samples, "num_val_samples")
        n_bins = positive_int(n_bins, "n_bins")
        self.num_samples, self.n_bins, self.loader = num_samples, n_bins, loader

    def samples_for(self, guide: Callable) -> int:
        """The posterior samples a validation of ``guide`` draws: :attr:`num_samples`, or where that is None
        :data:`DEFAULT_VAL_SAMPLES` rounded up to a multiple of the guide's K (18 for a mixture of 3), so that each
        component gives as many."""
        if self.num_samples is not None:
            return self.num_samples
        return samples_for_components(DEFAULT_VAL_SAMPLES, GuideSource(guide).num_components)

    def check_guide(self, guide: Callable) -> None:
        """Refuses an explicit :attr:`num_samples` that is no multiple of a mixture guide's K (its components would
        weigh unequally), in one line naming ``num_val_samples``."""
        k = GuideSource(guide).num_components
        if self.num_samples is not None and self.num_samples % k:
            raise ValueError(
                f"num_val_samples={self.num_samples} is not a multiple of {k}: the mixture guide takes the same "
                f"number of samples from each of its {k} components (e.g. "
                f"{samples_for_components(self.num_samples, k)}; the default, None, is "
                f"{samples_for_components(DEFAULT_VAL_SAMPLES, k)} "
                "here)"
            )

    @torch.no_grad()
    def evaluate(
        self, model: torch.nn.Module, guide: torch.nn.Module, loader: Iterable, num_samples: int | None = None
    ) -> dict[str, float]:
        """Posterior predictive metrics of ``model`` and ``guide`` on ``loader`` (without the ``val_`` prefix).

        Raises:
            NonFiniteOutputError: The predictions are NaN or infinite.
        """
        num_samples = self.samples_for(guide) if num_samples is None else num_samples
        if isinstance(model, BNN):
            prediction = predict(model, guide, loader, num_samples=num_samples)
        else:  # a composed model (TrainableModel) makes its own predictive
            prediction = model.predict(guide, loader, num_samples=num_samples)
        outputs = prediction.probs if prediction.is_classification else prediction.means
        if not bool(torch.isfinite(outputs).all()):
            raise NonFiniteOutputError("the network's predictions on the validation data are NaN or infinite")
        return prediction.metrics(n_bins=self.n_bins)

    def on_epoch_end(self, trainer: Trainer, record: dict[str, Any]) -> None:
        """Adds the metrics on :attr:`loader` (if any) to ``record``.

        Raises:
            NonFiniteLossError: The predictions overflow: the parameters diverged.
        """
        if self.loader is None:
            return
        try:
            metrics = self.evaluate(trainer.bnn, trainer.guide, self.loader)
        except NonFiniteOutputError as err:
            raise NonFiniteLossError(
                f"{err} after epoch {record['epoch']}: the parameters diverged; training stopped and "
                f"{last_checkpoint_text(trainer.callbacks)}. {DIVERGENCE_ADVICE}"
            ) from err
        record.update({f"val_{k}": v for k, v in metrics.items()})
