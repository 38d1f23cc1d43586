"""Composition: a BNN outside the library's own model and training loop, in both directions.

:class:`BayesianModule` turns a BNN and its guide into a plain ``nn.Module`` that draws its weights on each forward
and exposes the draw's KL term, for a user's own PyTorch or Lightning loop. :class:`RandomFunction` puts a BNN inside
a user's own Pyro model (its sites under a name prefix), :func:`model_guide` builds the guide of such a model (the
library's guide for the network, :class:`NetworkGuide`, and Pyro's autoguides for the rest) and
:func:`predict_model` draws from its posterior predictive. :class:`ComposedModel` makes such a model trainable by
:class:`~pyro_bnn.infer.Trainer` and predicts it into a :class:`~pyro_bnn.predict.Prediction`; a guide of its
per-example latents scales them by N/B as the model does (:func:`model_guide` of the composed model, or
:class:`ScaledGuide`). See docs/compose.md.
"""

from pyro_bnn.compose.guides import ModelGuide, NetworkGuide, model_guide
from pyro_bnn.compose.model import ComposedModel
from pyro_bnn.compose.module import BayesianModule
from pyro_bnn.compose.predict import predict_model
from pyro_bnn.compose.random_function import SAMPLE_PLATES, PrefixMessenger, RandomFunction
from pyro_bnn.compose.scaling import ScaledGuide

__all__ = [
    "SAMPLE_PLATES",
    "BayesianModule",
    "ComposedModel",
    "ModelGuide",
    "NetworkGuide",
    "PrefixMessenger",
    "RandomFunction",
    "ScaledGuide",
    "model_guide",
    "predict_model",
]
