"""Name -> model factory registry: ``register_model``, ``build_model`` and ``available_models``.

A factory is a class or function called as::

    factory(input_shape=..., num_classes=..., activation=..., dropout=..., **options) -> nn.Module

where ``activation=None`` means the model's own default. Names are case-insensitive (``"3FC"`` is ``"3fc"``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TypeVar

from torch import nn

from pyro_bnn.nn import ActivationLike

ModelFactory = Callable[..., nn.Module]
"""Builds a net from ``input_shape``, ``num_classes``, ``activation``, ``dropout`` and model options."""

FactoryT = TypeVar("FactoryT", bound=ModelFactory)

_COMMON_ARGUMENTS = frozenset({"input_shape", "num_classes", "activation", "dropout"})

_REGISTRY: dict[str, ModelFactory] = {}


def _key(name: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a model name must be a non-empty string, got {name!r}")
    return name.strip().lower()


def register_model(name: str, *, replace: bool = False) -> Callable[[FactoryT], FactoryT]:
    """Decorator that registers a model class or factory function under ``name``.

    Example::

        @register_model("my-mlp")
        def my_mlp(*, input_shape, num_classes, activation=None, dropout=0.0, width=64):
            return MLP(input_shape, num_classes, [width], activation=activation or "tanh", dropout=dropout)

    Args:
        name: Registry name (case-insensitive).
        replace: Allow replacing a different factory already registered under ``name``.

    Returns:
        A decorator that registers its argument and returns it unchanged.

    Raises:
        ValueError: If ``name`` is empty, or already taken by another factory and ``replace`` is false.
    """
    key = _key(name)

    def decorator(factory: FactoryT) -> FactoryT:
        existing = _REGISTRY.get(key)
        if existing is not None and existing is not factory and not replace:
            raise ValueError(
                f"model name {key!r} is already registered to {existing!r}; pass replace=True to override it"
            )
        _REGISTRY[key] = factory
        return factory

    return decorator


def available_models() -> list[str]:
    """Returns the registered model names, sorted."""
    return sorted(_REGISTRY)


def _model_options(factory: ModelFactory) -> list[str] | None:
    """Returns the options a factory takes beyond the common arguments; None if it takes ``**kwargs``."""
    parameters = inspect.signature(factory).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return [
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and p.name not in _COMMON_ARGUMENTS
    ]


def build_model(
    name: str,
    *,
    input_shape: Sequence[int],
    num_classes: int,
    activation: ActivationLike | None = None,
    dropout: float = 0.0,
    **kwargs: object,
) -> nn.Module:
    """Builds a registered model.

    Args:
        name: A name from ``available_models()`` (case-insensitive).
        input_shape: One example's shape without the batch dimension, e.g. ``(1, 28, 28)`` or ``(2,)``.
        num_classes: Output size.
        activation: Hidden activation (see ``pyro_bnn.nn.make_activation``); None uses the model's default.
        dropout: Probability of the ``nn.Dropout`` after each hidden activation; 0 adds none.
        **kwargs: Model-specific options, e.g. ``width`` for ``"bbb-mlp"``.

    Returns:
        The net, mapping ``(batch, *input_shape)`` to ``(batch, num_classes)``, with ``input_shape`` and
        ``num_classes`` attributes (set here if a user factory did not set them).

    Raises:
        ValueError: If ``name`` is unknown (the message lists the known names), or the model rejects the
            shape, activation or options.
        TypeError: If an option is not one the model takes (the message lists those it does), or the factory
            returns something other than an ``nn.Module``.
    """
    key = _key(name)
    factory = _REGISTRY.get(key)
    if factory is None:
        raise ValueError(f"unknown model {name!r}; available models: {', '.join(available_models())}")
    options = _model_options(factory)
    if options is not None:
        unknown = sorted(set(kwargs) - set(options))
        if unknown:
            accepted = ", ".join(options) if options else "none"
            raise TypeError(f"model {key!r} got unknown option(s) {unknown}; its options are: {accepted}")
    net = factory(input_shape=input_shape, num_classes=num_classes, activation=activation, dropout=dropout, **kwargs)
    if not isinstance(net, nn.Module):
        raise TypeError(f"the factory registered as {key!r} returned {type(net).__name__}, not an nn.Module")
    if not hasattr(net, "input_shape"):
        net.input_shape = tuple(input_shape)
    if not hasattr(net, "num_classes"):
        net.num_classes = num_classes
    return net
