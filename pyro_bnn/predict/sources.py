"""Where the latent values of a prediction come from: a guide, a dict of samples, or a point estimate.

A parameter source draws the model's global sites (network weights) once per chunk of posterior samples, and the
per-example latent sites for every batch. Shapes follow :mod:`pyro_bnn.sites`: globals ``(S, 1, *param_shape)``,
per-example latents ``(S, B, *event_shape)``.

* :class:`GuideSource` draws both from a trained guide.
* :class:`Samples` replays given weight draws ``{site: (S, *param_shape)}`` (MCMC, an ensemble, a file) in order;
  per-example latents of new inputs come from their prior, since such draws hold no value for them.
* :class:`PointEstimate` is one set of weights ``{site: param_shape}`` (a MAP or posterior-mean network);
  per-example latents sit at their point value (the prior mean).

A source may also name one *point network* (:meth:`ParameterSource.point`): the single network that summarises it,
which :func:`~pyro_bnn.predict.predict` runs beside the samples when asked (``point=True``) and
:func:`~pyro_bnn.predict.predict_posterior_mean` runs alone.

:func:`as_source` turns what the user passed to :func:`~pyro_bnn.predict.predict` into one of these.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pyro
import torch
from pyro import poutine
from torch import nn

from pyro_bnn.bnn import BNN
from pyro_bnn.guides.capabilities import DrawsPosterior, NormalMixturePosterior
from pyro_bnn.guides.mixture import samples_for_components
from pyro_bnn.sites import DATA_DIM, sample_plate


class ParameterSource:
    """Base class: what :func:`~pyro_bnn.predict.predict` needs from a source of latent values.

    Attributes:
        mc_dropout: Keep the network's dropout on while predicting (each sample draws its own mask).
    """

    mc_dropout: bool = False

    def default_num_samples(self) -> int:
        """S when the caller does not say."""
        return 100

    def check_num_samples(self, num_samples: int) -> None:
        """Called once with the S a prediction will draw, before drawing: a source that S does not suit says so
        (the base class takes any)."""

    def prepare(self, bnn: BNN, x: torch.Tensor) -> None:
        """Called once before drawing, with the first batch's inputs ``(B, ...)``."""

    def point(self, bnn: BNN, x: torch.Tensor) -> dict[str, torch.Tensor] | None:
        """The weights of the source's point network, ``{site name: param_shape}``, or None when it has none.

        The point network is the one network that stands for the whole source (a guide's posterior median, a point
        estimate's own values); it runs with dropout off and per-example latents at their point value. The base
        class has none.

        Args:
            bnn: The model.
            x: The first batch's inputs ``(B, ...)`` (a guide that has not run yet needs them).
        """
        return None

    def draw_globals(self, bnn: BNN, start: int, num_samples: int, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Samples ``start .. start + num_samples`` of every weight site, ``{name: (S, 1, *param_shape)}`` (or
        ``param_shape`` when they do not vary)."""
        raise NotImplementedError

    def draw_locals(
        self, bnn: BNN, globals_: Mapping[str, torch.Tensor], num_samples: int, x: torch.Tensor
    ) -> dict[str, torch.Tensor] | None:
        """The per-example latents of one batch ``x`` given this chunk's globals, ``{name: (S, B, *event)}``;
        None puts them at their point value."""
        if not bnn.local_latents:
            return None
        # A plate of the batch's own size: a prediction scales nothing by N/B, and its batch may hold more rows
        # than the training set (which the likelihood's training plate refuses).
        plate = pyro.plate("data", x.shape[0], dim=DATA_DIM)
        with poutine.block(), poutine.trace() as tracer, sample_plate(num_samples):
            bnn.sample_local_latents(x.shape[0], x.device, plate=plate)
        return {name: tracer.trace.nodes[name]["value"] for name in bnn.local_site_names}


class GuideSource(ParameterSource):
    """Draws every latent site from a trained guide (global sites once per chunk, per-example sites per batch).

    The guide runs on at most N rows at a time (N: the likelihood's ``dataset_size``), as many as its data plate
    takes while training: a batch of more rows has its per-example sites drawn N rows at a time.

    Args:
        guide: The guide, called as ``guide(x)``. A guide with ``mc_dropout = True`` keeps dropout on.
    """

    def __init__(self, guide: Callable) -> None:
        if not callable(guide):
            raise ValueError(f"a guide source needs a callable guide, got {type(guide).__name__}")
        self.guide = guide
        self.mc_dropout = bool(getattr(guide, "mc_dropout", False))

    @property
    def num_components(self) -> int:
        """K of an equal-weight mixture guide (:class:`~pyro_bnn.guides.NormalMixturePosterior`, e.g.
        :class:`~pyro_bnn.guides.NodeNoiseMixture`), whose sample i comes from component ``i mod K``; 1 for any
        other guide."""
        return int(self.guide.num_components) if isinstance(self.guide, NormalMixturePosterior) else 1

    def default_num_samples(self) -> int:
        """100, or for a mixture of K components the smallest multiple of K from 100 on (102 for K = 3), so that
        every component gives the same number of samples."""
        return samples_for_components(super().default_num_samples(), self.num_components)

    def check_num_samples(self, num_samples: int) -> None:
        """Refuses an S that is no multiple of a mixture guide's K: sample i comes from component ``i mod K``, so
        the components would weigh unequally in the prediction."""
        k = self.num_components
        if num_samples % k:
            raise ValueError(
                f"num_samples={num_samples} is not a multiple of {k}: the mixture guide takes the same number of "
                f"samples from each of its {k} components (e.g. num_samples={samples_for_components(num_samples, k)}"
                f"; the default, None, is {self.default_num_samples()})"
            )

    def prepare(self, bnn: BNN, x: torch.Tensor) -> None:
        if getattr(self.guide, "prototype_trace", True) is None:  # an AutoGuide that has not run yet
            with poutine.block():
                self.guide(_training_rows(bnn, x))

    def point(self, bnn: BNN, x: torch.Tensor) -> dict[str, torch.Tensor] | None:
        """The guide's posterior median of every weight site (``guide.median()``), None for a guide without one.

        For the Normal guides (``AutoNormal``, :class:`~pyro_bnn.guides.BayesByBackprop`,
        :class:`~pyro_bnn.guides.FlatMeanField`) the median of a real-valued weight is its Normal's loc, which is
        also its mean; a constrained site (a hierarchical scale) gets ``biject_to(support)(loc)``, its median but
        not its mean. :class:`~pyro_bnn.guides.NodeNoiseMixture` gives its mixture's mean, MAP and MC-dropout
        guides their point values. A network without weight sites is its own point network (``{}``).
        """
        if not bnn.sites:
            return {}
        median = getattr(self.guide, "median", None)
        if not callable(median):
            return None
        self.prepare(bnn, x)
        values = median()
        missing = [name for name in bnn.site_names if name not in values]
        if missing:
            raise ValueError(f"the guide's median has no values for the weight sites {missing[:5]}")
        return {name: values[name] for name in bnn.site_names}

    def draw_globals(self, bnn: BNN, start: int, num_samples: int, x: torch.Tensor) -> dict[str, torch.Tensor]:
        values = self.draw_latents(num_samples, _training_rows(bnn, x), start=start)
        missing = [name for name in bnn.site_names if name not in values]
        if missing:
            raise ValueError(f"the guide does not sample the model's weight sites {missing[:5]}")
        return {name: values[name] for name in bnn.site_names}

    def draw_latents(self, num_samples: int, *args, start: int = 0) -> dict[str, torch.Tensor]:
        """Samples ``start .. start + num_samples`` of every latent site the guide samples (auxiliary sites left
        out), ``{site: (S, 1, *site_shape)}`` for global sites (one that ignores the sample plate is expanded to it).

        A guide that draws for itself (:class:`~pyro_bnn.guides.DrawsPosterior`, e.g. the flat and mixture guides)
        draws in one pass without Pyro: the mixture's sample i comes from component ``i mod K``, so S = K n samples
        hold n from each component (the authors' prediction). Any other guide is run once under a sample plate.

        Args:
            num_samples: S.
            *args: The model's arguments, to call the guide with (a guide that has not run yet needs them).
            start: Index of the first sample.
        """
        if isinstance(self.guide, DrawsPosterior):
            if getattr(self.guide, "prototype_trace", True) is None and args:
                with torch.no_grad(), poutine.block():
                    self.guide(*args)
            return self.guide.draw(num_samples, start=start)
        with poutine.block(), poutine.trace() as tracer, sample_plate(num_samples):
            self.guide(*args)
        values = {}
        for name, node in tracer.trace.nodes.items():
            if node["type"] != "sample" or node["is_observed"] or (node.get("infer") or {}).get("is_auxiliary"):
                continue
            value = node["value"]
            if value.dim() >= 2 and value.shape[:2] == (num_samples, 1):
                pass
            elif value.dim() == 0 or value.shape[0] != num_samples:  # a site that ignores the sample plate
                value = value.expand(num_samples, 1, *value.shape)
            else:
                value = value.unsqueeze(1)
            values[name] = value
        return values

    def draw_locals(self, bnn, globals_, num_samples, x):
        if not bnn.local_latents:
            return None
        # The chunk's weights are held fixed across batches; only the per-example sites are drawn afresh. A guide
        # of them opens the likelihood's data plate (Likelihood.plate), which takes at most the N training rows, so
        # a larger batch is drawn N rows at a time: the rows of a plate are independent given the weights, and the
        # draws are those of the same rows predicted in batches of N.
        size = bnn.likelihood.dataset_size
        parts = []
        for start in range(0, x.shape[0], size):
            nodes = self._trace(num_samples, x[start : start + size], condition=dict(globals_)).nodes
            missing = [name for name in bnn.local_site_names if name not in nodes]
            if missing:
                raise ValueError(f"the guide does not sample the model's per-example latent sites {missing[:5]}")
            parts.append({name: nodes[name]["value"] for name in bnn.local_site_names})
        if len(parts) == 1:
            return parts[0]
        return {  # joined at each value's row dimension, (S, B, *event) or (B, *event)
            latent.name: torch.cat(
                [part[latent.name] for part in parts], dim=parts[0][latent.name].dim() - len(latent.event_shape) - 1
            )
            for latent in bnn.local_latents
        }

    def _trace(self, num_samples: int, x: torch.Tensor, condition: dict | None = None):
        guide = poutine.condition(self.guide, data=condition) if condition else self.guide
        with poutine.block(), poutine.trace() as tracer, sample_plate(num_samples):
            guide(x)
        return tracer.trace


class Samples(ParameterSource):
    """Given posterior draws of the weight sites, used in order.

    Such a source has no point network (:meth:`point` is None): the draws may come from MCMC chains or be the
    members of an independently trained ensemble, and the element-wise average of their weights is a network
    that nobody trained (permuted hidden units average to nonsense). Pass the posterior mean as a
    :class:`PointEstimate` to score it.

    Args:
        samples: ``{site name: (S, *param_shape)}`` for every weight site of the model, the same S for all (e.g.
            ``pyro.infer.MCMC.get_samples()``). Extra keys (hyperparameters) are ignored. Floating values of
            another dtype (float64 draws) are cast to the parameter's dtype when drawn; integer values are refused.
    """

    def __init__(self, samples: Mapping[str, torch.Tensor]) -> None:
        self.samples = dict(samples)
        counts = {len(v) for v in self.samples.values()}
        if len(counts) > 1:
            raise ValueError(f"every site needs the same number of samples, got {sorted(counts)}")
        self.count = counts.pop() if counts else 0

    def default_num_samples(self) -> int:
        return self.count

    def prepare(self, bnn: BNN, x: torch.Tensor) -> None:
        _check_values(bnn, self.samples, leading=1)

    def draw_globals(self, bnn, start, num_samples, x):
        if start + num_samples > self.count:
            raise ValueError(f"asked for {start + num_samples} samples but the source holds {self.count}")
        return {
            name: _as_site(bnn, name, self.samples[name][start : start + num_samples].unsqueeze(1), x.device)
            for name in bnn.site_names
        }


class PointEstimate(ParameterSource):
    """One value of every weight site (MAP, posterior mean, a deterministic network's weights).

    Args:
        values: ``{site name: param_shape tensor}``. Extra keys are ignored. Floating values are cast to the
            parameter's dtype when drawn; integer values are refused.
        mc_dropout: Keep dropout on, so that S samples differ by their dropout masks.
    """

    def __init__(self, values: Mapping[str, torch.Tensor], *, mc_dropout: bool = False) -> None:
        self.values = dict(values)
        self.mc_dropout = bool(mc_dropout)

    def default_num_samples(self) -> int:
        return 100 if self.mc_dropout else 1

    def prepare(self, bnn: BNN, x: torch.Tensor) -> None:
        _check_values(bnn, self.values, leading=0)

    def point(self, bnn: BNN, x: torch.Tensor) -> dict[str, torch.Tensor] | None:
        """The point estimate's own values (with dropout off, also when ``mc_dropout`` is on)."""
        _check_values(bnn, self.values, leading=0)
        return {name: self.values[name] for name in bnn.site_names}

    def draw_globals(self, bnn, start, num_samples, x):
        return {name: _as_site(bnn, name, self.values[name], x.device) for name in bnn.site_names}

    def draw_locals(self, bnn, globals_, num_samples, x):
        return None


def _training_rows(bnn: BNN, x: torch.Tensor) -> torch.Tensor:
    """The first rows of ``x``, at most as many as the training set has: the most a guide that opens the
    likelihood's data plate takes in one call (to run it for its global sites, whatever the batch)."""
    return x[: bnn.likelihood.dataset_size]


def _as_site(bnn: BNN, name: str, value: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``value`` on ``device`` in the dtype of the network's parameter ``name``: float64 draws (MCMC, a file) meet a
    float32 network, and torch refuses to mix the two in one layer (``_check_values`` took only floating values)."""
    return value.to(device=device, dtype=bnn.net.get_buffer(name).dtype)


def _check_values(bnn: BNN, values: Mapping[str, torch.Tensor], leading: int, *, either: bool = False) -> None:
    """Names the first site whose values are not of the site's shape after ``leading`` dimensions (0: a point, 1:
    samples), or not floating point (those are cast to the parameter's dtype when drawn, integers are refused);
    ``either``: a dict that may be either form, and the message names both."""
    missing = [name for name in bnn.site_names if name not in values]
    if missing:
        raise ValueError(f"the parameter source has no values for the weight sites {missing[:5]}")
    for site in bnn.sites:
        shape = tuple(values[site.name].shape)
        if shape[leading:] != tuple(site.shape) or len(shape) != leading + len(site.shape):
            dims = ", ".join(str(n) for n in site.shape)
            samples = f"(S, {dims})" if dims else "(S,)"
            expected = samples if leading else str(tuple(site.shape))
            if either:
                expected = f"{tuple(site.shape)} (a point) or {samples} (S samples)"
            raise ValueError(f"values of site {site.name!r} have shape {shape}; expected {expected}")
        dtype, wanted = values[site.name].dtype, bnn.net.get_buffer(site.name).dtype
        if not dtype.is_floating_point:
            raise ValueError(
                f"values of site {site.name!r} are {dtype}; expected floating-point weights (the network's are "
                f"{wanted})"
            )


def as_source(bnn: BNN, source: ParameterSource | Callable | Mapping[str, torch.Tensor]) -> ParameterSource:
    """The :class:`ParameterSource` behind what a user passed: a source, a guide, or a dict of tensors.

    A dict is a point estimate when every weight site's value has the parameter's own shape, and samples when every
    value has one more leading dimension.

    Raises:
        ValueError: when a dict fits neither form, naming the first site that does not fit.
    """
    if isinstance(source, ParameterSource):
        return source
    if isinstance(source, Mapping):
        if all(name in source and tuple(source[name].shape) == tuple(s.shape) for name, s in _named(bnn)):
            return PointEstimate(source)
        if all(name in source and tuple(source[name].shape[1:]) == tuple(s.shape) for name, s in _named(bnn)):
            return Samples(source)
        _check_values(bnn, source, leading=1, either=True)  # raises, naming the site that fits neither form
    if isinstance(source, nn.Module) or callable(source):
        return GuideSource(source)
    raise ValueError(
        f"predict takes a guide, a dict of weight samples or a point estimate, got {type(source).__name__}"
    )


def _named(bnn: BNN):
    return [(site.name, site) for site in bnn.sites]


def draw_parameters(bnn: BNN, guide: Callable, num_samples: int, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Draws ``num_samples`` weight sets from a guide in one vectorised call.

    Returns:
        ``{site name: (num_samples, 1, *param_shape)}``, the layout :meth:`BNN.apply_parameters` takes.
    """
    source = GuideSource(guide)
    source.prepare(bnn, x)
    return source.draw_globals(bnn, 0, num_samples, x)


__all__ = ["GuideSource", "ParameterSource", "PointEstimate", "Samples", "as_source", "draw_parameters"]
