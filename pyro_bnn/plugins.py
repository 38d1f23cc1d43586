"""Plugins: guide families, objectives and papers that another installed package registers, found through its entry
points and loaded by :func:`load_plugins` (the ``pyro-bnn`` command calls it before it reads its arguments).

An installed distribution declares its plugins in its ``pyproject.toml``, one table per group (docs/plugins.md)::

    [project.entry-points."pyro_bnn.guides"]
    toyflat = "toy_plugin:TOYFLAT"           # a GuideFamily

    [project.entry-points."pyro_bnn.objectives"]
    toy-elbo = "toy_plugin:register_toy_elbo"  # a callable taking no arguments that calls register_objective

    [project.entry-points."pyro_bnn.papers"]
    toypaper = "toy_plugin:TOYPAPER"         # an Experiment object

What each entry point names (:data:`GROUPS`):

- ``pyro_bnn.guides``: a :class:`~pyro_bnn.guides.GuideFamily`; loading registers it
  (:func:`~pyro_bnn.guides.register_guide`), so ``--guide NAME`` parses.
- ``pyro_bnn.objectives``: a callable taking no arguments that registers one or more objectives with
  :func:`~pyro_bnn.infer.objective_registry.register_objective` (an objective's registration is that decorator's
  call, with its options and guide capabilities, so there is no object to name); ``--elbo NAME`` then parses. A
  callable that registers nothing, or replaces an objective already registered, fails (and its changes are undone).
- ``pyro_bnn.papers``: an experiment object (an *instance* with ``name``, ``title``, ``summary``, ``profiles``,
  ``plan`` and ``analyse``, :class:`~pyro_bnn.reproduce.planned.Experiment`); loading registers it
  (:func:`~pyro_bnn.reproduce.papers.register_experiment`), so ``pyro-bnn reproduce NAME`` and ``--list`` see it.

A plugin never replaces a registration: a name that is taken fails that plugin, and so does a plugin whose import or
registration replaces or removes a guide, objective, model, paper, measurement or runner registered before it (the
registries are snapshotted before its module is imported, and put back exactly when it fails: what it registered
before failing, a paper's measurements and runners included, is undone).

**A plugin that fails** (its module does not import, or exits when imported: ``sys.exit()``, argparse reading the
command line; its object is not what its group takes; registering it raises; it replaces a registration) is
skipped, with a warning of one line naming the distribution, the entry point and the cause; the other plugins and
the command go on, so a broken third-party package cannot make ``pyro-bnn --help`` unusable. The
failure is not silent: the warning is printed on every ``pyro-bnn`` command, ``pyro-bnn plugins`` lists every
plugin as ``loaded`` or ``failed`` (with the cause) and exits with status 1 when one failed, and
``load_plugins(on_error="raise")`` raises :class:`PluginError` instead, for a program that must not run without
its plugins. Setting :data:`DISABLE_ENV` (``PYRO_BNN_NO_PLUGINS=1``) loads none.

Each entry point is loaded once per process: calling :func:`load_plugins` again loads only the entry points it has
not tried yet (a failed one is not retried, nor warned about twice). Runs that a grid hands to other processes
(``pyro-bnn reproduce --workers N`` with N > 1, or ``--executor ray``) load no plugin there, yet run with a plugin's
guide or objective as in the command's process: the grid hands each worker the guide families, objectives,
measurements and runners its runs use (:mod:`pyro_bnn.reproduce.registries`), by module and name. So what a plugin
registers must be importable (a module-level class or function, not a lambda): a grid whose runs use one that is not
is refused before its runs start, in one line naming it.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Literal

from pyro_bnn.commands.verb import Verb, no_arguments

__all__ = [
    "PLUGINS_VERB",
    "DISABLE_ENV",
    "GROUPS",
    "Plugin",
    "PluginError",
    "PluginWarning",
    "discovered_plugins",
    "load_plugins",
    "plugins_disabled",
    "unload_plugins",
]

DISABLE_ENV = "PYRO_BNN_NO_PLUGINS"
"""The environment variable that turns plugin loading off: set to anything but empty or ``0``,
:func:`load_plugins` loads nothing (``PYRO_BNN_NO_PLUGINS=1 pyro-bnn ...``)."""

GROUPS = {"pyro_bnn.guides": "guide", "pyro_bnn.objectives": "objective", "pyro_bnn.papers": "paper"}
"""The entry-point groups :func:`load_plugins` reads, each with the kind of thing its entry points register."""


class PluginError(RuntimeError):
    """A plugin failed to load (``load_plugins(on_error="raise")``): one line naming its distribution, its entry
    point and the cause."""


class PluginWarning(UserWarning):
    """A plugin failed to load and was skipped (``load_plugins(on_error="warn")``, the default): one line naming its
    distribution, its entry point and the cause."""


@dataclass(frozen=True)
class Plugin:
    """One entry point :func:`load_plugins` has tried.

    Attributes:
        group: Its entry-point group (:data:`GROUPS`).
        name: The entry point's name.
        value: What it names, ``module:attribute``.
        distribution: The distribution that declares it, ``name version`` (empty when unknown).
        registered: The names it registered (guide, objective or experiment names); empty when it failed.
        error: Why it failed, in one line; empty when it loaded.
    """

    group: str
    name: str
    value: str
    distribution: str = ""
    registered: tuple[str, ...] = ()
    error: str = ""

    @property
    def loaded(self) -> bool:
        """Whether it loaded and registered."""
        return not self.error

    @property
    def label(self) -> str:
        """``plugin DIST (entry point GROUP:NAME = VALUE)``: which plugin, for messages."""
        source = f"plugin {self.distribution} " if self.distribution else "plugin "
        return f"{source}(entry point {self.group}:{self.name} = {self.value})"

    @property
    def message(self) -> str:
        """The one-line failure message (empty when it loaded)."""
        return f"{self.label} failed: {self.error}" if self.error else ""

    def describe(self) -> str:
        """One line for ``pyro-bnn plugins``: loaded and what it registered, or failed and why."""
        if self.error:
            return f"failed  {self.label}: {self.error}"
        kind = GROUPS[self.group]
        return f"loaded  {self.label}: {kind} {', '.join(self.registered)}"


_TRIED: dict[tuple[str, str, str, str], Plugin] = {}
"""Every entry point tried in this process, by (group, name, value, distribution), in the order tried."""


def plugins_disabled() -> bool:
    """Whether :data:`DISABLE_ENV` turns plugin loading off."""
    return os.environ.get(DISABLE_ENV, "").strip() not in ("", "0")


def _one_line(err: BaseException) -> str:
    text = "; ".join(line.strip() for line in str(err).splitlines() if line.strip())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _register_guide(obj: object) -> tuple[str, ...]:
    from pyro_bnn.guides.registry import GuideFamily, guide_families, register_guide

    if not isinstance(obj, GuideFamily):
        raise TypeError(f"a pyro_bnn.guides entry point names a GuideFamily, this one a {type(obj).__name__}")
    if obj.name in {family.name for family in guide_families()}:  # even the same object: it is not the plugin's
        raise ValueError(f"guide {obj.name!r} is already registered; a plugin adds names, never replaces")
    register_guide(obj)
    return (obj.name,)


def _register_objectives(obj: object) -> tuple[str, ...]:
    from pyro_bnn.infer.objective_registry import objective_entries

    if not callable(obj) or isinstance(obj, type):
        raise TypeError(
            "a pyro_bnn.objectives entry point names a callable taking no arguments that calls register_objective, "
            f"this one a {type(obj).__name__ if not isinstance(obj, type) else 'class'}"
        )
    before = objective_entries()
    obj()  # what it replaces, and everything it did when it raises, _try undoes
    now = {entry.name: entry for entry in objective_entries()}
    if any(now.get(entry.name) != entry for entry in before):
        return ()  # it replaced or removed one: _try names it and undoes it (a replacement is no missing name)
    known = {entry.name for entry in before}
    names = tuple(name for name in now if name not in known)
    if not names:
        raise ValueError("it registered no objective (call register_objective(...)(factory) in it)")
    return names


def _register_paper(obj: object) -> tuple[str, ...]:
    from pyro_bnn.reproduce.papers import EXPERIMENTS, register_experiment

    if isinstance(obj, type):  # the class where its instance was meant
        raise TypeError(
            f"a pyro_bnn.papers entry point names an experiment object, an instance, got the class "
            f"{obj.__module__}.{obj.__qualname__}; name an instance ({obj.__qualname__}() at module level)"
        )
    if getattr(obj, "name", None) in EXPERIMENTS:  # even the same object: it is not the plugin's
        raise ValueError(f"experiment {obj.name!r} is already registered; a plugin adds names, never replaces")
    register_experiment(obj)
    return (obj.name,)


@dataclass(frozen=True)
class _Registrations:
    """What the registries a plugin could touch hold, taken before the plugin is imported (:func:`_snapshot`)."""

    guides: tuple
    objectives: tuple
    models: dict
    papers: dict
    measures: dict
    runners: dict

    def meddling(self) -> str:
        """How the registries now differ from this snapshot other than by added names (a clause: ``replaced the
        registered objective 'trace'``), or empty."""
        now = _snapshot()
        pairs = (
            ("guide", {f.name: f for f in self.guides}, {f.name: f for f in now.guides}, False),
            ("objective", {e.name: e for e in self.objectives}, {e.name: e for e in now.objectives}, True),
            ("model", self.models, now.models, True),
            ("paper", self.papers, now.papers, False),
            ("measurement", self.measures, now.measures, False),
            ("runner", self.runners, now.runners, False),
        )
        for kind, before, after, by_value in pairs:
            for name, old in before.items():
                if name not in after:
                    return f"removed the registered {kind} {name!r}"
                if (after[name] != old) if by_value else (after[name] is not old):
                    return f"replaced the registered {kind} {name!r}"
        return ""

    def restore(self) -> None:
        """Puts every registry back as it was, each entry with every field, in its order."""
        from pyro_bnn.guides.registry import restore_guides
        from pyro_bnn.infer.objective_registry import restore_objectives
        from pyro_bnn.models.registry import restore_models
        from pyro_bnn.reproduce.measures import MEASURES
        from pyro_bnn.reproduce.papers import EXPERIMENTS
        from pyro_bnn.reproduce.runners import RUNNERS

        restore_guides(self.guides)
        restore_objectives(self.objectives)
        restore_models(self.models)
        # A paper's module registers its measurements and runners when imported: a failed one's must go too, or a
        # grid would send the function of a module that does not import to its worker processes.
        for registry, saved in ((EXPERIMENTS, self.papers), (MEASURES, self.measures), (RUNNERS, self.runners)):
            registry.clear()
            registry.update(saved)


def _snapshot() -> _Registrations:
    """The registries' contents, once every built-in is registered (a plugin that imports the module registering a
    built-in must not make the built-in look like one of its own names)."""
    import pyro_bnn.guides
    import pyro_bnn.infer
    import pyro_bnn.models  # noqa: F401
    from pyro_bnn.guides.registry import guide_families
    from pyro_bnn.infer.objective_registry import objective_entries
    from pyro_bnn.models.registry import model_registrations
    from pyro_bnn.reproduce.measures import MEASURES
    from pyro_bnn.reproduce.papers import EXPERIMENTS  # the built-in papers register their measurements and runners
    from pyro_bnn.reproduce.runners import RUNNERS

    registries = (model_registrations(), dict(EXPERIMENTS), dict(MEASURES), dict(RUNNERS))
    return _Registrations(guide_families(), objective_entries(), *registries)


_REGISTER: dict[str, Callable[[object], tuple[str, ...]]] = {
    "pyro_bnn.guides": _register_guide,
    "pyro_bnn.objectives": _register_objectives,
    "pyro_bnn.papers": _register_paper,
}


def _unregister(group: str, names: tuple[str, ...]) -> None:
    if group == "pyro_bnn.guides":
        from pyro_bnn.guides.registry import unregister_guide as remove
    elif group == "pyro_bnn.objectives":
        from pyro_bnn.infer.objective_registry import unregister_objective as remove
    else:
        from pyro_bnn.reproduce.papers import unregister_experiment as remove
    for name in names:
        remove(name)


def _distribution(entry_point: EntryPoint) -> str:
    dist = getattr(entry_point, "dist", None)
    if dist is None:
        return ""
    return f"{dist.name} {dist.version}".strip()


def _cause(err: BaseException) -> str:
    from pyro_bnn.infer.objective_registry import ObjectiveTaken

    if isinstance(err, ObjectiveTaken):  # its advice, replace=True, is what a plugin may not do
        return f"ValueError: objective {err.name!r} is already registered; a plugin adds names, never replaces"
    if isinstance(err, SystemExit):  # sys.exit() or argparse at import: it would end every pyro-bnn command
        return f"SystemExit({err.code!r}): it exits when imported (sys.exit(), or argparse reading the command line)"
    return _one_line(err)


def _try(group: str, entry_point: EntryPoint) -> Plugin:
    plugin = Plugin(group, entry_point.name, entry_point.value, _distribution(entry_point))
    before = _snapshot()  # before the import: what the plugin's module does when imported counts too
    result: Any = entry_point
    # Its import, then its registration: whatever either raises is the plugin's bug, reported with its own words;
    # a registration either replaces or removes is undone.
    steps = (("import", "importing", lambda e: e.load()), ("register", "registering", _REGISTER[group]))
    for verb, doing, step in steps:
        try:
            result = step(result)
        except (Exception, SystemExit) as err:
            before.restore()
            return _failed(plugin, f"cannot {verb} it: {_cause(err)}")
        meddled = before.meddling()
        if meddled:
            before.restore()
            return _failed(plugin, f"{doing} it {meddled}; a plugin adds names, never replaces (undone)")
    return Plugin(plugin.group, plugin.name, plugin.value, plugin.distribution, registered=result)


def _failed(plugin: Plugin, error: str) -> Plugin:
    return Plugin(plugin.group, plugin.name, plugin.value, plugin.distribution, error=error)


def load_plugins(*, on_error: Literal["warn", "raise", "record"] = "warn") -> tuple[Plugin, ...]:
    """Loads and registers every installed plugin not tried yet in this process (:data:`GROUPS`), unless
    :data:`DISABLE_ENV` is set.

    Args:
        on_error: What a plugin that fails does: ``warn`` (a :class:`PluginWarning` of one line, then the others
            load), ``raise`` (a :class:`PluginError` of one line; the plugins before it stay loaded) or ``record``
            (only the returned :class:`Plugin`'s ``error``, for a front end that reports it itself, as ``pyro-bnn``
            does). :func:`discovered_plugins` keeps every failure whatever the choice.

    Returns:
        The plugins this call tried, in order (empty when all were tried before, or loading is off).

    Raises:
        PluginError: With ``on_error="raise"``, the first plugin that failed.
    """
    if on_error not in ("warn", "raise", "record"):
        raise ValueError(f"on_error must be 'warn', 'raise' or 'record', got {on_error!r}")
    if plugins_disabled():
        return ()
    tried = []
    found = entry_points()
    for group in GROUPS:
        for entry_point in found.select(group=group):
            key = (group, entry_point.name, entry_point.value, _distribution(entry_point))
            if key in _TRIED:
                continue
            plugin = _try(group, entry_point)
            _TRIED[key] = plugin
            tried.append(plugin)
            if plugin.error and on_error == "raise":
                raise PluginError(plugin.message)
            if plugin.error and on_error == "warn":
                warnings.warn(
                    f"{plugin.message}; skipped ({DISABLE_ENV}=1 loads no plugin)", PluginWarning, stacklevel=2
                )
    return tuple(tried)


def discovered_plugins() -> tuple[Plugin, ...]:
    """Every plugin :func:`load_plugins` has tried in this process, loaded or failed, in the order tried."""
    return tuple(_TRIED.values())


def unload_plugins() -> None:
    """Unregisters everything the loaded plugins registered and forgets every plugin tried, so that the next
    :func:`load_plugins` tries them all again (tests that install a plugin clean up with it)."""
    for plugin in reversed(list(_TRIED.values())):
        if plugin.loaded:
            _unregister(plugin.group, plugin.registered)
    _TRIED.clear()


def _cmd_plugins(args: object) -> int:
    """``pyro-bnn plugins``: each plugin tried, loaded or failed; status 1 when one failed."""
    if plugins_disabled():
        print(f"plugin loading is off ({DISABLE_ENV} is set): no plugin was loaded")
        return 0
    plugins = discovered_plugins()
    if not plugins:
        print(f"no plugins installed (entry-point groups {', '.join(GROUPS)})")
        return 0
    for plugin in plugins:
        print(plugin.describe())
    return 1 if any(not plugin.loaded for plugin in plugins) else 0


PLUGINS_VERB = Verb(
    "plugins",
    help="list the installed plugins (guides, objectives, papers of other packages), loaded or failed",
    description="Lists every entry point of the groups "
    + ", ".join(GROUPS)
    + " as loaded (with what it registered) or failed (with the cause); exits with status 1 when one failed. "
    f"Plugins load before every command reads its arguments; {DISABLE_ENV}=1 loads none.",
    add_arguments=no_arguments,
    run=_cmd_plugins,
)
"""The ``pyro-bnn plugins`` verb (registered in :data:`pyro_bnn.cli.VERBS`)."""
