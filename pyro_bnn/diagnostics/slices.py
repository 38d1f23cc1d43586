"""Likelihood slices: the data log-likelihood along one scalar weight with every other value fixed.

The One Simple Trick paper (Tempczyk et al. 2022, Fig. 1) looks at such slices of a trained deterministic network to
show why ReLU posteriors are hard for mean-field VI: once a ReLU unit is off for every example, moving a weight that
feeds it further changes nothing, so the likelihood is exactly flat along that weight (Proposition 1), an unbounded
plateau no Gaussian fits. Its recipe: the first 6000 MNIST training images, two random entries per weight tensor, a
window that grows from +-0.1 by x1.1 per side until ``exp(ll - ll0) < 0.01``, 25 grid points, the slice drawn as
``exp(ll - max)`` beside a fitted Gaussian.

* :func:`point_values` gives the values every tensor of ``bnn.net`` takes: the network's own (a deterministic net's
  trained weights), a guide's posterior median or given values.
* :func:`likelihood_slice` evaluates one slice; :func:`likelihood_slices` several entries of one tensor, sharing the
  cached computation.
* :class:`LikelihoodSlice` holds the grid, the log-likelihood, the window search's outcome, the fitted Gaussian
  (:func:`fit_gaussian`) and its total-variation distance to the slice (:func:`gaussian_tv_distance`).

The evaluation engine is :mod:`pyro_bnn.diagnostics.slice_evaluator`, the fit :mod:`pyro_bnn.diagnostics.gaussian_fit`.
Plateaus are found by :mod:`pyro_bnn.diagnostics.plateaus`; :mod:`pyro_bnn.plots.slices` draws both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from pyro_bnn.bnn import BNN
from pyro_bnn.diagnostics.gaussian_fit import fit_gaussian, gaussian_tv_distance
from pyro_bnn.diagnostics.slice_evaluator import Index, SliceEvaluator
from pyro_bnn.diagnostics.slice_inputs import refuse_unknown_tensors
from pyro_bnn.diagnostics.slice_settings import (
    DEFAULT_MAX_HALF_WIDTH as DEFAULT_MAX_HALF_WIDTH,
)
from pyro_bnn.diagnostics.slice_settings import (
    DEFAULT_MAX_STEPS as DEFAULT_MAX_STEPS,
)
from pyro_bnn.diagnostics.slice_settings import (
    SliceOptions,
    slice_options,
)
from pyro_bnn.diagnostics.slice_window import SearchOptions, log_prior_function, prior_values


def point_values(bnn: BNN, source: Callable | Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The value of every parameter and buffer of ``bnn.net`` by name, the random sites set from ``source``.

    Args:
        bnn: The model. Its random sites are buffers of ``bnn.net`` holding the network's initial values.
        source: ``None`` keeps the network's own values (for a deterministic or MLE network, its trained weights);
            a guide (anything with ``median()``, e.g. every pyro_bnn guide once trained or run once) sets each
            random site to its posterior median (the mean for Normal guides; :class:`~pyro_bnn.guides.NodeNoiseMixture`
            returns the mixture's mean); a dict ``{name: tensor}`` sets the tensors it names (sites or any other
            parameter or buffer of the network).

    Returns:
        ``{name: tensor}``, detached copies, for :func:`likelihood_slice` and :func:`torch.func.functional_call`.

    Raises:
        ValueError: ``bnn`` is not a BNN, ``source`` is none of the above, the guide lacks a site, or a dict names an
            unknown tensor or gives one of another shape.
    """
    if not isinstance(bnn, BNN):
        raise ValueError(f"point_values needs a pyro_bnn BNN, got {type(bnn).__name__}")
    values = {name: tensor.detach().clone() for name, tensor in bnn.net.named_parameters()}
    values.update({name: tensor.detach().clone() for name, tensor in bnn.net.named_buffers()})
    if source is None:
        return values
    if isinstance(source, Mapping):
        given = dict(source)
        refuse_unknown_tensors(given, values, "point_values")
    else:
        median = getattr(source, "median", None)
        if not callable(median):
            raise ValueError(
                "point_values: source must be None, a guide with a median() method or a dict {name: tensor}, "
                f"got {type(source).__name__}"
            )
        medians = median()
        missing = [name for name in bnn.site_names if name not in medians]
        if missing:
            raise ValueError(f"point_values: the guide's median() has no value for the weight site {missing[0]!r}")
        given = {name: medians[name] for name in bnn.site_names}
    for name, value in given.items():
        value = torch.as_tensor(value)
        if tuple(value.shape) != tuple(values[name].shape):
            raise ValueError(
                f"point_values: value for {name!r} has shape {tuple(value.shape)}, expected {tuple(values[name].shape)}"
            )
        values[name] = value.detach().to(device=values[name].device, dtype=values[name].dtype).clone()
    return values


