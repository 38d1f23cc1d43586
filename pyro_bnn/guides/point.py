"""Point-estimate guides: MAP, maximum likelihood and MC dropout, trained and scored like the Bayesian guides."""

from __future__ import annotations

from collections.abc import Callable

from pyro.infer.autoguide import AutoDelta
from pyro.infer.autoguide.initialization import init_to_median

from pyro_bnn.guides.capabilities import BatchedLayout, ScaleMap


class PointEstimateGuide(AutoDelta):
    """Pyro's ``AutoDelta`` (a point estimate per weight site: MAP under a prior, maximum likelihood without one)
    that batched runs can stack: the ``map`` and ``mle`` guides (and :class:`MCDropout`). It trains, predicts and
    checkpoints as ``AutoDelta`` does; it only declares where its values live (:attr:`batched_layout`).

    ``AutoDelta`` keeps each site's value as a parameter named ``<site>_unconstrained`` (one attribute per site,
    nested at the dots of its name); for the real support of a weight it is the weight itself.
    """

    batched_layout = BatchedLayout(ScaleMap.POINT, loc="{site}_unconstrained")
    """Batched runs stack each weight site's value (:class:`~pyro_bnn.guides.capabilities.BatchedLayout`)."""


class MCDropout(PointEstimateGuide):
    """MC dropout (Gal & Ghahramani, 2016): a MAP point estimate whose dropout stays on at prediction time.

    Use it with a network that has dropout layers (``build_model(..., dropout=p)``) and a Normal prior, whose log
    density is the L2 weight decay of the dropout objective. Training is MAP; :func:`pyro_bnn.predict.predict`
    sees :attr:`mc_dropout` and keeps the network in train mode, so each predictive sample draws a dropout mask.
    Batched runs stack its values as the MAP guide's and draw each run's masks (:mod:`pyro_bnn.batched`).
    """

    mc_dropout = True

    def __init__(self, model: Callable, init_loc_fn: Callable = init_to_median, *, create_plates=None) -> None:
        super().__init__(model, init_loc_fn=init_loc_fn, create_plates=create_plates)
