"""Composition: a BNN outside the library's own model and training loop.

:class:`BayesianModule` turns a BNN and its guide into a plain ``nn.Module`` that draws its weights on each forward
and exposes the draw's KL term, for a user's own PyTorch or Lightning loop. See docs/compose.md.
"""

from pyro_bnn.compose.module import BayesianModule

__all__ = ["BayesianModule"]
