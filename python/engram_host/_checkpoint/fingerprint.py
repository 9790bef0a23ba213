"""The fingerprint (docs/checkpoints.md, "The fingerprint"): its canonical encoding (versions 1 and 2),
its decoding with every check, the differences between two, and whether they share a content identity.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Optional, Sequence, Union

from .._wire import DTYPE_BITS
from .base import CheckpointError, LAYOUT_VERSION, MAX_RANK, _I64_MAX, _shape_text, byte_length, counted
from .model import Checkpoint
from .safetensors import TensorInfo, _name

if TYPE_CHECKING:
    from .identity import ContentIdentity


# ---------------------------------------------------------------------------------------------------------------
# fingerprint

#: The names of the content digests, as digest records, differences and STATUS write them.
ENGRAM_DIGEST = "engram-digest-v1"
TREE_DIGEST = "sha256-tree-v1"


@dataclass(frozen=True)
class FingerprintFile:
    """One checkpoint file of a fingerprint: base name, size, SHA-256 of its raw header (32 bytes), and its
    content identity: the SHA-256 of the whole file (32 bytes) when it is a Hugging Face snapshot file, else
    None."""

    name: str
    size: int
    header_sha256: bytes
    content_sha256: Optional[bytes] = None


@dataclass(frozen=True)
class FingerprintTable:
    """One table of a fingerprint: name, dtype, shape and byte count (always dtype x shape), and its content
    identity where a digest record holds it: its engram digest v1 (an int) and its sha256-tree-v1 (32
    bytes), each None when absent."""

    name: str
    dtype: str
    shape: tuple
    nbytes: int
    engram_digest: Optional[int] = None
    tree_digest: Optional[bytes] = None


@dataclass(frozen=True)
class Fingerprint:
    """A fingerprint in canonical form: patterns sorted and distinct (never empty), files and tables sorted
    by name in code point order."""

    layout_version: int
    backend: str
    patterns: tuple
    files: tuple
    tables: tuple

    @property
    def has_identity(self) -> bool:
        """Whether any file or table carries a content identity (then it is encoded as version 2)."""
        return any(f.content_sha256 is not None for f in self.files) or any(
            t.engram_digest is not None or t.tree_digest is not None for t in self.tables)


_MAGIC = b"EGFP"
#: The encoding of a fingerprint without content identity, and of one with.
_VERSION_HEADERS = 1
_VERSION_IDENTITY = 2
_ENGRAM_BIT = 1
_TREE_BIT = 2


def fingerprint(checkpoint: Checkpoint, patterns: Sequence[str] = (), backend: str = "",
                layout_version: int = LAYOUT_VERSION) -> bytes:
    """The canonical encoding of the fingerprint of ``patterns`` (globs) of ``checkpoint`` served with
    ``backend`` (``""``: any), without content identity (so version 1), byte for byte what
    ``Fingerprint.of(...).canonicalBytes()`` gives: the files that hold a selected table and the selected
    tables, by name; patterns sorted and distinct, ``[]`` as ``["*"]``. Raises :class:`CheckpointError` for a
    pattern that matches nothing or two files of one base name. :func:`served_fingerprint` chooses the tables
    as ``serve`` does and adds the content identities."""
    return _encode(_fingerprint_of(checkpoint.select(list(patterns)), patterns, backend, layout_version, None))


def _fingerprint_of(tensors: Sequence[TensorInfo], patterns: Sequence[str], backend: str, layout_version: int,
                    identity: Optional["ContentIdentity"]) -> Fingerprint:
    files: dict = {}
    tables = []
    for t in tensors:
        f = t.file
        content = identity.files.get(f.name) if identity is not None else None
        entry = FingerprintFile(f.name, f.size, f.header_sha256, content)
        if files.setdefault(entry.name, entry) != entry:
            raise CheckpointError(f"{f.path}: another checkpoint file has the same base name; a fingerprint names "
                                  "files by base name")
        digests = identity.tables.get(t.name, (None, None)) if identity is not None else (None, None)
        tables.append(FingerprintTable(t.name, t.dtype, t.shape, t.nbytes, *digests))
    return Fingerprint(layout_version, backend, tuple(sorted(set(patterns))) or ("*",),
                       tuple(files[n] for n in sorted(files)), tuple(sorted(tables, key=_name)))


def _encode(fp: Fingerprint) -> bytes:
    """The canonical encoding: version 1, byte for byte as every earlier build, when no file and no table
    carries a content identity; version 2 otherwise."""
    v2 = fp.has_identity
    out = bytearray(_MAGIC)
    out += struct.pack("<HHi", _VERSION_IDENTITY if v2 else _VERSION_HEADERS, 0, fp.layout_version)

    def text(s: str) -> None:
        b = s.encode("utf-8")
        out.extend(struct.pack("<I", len(b)))
        out.extend(b)

    text(fp.backend)
    out += struct.pack("<I", len(fp.patterns))
    for p in fp.patterns:
        text(p)
    out += struct.pack("<I", len(fp.files))
    for f in fp.files:
        text(f.name)
        out += struct.pack("<Q", f.size) + f.header_sha256
        if v2:
            out += b"\x00" if f.content_sha256 is None else b"\x01" + f.content_sha256
    out += struct.pack("<I", len(fp.tables))
    for t in fp.tables:
        text(t.name)
        text(t.dtype)
        out += struct.pack(f"<I{len(t.shape)}QQ", len(t.shape), *t.shape, t.nbytes)
        if v2:
            bits = (_ENGRAM_BIT if t.engram_digest is not None else 0) | (_TREE_BIT if t.tree_digest is not None else 0)
            out.append(bits)
            if t.engram_digest is not None:
                out += struct.pack("<Q", t.engram_digest)
            if t.tree_digest is not None:
                out += t.tree_digest
    return bytes(out)


def fingerprint_sha256_hex(encoded: bytes) -> str:
    """SHA-256 of a canonical fingerprint encoding, 64 lower-case hex digits (what the short form and the
    daemon's ready file show)."""
    return hashlib.sha256(encoded).hexdigest()


class _Decoder:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def error(self, at: int, problem: str) -> CheckpointError:
        return CheckpointError(f"fingerprint at byte {at}: {problem}")

    def left(self) -> int:
        return len(self.data) - self.pos

    def need(self, n: int, what: str) -> None:
        if self.left() < n:
            raise self.error(self.pos, f"{what} needs {n} bytes but only {self.left()} are left")

    def raw(self, n: int, what: str) -> bytes:
        self.need(n, what)
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def unpack(self, fmt: str, what: str) -> int:
        size = struct.calcsize(fmt)
        self.need(size, what)
        self.pos += size
        return struct.unpack_from(fmt, self.data, self.pos - size)[0]

    def non_negative(self, what: str) -> int:
        self.need(8, what)
        v = struct.unpack_from("<Q", self.data, self.pos)[0]
        if v > _I64_MAX:
            raise self.error(self.pos, f"{what} {v} exceeds 2^63 - 1")
        self.pos += 8
        return v

    def count(self, what: str, min_entry: int) -> int:
        at = self.pos
        n = self.unpack("<I", "u32")
        if n * min_entry > self.left():
            raise self.error(at, f"{n} {what} cannot fit in the {self.left()} bytes left")
        return n

    def text(self, what: str) -> str:
        at = self.pos
        n = self.unpack("<I", "u32")
        if n > self.left():
            raise self.error(at, f"{what} of {n} bytes runs past the end ({self.left()} left)")
        try:
            s = self.data[self.pos:self.pos + n].decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(at, f"{what} is not valid UTF-8") from None
        self.pos += n
        return s

    def ordered(self, at: int, what: str, previous: Optional[str], name: str) -> None:
        if previous is not None and previous >= name:
            problem = "is repeated" if previous == name else f"is out of order (after '{previous}')"
            raise self.error(at, f"{what} '{name}' {problem}")


def decode_fingerprint(encoded: bytes) -> Fingerprint:
    """Decodes a canonical fingerprint strictly (``Fingerprint.decode``), version 1 or 2: magic, version and
    flags exact, every length and count bounded by the bytes left, valid UTF-8, known dtypes, ranks up to 16,
    byte counts equal to dtype x shape, canonical order without repeats, content bytes 0 or 1 and identity
    bytes 0 to 3 (version 2), a version 2 encoding that carries at least one identity, nothing left over.
    Raises :class:`CheckpointError` ("fingerprint at byte N: ...") naming the offset and the problem."""
    d = _Decoder(bytes(encoded))
    magic = d.raw(4, "magic")
    if magic != _MAGIC:
        raise d.error(0, f'bad magic {magic.hex()}, expected "EGFP"')
    version = d.unpack("<H", "u16")
    if version not in (_VERSION_HEADERS, _VERSION_IDENTITY):
        raise d.error(4, f"encoding version {version}, this build reads only {_VERSION_HEADERS} and "
                         f"{_VERSION_IDENTITY}")
    v2 = version == _VERSION_IDENTITY
    flags = d.unpack("<H", "u16")
    if flags:
        raise d.error(6, f"flags 0x{flags:x}, expected 0")
    layout = d.unpack("<i", "u32")
    backend = d.text("backend")
    patterns: list = []
    n = d.count("patterns", 4)
    if n == 0:
        raise d.error(d.pos - 4, "no selection pattern (the canonical form has at least '*')")
    for _ in range(n):
        at = d.pos
        p = d.text("pattern")
        d.ordered(at, "pattern", patterns[-1] if patterns else None, p)
        patterns.append(p)
    files: list = []
    for _ in range(d.count("files", 4 + 8 + 32 + v2)):
        at = d.pos
        name = d.text("file name")
        d.ordered(at, "file", files[-1].name if files else None, name)
        size = d.non_negative("file size")
        header = d.raw(32, "header SHA-256")
        content = None
        if v2:
            content_at = d.pos
            flag = d.unpack("<B", "content flag")
            if flag > 1:
                raise d.error(content_at, f"file '{name}': content flag {flag}, expected 0 or 1")
            if flag:
                content = d.raw(32, "content SHA-256")
        files.append(FingerprintFile(name, size, header, content))
    tables: list = []
    for _ in range(d.count("tables", 4 + 4 + 4 + 8 + v2)):
        at = d.pos
        name = d.text("table name")
        d.ordered(at, "table", tables[-1].name if tables else None, name)
        dtype_at = d.pos
        dtype = d.text("dtype")
        if dtype not in DTYPE_BITS:
            raise d.error(dtype_at, f"table '{name}': unknown dtype '{dtype}'")
        rank_at = d.pos
        rank = d.unpack("<I", "u32")
        if rank > MAX_RANK:
            raise d.error(rank_at, f"table '{name}': rank {rank} exceeds {MAX_RANK}")
        shape = tuple(d.non_negative("dimension") for _ in range(rank))
        bytes_at = d.pos
        nbytes = d.non_negative("table bytes")
        try:
            needed = byte_length(dtype, shape)
        except ValueError as e:
            raise d.error(bytes_at, str(e)) from None
        if needed != nbytes:
            raise d.error(bytes_at, f"table '{name}': {dtype} {_shape_text(shape)} is {needed} bytes, not {nbytes}")
        engram = tree = None
        if v2:
            bits_at = d.pos
            bits = d.unpack("<B", "identity flags")
            if bits > _ENGRAM_BIT | _TREE_BIT:
                raise d.error(bits_at, f"table '{name}': identity flags 0x{bits:x}, expected bits 0 and 1 only")
            if bits & _ENGRAM_BIT:
                engram = d.unpack("<Q", "engram digest v1")
            if bits & _TREE_BIT:
                tree = d.raw(32, TREE_DIGEST)
        tables.append(FingerprintTable(name, dtype, shape, nbytes, engram, tree))
    if d.pos != len(d.data):
        raise d.error(d.pos, f"{len(d.data) - d.pos} bytes left over after the last table")
    fp = Fingerprint(layout, backend, tuple(patterns), tuple(files), tuple(tables))
    if v2 and not fp.has_identity:
        raise d.error(4, "encoding version 2 but no file or table carries content identity: its canonical "
                         "encoding is version 1")
    return fp


def _decoded(fp: Union[Fingerprint, bytes]) -> Fingerprint:
    return decode_fingerprint(fp) if isinstance(fp, (bytes, bytearray, memoryview)) else fp


def _patterns_in_short(patterns: Sequence[str]) -> str:
    """``[*]``; ``[layers.1.engram.embed.scale, ... (4 patterns)]``; a pattern over 64 characters cut there."""
    first = patterns[0] if len(patterns[0]) <= 64 else patterns[0][:64] + "..."
    return f"[{first}" + (f", ... ({len(patterns)} patterns)" if len(patterns) > 1 else "") + "]"


def fingerprint_differences(expected: Union[Fingerprint, bytes], actual: Union[Fingerprint, bytes],
                            limit: Optional[int] = None) -> list:
    """How ``actual`` (the daemon's) differs from ``expected``, one line each, in ``Fingerprint.differences``'
    order and words (docs/checkpoints.md, "Fingerprint"): layout version; backend (only when ``expected``
    names one); the selection, in one line, when the two select different table names and their patterns
    differ (instead of a line per table missing or not expected); files missing / not expected / size /
    header SHA-256 / content; tables missing / not expected / dtype / shape / bytes / content. Each content
    identity is compared where both sides have it. Patterns alone are not compared. An empty list is a match.
    Encoded fingerprints are decoded first. With ``limit``, the first ``limit`` lines and then one counting
    the rest."""
    e = _decoded(expected)
    a = _decoded(actual)
    out: list = []
    if e.layout_version != a.layout_version:
        out.append(f"layout version: expected {e.layout_version}, actual {a.layout_version}")
    if e.backend and e.backend != a.backend:
        out.append(f"backend: expected '{e.backend}', actual '{a.backend}'")
    by_selection = e.patterns != a.patterns and {t.name for t in e.tables} != {t.name for t in a.tables}
    if by_selection:
        out.append(f"selection: the daemon serves {counted(len(a.tables), 'table')} by "
                   f"{_patterns_in_short(a.patterns)}; this expectation selects {counted(len(e.tables), 'table')} by "
                   f"{_patterns_in_short(e.patterns)}")

    def compare(what: str, expected_items: tuple, actual_items: tuple, diff, one_sided: bool = True) -> None:
        ex = {x.name: x for x in expected_items}
        ac = {x.name: x for x in actual_items}
        for name in sorted(ex.keys() | ac.keys()):
            if name not in ac:
                if one_sided:
                    out.append(f"{what} '{name}': missing")
            elif name not in ex:
                if one_sided:
                    out.append(f"{what} '{name}': not expected")
            else:
                out.extend(f"{what} '{name}': {d}" for d in diff(ex[name], ac[name]))

    def content(kind: str, x: Optional[str], y: Optional[str]) -> Iterator[str]:
        if x is not None and y is not None and x != y:
            yield f"content differs: {kind} expected {x}, actual {y}"

    def file_diff(x: FingerprintFile, y: FingerprintFile) -> Iterator[str]:
        if x.size != y.size:
            yield f"size expected {x.size}, actual {y.size}"
        if x.header_sha256 != y.header_sha256:
            yield f"header SHA-256 expected {x.header_sha256.hex()}, actual {y.header_sha256.hex()}"
        yield from content("SHA-256", _hex(x.content_sha256), _hex(y.content_sha256))

    def table_diff(x: FingerprintTable, y: FingerprintTable) -> Iterator[str]:
        if x.dtype != y.dtype:
            yield f"dtype expected {x.dtype}, actual {y.dtype}"
        if tuple(x.shape) != tuple(y.shape):
            yield f"shape expected {_shape_text(x.shape)}, actual {_shape_text(y.shape)}"
        if x.nbytes != y.nbytes:
            yield f"bytes expected {x.nbytes}, actual {y.nbytes}"
        yield from content(ENGRAM_DIGEST, _engram_hex(x.engram_digest), _engram_hex(y.engram_digest))
        yield from content(TREE_DIGEST, _hex(x.tree_digest), _hex(y.tree_digest))

    compare("file", e.files, a.files, file_diff)
    compare("table", e.tables, a.tables, table_diff, not by_selection)
    if limit is not None and len(out) > limit:
        return out[:limit] + [f"... and {len(out) - limit} more differences"]
    return out


def _hex(b: Optional[bytes]) -> Optional[str]:
    return None if b is None else b.hex()


def _engram_hex(d: Optional[int]) -> Optional[str]:
    return None if d is None else f"{d:016x}"


def fingerprint_shares_identity(expected: Union[Fingerprint, bytes], actual: Union[Fingerprint, bytes]) -> bool:
    """Whether comparing the two compares any content identity (``sharesIdentityWith``): a file both name
    whose content SHA-256 both carry, or a table both name with a digest of one kind on both sides. False
    means the comparison was of headers only."""
    e = _decoded(expected)
    a = _decoded(actual)
    files = {f.name: f for f in a.files if f.content_sha256 is not None}
    if any(f.content_sha256 is not None and f.name in files for f in e.files):
        return True
    tables = {t.name: t for t in a.tables}
    for t in e.tables:
        other = tables.get(t.name)
        if other is not None and ((t.engram_digest is not None and other.engram_digest is not None)
                                  or (t.tree_digest is not None and other.tree_digest is not None)):
            return True
    return False
