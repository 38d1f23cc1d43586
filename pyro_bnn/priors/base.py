"""The prior interface: which parameters are random and what their prior distribution is."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
from pyro.distributions import Distribution
from torch import nn
from torch.nn.parameter import is_lazy

from pyro_bnn.checks import (
    FLOAT32_FINITE,
    FLOAT32_POSITIVE,
    float32_holds_finite,
    float32_holds_positive,
    to_float32,
)
from pyro_bnn.priors.selection import Select, every_parameter


@dataclass(frozen=True)
class ParameterSite:
    """One parameter tensor of a network that becomes a Pyro sample site.

    Attributes:
        name: Full dotted parameter name, also the sample site's name (``"layers.0.weight"``).
        layer: Dotted name of the module that owns the parameter (``"layers.0"``; ``""`` for the root).
        attr: Attribute name on that module (``"weight"``).
        shape: The parameter's shape, which is the site's event shape.
    """

    name: str
    layer: str
    attr: str
    shape: torch.Size


def join_name(prefix: str, name: str) -> str:
    """Dotted name ``prefix.name``, or ``name`` alone when the prefix is empty (the root module)."""
    return f"{prefix}.{name}" if prefix else name


def elementwise(family: Callable[..., Distribution], shape: torch.Size, *params: torch.Tensor) -> Distribution:
    """An i.i.d. prior over a tensor of ``shape`` whose parameters may carry sample dimensions.

    Args:
        family: A distribution constructor taking the tensors ``params`` (e.g. ``dist.Normal``).
        shape: Event shape, the parameter tensor's shape.
        *params: Tensors of shape ``batch`` (``()`` for fixed hyperparameters, ``(P, 1)`` when a hyperprior was
            sampled under a vectorised particle plate).

    Returns:
        A distribution with ``batch_shape == broadcast(batch)`` and ``event_shape == shape``.
    """
    batch = torch.broadcast_shapes(*(p.shape for p in params))
    trailing = (1,) * len(shape)
    base = family(*(p.reshape(p.shape + trailing) for p in params))
    return base.expand(batch + shape).to_event(len(shape))


def _real_number(value: object) -> float | None:
    """``value`` as a float if it is a real number: an int or float, a NumPy scalar, or a real tensor or NumPy array
    of one element (not a bool, a string or a sequence); else None."""
    if isinstance(value, torch.Tensor):
        if value.numel() == 1 and value.dtype != torch.bool and not value.is_complex():
            return float(value.item())
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    elif isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "iuf":  # a 0-d or (1,) array
        return float(value.reshape(()))
    return None


def _refusal(value: object, number: float | None, what: str, expected: str) -> ValueError:
    """The one-line ``"{what} must be {expected}, got ..."``, naming a tensor that is no number by its shape and
    dtype (its repr may span lines) and a one-element tensor by its number."""
    if isinstance(value, torch.Tensor):
        shown = f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}" if number is None else number
    else:
        shown = repr(value)
    return ValueError(f"{what} must be {expected}, got {shown}")


def positive_number(value: object, what: str) -> float:
    """``value`` as a float if it is a finite real number > 0 (:func:`_real_number`'s kinds) that float32 holds as a
    positive normal number (it is stored in a float32 buffer, where 1e-50 would become 0 and 1e39 inf); else a
    one-line ``ValueError``: ``"{what} must be a finite number > 0, got ..."``, or ``"{what} must be a positive number
    that float32 holds (1.2e-38 to 3.4e+38), got 1e+39"`` (the words of the option strings' refusal)."""
    number = _real_number(value)
    if number is None or not 0 < number < math.inf:
        raise _refusal(value, number, what, "a finite number > 0")
    if not float32_holds_positive(number):
        raise _refusal(value, number, what, FLOAT32_POSITIVE)
    return number


def unit_number(value: object, what: str) -> float:
    """``value`` as a float if it is a real number (:func:`_real_number`'s kinds) in (0, 1) also once rounded to
    float32 (a mixture weight: 1 - 1e-9 would become 1); else a one-line ``ValueError`` in the words of the option
    strings' refusal: ``"{what} must be a number in (0, 1) after rounding to float32, got 0.999999999"``."""
    number = _real_number(value)
    if number is None or not 0 < number < 1:
        raise _refusal(value, number, what, "a number in (0, 1)")
    if not 0 < to_float32(number) < 1:
        raise _refusal(value, number, what, "a number in (0, 1) after rounding to float32")
    return number


def positive_buffer(module: nn.Module, name: str, value: float) -> None:
    """Registers ``value`` as a scalar float32 buffer after checking that it is a finite number > 0 that float32
    holds (:func:`positive_number`; the error names the prior's class and ``name``)."""
    module.register_buffer(name, torch.tensor(positive_number(value, f"{type(module).__name__}: {name}")))


def finite_buffer(module: nn.Module, name: str, value: float) -> None:
    """Registers ``value`` as a scalar float32 buffer after checking that it is a finite number (of
    :func:`_real_number`'s kinds) that stays finite as a float32; else a one-line ``ValueError`` naming the prior's
    class and ``name``: ``"NormalPrior: loc must be a finite number that float32 holds (-3.4e+38 to 3.4e+38), got
    1e+39"``."""
    what = f"{type(module).__name__}: {name}"
    number = _real_number(value)
    if number is None or not math.isfinite(number):
        raise _refusal(value, number, what, "a finite number")
    if not float32_holds_finite(number):
        raise _refusal(value, number, what, FLOAT32_FINITE)
    module.register_buffer(name, torch.tensor(number))


class Prior(nn.Module):
    """Base class of weight priors.

    A prior walks a network, picks the parameters that become random (``select``) and gives each its prior
    distribution. Its hyperparameters are registered buffers, so ``bnn.to("cuda")`` moves them with the network.

    Args:
        select: ``select(name, module) -> bool`` choosing the random parameters (see
            :mod:`pyro_bnn.priors.selection`); default: every weight and bias.

    Subclasses implement :meth:`distribution`; hierarchical priors also :meth:`layer_hyperpriors`.
    """

    def __init__(self, select: Select | None = None) -> None:
        super().__init__()
        if select is not None and not callable(select):
            raise ValueError(f"select must be a callable select(name, module) -> bool, got {select!r}")
        self.select: Select = select if select is not None else every_parameter

    def parameter_sites(self, net: nn.Module) -> list[ParameterSite]:
        """The parameters of ``net`` that this prior makes random, in ``named_modules`` order."""
        sites, owners = [], {}
        for layer_name, layer in net.named_modules(remove_duplicate=False):
            for attr, param in layer.named_parameters(recurse=False):
                name = join_name(layer_name, attr)
                selected = bool(self.select(name, layer))
                if id(param) in owners:
                    first, first_selected = owners[id(param)]
                    if selected or first_selected:
                        # One site per tensor would break the tie (the other owner would keep a deterministic copy).
                        raise ValueError(
                            f"parameters {first!r} and {name!r} are one shared (tied) tensor; pyro_bnn cannot make "
                            "tied weights random yet (leave both out of the prior's select)"
                        )
                    continue  # a tied tensor left deterministic stays one tensor
                owners[id(param)] = (name, selected)
                if selected and is_lazy(param):
                    raise ValueError(
                        f"parameter {name!r} belongs to a lazy module not yet materialised (shape unknown); run the "
                        "network once on a batch, net(x), before making it Bayesian"
                    )
                if selected:
                    sites.append(ParameterSite(name, layer_name, attr, param.shape))
        return sites

    def layer_hyperpriors(self, layer: str) -> dict[str, Distribution]:
        """Hyperprior distributions shared by one layer's parameters, keyed by a short name (``"scale"``).

        The model samples each as site ``"<layer>.prior_<key>"`` before the layer's parameters and passes the
        values to :meth:`distribution`. Non-hierarchical priors have none.
        """
        return {}

    def distribution(self, site: ParameterSite, hyper: Mapping[str, torch.Tensor]) -> Distribution:
        """Prior distribution of one parameter tensor.

        Args:
            site: The parameter.
            hyper: Sampled values of this layer's :meth:`layer_hyperpriors`, each of shape ``()`` or ``(P, 1)``.

        Returns:
            A distribution with event shape ``site.shape``.
        """
        raise NotImplementedError

    def log_prob(
        self, site: ParameterSite, value: torch.Tensor, hyper: Mapping[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Log prior density of a parameter value, summed over the tensor (a convenience for diagnostics)."""
        return self.distribution(site, hyper or {}).log_prob(value)
