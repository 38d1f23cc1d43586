"""The deterministic baseline and pyro_bnn's training paths, each as one pass over a list of batches.

Every variant is built from the first batch and returns ``run(batches)``, which takes one training step per batch
and returns the seconds those steps took (the device's work finished):

- ``deterministic``: the plain torch loop (cross-entropy, ``torch.optim.Adam`` with torch's default implementation),
  the baseline every ratio is relative to;
- pyro_bnn's rows run :meth:`pyro_bnn.infer.Trainer.fit` for one more epoch over the batches and return the epoch's
  ``time_s`` (:func:`fit_run`): the loop of steps with the trainer's own per-step work (KL weights, NaN checks,
  device-side sums), not what a fit does once (its set-up checks; after the epoch, the finiteness check of the
  parameters and the unmoved-posterior check), which ``bench/epoch.py``'s epoch timing includes. They use a N(0, 1)
  prior on every weight and ``Categorical(N)``:

  - ``pyro_bnn default``: what ``pyro-bnn train`` runs without options: the ``flat:rel=1`` guide, ``--elbo auto``
    (which picks the fused :class:`~pyro_bnn.infer.FastMeanFieldELBO`) and the default (fused) Adam; on CUDA each
    step replays a captured CUDA graph (:mod:`pyro_bnn.infer.cuda_graph`), as in ``pyro-bnn train``;
  - ``... no CUDA graph``: the default step launched op by op (CUDA only; on a CPU that is the default);
  - ``... fast-single`` / ``... local reparam.`` / ``... flipout``: the same with those forms of the fast
    objective (one draw shared by the batch instead of the antithetic pair; local reparameterisation; flipout);
  - ``pyro_bnn before #9``: the default before the performance issue, reconstructed: ``autonormal:rel=1`` with
    Pyro's ``Trace_ELBO`` and ``torch.optim.Adam`` with torch's default implementation;
  - ``pyro_bnn bbb (trace)``: Bayes by Backprop with ``Trace_ELBO``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from pyro_bnn import BNN
from pyro_bnn.guides import DEFAULT_GUIDE, parse_guide
from pyro_bnn.guides.movement import UnmovedPosteriorWarning
from pyro_bnn.infer import FastMeanFieldELBO, RuntimeOptions, Trainer
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.priors import NormalPrior

Batches = Sequence[tuple[torch.Tensor, torch.Tensor]]
Run = Callable[[Batches], float]
"""``run(batches) -> seconds``: one training step per batch; the seconds the steps took."""


def net_3fc(device: torch.device) -> torch.nn.Module:
    """The 3FC network (784-1000-1000-1000-10, ReLU), 2.8 M parameters."""
    return build_model("3fc", input_shape=(1, 28, 28), num_classes=10).to(device)


def sync(device: torch.device) -> None:
    """Waits for the work queued on ``device`` (CUDA; a CPU's work is done when the call returns)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def from_step(step: Callable[[torch.Tensor, torch.Tensor], None]) -> Run:
    """A ``run(batches)`` that calls ``step(x, y)`` on each batch and returns the wall time of those calls, from the
    device's queue empty to the device's work done."""

    def run(batches: Batches) -> float:
        device = batches[0][0].device
        sync(device)
        start = time.perf_counter()
        for x, y in batches:
            step(x, y)
        sync(device)
        return time.perf_counter() - start

    return run


def deterministic(x: torch.Tensor, y: torch.Tensor, num_data: int, *, fused: bool = False) -> Run:
    """Plain torch: the 3FC net, mean cross-entropy, Adam (torch's default implementation, or ``fused``)."""
    net = net_3fc(x.device)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3, fused=fused or None)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        optimizer.zero_grad()
        F.cross_entropy(net(x), y).backward()
        optimizer.step()

    return from_step(step)


def deterministic_graphed(x: torch.Tensor, y: torch.Tensor, num_data: int) -> Run:
    """The deterministic step (fused Adam) captured in a CUDA graph and replayed (PyTorch's whole-network capture
    recipe): what the same graph replay gives a network without weight noise. CUDA only."""
    net = net_3fc(x.device)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3, fused=True, capturable=True)
    static_x, static_y = x.clone(), y.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(net(static_x), static_y).backward()
            optimizer.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph, stream=side):
        F.cross_entropy(net(static_x), static_y).backward()
        optimizer.step()

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()

    step.keep = (side, graph, net, optimizer)  # alive as long as the step: the graph reads their memory

    return from_step(step)


