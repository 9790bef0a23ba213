"""One safetensors file: opened through one fd (``O_RDONLY|O_CLOEXEC|O_NONBLOCK``), its header read and
validated from that fd (every field, every span inside the data, no overlap), its tensors; and a Hugging Face
snapshot's blob link, which names the file's SHA-256.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import struct
from dataclasses import dataclass
from typing import Optional

from .._wire import DTYPE_BITS
from ..errors import one_line
from .base import CheckpointError, MAX_HEADER_LENGTH, PathArg, _shape_text, byte_length
from .strict_json import JsonError, _kind, parse_json


# ---------------------------------------------------------------------------------------------------------------
# files

def _display(path: PathArg) -> str:
    """A path as Java's ``Path.toString`` shows it: repeated slashes merged, no trailing slash."""
    text = re.sub("/+", "/", os.fspath(path))
    return text.rstrip("/") or text


def _absolute(path: str) -> str:
    """``Path.toAbsolutePath()``: the working directory prefixed, nothing normalized."""
    return path if path.startswith("/") else _display(os.path.join(os.getcwd(), path))


def _errno_text(e: int) -> str:
    return f"{errno.errorcode.get(e, f'errno {e}')} ({os.strerror(e)})"


class _ReadFailed(Exception):
    """A positioned read failed; the message is the failing call, as the Java's NativeException words it."""


def _pread_into(fd: int, view: memoryview, offset: int, what: str) -> None:
    """Fills ``view`` from ``fd`` at ``offset`` with positioned reads, retrying short reads; an early end of
    file or an error raises _ReadFailed naming the call (``what`` names the fd)."""
    done = 0
    length = len(view)
    while done < length:
        try:
            n = os.preadv(fd, [view[done:]], offset + done)
        except OSError as e:
            raise _ReadFailed(f"pread({what}, len={length - done}, off={offset + done}) failed: "
                              f"{_errno_text(e.errno or 0)}") from None
        if n == 0:
            raise _ReadFailed(f"pread({what}, off={offset + done}) failed: {_errno_text(errno.EIO)}; "
                              f"unexpected end of file after {offset + done} bytes")
        done += n


def _read_bytes(where: str, fd: int, offset: int, length: int) -> bytes:
    buf = bytearray(length)
    try:
        _pread_into(fd, memoryview(buf), offset, where)
    except _ReadFailed as e:
        raise CheckpointError(f"{where}: cannot read {length} bytes at offset {offset}: {e}") from None
    return bytes(buf)


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a checkpoint file: ``offset`` is absolute in ``file`` (8 + header length + the begin of
    its data_offsets) and ``nbytes`` is always dtype x shape."""

    name: str
    dtype: str
    shape: tuple
    nbytes: int
    file: "CheckpointFile"
    offset: int

    @property
    def rank(self) -> int:
        return len(self.shape)

    def describe(self) -> str:
        """e.g. ``F8_E4M3 [384, 256]``."""
        return f"{self.dtype} {_shape_text(self.shape)}"


class CheckpointFile:
    """One validated safetensors file, open on ``fd`` (``O_RDONLY|O_CLOEXEC|O_NONBLOCK``) until closed.

    ``path`` is the path as given (shards of an index: absolute), ``name`` its base name, ``size`` the size
    ``fstat`` gave at the open, ``header_length`` n, ``header_sha256`` the SHA-256 of the n raw header bytes
    read through ``fd``, ``metadata`` the ``__metadata__`` map, ``tensors`` the tensors by name.
    """

    def __init__(self, path: str, fd: int, opened: os.stat_result, header_length: int, header_sha256: bytes,
                 metadata: dict, entries: list):
        self.path = path
        self.name = os.path.basename(path)
        self.fd = fd
        self.size = opened.st_size
        self.header_length = header_length
        self.header_sha256 = header_sha256
        self.metadata = metadata
        #: The SHA-256 of the whole file (32 bytes) when its path is a Hugging Face snapshot file, else None.
        self.snapshot_sha256 = snapshot_blob_sha256(path)
        self._opened = opened
        self.tensors = sorted((TensorInfo(n, d, s, b, self, o) for n, d, s, b, o in entries), key=_name)

    @property
    def data_offset(self) -> int:
        """Where the data section starts: 8 + n."""
        return 8 + self.header_length

    def close(self) -> None:
        """Closes the fd; later calls do nothing."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def changes(self) -> list:
        """What changed since the open, as ``check_unchanged`` lists it; empty when nothing did."""
        what: list = []
        try:
            now = os.fstat(self.fd)
        except OSError as e:
            return [f"cannot stat the open file: {e}"]
        before = self._opened
        if now.st_size != before.st_size:
            what.append(f"size {before.st_size} -> {now.st_size} bytes")
        if now.st_mtime_ns != before.st_mtime_ns:
            what.append("mtime")
        if now.st_ctime_ns != before.st_ctime_ns:
            what.append("ctime")
        if now.st_size < self.data_offset:
            what.append("header bytes (the file is now shorter than its header)")
        else:
            try:
                again = _read_bytes(self.path, self.fd, 0, self.data_offset)
                n = struct.unpack_from("<Q", again)[0]
                if n != self.header_length or hashlib.sha256(again[8:]).digest() != self.header_sha256:
                    what.append("header bytes")
            except CheckpointError as e:
                what.append(f"header bytes unreadable: {e}")
        try:
            named = os.stat(self.path)
            if (named.st_dev, named.st_ino) != (before.st_dev, before.st_ino):
                what.append("the path now names another file")
        except FileNotFoundError:
            what.append("the path no longer exists")
        except OSError as e:
            what.append(f"cannot stat the path: {e}")
        return what

    def __repr__(self) -> str:
        return f"CheckpointFile({self.path!r}, {len(self.tensors)} tensors, {self.size} bytes, fd {self.fd})"


