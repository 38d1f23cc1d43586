"""Name -> model factory registry: ``register_model``, ``build_model``, ``parse_model_spec`` and
``available_models``.

A factory is a class or function called as::

    factory(input_shape=..., num_classes=..., activation=..., dropout=..., **options) -> nn.Module

where ``activation=None`` means the model's own default, which the factory declares in a ``default_activation``
attribute (a class attribute, or one set on the function) when it is not ReLU (:func:`default_activation`; ``tanh``
for ``tanh-small`` and ``tanh-cnn``). Names are case-insensitive (``"3FC"`` is ``"3fc"``).

A model string (the CLI's ``--model``, ``RunConfig.model``) is ``name`` or ``name:arg1,arg2,...``. Only models
registered with :class:`ModelArguments` take arguments after the colon; they say how the arguments become
options, e.g. ``mlp:256,256`` is ``hidden_widths=(256, 256)``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from torch import nn

from pyro_bnn.checks import REGISTRY_NAME
from pyro_bnn.nn import ActivationLike
from pyro_bnn.spec import CustomArguments, Family, Form

ModelFactory = Callable[..., nn.Module]
"""Builds a net from ``input_shape``, ``num_classes``, ``activation``, ``dropout`` and model options."""

FactoryT = TypeVar("FactoryT", bound=ModelFactory)

DEFAULT_ACTIVATION = "relu"
"""The activation a factory builds with ``activation=None`` unless it declares another in its
``default_activation`` attribute."""

_COMMON_ARGUMENTS_ORDER = ("input_shape", "num_classes", "activation", "dropout")
_COMMON_ARGUMENTS = frozenset(_COMMON_ARGUMENTS_ORDER)


@dataclass(frozen=True)
class ModelArguments(CustomArguments):
    """How a model reads the arguments after the colon of its model string (its form in :data:`MODEL_FAMILY`).

    Attributes:
        usage: What follows the colon, for messages and ``pyro-bnn list``, e.g. ``"W1,W2,..."``.
        parse: Turns the comma-separated arguments (stripped strings, never empty as a list) into build options,
            e.g. ``["256", "256"] -> {"hidden_widths": (256, 256)}``; raises ``ValueError`` saying what is wrong
            with which argument.
    """


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model string.

    Attributes:
        name: The registered name (lower case).
        options: Build options given after the colon (empty for a bare name).
    """

    name: str
    options: dict[str, object] = field(default_factory=dict)


_REGISTRY: dict[str, ModelFactory] = {}

_ARGUMENTS: dict[str, ModelArguments] = {}


