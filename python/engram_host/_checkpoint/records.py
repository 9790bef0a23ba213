"""The digest record's format (docs/checkpoints.md, "Content identity"): ``*.engram-digests.json`` beside a
file, ``engram-digests.json`` in a model directory, read strictly; :mod:`engram_host.digests` computes the digests
and re-exports these names.
"""

from __future__ import annotations

import os
import stat

from .base import CheckpointError, INDEX_SUFFIX, PathArg
from .fingerprint import ENGRAM_DIGEST, TREE_DIGEST
from .safetensors import _absolute
from .strict_json import JsonError, _kind, _quoted, parse_json


# ---------------------------------------------------------------------------------------------------------------
# the digest sidecar (the record's format; engram_host.digests computes the digests and re-exports these)

#: sha256-tree-v1's chunk: each leaf hashes 16 MiB (engram_host.digests.TREE_CHUNK is this).
RECORD_TREE_CHUNK = 16 << 20

SIDECAR_FORMAT = "engram-content-digests"
#: The sidecar of ``x.safetensors`` is ``x.safetensors.engram-digests.json``.
SIDECAR_SUFFIX = ".engram-digests.json"
#: The sidecar of a directory or an index, in that directory.
SIDECAR_DIRECTORY_FILE = "engram-digests.json"
#: The largest sidecar read.
SIDECAR_MAX_BYTES = 256 << 20


def is_sidecar(path: PathArg) -> bool:
    """True when the path's name is a sidecar's: ``*.engram-digests.json`` or ``engram-digests.json``."""
    name = os.path.basename(os.fspath(path).rstrip("/"))
    return name.endswith(SIDECAR_SUFFIX) or name == SIDECAR_DIRECTORY_FILE


class DigestRecord:
    """A digest record (sidecar) as read: ``path``, ``version`` (1 or 2) and ``tables``: per table name, its
    sha256-tree-v1 (version 1), or ``(engram digest v1, sha256-tree-v1)`` as hex strings (version 2), in the
    file's order."""

    __slots__ = ("path", "version", "tables")

    def __init__(self, path: str, version: int, tables: dict):
        self.path = path
        self.version = version
        self.tables = tables

    def tree_digests(self) -> dict:
        """Table name -> sha256-tree-v1, whatever the version."""
        return dict(self.tables) if self.version == 1 else {n: d[1] for n, d in self.tables.items()}


#: Each version's fields, in the order messages list them; every field but 'tables' has one accepted value.
_RECORD_FIELDS = {1: (("format", SIDECAR_FORMAT), ("version", 1), ("algorithm", TREE_DIGEST),
                      ("chunk_bytes", RECORD_TREE_CHUNK), ("tables", None)),
                  2: (("format", SIDECAR_FORMAT), ("version", 2), ("chunk_bytes", RECORD_TREE_CHUNK), ("tables", None))}
_V2_TABLE_FIELDS = (ENGRAM_DIGEST, TREE_DIGEST)


def record_beside(given: PathArg) -> str:
    """Where the digest record of a checkpoint path lies (docs/checkpoints.md, "The sidecar"): a directory's
    ``<directory>/engram-digests.json``, an index's ``engram-digests.json`` in its directory, a file's
    ``<file>.engram-digests.json``."""
    given = os.fspath(given)
    if os.path.isdir(given):
        return os.path.join(given, SIDECAR_DIRECTORY_FILE)
    where = _absolute(given)
    if os.path.basename(where).endswith(INDEX_SUFFIX):
        return os.path.join(os.path.dirname(where), SIDECAR_DIRECTORY_FILE)
    return where + SIDECAR_SUFFIX