@dataclass(frozen=True)
class LikelihoodSlice:
    """The log-likelihood along one scalar ``values[name][index]``, every other value fixed.

    Attributes:
        name: The tensor's name (``"fc1.weight"``).
        index: The entry's index in that tensor.
        w0: The entry's own value, where the window search starts.
        grid: ``(G,)`` float64, evenly spaced over the final window (the values the network ran with).
        log_likelihood: ``(G,)`` float64, the summed data log-likelihood at each grid value, plus the log prior
            density of the scalar when a prior was given.
        log_likelihood_w0: The same at ``w0``.
        log_prior: ``(G,)`` float64, the log prior part of :attr:`log_likelihood`, or None without a prior.
        half_widths: ``(lower, upper)``: the window is ``[w0 - lower, w0 + upper]``.
        steps: ``(lower, upper)``: window-search evaluations per side.
        capped: ``(lower, upper)``: True where that side stopped at ``max_half_width`` or ``max_steps`` with the
            likelihood still above ``threshold`` times its value at ``w0`` (a plateau that never falls, the ReLU
            case, ends here).
        nonfinite: ``(lower, upper)``: True where that side stopped at an edge whose log-likelihood was NaN or
            ``+inf`` (logits overflowing, a likelihood undefined there); the window then ends at that side's last
            finite edge (at ``w0``, half-width 0, when its first edge was already non-finite).
        gaussian_mean, gaussian_sd: The Gaussian fitted to the normalised slice (:func:`fit_gaussian`).
        tv_distance: Total-variation distance between the normalised slice and that Gaussian on the grid
            (:func:`gaussian_tv_distance`): 0 for a Gaussian slice, 1 for disjoint ones.
        evaluations: Network evaluations (scalar values) spent on this slice, window search included.
    """

    name: str
    index: Index
    w0: float
    grid: torch.Tensor
    log_likelihood: torch.Tensor
    log_likelihood_w0: float
    log_prior: torch.Tensor | None
    half_widths: tuple[float, float]
    steps: tuple[int, int]
    capped: tuple[bool, bool]
    gaussian_mean: float
    gaussian_sd: float
    tv_distance: float
    evaluations: int
    nonfinite: tuple[bool, bool] = (False, False)

    @property
    def normalised(self) -> torch.Tensor:
        """``exp(ll - max ll)``, ``(G,)``: the likelihood relative to its largest value on the grid."""
        return (self.log_likelihood - self.log_likelihood.max()).exp()

    @property
    def window(self) -> tuple[float, float]:
        """The window's edges ``(w0 - lower, w0 + upper)``."""
        return float(self.grid[0]), float(self.grid[-1])

    @property
    def spacing(self) -> float:
        """Distance between neighbouring grid points."""
        return (float(self.grid[-1]) - float(self.grid[0])) / (len(self.grid) - 1)

    def gaussian(self, w: torch.Tensor) -> torch.Tensor:
        """The fitted Gaussian's shape ``exp(-(w - mean)^2 / (2 sd^2))`` (peak 1) at ``w``."""
        return torch.exp(
            -0.5 * ((torch.as_tensor(w, dtype=torch.float64) - self.gaussian_mean) / self.gaussian_sd) ** 2
        )


