"""Reading the four IDX files of one source into the cache: validated as a whole before anything is written.

``_scan`` reads each file once (``pyro_bnn.data.idx.scan_idx``: validate, hash and, when staging, decompress in the
same pass), unless its stamp in the cache says it is unchanged; ``_commit`` moves the staged copies into a cache
entry and ``_remember`` stamps the sources. ``pyro_bnn.data.sources`` decides which source to read and where its
content goes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from pyro_bnn.data.cache import (
    Staging,
    cached_file_facts,
    file_signature,
    install_cached_file,
    recall_facts,
    record_facts,
    source_stamp_path,
    torchvision_raw_dir,
)
from pyro_bnn.data.idx import IdxFacts, IdxKind, scan_idx
from pyro_bnn.data.idx_layout import IDX_FILES, IdxDatasetSpec, _check_counts, _check_facts, _item_shape


@dataclass
class _Scan:
    """The four files of one source, validated as a whole.

    Attributes:
        files: Each standard name's file in the source.
        facts: What each file holds (from a remembered stamp or a fresh read).
        staged: Decompressed copies written while reading, waiting in a staging folder.
        learned: Facts read afresh, with the file's signature from before the read, to remember once the whole
            source has passed.
    """

    files: dict[str, Path]
    facts: dict[str, IdxFacts] = field(default_factory=dict)
    staged: dict[str, Path] = field(default_factory=dict)
    learned: dict[str, tuple[IdxFacts, dict[str, object]]] = field(default_factory=dict)

    @property
    def digests(self) -> dict[str, str]:
        return {name: facts.md5 for name, facts in self.facts.items()}


def _read_into(source: Path, kind: IdxKind, item_shape: tuple[int, ...], target: Path) -> IdxFacts:
    with open(target, "wb") as sink:
        facts = scan_idx(source, kind, item_shape, sink)
        sink.flush()
        os.fsync(sink.fileno())
    return facts


def _scan(spec: IdxDatasetSpec, files: dict[str, Path], cache: Path, staging: Staging | None) -> _Scan:
    """Validates all four files of a source before anything is written to the cache.

    A file whose stamp in the cache still matches is not read again; any other is read once, validated, hashed
    and (with ``staging``) copied decompressed into ``staging`` in the same pass.
    """
    scan = _Scan(files)
    for name, kind in IDX_FILES:
        source = files[name]
        facts = recall_facts(source_stamp_path(cache, source), source, kind)
        if facts is None:
            signature = file_signature(source)
            if staging is None:
                facts = scan_idx(source, kind, _item_shape(spec, kind))
            else:
                facts = _read_into(source, kind, _item_shape(spec, kind), staging.path / name)
                scan.staged[name] = staging.path / name
            scan.learned[name] = (facts, signature)
        _check_facts(spec, source, kind, facts)
        scan.facts[name] = facts
    _check_counts({name: (files[name], facts.header) for name, facts in scan.facts.items()})
    return scan


def _remember(cache: Path, scan: _Scan) -> None:
    for name, (facts, signature) in scan.learned.items():
        record_facts(source_stamp_path(cache, scan.files[name]), facts, signature)


def _commit(spec: IdxDatasetSpec, scan: _Scan, root: Path, staging: Staging) -> None:
    """Makes ``root``'s raw folder hold the scanned content, moving in only the files it lacks."""
    raw_dir = torchvision_raw_dir(root, spec.folder)
    for name, kind in IDX_FILES:
        cached_file, wanted = raw_dir / name, scan.facts[name]
        try:
            if cached_file_facts(cached_file, kind).md5 == wanted.md5:
                continue
        except (FileNotFoundError, ValueError):
            pass  # Missing or damaged: replaced below.
        prepared = scan.staged.get(name)
        if prepared is None:
            # The source was read on an earlier load (its stamp held), but this entry lost its copy.
            prepared = staging.path / name
            found = _read_into(scan.files[name], kind, _item_shape(spec, kind), prepared)
            if found.md5 != wanted.md5:
                raise ValueError(
                    f"{scan.files[name]}: changed while being read: expected MD5 {wanted.md5}, found {found.md5}; "
                    f"load again"
                )
        install_cached_file(prepared, cached_file, wanted)