class _Loader:
    """The batches as a training loader for ``Trainer.fit``: ``len`` steps, a ``dataset`` of ``num_data`` examples
    (which the likelihood's N/B scaling checks)."""

    def __init__(self, batches: Batches, num_data: int) -> None:
        self.batches, self.dataset = list(batches), range(num_data)

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def trainer_run(
    x: torch.Tensor, y: torch.Tensor, num_data: int, guide: str, *, objective="auto", optim=None, cuda_graph=True
) -> tuple[Run, Trainer]:
    """A pyro_bnn :class:`Trainer` on the 3FC BNN; ``run(batches)`` trains one more epoch over them."""
    bnn = BNN(net_3fc(x.device), NormalPrior(0.0, 1.0).to(x.device), Categorical(num_data))
    trainer = Trainer(
        bnn,
        parse_guide(guide).build,
        optim=optim,
        objective=objective,
        runtime=RuntimeOptions(seed=0, progress=False, cuda_graph=cuda_graph),
    )
    trainer.setup(x, y)
    return fit_run(trainer, num_data), trainer


def fit_run(trainer: Trainer, num_data: int) -> Run:
    """``run(batches)``: ``trainer.fit`` for one more epoch over the batches (``x``: ``(B, *input_shape)``, ``y``:
    ``(B,)``) with a data set of ``num_data`` examples; returns that epoch's ``time_s``.

    ``time_s`` is the epoch's loop of steps with the trainer's per-step work; it ends reading the device-side loss
    sums, so the device's work is done. A wall clock around ``fit`` would add what a fit does once: the 3FC's
    finiteness check of 5.6 M parameters and the unmoved-posterior check's medians took 40 ms and 130 ms on one CPU
    core, a third of a 10-step round, and the deterministic and competitor rows pay nothing like it.
    """

    def run(batches: Batches) -> float:
        with warnings.catch_warnings():
            # A round is a few steps from the start, so the posterior has barely moved: the warning is expected.
            warnings.simplefilter("ignore", UnmovedPosteriorWarning)
            history = trainer.fit(_Loader(batches, num_data), trainer.epoch + 1)
        return history[-1]["time_s"]

    return run


def pyro_bnn_default(x, y, num_data) -> Run:
    return trainer_run(x, y, num_data, DEFAULT_GUIDE)[0]


def pyro_bnn_single(x, y, num_data) -> Run:
    return trainer_run(x, y, num_data, DEFAULT_GUIDE, objective="fast-single")[0]


def pyro_bnn_local_reparam(x, y, num_data) -> Run:
    return trainer_run(x, y, num_data, DEFAULT_GUIDE, objective=FastMeanFieldELBO(local_reparameterization=True))[0]


def pyro_bnn_flipout(x, y, num_data) -> Run:
    return trainer_run(x, y, num_data, DEFAULT_GUIDE, objective=FastMeanFieldELBO(flipout=True))[0]


def _torch_adam(params):
    return torch.optim.Adam(params, lr=1e-3)


def pyro_bnn_before(x, y, num_data) -> Run:
    return trainer_run(x, y, num_data, "autonormal:rel=1", objective="trace", optim=_torch_adam)[0]


def pyro_bnn_bbb(x, y, num_data) -> Run:
    return trainer_run(x, y, num_data, "bbb", objective="trace")[0]


DETERMINISTIC = "deterministic"
DEFAULT = "pyro_bnn default (flat:rel=1, fast)"
BEFORE = "pyro_bnn before #9 (autonormal:rel=1, trace)"

OURS: dict[str, Callable[[torch.Tensor, torch.Tensor, int], Run]] = {
    DETERMINISTIC: deterministic,
    "deterministic, fused Adam": lambda x, y, n: deterministic(x, y, n, fused=True),
    DEFAULT: pyro_bnn_default,
    "pyro_bnn fast-single (one shared draw)": pyro_bnn_single,
    "pyro_bnn fast, local reparam.": pyro_bnn_local_reparam,
    "pyro_bnn fast, flipout": pyro_bnn_flipout,
    BEFORE: pyro_bnn_before,
    "pyro_bnn bbb (trace)": pyro_bnn_bbb,
}
"""Display name -> builder ``(x, y, num_data) -> run(batches)``."""

CUDA_ONLY: dict[str, Callable[[torch.Tensor, torch.Tensor, int], Run]] = {
    "deterministic, fused Adam, CUDA graph": deterministic_graphed,
    "pyro_bnn default, no CUDA graph": lambda x, y, n: trainer_run(x, y, n, DEFAULT_GUIDE, cuda_graph=False)[0],
}
"""Variants timed on CUDA only, after :data:`OURS`."""
