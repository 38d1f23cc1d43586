"""Stochastic-gradient MCMC on a BNN's own log joint: SGLD, SGHMC and cyclical SG-MCMC.

:func:`sample_sgmcmc` runs the chains on the minibatch log joint (:mod:`pyro_bnn.sgmcmc.log_joint`) with the update
rules of :mod:`pyro_bnn.sgmcmc.samplers`, and returns an :class:`SGMCMCResult`: draws ``{site: (chain, draw,
*site_shape)}`` for :func:`~pyro_bnn.diagnostics.to_inference_data`, ``{site: (chain * draw, *site_shape)}`` for
:class:`~pyro_bnn.predict.Samples`, and r-hat / ESS from ArviZ. See docs/sgmcmc.md.
"""

from pyro_bnn.sgmcmc.log_joint import LogJoint, check_supported, model_log_joint
from pyro_bnn.sgmcmc.result import SGMCMCDivergenceError, SGMCMCResult
from pyro_bnn.sgmcmc.run import sample_sgmcmc
from pyro_bnn.sgmcmc.samplers import Method, StepPlan, sghmc_step, sgld_step

__all__ = [
    "LogJoint",
    "Method",
    "SGMCMCDivergenceError",
    "SGMCMCResult",
    "StepPlan",
    "check_supported",
    "model_log_joint",
    "sample_sgmcmc",
    "sghmc_step",
    "sgld_step",
]