def _key(name: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a model name must be a non-empty string, got {name!r}")
    return name.strip().lower()


def register_model(
    name: str, *, replace: bool = False, arguments: ModelArguments | None = None
) -> Callable[[FactoryT], FactoryT]:
    """Decorator that registers a model class or factory function under ``name``.

    Example::

        @register_model("my-mlp")
        def my_mlp(*, input_shape, num_classes, activation=None, dropout=0.0, width=64):
            return MLP(input_shape, num_classes, [width], activation=activation or "tanh", dropout=dropout)

        my_mlp.default_activation = "tanh"  # what activation=None builds (RunConfig fills it in)

    A factory whose ``activation=None`` builds anything but ReLU says which in a ``default_activation``
    attribute, an activation string (:func:`default_activation`): a run's resolved config and ``config.json`` name
    it, so they say which activation ran.

    Args:
        name: Registry name (case-insensitive, without ``:``).
        replace: Allow replacing a different factory already registered under ``name``.
        arguments: How the model reads ``name:arg1,arg2,...`` model strings; ``None``: it takes no arguments.

    Returns:
        A decorator that registers its argument and returns it unchanged.

    Raises:
        ValueError: If ``name`` is empty or holds a ``:``, or is already taken by another factory and
            ``replace`` is false.
    """
    key = _key(name)
    if ":" in key:
        raise ValueError(f"a model name cannot hold ':' (it starts the arguments of a model string), got {name!r}")
    if not REGISTRY_NAME.fullmatch(key):
        raise ValueError(f"a model name is letters, digits, '.', '_' and '-' (not first; no space), got {name!r}")
    if arguments is not None and not isinstance(arguments, ModelArguments):
        raise TypeError(f"model {key!r}: arguments is a ModelArguments or None, got {arguments!r}")

    def decorator(factory: FactoryT) -> FactoryT:
        _check_factory(factory, key)
        existing = _REGISTRY.get(key)
        if existing is not None and existing is not factory and not replace:
            raise ValueError(
                f"model name {key!r} is already registered to {existing!r}; pass replace=True to override it"
            )
        _REGISTRY[key] = factory
        if arguments is None:
            _ARGUMENTS.pop(key, None)
        else:
            _ARGUMENTS[key] = arguments
        return factory

    return decorator


def _check_factory(factory: object, key: str) -> None:
    """Refuses a factory :func:`build_model` cannot call: not callable, or not taking the common arguments
    (``input_shape``, ``num_classes``, ``activation``, ``dropout``) as keywords."""
    if not callable(factory):
        raise TypeError(f"model {key!r}: register_model decorates a class or factory function, got {factory!r}")
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin without a signature: nothing more to check
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    by_keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    missing = [a for a in _COMMON_ARGUMENTS_ORDER if a not in parameters or parameters[a].kind not in by_keyword]
    if missing:
        raise TypeError(
            f"model {key!r}: its factory takes no keyword {', '.join(missing)}; build_model calls it as "
            "factory(input_shape=..., num_classes=..., activation=..., dropout=..., **options)"
        )


def unregister_model(name: str) -> None:
    """Removes the model called ``name`` (nothing when there is none; tests that register one clean up with it)."""
    key = str(name).strip().lower()
    _REGISTRY.pop(key, None)
    _ARGUMENTS.pop(key, None)


def model_registrations() -> dict[str, tuple[ModelFactory, ModelArguments | None]]:
    """Every registered model: name -> (factory, its :class:`ModelArguments` or None), for :func:`restore_models`."""
    return {key: (factory, _ARGUMENTS.get(key)) for key, factory in _REGISTRY.items()}


def restore_models(registrations: dict[str, tuple[ModelFactory, ModelArguments | None]]) -> None:
    """Makes the registry hold exactly ``registrations`` (what :func:`model_registrations` returned before): undoes
    every registration, replacement and removal made since."""
    _REGISTRY.clear()
    _ARGUMENTS.clear()
    for key, (factory, arguments) in registrations.items():
        _REGISTRY[key] = factory
        if arguments is not None:
            _ARGUMENTS[key] = arguments


def available_models() -> list[str]:
    """Returns the registered model names, sorted."""
    return sorted(_REGISTRY)


def model_usage(name: str) -> str:
    """The model string forms of a registered model: ``"mlp[:W1,W2,...]"``, or the bare name if it takes no
    arguments."""
    key = _key(name)
    if key not in _REGISTRY:
        raise ValueError(f"unknown model {name!r}; expected one of {MODEL_FAMILY.usages()}")
    return _model_form(key).usage


def _model_form(key: str) -> Form:
    return Form(key, custom=_ARGUMENTS.get(key), doc=_REGISTRY[key].__doc__ or "")


MODEL_FAMILY = Family(
    "model",
    lambda: [_model_form(key) for key in available_models()],
    example="mlp:256,256",
    no_arguments_hint="set its options in Python with build_model(name, ..., **options)",
)
"""The ``--model`` grammar: one form per registered model, read from the registry on every use (a model
registered later is parsed and listed too); the arguments are read by the model's :class:`ModelArguments`."""


def parse_model_spec(spec: str) -> ModelSpec:
    """Parses a model string ``name`` or ``name:arg1,arg2,...`` without building anything.

    ``RunConfig.validate`` calls this so that a bad ``--model`` fails before any data is loaded.

    Args:
        spec: A registered name (case-insensitive), optionally followed by ``:`` and the model's arguments.
            ``"name:"`` with nothing after the colon is the bare name.

    Returns:
        The name and the options the arguments stand for.

    Raises:
        ValueError: One line naming ``spec``: an unknown name (listing the registered forms), arguments given to
            a model that takes none, or arguments its parser refuses (with the expected form).
    """
    parsed = MODEL_FAMILY.parse(spec)
    return ModelSpec(parsed.name, dict(parsed.values))


def default_activation(model: str) -> str:
    """The activation ``model`` builds when given ``activation=None``: its factory's ``default_activation``
    attribute, else :data:`DEFAULT_ACTIVATION` (``relu``); ``tanh`` for ``tanh-small`` and ``tanh-cnn``.

    Args:
        model: A model string, as for :func:`parse_model_spec` (``"mlp:256,256"``).

    Raises:
        ValueError: ``model`` does not parse (:func:`parse_model_spec`'s message), or its factory's
            ``default_activation`` is not a string (one line naming both).
    """
    key = parse_model_spec(model).name
    declared = getattr(_REGISTRY[key], "default_activation", DEFAULT_ACTIVATION)
    if not isinstance(declared, str):
        raise ValueError(f"model {key!r}: its default_activation must be an activation string, got {declared!r}")
    return declared


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
        name: A name from ``available_models()`` (case-insensitive), or a model string with arguments such as
            ``"mlp:256,256"`` (see :func:`parse_model_spec`).
        input_shape: One example's shape without the batch dimension, e.g. ``(1, 28, 28)`` or ``(2,)``.
        num_classes: Output size (classes, or the target dimension D of a regression).
        activation: Hidden activation (see ``pyro_bnn.nn.make_activation``); None uses the model's default.
        dropout: Probability of the ``nn.Dropout`` after each hidden activation; 0 adds none.
        **kwargs: Model-specific options, e.g. ``width`` for ``"bbb-mlp"``.

    Returns:
        The net, mapping ``(batch, *input_shape)`` to ``(batch, num_classes)``, with ``input_shape`` and
        ``num_classes`` attributes (set here if a user factory did not set them).

    Raises:
        ValueError: If ``name`` is unknown (the message lists the known names), its arguments are invalid, or
            the model rejects the shape, activation or options.
        TypeError: If an option is not one the model takes (the message lists those it does), is given both in
            the model string and as a keyword, or the factory returns something other than an ``nn.Module``.
    """
    spec = parse_model_spec(name)
    key, factory = spec.name, _REGISTRY[spec.name]
    both = sorted(set(spec.options) & set(kwargs))
    if both:
        raise TypeError(f"option(s) {both} given both in the model string {name!r} and as keyword arguments")
    kwargs = {**spec.options, **kwargs}
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
