"""The SG-MCMC update rules and their step plan (step size, stage and kept draws at every step).

Every rule moves flat weights ``theta`` ``(D,)`` along ``g = grad log p~(theta)``, the gradient of the minibatch log
joint (:mod:`pyro_bnn.sgmcmc.log_joint`), with step size ``eps``:

* SGLD (Welling & Teh 2011): ``theta += eps / 2 * g + N(0, eps I)``.
* SGHMC (Chen, Fox & Guestrin 2014, in their "connection to SGD with momentum" form with the gradient-noise estimate
  ``beta_hat = 0``): ``v = (1 - alpha) v + eps * g + N(0, 2 alpha eps I)``, then ``theta += v``; ``eps`` is the
  learning rate (``eta``, the square of the Hamiltonian step with unit mass) and ``alpha`` the friction. The momentum
  starts at 0 and is never resampled.
* Cyclical SG-MCMC (Zhang et al. 2020, cSGLD and cSGHMC): the same rules with the cosine cyclical step size
  ``eps_k = eps_0 / 2 * (cos(pi * (k mod L) / L) + 1)`` over cycles of L steps. The first part of each cycle is
  the exploration stage: the same update without the noise (gradient ascent, with momentum for cSGHMC); the rest
  is the sampling stage, which adds the noise and keeps draws, the last one at the cycle's end.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import torch

from pyro_bnn.checks import Settings, enum_member, int_at_least, positive_int


class Method(str, Enum):
    """Which SG-MCMC sampler runs (``method=`` of :func:`~pyro_bnn.sgmcmc.sample_sgmcmc`)."""

    SGLD = "sgld"
    """Stochastic gradient Langevin dynamics (Welling & Teh 2011) at a constant step size."""
    SGHMC = "sghmc"
    """Stochastic gradient Hamiltonian Monte Carlo with friction (Chen et al. 2014) at a constant step size."""
    CSGLD = "csgld"
    """Cyclical SGLD (Zhang et al. 2020): cosine cyclical step size, exploration then sampling in each cycle."""
    CSGHMC = "csghmc"
    """Cyclical SGHMC (Zhang et al. 2020): SGHMC's rule under the cyclical schedule and stages of ``csgld``."""

    @property
    def cyclical(self) -> bool:
        """Whether the step size follows the cosine cycles."""
        return self in (Method.CSGLD, Method.CSGHMC)

    @property
    def momentum(self) -> bool:
        """Whether the rule carries a momentum (SGHMC's)."""
        return self in (Method.SGHMC, Method.CSGHMC)


def as_method(method: Method | str) -> Method:
    """The :class:`Method` named by ``method``, or a one-line ValueError listing the choices."""
    return enum_member(Method, method, "SG-MCMC method")


DEFAULT_FRICTION = 0.1
"""SGHMC's friction where none is given."""
DEFAULT_NUM_CYCLES = 4
"""The cyclical methods' kept cycles where none is given."""
DEFAULT_EXPLORATION = 0.5
"""The cyclical methods' noise-free share of a cycle where none is given."""


def check_method_options(method: Method, spell: Callable[[str], str] = str, **options: object) -> None:
    """Refuses an option ``method`` does not read (one-line ValueError naming it as ``spell(name)``, its value and
    the methods it applies to): ignored without a word, it would look as if it had been used.

    Args:
        method: The sampler.
        spell: How to name an option in the message (the command line passes its flag names).
        **options: ``friction`` (momentum methods), ``num_cycles`` and ``exploration`` (cyclical methods); None
            means not given.
    """
    for name, value in options.items():
        applies, methods = (
            (method.momentum, [m.value for m in Method if m.momentum])
            if name == "friction"
            else (method.cyclical, [m.value for m in Method if m.cyclical])
        )
        if value is not None and not applies:
            raise ValueError(
                f"{spell(name)} {value} applies to the methods {', '.join(methods)} only, not {method.value!r}"
            )


