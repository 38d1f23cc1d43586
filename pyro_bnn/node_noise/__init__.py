"""Node-noise (implicit) BNNs: multiplicative latent noise on each layer's inputs, deterministic weights.

``add_node_noise(net)`` adds the noise, :class:`NodeNoisePrior` gives it the prior N(1, s^2), and a
:class:`~pyro_bnn.BNN` built from the two makes the noise Pyro sample sites; train it with the
:class:`~pyro_bnn.guides.NodeNoiseMixture` guide and the :class:`~pyro_bnn.infer.MixtureMeanKL` objective.
"""

from pyro_bnn.node_noise.convert import (
    BIAS_NOISE,
    INPUT_NOISE,
    LatentCounts,
    NoisyLayer,
    add_node_noise,
    count_latents,
    is_node_noise,
    noisy_layers,
)
from pyro_bnn.node_noise.prior import NodeNoisePrior

__all__ = [
    "BIAS_NOISE",
    "INPUT_NOISE",
    "LatentCounts",
    "NodeNoisePrior",
    "NoisyLayer",
    "add_node_noise",
    "count_latents",
    "is_node_noise",
    "noisy_layers",
]