def read_record(path: PathArg) -> DigestRecord:
    """Reads a digest record strictly (``DigestSidecar.read``), version 1 or 2 (docs/checkpoints.md, "The
    sidecar" and "The digest record, version 2"): a JSON object with exactly its version's fields (version 1:
    format, version, algorithm, chunk_bytes, tables; version 2: format, version, chunk_bytes, tables), this
    format, sha256-tree-v1 and 16 MiB; every table name non-empty and unique; per table a sha256-tree-v1 of 64
    lower-case hex digits (version 1), or an object of exactly ``engram-digest-v1`` (16 lower-case hex digits)
    and ``sha256-tree-v1`` (version 2). Raises :class:`CheckpointError`, one line naming the file and the
    problem."""
    where = os.fspath(path)
    try:
        fd = os.open(where, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise CheckpointError(f"{where}: no such file") from None
    except OSError as e:
        raise CheckpointError(f"{where}: cannot read: {e}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"{where}: cannot read: not a regular file")
        if st.st_size > SIDECAR_MAX_BYTES:
            raise CheckpointError(f"{where}: {st.st_size} bytes, over the limit of {SIDECAR_MAX_BYTES} for a digest "
                                  "sidecar")
        data = f.read()
    try:
        doc = parse_json(data)
    except JsonError as e:
        raise CheckpointError(f"{where}: not a digest sidecar: JSON at byte {e.position}: {e.problem}") from None
    if type(doc) is not dict:
        raise CheckpointError(f"{where}: not a digest sidecar: not a JSON object but {_kind(doc)}")
    version = 2 if type(doc.get("version")) is int and doc["version"] == 2 else 1
    fields = _RECORD_FIELDS[version]
    for key in doc:
        if key not in dict(fields):
            raise CheckpointError(f"{where}: unexpected field '{key}' (expected {', '.join(f for f, _ in fields)})")
    for field, value in fields[:-1]:
        if version == 2 and field == "version":
            continue
        readable = "1 and 2" if field == "version" else f'"{value}"' if isinstance(value, str) else str(value)
        _field_is(where, doc, field, value, readable)
    tables = doc.get("tables")
    if type(tables) is not dict:
        raise CheckpointError(f"{where}: 'tables' is not an object of table name to digest{'s' if version == 2 else ''}"
                              f" but {_kind(tables)}")
    out: dict = {}
    for name, digest in tables.items():
        if not name:
            raise CheckpointError(f"{where}: a table has an empty name")
        if version == 1:
            if not _is_hex(digest):
                raise CheckpointError(f"{where}: table {_quoted(name)}: digest is {_kind(digest)}, not 64 lower-case "
                                      "hex digits")
            out[name] = digest
            continue
        at = f"{where}: table {_quoted(name)}: "
        if type(digest) is not dict:
            raise CheckpointError(f"{at}not an object of {ENGRAM_DIGEST} and {TREE_DIGEST} but {_kind(digest)}")
        for key in digest:
            if key not in _V2_TABLE_FIELDS:
                raise CheckpointError(f"{at}unexpected field '{key}' (expected {', '.join(_V2_TABLE_FIELDS)})")
        for key, digits in ((ENGRAM_DIGEST, 16), (TREE_DIGEST, 64)):
            if not _is_hex(digest.get(key), digits):
                raise CheckpointError(f"{at}{key} is {_kind(digest.get(key))}, not {digits} lower-case hex digits")
        out[name] = (digest[ENGRAM_DIGEST], digest[TREE_DIGEST])
    return DigestRecord(where, version, out)


def _field_is(where: str, doc: dict, field: str, value: object, readable: str) -> None:
    """``doc[field]`` must be ``value``, of its type; ``readable`` says what this build reads."""
    if field not in doc:
        raise CheckpointError(f"{where}: not a digest sidecar: no '{field}'")
    v = doc[field]
    if type(v) is not type(value) or v != value:
        raise CheckpointError(f"{where}: '{field}' is {_kind(v)}, this build reads only {readable}")


def read_sidecar(path: PathArg) -> dict:
    """The sha256-tree-v1 digests of a digest sidecar, version 1 or 2 (:func:`read_record`): table name ->
    64 hex digits, in the file's order. Raises :class:`CheckpointError`, one line naming the file and the
    problem."""
    return read_record(path).tree_digests()


def _is_hex(value: object, digits: int = 64) -> bool:
    return type(value) is str and len(value) == digits and all(c in "0123456789abcdef" for c in value)
