"""What ``serve`` would serve from a checkpoint: the content identity its selected tables carry (a version 2
digest record beside a path, a Hugging Face snapshot's links) and the fingerprint made of the selection and it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

from .base import LAYOUT_VERSION
from .identity import ContentIdentity
from .fingerprint import Fingerprint, _encode, _fingerprint_of, fingerprint_sha256_hex
from .limits import check_limits
from .model import Checkpoint
from .records import read_record, record_beside
from .selection import Selection, select_served
from .strict_json import _quoted


# ---------------------------------------------------------------------------------------------------------------
# content identity, and the fingerprint serve gives

#: At most this many table names in a note.
_NAMES_IN_A_NOTE = 3


def content_identity(checkpoint: Checkpoint, selection: Selection) -> ContentIdentity:
    """The identities of ``selection``'s tables: the snapshot files that hold them, and for each path given
    that holds a selected table, its digest record when there is one (``<dir>/engram-digests.json``, the
    index's directory's, or ``<file>.engram-digests.json``), which gives the tables found through that path
    their digests. A version 1 record gives none, and a note says so; a note names the selected tables a
    record does not cover. Raises :class:`CheckpointError` for a record that cannot be read."""
    by_given: dict = {}
    files: dict = {}
    for t in selection.tensors:
        by_given.setdefault(checkpoint.given_as(t.file), []).append(t)
        if t.file.snapshot_sha256 is not None:
            files.setdefault(t.file.name, t.file.snapshot_sha256)
    tables: dict = {}
    records: list = []
    uncovered: list = []
    notes: list = []
    for given, chosen in by_given.items():
        path = record_beside(given)
        if not os.path.exists(path):
            continue
        record = read_record(path)
        if record.version < 2:
            notes.append(f"{path}: a digest record of version {record.version} holds no engram digest v1 and gives "
                         f"no content identity: write version 2 with engram-host inspect --write-digests {given}")
            continue
        records.append(path)
        missing = []
        for t in chosen:
            held = record.tables.get(t.name)
            if held is None:
                missing.append(t.name)
            else:
                tables[t.name] = (int(held[0], 16), bytes.fromhex(held[1]))
        if missing:
            shown = ", ".join(_quoted(n) for n in missing[:_NAMES_IN_A_NOTE])
            shown += ", ..." if len(missing) > _NAMES_IN_A_NOTE else ""
            notes.append(f"{path}: the digest record does not cover {len(missing)} of the {len(chosen)} selected "
                         f"tables ({shown}), which have no content identity: write it again with engram-host "
                         f"inspect --write-digests {given}")
            uncovered += missing
    return ContentIdentity(files, tables, tuple(records), tuple(sorted(uncovered)), tuple(notes))


@dataclass(frozen=True)
class Served:
    """What ``serve`` would serve from a checkpoint: the :class:`Selection`, the :class:`ContentIdentity` of
    its tables, and the fingerprint (``fingerprint``, and ``encoded``: its canonical bytes, version 2 when any
    identity is present)."""

    selection: Selection
    identity: ContentIdentity
    fingerprint: Fingerprint
    encoded: bytes

    @property
    def sha256_hex(self) -> str:
        return fingerprint_sha256_hex(self.encoded)


def served_fingerprint(checkpoint: Checkpoint, tables: Sequence[str] = (), backend: str = "",
                       layout_version: int = LAYOUT_VERSION) -> Served:
    """The selection (:func:`select_served`), the content identity (:func:`content_identity`) and the
    fingerprint of what ``serve --tables TABLES --backend BACKEND`` would serve from ``checkpoint``, checked
    against the limits (:func:`check_limits`), as the Java's ``ServedSelection.of``: what an expectation built
    from a path carries. The client hashes nothing: identities come from records and snapshot links."""
    selection = select_served(checkpoint, tables)
    identity = content_identity(checkpoint, selection)
    fp = _fingerprint_of(selection.tensors, selection.patterns, backend, layout_version, identity)
    encoded = _encode(fp)
    check_limits(selection.tensors, encoded)
    return Served(selection, identity, fp, encoded)
