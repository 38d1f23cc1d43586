"""The running moments of SWAG: the mean, the mean of squares and the last K deviations of a weight trajectory.

Maddox et al. (2019), "A Simple Baseline for Bayesian Uncertainty in Deep Learning", Algorithm 1: after each
collected SGD iterate ``theta_n`` (``n = 1, 2, ...``),

    mean    <- (n - 1) / n * mean    + theta_n / n
    sq_mean <- (n - 1) / n * sq_mean + theta_n ** 2 / n
    D       <- the last K columns of [..., theta_n - mean]     (the deviation from the *updated* mean)

The diagonal covariance is ``sq_mean - mean ** 2`` (clamped at a small positive floor, since rounding can make it
negative); the low-rank one is ``D D^T / (K - 1)``. Pure torch; flat weights ``(P,)``.
"""

from __future__ import annotations

import torch

from pyro_bnn.checks import non_negative_int, positive_int

VARIANCE_FLOOR = 1e-30
"""The smallest diagonal variance kept (the authors' ``var_clamp``)."""


class SwagMoments:
    """Accumulates SWAG's moments over collected iterates of flat weights ``(P,)``.

    Args:
        dim: P, the number of scalar weights.
        rank: K, the most deviation columns kept (the oldest is dropped when a new one arrives); 0 keeps none
            (SWAG-Diagonal).
        dtype, device: Of the accumulators (float64 by default: the mean of squares minus the squared mean
            cancels, and float32 loses the small variances of a converged trajectory).

    Attributes:
        count: n, the iterates collected so far.
        mean: ``(P,)``; sq_mean: ``(P,)``; deviations: ``(min(n, K), P)``, oldest first.
    """

    def __init__(
        self, dim: int, rank: int = 20, *, dtype: torch.dtype = torch.float64, device: torch.device | str = "cpu"
    ) -> None:
        self.dim = positive_int(dim, "dim")
        self.rank = non_negative_int(rank, "rank (0: diagonal SWAG)")
        self.count = 0
        self.mean = torch.zeros(dim, dtype=dtype, device=device)
        self.sq_mean = torch.zeros(dim, dtype=dtype, device=device)
        self.deviations = torch.zeros(0, dim, dtype=dtype, device=device)

    @torch.no_grad()
    def collect(self, theta: torch.Tensor) -> None:
        """Adds one iterate ``theta`` ``(P,)`` (any float dtype; it is not modified)."""
        if tuple(theta.shape) != (self.dim,):
            raise ValueError(f"theta has shape {tuple(theta.shape)}, expected ({self.dim},)")
        if not torch.isfinite(theta).all():
            raise ValueError("theta holds NaN or infinite weights; SWAG collects finite iterates only")
        theta = theta.detach().to(self.mean)
        self.count += 1
        weight = 1.0 / self.count
        self.mean.mul_(1.0 - weight).add_(theta, alpha=weight)
        self.sq_mean.mul_(1.0 - weight).add_(theta * theta, alpha=weight)
        if self.rank:
            column = (theta - self.mean).unsqueeze(0)
            self.deviations = torch.cat([self.deviations, column])[-self.rank :]

    @property
    def variance(self) -> torch.Tensor:
        """The diagonal variance ``(P,)``: ``sq_mean - mean ** 2``, at least :data:`VARIANCE_FLOOR`."""
        return (self.sq_mean - self.mean**2).clamp_min(VARIANCE_FLOOR)