def likelihood_slice(
    net: nn.Module,
    likelihood,
    x: torch.Tensor,
    y: torch.Tensor,
    values: Mapping[str, torch.Tensor],
    name: str,
    index: int | Sequence[int],
    *,
    options: SliceOptions | None = None,
    **deprecated_options,
) -> LikelihoodSlice:
    """The summed data log-likelihood as the scalar ``values[name][index]`` varies, all else fixed.

    **Window.** From ``w0 = values[name][index]`` each side grows on its own: its half-width starts at ``start`` and
    is multiplied by ``growth`` after every evaluation of its edge ``w0 -+ half_width`` for which
    ``exp(ll(edge) - ll(w0)) >= threshold``; the side stops at the first edge below the threshold, or, capped, once
    its half-width has reached ``max_half_width`` (the last step is shortened to land on it) or it has made
    ``max_steps`` evaluations with the likelihood still above the threshold. A side whose edge gives a NaN or
    ``+inf`` log-likelihood stops there and its window ends at its last finite edge (``w0`` if there is none;
    :attr:`LikelihoodSlice.nonfinite`). Both pending edges of a step are evaluated in one call. Then
    ``num_points`` evenly spaced values over ``[w0 - lower, w0 + upper]`` are evaluated.
    With a ``prior`` every ``ll`` here, the window search included, is the log-likelihood plus the scalar's log
    prior density.

    **Evaluation.** Everything runs under ``torch.no_grad`` with the network in eval mode (dropout off; each
    module's mode is restored after). Values of the varied scalar are evaluated in vectorised batches of
    ``batch_points``: ``torch.vmap`` over the stacked tensor through ``functional_call(net, values, (x,))``, over
    ``batch_size`` rows of data at a time; per-row log-likelihoods are summed in float64.
    With ``incremental=True`` (the default) and an ``nn.Sequential`` network (every zoo MLP and CNN) the work that
    does not change is done once (:mod:`pyro_bnn.diagnostics.slice_evaluator` describes how): the layers before the
    one that owns ``name`` run once; a changed weight or bias of a plain ``nn.Linear`` changes one output column,
    which enters the next ``nn.Linear`` as a rank-one update, and after a ReLU-type activation the ``nn.Linear``
    after that (if at least :data:`~pyro_bnn.diagnostics.slice_plan.LINEARISE_MIN_WIDTH` wide) is linearised with
    exact corrections at the kink; each distinct (example, column value) pair runs through the rest once and is
    remembered. So a stretch where a ReLU unit is off for every example costs nothing after its first point, and its
    log-likelihood is *exactly* constant (the flatness test of :func:`~pyro_bnn.diagnostics.plateaus.find_plateau`
    relies on this; the plain vmap path gives identical rows identical results only as far as the BLAS does).
    Other layers (convolutions, node-noise layers with their hooks) are evaluated with vmap from that layer on.

    **Timing** (``python bench/slice_timing.py``, ``bench/SLICES.md``) on this repository's 2-core AMD EPYC machine,
    idle, two torch threads, float32, for the ReLU 3FC network trained on 6000 Fashion-MNIST images and slices over
    those images: a 25-point slice on its own, including the one forward pass that fills the cache, takes 0.28-0.40 s
    for a weight of ``fc1`` and 0.20-0.33 s for the other layers; the default slice (the window search, then 25
    points) costs 0.90 s per ``fc1`` weight and 0.14-0.24 s for the others when several share the cache
    (:func:`likelihood_slices`). Single weights of these wide layers move the likelihood little, so most windows
    reach the +-5 cap (85-112 evaluations in all), and a change of an ``fc1`` weight reaches every input of the
    1000-wide ``fc3`` (linearised, with exact corrections at the kink). On the same machine busy with other jobs
    (load ~3, one thread) the figures were 2-4x these. The plain vmap path (``incremental=False``) costs 0.2-0.6 s
    per value.

    Args:
        net: The network; ``functional_call(net, values, (x,))`` must give its outputs ``(N, out)``.
        likelihood: A :class:`~pyro_bnn.likelihoods.Likelihood` (its ``log_likelihood(output, y)``), or a function
            ``(output (N, out), y) -> (N,)`` per-row log-likelihoods.
        x, y: The data, ``(N, *input_shape)`` and ``(N,)`` labels or ``(N, D)`` targets.
        values: ``{name: tensor}`` for the network's tensors (:func:`point_values`); tensors it omits keep the
            network's own values.
        name: The tensor holding the varied scalar (``"fc1.weight"``); a parameter or buffer of ``net``.
        index: The scalar's index in it (an int for a 1-D tensor; negative entries count from the end).
        options: A :class:`SliceOptions` (``prior``, ``start``, ``growth``, ``threshold``, ``num_points``,
            ``max_half_width``, ``max_steps``, ``batch_points``, ``batch_size``, ``incremental``); None: the
            defaults.
        **deprecated_options: The same options as loose keywords, as before :class:`SliceOptions`: still taken
            (over ``options``), with a ``DeprecationWarning``.

    Returns:
        A :class:`LikelihoodSlice`.

    Raises:
        ValueError: one line naming the bad value: an unknown tensor name, an index out of range, an option out of
            range, data whose row counts differ, a log-likelihood at ``w0`` that is not finite, non-finite at the
            first edge on both sides (no window is left), or NaN or ``+inf`` at a grid value inside the window (the
            entry and that value named).
    """
    options = slice_options(options, deprecated_options, "likelihood_slice")
    return likelihood_slices(net, likelihood, x, y, values, name, [index], options=options)[0]


def likelihood_slices(
    net: nn.Module,
    likelihood,
    x: torch.Tensor,
    y: torch.Tensor,
    values: Mapping[str, torch.Tensor],
    name: str,
    indices: Iterable[int | Sequence[int]],
    *,
    options: SliceOptions | None = None,
    **deprecated_options,
) -> list[LikelihoodSlice]:
    """:func:`likelihood_slice` for several entries of one tensor, in the order given, sharing one cache (the
    unperturbed network's intermediate values are computed once for all of them).

    Arguments as for :func:`likelihood_slice`, with ``indices`` a list of indices into ``values[name]``.
    """
    options = slice_options(options, deprecated_options, "likelihood_slices")
    search = options.search
    log_prior = log_prior_function(options.prior)
    evaluator = SliceEvaluator(
        net,
        likelihood,
        x,
        y,
        values,
        name,
        batch_points=options.batch_points,
        batch_size=options.batch_size,
        incremental=options.incremental,
    )
    checked = [evaluator.check_index(index) for index in indices]
    # Entries that share a changed column share remembered evaluations; the cache keeps one column at a time.
    order = sorted(range(len(checked)), key=lambda k: checked[k])
    slices: list[LikelihoodSlice | None] = [None] * len(checked)
    for k in order:
        slices[k] = _one_slice(evaluator, checked[k], log_prior, search)
    return slices  # type: ignore[return-value]


