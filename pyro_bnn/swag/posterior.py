"""SWAG's Gaussian over the weights, and MultiSWAG's equal mixture of several, as parameter sources for ``predict``.

SWAG (Maddox et al., 2019) fits ``N(mean, Sigma)`` to the iterates of SGD at a constant learning rate:

* SWAG-Diagonal: ``Sigma = diag(variance)``;
* SWAG: ``Sigma = (diag(variance) + D D^T / (K - 1)) / 2``, with ``D`` ``(P, K)`` the last K deviations.

A draw is ``mean + sqrt(s) * (sqrt(variance) * z1 + D z2 / sqrt(K - 1))`` with ``z1 ~ N(0, I_P)``, ``z2 ~ N(0, I_K)``
and ``s = 1/2`` (the diagonal form: ``mean + sqrt(variance) * z1``). The mean is the SWA network (Izmailov et al.,
2018), which :meth:`SwagPosterior.point` returns, so ``predict(..., point=True)`` scores SWA beside SWAG.

MultiSWAG (Wilson and Izmailov, 2020) is an equal mixture of SWAG posteriors from independent runs; sample ``i`` of
a prediction comes from member ``i mod M``. Its members' means are not averaged into a point network (permuted
hidden units average to nonsense), so it has none.

Draws are reproducible and do not depend on how ``predict`` chunks them: sample ``i`` uses its own generator,
seeded from ``(seed, i)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from pyro_bnn.bnn import BNN
from pyro_bnn.checks import non_negative_int, positive_int
from pyro_bnn.infer.checkpoint import load_tensor_file, save_tensor_file
from pyro_bnn.predict.sources import ParameterSource
from pyro_bnn.sites import unflatten

FORMAT = "pyro_bnn.swag/1"


class SwagPosterior(ParameterSource):
    """A SWAG posterior over a BNN's weight sites.

    Args:
        names: Weight site names, in the flat vector's order (``bnn.site_names``).
        shapes: Their shapes.
        mean: ``(P,)``, the SWA weights.
        variance: ``(P,)``, the diagonal variance (positive).
        deviations: ``(K, P)``, the last K deviations from the running mean (``(0, P)``: diagonal only).
        count: The SGD iterates collected.
        seed: Seeds the draws (sample ``i`` from ``(seed, i)``).
        scale: ``s`` of the draws; None: 1/2 with deviations (SWAG), 1 without (SWAG-Diagonal), as in the paper.
    """

    def __init__(
        self,
        names: Sequence[str],
        shapes: Sequence[Sequence[int]],
        mean: torch.Tensor,
        variance: torch.Tensor,
        deviations: torch.Tensor,
        count: int,
        *,
        seed: int = 0,
        scale: float | None = None,
    ) -> None:
        self.names = list(names)
        self.shapes = [tuple(int(n) for n in shape) for shape in shapes]
        dim = sum(math.prod(shape) for shape in self.shapes)
        if tuple(mean.shape) != (dim,) or tuple(variance.shape) != (dim,):
            raise ValueError(
                f"mean {tuple(mean.shape)} and variance {tuple(variance.shape)} must be ({dim},) for sites of "
                f"{dim} weights"
            )
        if deviations.dim() != 2 or deviations.shape[1] != dim:
            raise ValueError(f"deviations must be (K, {dim}), got {tuple(deviations.shape)}")
        if deviations.shape[0] == 1:
            raise ValueError("one deviation column gives no low-rank covariance (K - 1 = 0); keep K >= 2 or none")
        if not bool((variance > 0).all()):
            raise ValueError("variance must be positive everywhere (clamp it at a small floor)")
        self.mean, self.variance, self.deviations = mean, variance, deviations
        self.count = positive_int(count, "count")
        self.seed = non_negative_int(seed, "seed")
        if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0):
            raise ValueError(f"scale must be a positive number or None, got {scale!r}")
        self.scale = float(scale) if scale is not None else (0.5 if self.rank else 1.0)

    @property
    def rank(self) -> int:
        """K, the deviation columns (0: SWAG-Diagonal)."""
        return self.deviations.shape[0]

    @property
    def dim(self) -> int:
        """P, the number of scalar weights."""
        return self.mean.shape[0]

    def diagonal(self) -> SwagPosterior:
        """The SWAG-Diagonal posterior of the same trajectory (no deviations, ``s = 1``)."""
        empty = self.deviations[:0]
        return SwagPosterior(self.names, self.shapes, self.mean, self.variance, empty, self.count, seed=self.seed)

    def covariance(self) -> torch.Tensor:
        """The dense covariance ``(P, P)`` the draws follow (for tests and small models)."""
        cov = torch.diag(self.variance)
        if self.rank:
            cov = cov + self.deviations.T @ self.deviations / (self.rank - 1)
        return self.scale * cov

    def sample_flat(self, start: int, num_samples: int) -> torch.Tensor:
        """Draws ``start .. start + num_samples`` as flat weights ``(S, P)`` in the posterior's dtype, on its
        device."""
        rows = []
        for index in range(start, start + num_samples):
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
            z1 = torch.randn(self.dim, generator=generator, dtype=self.mean.dtype).to(self.mean.device)
            step = self.variance.sqrt() * z1
            if self.rank:
                z2 = torch.randn(self.rank, generator=generator, dtype=self.mean.dtype).to(self.mean.device)
                step = step + z2 @ self.deviations / math.sqrt(self.rank - 1)
            rows.append(self.mean + math.sqrt(self.scale) * step)
        return torch.stack(rows) if rows else self.mean.new_zeros(0, self.dim)

    def sample(self, num_samples: int, start: int = 0) -> dict[str, torch.Tensor]:
        """``{site: (S, *site_shape)}`` draws (float32)."""
        num_samples = positive_int(num_samples, "num_samples")
        return unflatten(self.names, self.shapes, self.sample_flat(start, num_samples).float())

    # -- ParameterSource --------------------------------------------------------------------------------------------

    def default_num_samples(self) -> int:
        return 30  # the paper's number of SWAG draws per prediction

    def prepare(self, bnn: BNN, x: torch.Tensor) -> None:
        check_sites(bnn, self.names, self.shapes)

    def point(self, bnn: BNN, x: torch.Tensor) -> dict[str, torch.Tensor]:
        values = unflatten(self.names, self.shapes, self.mean.float())
        return {name: value.to(x.device) for name, value in values.items()}

    def draw_globals(self, bnn: BNN, start: int, num_samples: int, x: torch.Tensor) -> dict[str, torch.Tensor]:
        flat = self.sample_flat(start, num_samples).to(device=x.device, dtype=torch.float32)
        return {name: value.unsqueeze(1) for name, value in unflatten(self.names, self.shapes, flat).items()}

    # -- files ------------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Tensors, names and numbers only: loadable with ``torch.load(weights_only=True)``."""
        return {
            "format": FORMAT,
            "names": list(self.names),
            "shapes": [list(shape) for shape in self.shapes],
            "mean": self.mean.cpu(),
            "variance": self.variance.cpu(),
            "deviations": self.deviations.cpu(),
            "count": self.count,
            "seed": self.seed,
            "scale": self.scale,
        }

    def save(self, path: str | Path) -> None:
        """Writes :meth:`state_dict` to ``path`` atomically (a crash leaves the old file whole), as checkpoints are
        written (:func:`~pyro_bnn.infer.checkpoint.save_tensor_file`)."""
        state = dict(self.state_dict())
        save_tensor_file(state, path, state.pop("format"))

    @classmethod
    def load(cls, path: str | Path) -> SwagPosterior:
        """Reads a file written by :meth:`save` without unpickling arbitrary objects; an empty, cut, damaged or
        foreign file is one line naming it (:func:`~pyro_bnn.infer.checkpoint.load_tensor_file`)."""
        return cls.from_state_dict(load_tensor_file(path, FORMAT, "SWAG posterior file"))

    @classmethod
    def from_state_dict(cls, state: Mapping) -> SwagPosterior:
        """The posterior of a :meth:`state_dict`."""
        if not isinstance(state, Mapping) or state.get("format") != FORMAT:
            found = state.get("format") if isinstance(state, Mapping) else type(state).__name__
            raise ValueError(f"not a SWAG posterior file: format {found!r}, expected {FORMAT!r}")
        return cls(
            state["names"],
            state["shapes"],
            state["mean"],
            state["variance"],
            state["deviations"],
            state["count"],
            seed=state["seed"],
            scale=state["scale"],
        )


