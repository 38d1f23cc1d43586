"""What an SG-MCMC run returns: its draws in the code base's two layouts, and r-hat / ESS from ArviZ."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pyro_bnn.bnn import BNN
from pyro_bnn.diagnostics import arviz_compat
from pyro_bnn.diagnostics.arviz_export import convergence_summary, site_dims, to_inference_data
from pyro_bnn.predict.predictive import Data
from pyro_bnn.predict.sources import Samples
from pyro_bnn.sgmcmc.samplers import Method


class SGMCMCDivergenceError(RuntimeError):
    """A chain's log joint or parameters became NaN or infinite; the run stopped (the step size is too large)."""


def divergence_message(method: Method, chain: int, step: int, total: int, what: str, step_size: float) -> str:
    """The one-line message of a :class:`SGMCMCDivergenceError` (``chain`` and ``step`` counted from 0 and 1)."""
    return (
        f"{method.value} chain {chain} diverged at step {step} of {total}: {what}; try a smaller step_size "
        f"(now {step_size:g})"
    )


@dataclass
class SGMCMCResult:
    """Draws of an SG-MCMC run.

    Attributes:
        samples: ``{site: (chain, draw, *site_shape)}``, what :func:`~pyro_bnn.diagnostics.to_inference_data`
            takes.
        log_joint: ``(chain, total_steps)``: every step's minibatch log joint ``log p(w) + N/B log p(batch | w)``
            at the parameters the step started from (a burn-in and stage trace; noisy by construction).
        method: The sampler.
        step_size: Its (peak) step size.
        steps_per_chain: Steps each chain ran, burn-in included.
        seconds: Wall time of the run (all chains together).
    """

    samples: dict[str, torch.Tensor]
    log_joint: torch.Tensor
    method: Method
    step_size: float
    steps_per_chain: int
    seconds: float = 0.0

    @property
    def num_chains(self) -> int:
        """Chains run."""
        return next(iter(self.samples.values())).shape[0]

    @property
    def num_draws(self) -> int:
        """Draws kept per chain."""
        return next(iter(self.samples.values())).shape[1]

    def flat_samples(self) -> dict[str, torch.Tensor]:
        """``{site: (chain * draw, *site_shape)}``, chain 0's draws first: what :class:`~pyro_bnn.predict.Samples`
        takes."""
        return {name: value.reshape(-1, *value.shape[2:]) for name, value in self.samples.items()}

    def source(self) -> Samples:
        """The draws as a :class:`~pyro_bnn.predict.Samples` source for :func:`~pyro_bnn.predict.predict`."""
        return Samples(self.flat_samples())

    def inference_data(self, bnn: BNN, data: Data | None = None, **options: Any) -> Any:
        """ArviZ's container of the draws (:func:`~pyro_bnn.diagnostics.to_inference_data`, same options), with
        pointwise log-likelihoods when ``data`` is given."""
        return to_inference_data(bnn, self.samples, data, **options)

    def _posterior(self, sites: Sequence[str] | None) -> tuple[Any, list[str]]:
        names = list(self.samples) if sites is None else list(sites)
        unknown = [name for name in names if name not in self.samples]
        if unknown:
            raise ValueError(f"the run holds no site(s) {unknown[:5]}; it has {list(self.samples)[:5]}")
        posterior = {name: self.samples[name].detach().cpu().numpy() for name in names}
        dims = {name: site_dims(name, self.samples[name].dim() - 2) for name in names}
        return arviz_compat.from_dicts(posterior, dims=dims), names

    def rhat(self, sites: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Rank-normalised split r-hat (ArviZ) of every scalar: ``{site: site_shape array}``.

        Args:
            sites: Sites to include; default all.
        """
        data, names = self._posterior(sites)
        values = arviz_compat.rhat(data, names)
        return {name: np.asarray(values[name].values) for name in names}

    def ess(self, sites: Sequence[str] | None = None, *, method: str = "bulk") -> dict[str, np.ndarray]:
        """Effective sample size (ArviZ, ``method`` ``"bulk"``, ``"tail"``, ``"mean"``, ...) of every scalar over all
        chains: ``{site: site_shape array}``."""
        data, names = self._posterior(sites)
        values = arviz_compat.ess(data, names, method=method)
        return {name: np.asarray(values[name].values) for name in names}

    def convergence(self, sites: Sequence[str] | None = None) -> dict[str, float]:
        """r-hat and bulk / tail ESS summarised as floats
        (:func:`~pyro_bnn.diagnostics.convergence.convergence_summary`): ``rhat_max``, ``ess_bulk_min``, ..."""
        data, names = self._posterior(sites)
        return convergence_summary(data, names)
