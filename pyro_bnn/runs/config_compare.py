"""When two stored run configs (``config.json``, a checkpoint's) name the same run: equal values, or option strings
that differ only in the letter case their parsers ignore (``"TANH"`` and ``"tanh"``, ``"FLAT:0.01"`` and
``"flat:0.01"``). ``pyro-bnn list`` promises that names ignore case, and the CLI lowercases only the options whose
choices it lists, so a run trained as ``--activation TANH`` must resume as ``--activation tanh``.

Only case is ignored: other spellings the parsers also accept (an alias, ``normal`` for ``normal:0,1``) still count
as a change, and a run's id, which hashes its config as written, is not touched.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pyro_bnn.guides.spec import GUIDE_FAMILY
from pyro_bnn.infer.annealing import KL_SCHEDULE_FAMILY
from pyro_bnn.infer.checkpoint import differing_keys
from pyro_bnn.infer.lr_schedules import LR_SCHEDULE_FAMILY
from pyro_bnn.models.registry import MODEL_FAMILY
from pyro_bnn.nn.activations import ACTIVATION_FAMILY
from pyro_bnn.priors.spec import PRIOR_FAMILY
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.spec import Family

_SPEC_FAMILIES: dict[str, Family] = {
    "model": MODEL_FAMILY,
    "activation": ACTIVATION_FAMILY,
    "prior": PRIOR_FAMILY,
    "guide": GUIDE_FAMILY,
    "lr_schedule": LR_SCHEDULE_FAMILY,
    "lr_variational_schedule": LR_SCHEDULE_FAMILY,
    "kl_anneal": KL_SCHEDULE_FAMILY,
}
"""The option strings with arguments, by config key: their names and ``key=value`` keys ignore case, and so do the
built-in argument types, but a registered model's own argument parser need not, so these are compared as parsed."""

CASE_BLIND_KEYS: frozenset[str] = frozenset(
    {*_SPEC_FAMILIES, "dataset", "elbo", "optimizer", "kl_weighting", "kl_scale", "normalization"}
)
"""Config keys whose value is an option string read case-insensitively (every option ``pyro-bnn list`` shows that
``train`` takes); the bare names among them (``dataset``, ``elbo``, ...) are lowercased whole by their parsers."""


def _parsed(key: str, text: str) -> object:
    """What the parser of ``key`` reads in ``text``, without the text itself (None where it cannot read it)."""
    family = _SPEC_FAMILIES.get(key)
    if family is None:
        return text.lower()
    try:
        spec = family.parse(text)
    except (TypeError, ValueError):  # e.g. a plugin's name, not registered now
        return None
    return spec.form.name, dict(spec.values), spec.given


def same_setting(key: str, saved: Any, current: Any) -> bool:
    """Whether two configs' values of ``key`` set the same thing: equal, or for a :data:`CASE_BLIND_KEYS` key two
    strings equal up to letter case that the option's parser reads alike."""
    if saved == current:
        return True
    if key not in CASE_BLIND_KEYS or not (isinstance(saved, str) and isinstance(current, str)):
        return False
    if saved.lower() != current.lower():
        return False
    read = _parsed(key, saved)
    return read is not None and read == _parsed(key, current)


def changed_keys(saved: Mapping[str, Any], current: Mapping[str, Any], ignore: Iterable[str] = ()) -> list[str]:
    """The keys, sorted, outside ``ignore`` whose values differ (a key one config lacks differs), up to
    :func:`same_setting`."""
    return differing_keys(dict(saved), dict(current), ignore, same=same_setting)


def spelled_as(config: RunConfig, saved: Mapping[str, Any]) -> RunConfig:
    """``config`` with each value that :func:`same_setting` finds equal to, but spelled otherwise than, ``saved``'s
    taken from ``saved``: a resumed run keeps the spelling its checkpoint was written with, so its ``config.json``
    and later checkpoints stay as they were (and the trainer's own config check, which compares strings, passes)."""
    respelled = {
        key: saved[key]
        for key in CASE_BLIND_KEYS
        if key in saved and getattr(config, key) != saved[key] and same_setting(key, saved[key], getattr(config, key))
    }
    return dataclasses.replace(config, **respelled) if respelled else config


def normalized_config(values: dict[str, Any], source: Path) -> dict[str, Any]:
    """A stored config with the options added since it was written filled in at their defaults."""
    try:
        return json.loads(RunConfig.from_dict(values).resolved().to_json())
    except (TypeError, ValueError) as err:
        raise ValueError(f"{source} holds a config this version cannot read: {err}") from None