# --- the window search (its options and prior helpers: :mod:`pyro_bnn.diagnostics.slice_window`) ------------------


def _one_slice(evaluator: SliceEvaluator, index: Index, log_prior, options: SearchOptions) -> LikelihoodSlice:
    """The window search, then the grid, then the Gaussian fit."""
    w0 = float(evaluator.tensor[index])
    evaluations = 0

    def evaluate(points: list[float]) -> torch.Tensor:
        nonlocal evaluations
        w = torch.tensor(points, dtype=evaluator.tensor.dtype, device=evaluator.tensor.device)
        evaluations += len(points)
        ll = evaluator(index, w)
        if log_prior is not None:
            ll = ll + prior_values(log_prior, w)
        return ll

    ll0 = float(evaluate([w0])[0])
    if not math.isfinite(ll0):
        raise ValueError(f"the log-likelihood at {evaluator.name}{list(index)} = {w0!r} is {ll0!r}, not finite")
    log_threshold = math.log(options.threshold)
    half = [options.start, options.start]
    finite_half = [0.0, 0.0]  # each side's last edge with a finite (or -inf) log-likelihood
    steps = [0, 0]
    done = [False, False]
    capped = [False, False]
    nonfinite = [False, False]
    first_bad: list[tuple[float, float] | None] = [None, None]
    while not all(done):
        sides = [side for side in (0, 1) if not done[side]]
        edges = [w0 - half[0] if side == 0 else w0 + half[1] for side in sides]
        for side, edge, ll in zip(sides, edges, evaluate(edges).tolist(), strict=True):
            steps[side] += 1
            if math.isnan(ll) or ll == math.inf:
                done[side] = nonfinite[side] = True
                half[side] = finite_half[side]
                first_bad[side] = (edge, ll)
                continue
            finite_half[side] = half[side]
            if not ll - ll0 >= log_threshold:
                done[side] = True
            elif half[side] >= options.max_half_width or steps[side] >= options.max_steps:
                done[side] = capped[side] = True
            else:
                half[side] = min(half[side] * options.growth, options.max_half_width)

    where = f"{evaluator.name}{list(index)}"
    if half[0] == 0 and half[1] == 0:
        (low, low_ll), (high, high_ll) = first_bad  # type: ignore[misc]
        raise ValueError(
            f"the log-likelihood of {where} is {low_ll!r} at {low!r} and {high_ll!r} at {high!r}, the first edges "
            f"on both sides of w0 = {w0!r}, so no window is left; expected finite values (or -inf)"
        )
    grid = torch.linspace(w0 - half[0], w0 + half[1], options.num_points, dtype=torch.float64)
    grid = grid.to(evaluator.tensor.dtype).to(torch.float64)  # the values the network actually ran with
    ll = evaluate(grid.tolist()).cpu()
    bad = torch.isnan(ll) | (ll == math.inf)
    if bool(bad.any()):
        k = int(bad.nonzero()[0])
        raise ValueError(
            f"the log-likelihood of {where} is {float(ll[k])!r} at {float(grid[k])!r}, inside the window "
            f"[{float(grid[0])!r}, {float(grid[-1])!r}]; expected finite values (or -inf)"
        )
    prior_part = None
    if log_prior is not None:
        on_device = grid.to(dtype=evaluator.tensor.dtype, device=evaluator.tensor.device)
        prior_part = prior_values(log_prior, on_device).cpu()
    mean, sd = fit_gaussian(grid, ll)
    return LikelihoodSlice(
        name=evaluator.name,
        index=index,
        w0=w0,
        grid=grid,
        log_likelihood=ll,
        log_likelihood_w0=ll0,
        log_prior=prior_part,
        half_widths=(half[0], half[1]),
        steps=(steps[0], steps[1]),
        capped=(capped[0], capped[1]),
        nonfinite=(nonfinite[0], nonfinite[1]),
        gaussian_mean=mean,
        gaussian_sd=sd,
        tv_distance=gaussian_tv_distance(grid, ll, mean, sd),
        evaluations=evaluations,
    )


__all__ = [
    "LikelihoodSlice",
    "SliceOptions",
    "fit_gaussian",
    "gaussian_tv_distance",
    "likelihood_slice",
    "likelihood_slices",
    "point_values",
]
