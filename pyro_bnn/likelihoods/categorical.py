"""Classification likelihood."""

from __future__ import annotations

import pyro.distributions as dist
import torch
from pyro.distributions import Distribution

from pyro_bnn.likelihoods.base import Likelihood


class Categorical(Likelihood):
    """``y ~ Categorical(logits=output)`` for a network that outputs class logits ``(B, C)``."""

    def distribution(self, output: torch.Tensor) -> Distribution:
        return dist.Categorical(logits=output)

    def check_targets(self, output: torch.Tensor, y: torch.Tensor) -> None:
        num_classes = output.shape[-1]
        if y.dtype.is_floating_point or y.dtype == torch.bool or y.dim() != 1:
            raise ValueError(f"class labels must be an integer tensor of shape (B,), got {y.dtype} {tuple(y.shape)}")
        if y.shape[0] != output.shape[-2]:
            raise ValueError(f"{y.shape[0]} labels for a batch of {output.shape[-2]} inputs")
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= num_classes):
            raise ValueError(
                f"labels must lie in [0, {num_classes}) for a network with {num_classes} outputs, "
                f"found values in [{int(y.min())}, {int(y.max())}]"
            )

    def prediction_fields(self, output: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{"probs": softmax(output)}``, class probabilities ``(S, N, C)`` from logits ``(S, N, C)``."""
        return {"probs": torch.softmax(output, dim=-1)}