@dataclass(frozen=True)
class StepPlan(Settings):
    """What happens at each step ``k = 0 .. total_steps - 1`` of a chain.

    Constant step size (SGLD, SGHMC): ``burn_in`` steps, then ``num_draws * thin`` steps of which every ``thin``-th
    is kept. Cyclical: ``burn_in + num_cycles`` cycles of ``cycle_length = E + S`` steps: ``E`` exploration steps
    (``exploration`` of the cycle, rounded), then ``S = draws_per_cycle * thin`` sampling steps of which every
    ``thin``-th is kept, the last one at the cycle's end; the first ``burn_in`` cycles keep nothing.

    Attributes:
        step_size: ``eps`` (constant), or ``eps_0``, the peak of each cycle.
        num_draws: Draws kept per chain.
        burn_in: Steps (constant) or whole cycles (cyclical) run before the first kept draw.
        thin: Keep every ``thin``-th step.
        num_cycles: Kept cycles (cyclical), None for a constant step size.
        exploration: Share of each cycle without noise (cyclical).
    """

    step_size: float
    num_draws: int
    burn_in: int = 0
    thin: int = 1
    num_cycles: int | None = None
    exploration: float = 0.0

    def check(self) -> None:
        if isinstance(self.step_size, bool) or not isinstance(self.step_size, (int, float)):
            raise ValueError(f"step_size must be a number > 0, got {self.step_size!r}")
        if not (0 < self.step_size < math.inf):
            raise ValueError(f"step_size must be a finite number > 0, got {self.step_size!r}")
        for name, value, least in (
            ("num_draws", self.num_draws, 1),
            ("thin", self.thin, 1),
            ("burn_in", self.burn_in, 0),
        ):
            int_at_least(value, name, least)
        if self.num_cycles is not None:
            positive_int(self.num_cycles, "num_cycles")
            if self.num_draws % self.num_cycles:
                # led by num_cycles, which the CLI spells as its flag (--cycles; Verb.spell_flags)
                raise ValueError(
                    f"num_cycles={self.num_cycles} must divide the {self.num_draws} draws kept per chain (the same "
                    "number of draws from every cycle)"
                )
            if not (0.0 <= self.exploration < 1.0):
                raise ValueError(f"exploration must be a share of the cycle in [0, 1), got {self.exploration!r}")

    @property
    def sampling_steps(self) -> int:
        """S: steps of each cycle's sampling stage (cyclical), or of the whole run after burn-in (constant)."""
        per_cycle = self.num_draws // (self.num_cycles or 1)
        return per_cycle * self.thin

    @property
    def exploration_steps(self) -> int:
        """E: steps of each cycle's exploration stage, ``round(exploration / (1 - exploration) * S)``; 0 for a
        constant step size."""
        if self.num_cycles is None:
            return 0
        return round(self.exploration / (1.0 - self.exploration) * self.sampling_steps)

    @property
    def cycle_length(self) -> int | None:
        """L = E + S steps per cycle, None for a constant step size."""
        return None if self.num_cycles is None else self.exploration_steps + self.sampling_steps

    @property
    def total_steps(self) -> int:
        """Steps per chain, burn-in included."""
        if self.num_cycles is None:
            return self.burn_in + self.num_draws * self.thin
        return (self.burn_in + self.num_cycles) * self.cycle_length

    def step_size_at(self, step: int) -> float:
        """``eps_k``: the constant step size, or ``eps_0 / 2 * (cos(pi * (k mod L) / L) + 1)``."""
        if self.num_cycles is None:
            return self.step_size
        length = self.cycle_length
        return self.step_size / 2 * (math.cos(math.pi * (step % length) / length) + 1)

    def sampling(self, step: int) -> bool:
        """Whether step ``k`` adds noise (always, except in a cycle's exploration stage)."""
        return self.num_cycles is None or step % self.cycle_length >= self.exploration_steps

    def keep(self, step: int) -> bool:
        """Whether the parameters after step ``k`` are a kept draw."""
        if self.num_cycles is None:
            return step >= self.burn_in and (step - self.burn_in + 1) % self.thin == 0
        length = self.cycle_length
        within = step % length - self.exploration_steps
        return step >= self.burn_in * length and within >= 0 and (within + 1) % self.thin == 0


def sgld_step(theta: torch.Tensor, grad: torch.Tensor, step_size: float, noise: bool) -> torch.Tensor:
    """One SGLD update of ``theta`` ``(D,)`` given ``grad = grad log p~(theta)`` ``(D,)``: ``theta + eps / 2 * grad
    + N(0, eps I)`` (without the noise when ``noise`` is False). Returns the new ``(D,)``."""
    update = theta + 0.5 * step_size * grad
    if noise:
        update = update + math.sqrt(step_size) * torch.randn_like(theta)
    return update


def sghmc_step(
    theta: torch.Tensor, momentum: torch.Tensor, grad: torch.Tensor, step_size: float, friction: float, noise: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """One SGHMC update: ``v = (1 - alpha) v + eps * grad + N(0, 2 alpha eps I)``, ``theta + v``.

    Args:
        theta: Weights ``(D,)``.
        momentum: ``v`` ``(D,)``.
        grad: ``grad log p~(theta)`` ``(D,)``.
        step_size: ``eps`` (the learning rate).
        friction: ``alpha`` in (0, 1].
        noise: Add the noise (False in an exploration stage: SGD with momentum).

    Returns:
        The new ``(theta, momentum)``, each ``(D,)``.
    """
    momentum = (1.0 - friction) * momentum + step_size * grad
    if noise:
        momentum = momentum + math.sqrt(2.0 * friction * step_size) * torch.randn_like(theta)
    return theta + momentum, momentum
