"""The choices of a Laplace approximation: which weights, which Hessian structure, how the prior is tuned, and which
predictive."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from pyro_bnn.checks import Settings, enum_member, positive_float, positive_int


class Subset(str, Enum):
    """Which weights the Laplace approximation makes random."""

    LAST_LAYER = "last_layer"
    """The last layer only (laplace-torch finds it: the last leaf module that runs, which must be an
    ``nn.Linear``); every other weight stays at its MAP value."""
    ALL = "all"
    """Every weight of the network (each network parameter must be a weight site of the BNN)."""


class Structure(str, Enum):
    """The structure of the log-likelihood Hessian (its generalised Gauss-Newton approximation)."""

    DIAG = "diag"
    """The diagonal of the GGN: independent weights."""
    KRON = "kron"
    """Kronecker-factored (KFAC): one ``B (x) A`` block per layer parameter, no covariance between parameters or
    layers."""
    FULL = "full"
    """The dense GGN over the chosen weights (memory grows with the square of their number)."""


class PriorStructure(str, Enum):
    """How many prior precisions the marginal likelihood tunes."""

    SCALAR = "scalar"
    """One precision for every weight."""
    LAYERWISE = "layerwise"
    """One precision per parameter tensor (``weight`` and ``bias`` of each layer apart; for the last layer, two)."""


class Predictive(str, Enum):
    """How the Laplace posterior predicts."""

    GLM = "glm"
    """The linearised network (a generalised linear model in the weights): the outputs are Gaussian with mean
    ``f(x; w_MAP)`` and covariance ``J Sigma J^T``, pushed through the link by ``link``."""
    MC = "mc"
    """Monte Carlo over the network itself: weight draws from the Laplace posterior, each run through the network
    (:func:`pyro_bnn.predict.predict` with :meth:`LaplacePosterior.source`)."""


class Link(str, Enum):
    """How the GLM predictive turns Gaussian logits into class probabilities."""

    PROBIT = "probit"
    """The probit approximation ``softmax(mu / sqrt(1 + pi/8 var))``: one deterministic set of probabilities."""
    MC = "mc"
    """Monte Carlo: logit draws from the Gaussian, each through the softmax; one set of probabilities per draw."""


MARGLIK_WINDOW = 100
"""The Adam steps over which the log prior precision must move less than ``marglik_tol`` all told for the tuning to
stop (:class:`LaplaceOptions`): a change over many steps, since Adam nears the optimum from a far start in ever
smaller steps, each of which would pass for settled."""


@dataclass(frozen=True)
class LaplaceOptions(Settings):
    """How :func:`~pyro_bnn.laplace.fit_laplace` builds the approximation. Strings are turned into the enums.

    Attributes:
        subset: ``"last_layer"`` or ``"all"`` (:class:`Subset`).
        structure: ``"diag"``, ``"kron"`` or ``"full"`` (:class:`Structure`).
        prior_precision: The prior precision to start from (the fixed one when ``tune_prior`` is off). None reads
            it from the BNN's prior, which must then be a :class:`~pyro_bnn.priors.NormalPrior`: ``1 / scale^2``,
            around its ``loc``.
        tune_prior: Tune the prior precision by maximising laplace-torch's Laplace estimate of the log marginal
            likelihood (Adam on the log precision).
        prior_structure: ``"scalar"`` or ``"layerwise"`` (:class:`PriorStructure`): what the tuning may vary.
        marglik_steps: The most Adam steps of the tuning, at least :data:`MARGLIK_WINDOW`. It stops earlier, once
            the log precision has settled: moved less than ``marglik_tol`` over the last :data:`MARGLIK_WINDOW`
            steps; a tuning that has not settled by then warns. Each step evaluates the marginal likelihood once,
            which for ``structure="full"`` is a log-determinant of the P x P posterior precision: measured on 1 218
            weights, 207 steps (15 s) from the default start, 1 213 (88 s) from 1 000 times the optimum, where a
            fixed 100 steps took 7 s and stopped 5 to 86 times above the optimum.
        marglik_lr: Adam's learning rate on the log precision.
        marglik_tol: The change of the log precision over :data:`MARGLIK_WINDOW` steps below which it has settled.

    Raises:
        ValueError: an unknown choice, or a number out of range (one line each).
    """

    subset: Subset | str = Subset.LAST_LAYER
    structure: Structure | str = Structure.KRON
    prior_precision: float | None = None
    tune_prior: bool = True
    prior_structure: PriorStructure | str = PriorStructure.SCALAR
    marglik_steps: int = 2000
    marglik_lr: float = 0.1
    marglik_tol: float = 1e-4

    def check(self) -> None:
        self._set("subset", enum_member(Subset, self.subset, "Laplace subset"))
        self._set("structure", enum_member(Structure, self.structure, "Hessian structure"))
        self._set("prior_structure", enum_member(PriorStructure, self.prior_structure, "prior structure"))
        if self.prior_precision is not None:
            value = self.prior_precision
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
                raise ValueError(f"prior_precision must be a finite number > 0 or None, got {value!r}")
            self._set("prior_precision", float(value))
        if not isinstance(self.tune_prior, bool):
            raise ValueError(f"tune_prior must be True or False, got {self.tune_prior!r}")
        positive_int(self.marglik_steps, "marglik_steps")
        if self.tune_prior and self.marglik_steps < MARGLIK_WINDOW:
            raise ValueError(
                f"marglik_steps must be at least {MARGLIK_WINDOW} (the window over which the tuning judges whether "
                f"the prior precision has settled), got {self.marglik_steps}"
            )
        positive_float(self.marglik_lr, "marglik_lr")
        positive_float(self.marglik_tol, "marglik_tol")


__all__ = ["LaplaceOptions", "Link", "Predictive", "PriorStructure", "Structure", "Subset"]
