"""Atomic writes (pyro_bnn._io): the text of a growing JSON list encoded item by item, and the fsync option."""

from __future__ import annotations

import json
import os
import random

import pytest

from pyro_bnn import _io
from pyro_bnn._io import JsonListText, atomic_path, write_json_atomically, write_text_atomically


def _value(rng: random.Random, depth: int = 0):
    """A random JSON value: nested dicts and lists of numbers, strings with newlines and quotes, NaN, None."""
    kind = rng.random()
    if depth < 3 and kind < 0.3:
        return {f'k{i}\n"': _value(rng, depth + 1) for i in range(rng.randint(0, 3))}
    if depth < 3 and kind < 0.5:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return rng.choice([0, 1, 1.5, -0.0, 1e300, float("nan"), None, True, "a\nb", "é", [], {}])


@pytest.mark.parametrize("indent", [None, 0, 2, 4])
def test_the_text_is_json_dumps_of_the_list_as_it_grows_and_changes(indent):
    """Oracle: ``json.dumps(items, indent=indent)`` after every append, an item replaced or changed in place, and
    the list cut short (a resume going back to an earlier checkpoint) or replaced by an equal copy."""
    rng, encoder, items = random.Random(f"indent={indent}"), JsonListText(indent), []  # Random(None) would not fix it
    for step in range(80):
        assert encoder.text(items) == json.dumps(items, indent=indent)
        items.append(_value(rng))
        if step % 7 == 3:
            items[rng.randrange(len(items))] = _value(rng)
        if step % 9 == 4:
            items.append({"epoch": step, "loss": 1.0})
            assert encoder.text(items) == json.dumps(items, indent=indent)
            items[-1]["loss"] = 2.0  # in place, after it was encoded
        if step % 11 == 5:
            items = json.loads(json.dumps(items[:-2]))
    assert encoder.text(items) == json.dumps(items, indent=indent)


@pytest.mark.parametrize(
    ("before", "after"),
    [(1, True), (1, 1.0), (0.0, -0.0), ({"a": 1, "b": 2}, {"b": 2, "a": 1}), ([1], [True])],
)
def test_an_item_replaced_by_an_equal_value_of_other_text_is_encoded_again(before, after):
    """``==`` holds for each pair (the first CI failure: a random replacement of ``1`` by ``True``) yet the texts
    differ, so the cached text must not be reused."""
    assert before == after and json.dumps(before) != json.dumps(after)
    encoder = JsonListText(2)
    encoder.text([before, "x"])
    assert encoder.text([after, "x"]) == json.dumps([after, "x"], indent=2)


def test_an_item_that_cannot_be_pickled_is_encoded_every_time(monkeypatch):
    class Local(dict):  # a class local to a function cannot be pickled; json encodes it as a dict
        pass

    encoder, calls, dumps = JsonListText(2), [], json.dumps
    monkeypatch.setattr(_io.json, "dumps", lambda value, **kw: (calls.append(value), dumps(value, **kw))[1])
    items = [{"epoch": 1}, Local(epoch=2)]
    for _ in range(3):
        assert encoder.text(items) == dumps(items, indent=2)
    assert calls == [items[0], items[1], items[1], items[1]]


def test_each_item_is_encoded_once(monkeypatch):
    encoder, items, calls = JsonListText(2), [], []
    dumps = json.dumps
    monkeypatch.setattr(_io.json, "dumps", lambda value, **kw: (calls.append(value), dumps(value, **kw))[1])
    for epoch in range(1, 51):
        items.append({"epoch": epoch, "loss": 1.0 / epoch})
        encoder.text(items)
    assert calls == items


def test_an_atomic_write_syncs_unless_told_not_to(tmp_path, monkeypatch):
    synced = []
    fsync = os.fsync
    monkeypatch.setattr(_io.os, "fsync", lambda fd: (synced.append(fd), fsync(fd))[1])
    write_json_atomically(tmp_path / "a.json", [1, 2])
    write_text_atomically(tmp_path / "b.json", "[]", sync=False)
    write_json_atomically(tmp_path / "c.json", {"x": 1}, sync=False)
    assert len(synced) == 1
    assert json.loads((tmp_path / "a.json").read_text()) == [1, 2] and (tmp_path / "b.json").read_text() == "[]"
    assert (tmp_path / "c.json").read_text() == json.dumps({"x": 1}, indent=2)
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "a.json", sync=False) as temporary:
        temporary.write_text("half")
        raise RuntimeError("interrupted")
    assert json.loads((tmp_path / "a.json").read_text()) == [1, 2]  # the previous file, and no temporary left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json", "c.json"]
