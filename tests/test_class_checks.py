"""Capabilities, not classes: no module outside ``pyro_bnn/guides/`` asks whether a guide is of a guide class defined
there, and none outside ``pyro_bnn/infer/`` whether an objective is of an objective class. The rest of the package
asks the registries (a family's capabilities and batched layout, an objective's batched form) or a protocol of
:mod:`pyro_bnn.guides.capabilities` (``isinstance(guide, FlatNormalPosterior)``: structural, never a class).

Like the import contracts (tests/test_layers.py) this reads the source: every ``isinstance`` and ``issubclass`` call
and every ``type(x) is / == / in ...`` comparison of every module, its class argument resolved through the module's
imports (and module-level tuples of them) to the class it names.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pkgutil
import typing
from collections.abc import Iterator
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "pyro_bnn"

ALLOWED: dict[tuple[str, str], str] = {}
"""``{(module path under pyro_bnn/, class name): reason}``: the checks against a guide or objective class that are
meant to stay outside its layer. None today; keep this short and give each entry its reason."""


def _classes_of(package: str) -> Iterator[type]:
    """Every class defined in a module of ``package``."""
    root = importlib.import_module(package)
    names = [package] + [f"{package}.{m.name}" for m in pkgutil.walk_packages(root.__path__) if not m.ispkg]
    for name in names:
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == name:
                yield cls


@functools.cache
def _guide_classes() -> frozenset[type]:
    """The guide implementations of pyro_bnn.guides and their parts (nn.Modules and distributions); the protocols,
    enums, specs and registry entries defined there are what the rest of the package is meant to ask."""
    parts = (torch.nn.Module, torch.distributions.Distribution)
    return frozenset(cls for cls in _classes_of("pyro_bnn.guides") if issubclass(cls, parts))


@functools.cache
def _objective_classes() -> frozenset[type]:
    """The classes of the registered objectives (a factory that is a class, or a partial of one), with every class
    of pyro_bnn.infer they derive from or that derives from them."""
    from pyro_bnn.infer.objective_registry import objective_entries

    registered = set()
    for entry in objective_entries():
        factory = entry.factory
        while isinstance(factory, functools.partial):
            factory = factory.func
        if isinstance(factory, type):
            registered.add(factory)
    # the protocols (Objective, TrainableModel) say what is asked, not how: no objective derives from them
    infer = {cls for cls in _classes_of("pyro_bnn.infer") if typing.Protocol not in cls.__bases__}
    related = {cls for cls in infer if any(issubclass(cls, r) or issubclass(r, cls) for r in registered)}
    return frozenset(registered | related)


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


class _Resolver:
    """Resolves a class expression of one module to the objects it may name, through the module's imports
    (anywhere in it) and its module-level assignments."""

    def __init__(self, tree: ast.Module, module: str, is_package: bool) -> None:
        self.imports: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.imports[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.imports[top] = top
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = module.split(".")
                    package = package if is_package else package[:-1]
                    package = package[: len(package) - (node.level - 1)]
                    base = ".".join([*package, *([base] if base else [])])
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = f"{base}.{alias.name}"
        self.assigned: dict[str, ast.expr] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.assigned[node.targets[0].id] = node.value

    def dotted(self, expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Name):
            return self.imports.get(expr.id)
        if isinstance(expr, ast.Attribute):
            base = self.dotted(expr.value)
            return None if base is None else f"{base}.{expr.attr}"
        return None

    def objects(self, expr: ast.expr, depth: int = 0) -> Iterator[object]:
        if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
            for element in expr.elts:
                yield from self.objects(element, depth)
            return
        if isinstance(expr, ast.Name) and expr.id not in self.imports and expr.id in self.assigned and depth < 3:
            yield from self.objects(self.assigned[expr.id], depth + 1)
            return
        dotted = self.dotted(expr)
        if dotted is None or not dotted.startswith("pyro_bnn."):
            return
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                return
            yield obj
            return


def _class_checks(source: str, module: str, is_package: bool = False) -> Iterator[tuple[int, str, object]]:
    """``(line, source of the class argument, object it names)`` for every class check of the module ``module``
    whose source is ``source``."""
    tree = ast.parse(source)
    resolver = _Resolver(tree, module, is_package)
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 2:
            if node.func.id in ("isinstance", "issubclass"):
                targets.append(node.args[1])
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Call) and isinstance(s.func, ast.Name) and s.func.id == "type" for s in sides):
                targets.extend(s for s in sides if not isinstance(s, ast.Call))
        for target in targets:
            for obj in resolver.objects(target):
                yield node.lineno, ast.unparse(target), obj


def _violations() -> list[str]:
    guides, objectives = _guide_classes(), _objective_classes()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        checks = _class_checks(path.read_text(), _module_name(path), path.name == "__init__.py")
        for line, source, obj in sorted(checks, key=lambda check: check[0]):
            if obj in guides and not relative.startswith("guides/"):
                kind = "guide"
            elif obj in objectives and not relative.startswith("infer/"):
                kind = "objective"
            else:
                continue
            if (relative, obj.__name__) not in ALLOWED:
                found.append(f"pyro_bnn/{relative}:{line}: checks the {kind} class {obj.__name__} ({source})")
    return found


def test_no_module_asks_for_a_guide_or_objective_class_outside_its_layer():
    found = _violations()
    assert not found, (
        "ask the registry (a capability, GuideFamily.batched_layout, ObjectiveEntry.batched and batched_form) or a "
        "protocol of pyro_bnn.guides.capabilities instead; or list a real exception in ALLOWED with its reason:\n"
        + "\n".join(found)
    )


def test_the_scan_sees_the_checks_it_forbids():
    """The scan resolves a guide class imported directly, through the guides package and through a module-level
    tuple, and an objective class through a module alias; it lets protocols pass."""
    source = (
        "import pyro_bnn.infer.objectives as objectives\n"
        "from pyro_bnn.guides import BayesByBackprop, FlatNormalPosterior\n"
        "from pyro_bnn.guides.flat import FlatMeanField\n"
        "KINDS = (FlatMeanField, BayesByBackprop)\n"
        "def f(guide, objective):\n"
        "    return (isinstance(guide, KINDS), isinstance(objective, objectives.MeanFieldELBO),\n"
        "            type(guide) is FlatMeanField, isinstance(guide, FlatNormalPosterior))\n"
    )
    checks = [(line, obj) for line, _, obj in _class_checks(source, "pyro_bnn.batched._probe")]
    from pyro_bnn.guides import BayesByBackprop, FlatMeanField
    from pyro_bnn.infer import MeanFieldELBO

    named = [obj for _, obj in checks if obj in _guide_classes() or obj in _objective_classes()]
    assert named == [FlatMeanField, BayesByBackprop, MeanFieldELBO, FlatMeanField]