def _name(t: TensorInfo) -> str:
    return t.name


_BLOB_NAME = re.compile("[0-9a-f]{64}")


def snapshot_blob_sha256(path: PathArg) -> Optional[bytes]:
    """The content identity of a Hugging Face snapshot file (docs/checkpoints.md, "A Hugging Face snapshot"):
    when ``path`` is a symbolic link whose target's file name is 64 lower-case hex digits in a directory named
    ``blobs`` (relative and absolute links alike; the target as the link names it, ``blobs/./x`` is not one),
    those digits as 32 bytes: the SHA-256 of the whole file,
    which ``huggingface_hub`` checked as it downloaded it. None for any other path. Reads the link only,
    never the bytes."""
    path = os.fspath(path)
    try:
        target = os.readlink(path)
    except OSError:
        return None  # not a symbolic link (EINVAL), or gone
    parts = [p for p in target.split("/") if p]  # the link's own text, not resolved (as the Java's Path)
    if len(parts) < 2 or parts[-2] != "blobs" or not _BLOB_NAME.fullmatch(parts[-1]):
        return None
    return bytes.fromhex(parts[-1])


def _open_fd(where: str) -> int:
    try:
        return os.open(where, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise CheckpointError(f"{where}: no such file") from None
        raise CheckpointError(f"{where}: cannot open: open({where}) failed: {_errno_text(e.errno or 0)}") from None


def _read_file(where: str, fd: int) -> CheckpointFile:
    """Validates the safetensors file open on ``fd`` (docs/checkpoints.md, "What SafetensorsFile.open
    checks"); ``where`` names it. Does not close ``fd``."""
    try:
        opened = os.fstat(fd)
    except OSError as e:
        raise CheckpointError(f"{where}: cannot stat the open file: {e}") from None
    if not stat.S_ISREG(opened.st_mode):
        raise CheckpointError(f"{where}: not a regular file")
    size = opened.st_size
    if size < 8:
        raise CheckpointError(f"{where}: file is {size} bytes, too short for the 8-byte header length")
    prefix = _read_bytes(where, fd, 0, 8)
    n = struct.unpack("<Q", prefix)[0]
    if (n > MAX_HEADER_LENGTH or 8 + n > size) and (size == 8 or _read_bytes(where, fd, 8, 1) != b"{"):
        # an impossible length and no JSON object after it: some other file (as the Java's SafetensorsFile says)
        shown = "".join(chr(b) if 0x20 <= b < 0x7f and b != 0x22 else "." for b in prefix)
        raise CheckpointError(f'{where}: not a safetensors file (its first 8 bytes, "{shown}" = {prefix.hex()}, are '
                              "not a header length followed by a JSON object): give a .safetensors file, an index "
                              "or a model directory")
    if n > MAX_HEADER_LENGTH:
        raise CheckpointError(f"{where}: header length {n} exceeds the limit of {MAX_HEADER_LENGTH} bytes (100 MiB)")
    if 8 + n > size:
        raise CheckpointError(f"{where}: header length {n} runs past the end of the file ({size} bytes)")
    header = _read_bytes(where, fd, 8, n)
    metadata, entries = _parse_header(where, header, 8 + n, size - 8 - n)
    return CheckpointFile(where, fd, opened, n, hashlib.sha256(header).digest(), metadata, entries)


_FIELDS = ("dtype", "shape", "data_offsets")


def _parse_header(where: str, header: bytes, data_offset: int, data_length: int) -> tuple:
    """The metadata and the tensors (name, dtype, shape, nbytes, absolute offset) of a header, checked
    against a data section of ``data_length`` bytes at ``data_offset``."""
    try:
        root = parse_json(header)
    except JsonError as e:
        raise CheckpointError(f"{where}: header JSON at byte {e.position} (file offset {8 + e.position}): "
                              f"{e.problem}") from None
    if type(root) is not dict:
        raise CheckpointError(f"{where}: header is not a JSON object")
    metadata: dict = {}
    entries: list = []
    spans: list = []
    for name, value in root.items():
        if name == "__metadata__":
            metadata = _metadata(where, value)
            continue
        if not name:
            raise CheckpointError(f"{where}: a tensor has an empty name")
        if one_line(name) != name:   # printed in messages: refused here, once
            raise CheckpointError(f"{where}: tensor '{one_line(name)}': its name holds a control character or a line "
                                  f"separator, which no tensor name may; export the file again with printable names")
        at = f"{where}: tensor '{name}': "
        if type(value) is not dict:
            raise CheckpointError(f"{at}entry is not an object but {_kind(value)}")
        for key in value:
            if key not in _FIELDS:
                raise CheckpointError(f"{at}unexpected field '{key}' (expected dtype, shape, data_offsets)")
        dtype = _dtype(at, _field(at, value, "dtype"))
        shape = _integers(at, "shape", _field(at, value, "shape"), -1)
        begin, end = _integers(at, "data_offsets", _field(at, value, "data_offsets"), 2)
        if begin > end:
            raise CheckpointError(f"{at}data_offsets [{begin}, {end}] end before they begin")
        if end > data_length:
            raise CheckpointError(f"{at}data_offsets [{begin}, {end}] end past the data section ({data_length} bytes)")
        try:
            needed = byte_length(dtype, shape)
        except ValueError as e:
            raise CheckpointError(f"{at}{e}") from None
        if needed != end - begin:
            raise CheckpointError(f"{at}{dtype} {_shape_text(shape)} needs {needed} bytes but data_offsets give "
                                  f"{end - begin}")
        entries.append((name, dtype, shape, needed, data_offset + begin))
        spans.append((begin, end, name))
    _check_layout(where, spans, data_length)
    return metadata, entries


def _check_layout(where: str, spans: list, data_length: int) -> None:
    """Sorted by (begin, end, name) the spans must tile the data section exactly."""
    expected = 0
    previous: Optional[tuple] = None
    for begin, end, name in sorted(spans):
        at = f"{where}: tensor '{name}': data_offsets [{begin}, {end}] "
        if begin < expected:
            assert previous is not None
            raise CheckpointError(f"{at}overlap tensor '{previous[2]}' [{previous[0]}, {previous[1]}]")
        if begin > expected:
            after = "the start of the data section" if previous is None else f"tensor '{previous[2]}'"
            raise CheckpointError(f"{at}leave a hole of {begin - expected} bytes after {after}")
        expected = end
        previous = (begin, end, name)
    if expected != data_length:
        raise CheckpointError(f"{where}: the data section has {data_length} bytes but the tensors cover {expected}: "
                              f"{data_length - expected} bytes at the end belong to no tensor")


def _metadata(where: str, value: object) -> dict:
    if type(value) is not dict:
        raise CheckpointError(f"{where}: __metadata__ is not an object but {_kind(value)}")
    for key, v in value.items():
        if type(v) is not str:
            raise CheckpointError(f"{where}: __metadata__ '{key}' is not a string but {_kind(v)}")
    return dict(value)


def _field(at: str, fields: dict, key: str) -> object:
    if key not in fields:
        raise CheckpointError(f"{at}missing '{key}'")
    return fields[key]


def _dtype(at: str, value: object) -> str:
    if type(value) is not str:
        raise CheckpointError(f"{at}dtype is not a string but {_kind(value)}")
    if value not in DTYPE_BITS:
        raise CheckpointError(f"{at}unknown dtype '{value}' (known: {', '.join(DTYPE_BITS)})")
    return value


def _integers(at: str, field: str, value: object, count: int) -> tuple:
    """A list of non-negative integers (exactly ``count`` of them when ``count`` >= 0), as a tuple."""
    expected = "a list of non-negative integers" if count < 0 else f"a list of {count} non-negative integers"
    if type(value) is not list:
        raise CheckpointError(f"{at}{field} is not {expected} but {_kind(value)}")
    if count >= 0 and len(value) != count:
        raise CheckpointError(f"{at}{field} has {len(value)} elements, expected {count}")
    for i, v in enumerate(value):
        if type(v) is not int or v < 0:
            shown = v if type(v) is int else _kind(v)
            raise CheckpointError(f"{at}{field} is not {expected}: element {i} is {shown}")
    return tuple(value)
