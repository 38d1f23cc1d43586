"""Point-estimate guides: MAP, maximum likelihood and MC dropout, trained and scored like the Bayesian guides."""

from __future__ import annotations

from collections.abc import Callable

from pyro.infer.autoguide import AutoDelta
from pyro.infer.autoguide.initialization import init_to_median


class MCDropout(AutoDelta):
    """MC dropout (Gal & Ghahramani, 2016): a MAP point estimate whose dropout stays on at prediction time.

    Use it with a network that has dropout layers (``build_model(..., dropout=p)``) and a Normal prior, whose log
    density is the L2 weight decay of the dropout objective. Training is MAP; :func:`pyro_bnn.predict.predict`
    sees :attr:`mc_dropout` and keeps the network in train mode, so each predictive sample draws a dropout mask.
    """

    mc_dropout = True

    def __init__(self, model: Callable, init_loc_fn: Callable = init_to_median, *, create_plates=None) -> None:
        super().__init__(model, init_loc_fn=init_loc_fn, create_plates=create_plates)
