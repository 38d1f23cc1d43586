"""Point-estimate guides: MAP, maximum likelihood and MC dropout, trained and scored like the Bayesian guides."""

from __future__ import annotations

import math
from collections.abc import Callable

from pyro.infer.autoguide import AutoDelta
from pyro.infer.autoguide.initialization import init_to_median
from torch import nn

from pyro_bnn.guides.capabilities import BatchedLayout, ScaleMap
from pyro_bnn.nn.modes import DROPOUT_TYPES
from pyro_bnn.spec import format_number


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
    sees :attr:`mc_dropout` and keeps the network's dropout layers in training mode (batch norm in evaluation mode),
    so each predictive sample draws a dropout mask.
    Batched runs stack its values as the MAP guide's and draw each run's masks (:mod:`pyro_bnn.batched`).
    """

    mc_dropout = True

    def __init__(self, model: Callable, init_loc_fn: Callable = init_to_median, *, create_plates=None) -> None:
        super().__init__(model, init_loc_fn=init_loc_fn, create_plates=create_plates)


def check_dropout_probability(net: nn.Module, p: float) -> None:
    """Checks that ``net`` has dropout layers and that each drops with probability ``p`` (the ``mc-dropout:P`` guide
    spec's P): the guide does not change the network, so a spec whose P the network does not have would be scored as
    if it had.

    Raises:
        ValueError: naming P and the probabilities the network's dropout layers have (or that it has none).
    """
    # Dropout(0) drops nothing: a placeholder some networks keep, not dropout to sample.
    found = {name or "net": m.p for name, m in net.named_modules() if isinstance(m, DROPOUT_TYPES) and m.p > 0}
    # Numbers as the spec writes them (format_number): a message that says "write mc-dropout:Q" must name a Q that
    # parses back to the layer's own probability, which :g's six digits may not.
    shown = format_number(p)
    if not found:
        raise ValueError(
            f"mc-dropout:{shown} needs a network with dropout layers (build_model(..., dropout={shown}) or "
            f"nn.Dropout({shown}) in your module); this network has none, so every predictive sample would be the same "
            "(for a dropout module of your own, build MCDropout(bnn) directly)"
        )
    wrong = {name: q for name, q in found.items() if not math.isclose(q, p)}
    if wrong:
        name, q = next(iter(wrong.items()))
        raise ValueError(
            f"mc-dropout:{shown} asks for dropout probability {shown}, but {len(wrong)} of the network's {len(found)} "
            f"dropout layers have another (e.g. {name!r}: {format_number(q)}); write mc-dropout:{format_number(q)} or "
            "rebuild the network"
        )