class MultiSwag(ParameterSource):
    """MultiSWAG: an equal mixture of SWAG posteriors from independent runs (sample ``i`` from member ``i mod M``).

    Args:
        members: The SWAG posteriors, all over the same sites.
    """

    def __init__(self, members: Sequence[SwagPosterior]) -> None:
        self.members = list(members)
        if not self.members:
            raise ValueError("MultiSwag needs at least one SWAG posterior")
        first = self.members[0]
        for index, member in enumerate(self.members[1:], start=1):
            if member.names != first.names or member.shapes != first.shapes:
                raise ValueError(f"member {index} has other sites than member 0; every member must share the model")

    def default_num_samples(self) -> int:
        return 10 * len(self.members)

    def prepare(self, bnn: BNN, x: torch.Tensor) -> None:
        check_sites(bnn, self.members[0].names, self.members[0].shapes)

    def sample(self, num_samples: int, start: int = 0) -> dict[str, torch.Tensor]:
        """``{site: (S, *site_shape)}`` draws (float32), sample ``i`` from member ``i mod M``."""
        num_samples = positive_int(num_samples, "num_samples")
        first = self.members[0]
        return unflatten(first.names, first.shapes, self._flat(start, num_samples).float())

    def _flat(self, start: int, num_samples: int) -> torch.Tensor:
        count = len(self.members)
        rows = [self.members[i % count].sample_flat(i // count, 1)[0] for i in range(start, start + num_samples)]
        return torch.stack(rows)

    def draw_globals(self, bnn: BNN, start: int, num_samples: int, x: torch.Tensor) -> dict[str, torch.Tensor]:
        first = self.members[0]
        flat = self._flat(start, num_samples).to(device=x.device, dtype=torch.float32)
        return {name: value.unsqueeze(1) for name, value in unflatten(first.names, first.shapes, flat).items()}


def check_sites(bnn: BNN, names: Sequence[str], shapes: Sequence[tuple[int, ...]]) -> None:
    """Raises a one-line ValueError when ``bnn``'s weight sites are not ``names`` with ``shapes``."""
    expected = [(site.name, tuple(site.shape)) for site in bnn.sites]
    found = list(zip(names, shapes, strict=True))
    if expected != found:
        raise ValueError(
            f"the SWAG posterior is over sites {[n for n, _ in found][:5]} but the model's are "
            f"{[n for n, _ in expected][:5]} (or their shapes differ); fit it on this model"
        )
