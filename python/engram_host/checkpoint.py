"""Safetensors checkpoints as engram-host reads them (docs/checkpoints.md): strict validation of every file's
header, sharded checkpoints and directories, tensor selection (globs, and the rule of "Which tensors are served":
--tables, else the model's config.json, else every tensor), content identity (version 2 digest records, Hugging
Face snapshot links), the change check, the fingerprint (canonical encoding versions 1 and 2, decoding,
differences, shared identity) and the limits of docs/checkpoints.md, "Limits".

Every failure is a :class:`CheckpointError` whose message is one line naming the file, the tensor where
there is one, and the problem, in the words of the Java implementation
(``engram-host/checkpoint/src/main/java/io/engramhost/checkpoint``). Files are opened through one fd each
(``O_RDONLY|O_CLOEXEC|O_NONBLOCK``), validated from that fd, and kept open by the :class:`Checkpoint` so that
what is read later (:mod:`engram_host.digests`) is what was validated.
"""

from __future__ import annotations

import decimal
import errno
import hashlib
import json
import math
import os
import re
import stat
import struct
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional, Sequence, Union

from .errors import EngramHostError, one_line

__all__ = [
    "CheckpointError", "JsonError", "DTYPE_BITS", "MAX_HEADER_LENGTH", "FILE_SUFFIX", "INDEX_SUFFIX",
    "LAYOUT_VERSION", "MAX_NAME_BYTES", "MAX_RANK", "MAX_TABLES", "MAX_FINGERPRINT_BYTES", "MAX_MANIFEST_BYTES",
    "TensorInfo", "CheckpointFile", "Checkpoint", "open_checkpoint", "parse_json", "byte_length",
    "Fingerprint", "FingerprintFile", "FingerprintTable", "fingerprint", "fingerprint_sha256_hex",
    "decode_fingerprint", "fingerprint_differences", "fingerprint_shares_identity", "names_in_short", "counted",
    "ENGRAM_DIGEST", "TREE_DIGEST", "check_limits", "CONFIG_FILE", "Selection", "select_served", "format_bytes",
    "ContentIdentity", "content_identity", "Served", "served_fingerprint", "snapshot_blob_sha256",
]

PathArg = Union[str, "os.PathLike[str]"]


class CheckpointError(EngramHostError):
    """A checkpoint (or a fingerprint, or a digest sidecar) that cannot be used; the message is one line."""


# ---------------------------------------------------------------------------------------------------------------
# dtypes, shapes, limits

#: Every safetensors dtype and its width in bits, in the Java enum's order (which error messages list).
from ._wire import DTYPE_BITS  # noqa: E402  (one table of the dtypes: the manifest's, docs/checkpoints.md)

#: The largest safetensors header accepted (as the reference implementation): 100 MiB.
MAX_HEADER_LENGTH = 100 << 20
FILE_SUFFIX = ".safetensors"
INDEX_SUFFIX = ".safetensors.index.json"
#: The largest index file read.
MAX_INDEX_BYTES = 100 << 20
#: The layout version a fingerprint describes today (``Fingerprint.LAYOUT_VERSION``).
LAYOUT_VERSION = 1

MAX_NAME_BYTES = 4096
MAX_RANK = 16
MAX_TABLES = 1 << 20
MAX_FINGERPRINT_BYTES = 16 << 20
MAX_MANIFEST_BYTES = 1 << 30
# Bytes of a manifest besides names, dtypes and dims (Limits.java): fixed part, per region, per table.
_MANIFEST_FIXED_BYTES = 8 + 32 + 4 + 4 + 4
_MANIFEST_REGION_BYTES = 1 + 8 + 4 + 4
_MANIFEST_TABLE_BYTES = 2 + 2 + 1 + 8 + 4 + 8 + 8 + 1 + 4 + 4

_I64_MAX = (1 << 63) - 1
_LIMITS_REF = "(docs/checkpoints.md, Limits)"


def _shape_text(shape: Sequence[int]) -> str:
    """A shape as Java's ``Arrays.toString`` writes it: ``[10, 256]``."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def byte_length(dtype: str, shape: Sequence[int]) -> int:
    """Bytes of a tensor of ``dtype`` and ``shape``: numel * bits / 8 (1 element for ``[]``, none when a
    dimension is 0). Raises ValueError (the Java's words) when numel or the bit count passes 2^63, or when a
    sub-byte dtype's bit count is not a multiple of 8; KeyError for an unknown dtype."""
    bits = DTYPE_BITS[dtype]
    numel = 0 if 0 in shape else math.prod(shape)
    if numel > _I64_MAX:
        raise ValueError(f"shape {_shape_text(shape)} has more than 2^63 elements")
    bit_count = numel * bits
    if bit_count > _I64_MAX:
        raise ValueError(f"{dtype} {_shape_text(shape)} is larger than 2^63 bits")
    if bit_count % 8:
        raise ValueError(f"{dtype} {_shape_text(shape)} has {numel} elements of {bits} bits = {bit_count} bits,"
                         " not a whole number of bytes")
    return bit_count // 8


# ---------------------------------------------------------------------------------------------------------------
# strict JSON

class JsonError(ValueError):
    """JSON that is not valid, or valid JSON refused (a duplicate key, an integer beyond 64 bits, a lone
    surrogate, nesting deeper than the limit). ``position`` is the byte offset, ``problem`` the text."""

    def __init__(self, position: int, problem: str):
        super().__init__(f"at byte {position}: {problem}")
        self.position = position
        self.problem = problem


class _Refused(Exception):
    """Raised inside the fast parse when the input is one the strict reader refuses."""


def _refuse_constant(_: str) -> object:
    raise _Refused()


def _unique_pairs(pairs: list) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _Refused()
    return d


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_pairs, parse_constant=_refuse_constant)
_I64_MIN = -(1 << 63)


def _within_limits(root: object, max_depth: int, check_strings: bool) -> bool:
    """True when the parsed value nests at most ``max_depth`` containers deep, every integer fits in 64
    bits, every float is finite, and (when ``check_strings``) no string holds a lone surrogate."""
    stack: list = [([root], 0)]
    while stack:
        container, depth = stack.pop()
        if depth > max_depth:
            return False
        if type(container) is dict:
            if check_strings and not all(_valid_text(k) for k in container):
                return False
            items: Iterable = container.values()
        else:
            items = container
        for x in items:
            t = type(x)
            if t is dict or t is list:
                stack.append((x, depth + 1))
            elif t is int:
                if not _I64_MIN <= x <= _I64_MAX:
                    return False
            elif t is float:
                if math.isinf(x):
                    return False
            elif t is str and check_strings and not _valid_text(x):
                return False
    return True


def _valid_text(s: str) -> bool:
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def parse_json(data: bytes, max_depth: int = 64) -> object:
    """Parses UTF-8 JSON strictly (RFC 8259, as ``io.engramhost.json.JsonReader``): one value, only JSON
    whitespace around it; duplicate keys, integers beyond 64 bits, out-of-range numbers, lone surrogates,
    NaN/Infinity and nesting deeper than ``max_depth`` are refused. Objects become dicts (key order kept),
    integers int, other numbers float. Raises :class:`JsonError` naming the byte position and the problem
    exactly as the Java reader does: input is parsed by :mod:`json` and checked, and refused input is read
    again by a byte-exact reader to say where and why."""
    data = bytes(data)
    try:
        text = data.decode("utf-8")
        root = _DECODER.decode(text)
        if _within_limits(root, max_depth, "\\u" in text):
            return root
    except (ValueError, RecursionError, _Refused):
        pass
    _StrictReader(data, max_depth).parse()
    raise JsonError(0, "refused by the JSON reader")  # reached only if the two readers disagreed


class _StrictReader:
    """A byte-at-a-time JSON reader with JsonReader's positions and wording, for input found invalid."""

    def __init__(self, data: bytes, max_depth: int):
        self.data = data
        self.end = len(data)
        self.pos = 0
        self.max_depth = max_depth

    def parse(self) -> object:
        self.skip_ws()
        value = self.value(0)
        self.skip_ws()
        if self.pos != self.end:
            raise JsonError(self.pos, f"unexpected {self.describe(self.pos)} after the value")
        return value

    def peek(self) -> int:
        return self.data[self.pos] if self.pos < self.end else -1

    def skip_ws(self) -> None:
        while self.pos < self.end and self.data[self.pos] in b" \t\n\r":
            self.pos += 1

    def describe(self, at: int) -> str:
        if at >= self.end:
            return "end of input"
        b = self.data[at]
        return f"'{chr(b)}'" if 0x21 <= b < 0x7F else f"byte 0x{b:x}"

    def value(self, depth: int) -> object:
        if self.pos >= self.end:
            raise JsonError(self.pos, "unexpected end of input, expected a value")
        b = self.data[self.pos]
        if b == 0x7B:
            return self.object(depth + 1)
        if b == 0x5B:
            return self.array(depth + 1)
        if b == 0x22:
            return self.string()
        for word, value in ((b"true", True), (b"false", False), (b"null", None)):
            if b == word[0]:
                if self.data[self.pos:self.pos + len(word)] != word:
                    raise JsonError(self.pos, f"invalid literal, expected {word.decode()}")
                self.pos += len(word)
                return value
        if b == 0x2D or 0x30 <= b <= 0x39:
            return self.number()
        raise JsonError(self.pos, f"unexpected {self.describe(self.pos)}, expected a value")

    def enter(self, depth: int) -> None:
        if depth > self.max_depth:
            raise JsonError(self.pos, f"nesting deeper than {self.max_depth} levels")

    def object(self, depth: int) -> dict:
        self.enter(depth)
        self.pos += 1
        out: dict = {}
        self.skip_ws()
        if self.peek() == 0x7D:
            self.pos += 1
            return out
        while True:
            self.skip_ws()
            key_at = self.pos
            if self.peek() != 0x22:
                raise JsonError(self.pos, f"unexpected {self.describe(self.pos)}, expected a string key")
            key = self.string()
            self.skip_ws()
            if self.peek() != 0x3A:
                raise JsonError(self.pos, f"unexpected {self.describe(self.pos)}, expected ':' after key")
            self.pos += 1
            self.skip_ws()
            v = self.value(depth)
            if key in out:
                raise JsonError(key_at, f'duplicate key "{key}"')
            out[key] = v
            self.skip_ws()
            c = self.peek()
            if c not in (0x2C, 0x7D):
                raise JsonError(self.pos, f"unexpected {self.describe(self.pos)}, expected ',' or '}}' in object")
            self.pos += 1
            if c == 0x7D:
                return out

    def array(self, depth: int) -> list:
        self.enter(depth)
        self.pos += 1
        out: list = []
        self.skip_ws()
        if self.peek() == 0x5D:
            self.pos += 1
            return out
        while True:
            self.skip_ws()
            out.append(self.value(depth))
            self.skip_ws()
            c = self.peek()
            if c not in (0x2C, 0x5D):
                raise JsonError(self.pos, f"unexpected {self.describe(self.pos)}, expected ',' or ']' in array")
            self.pos += 1
            if c == 0x5D:
                return out

    def digits(self) -> None:
        while 0x30 <= self.peek() <= 0x39:
            self.pos += 1

    def number(self) -> Union[int, float]:
        start = self.pos
        integral = True
        if self.peek() == 0x2D:
            self.pos += 1
        if self.peek() == 0x30:
            self.pos += 1
            if 0x30 <= self.peek() <= 0x39:
                raise JsonError(start, "leading zero in number")
        elif 0x30 <= self.peek() <= 0x39:
            self.digits()
        else:
            raise JsonError(self.pos, "expected a digit in number")
        if self.peek() == 0x2E:
            integral = False
            self.pos += 1
            if not 0x30 <= self.peek() <= 0x39:
                raise JsonError(self.pos, "expected a digit after '.' in number")
            self.digits()
        if self.peek() in (0x65, 0x45):
            integral = False
            self.pos += 1
            if self.peek() in (0x2B, 0x2D):
                self.pos += 1
            if not 0x30 <= self.peek() <= 0x39:
                raise JsonError(self.pos, "expected a digit in exponent")
            self.digits()
        text = self.data[start:self.pos].decode("ascii")
        if integral:
            if len(text) > 20 or not _I64_MIN <= int(text) <= _I64_MAX:
                raise JsonError(start, f"integer {text} does not fit in 64 bits")
            return int(text)
        value = float(text)
        if math.isinf(value):
            raise JsonError(start, f"number {text} is out of range")
        return value

    def string(self) -> str:
        start = self.pos
        self.pos += 1
        out: list = []
        while True:
            if self.pos >= self.end:
                raise JsonError(start, "unterminated string")
            b = self.data[self.pos]
            if b == 0x22:
                self.pos += 1
                return "".join(out)
            if b == 0x5C:
                out.append(self.escape())
            elif b < 0x20:
                raise JsonError(self.pos, f"control character 0x{b:x} in string (must be escaped)")
            elif b < 0x80:
                out.append(chr(b))
                self.pos += 1
            else:
                out.append(self.utf8(b))

    def escape(self) -> str:
        at = self.pos
        self.pos += 1
        if self.pos >= self.end:
            raise JsonError(at, "unterminated escape")
        c = self.data[self.pos]
        self.pos += 1
        simple = {0x22: '"', 0x5C: "\\", 0x2F: "/", 0x62: "\b", 0x66: "\f", 0x6E: "\n", 0x72: "\r", 0x74: "\t"}
        if c in simple:
            return simple[c]
        if c == 0x75:
            return self.unicode_escape(at)
        shown = chr(c) if 0x20 <= c < 0x7F else f"0x{c:x}"
        raise JsonError(at, f"invalid escape \\{shown}")

    def unicode_escape(self, at: int) -> str:
        c = self.hex4(at)
        if 0xD800 <= c <= 0xDBFF:
            if self.data[self.pos:self.pos + 2] == b"\\u":
                self.pos += 2
                low = self.hex4(at)
                if 0xDC00 <= low <= 0xDFFF:
                    return chr(0x10000 + ((c - 0xD800) << 10) + (low - 0xDC00))
            raise JsonError(at, f"unpaired surrogate \\u{c:x}")
        if 0xDC00 <= c <= 0xDFFF:
            raise JsonError(at, f"unpaired surrogate \\u{c:x}")
        return chr(c)

    def hex4(self, at: int) -> int:
        if self.pos + 4 > self.end:
            raise JsonError(at, "truncated \\u escape")
        digits = self.data[self.pos:self.pos + 4]
        if any(d not in b"0123456789abcdefABCDEF" for d in digits):
            raise JsonError(at, "invalid hex digit in \\u escape")
        self.pos += 4
        return int(digits, 16)

    def utf8(self, b0: int) -> str:
        at = self.pos
        if b0 & 0xE0 == 0xC0:
            n, cp, low = 1, b0 & 0x1F, 0x80
        elif b0 & 0xF0 == 0xE0:
            n, cp, low = 2, b0 & 0x0F, 0x800
        elif b0 & 0xF8 == 0xF0:
            n, cp, low = 3, b0 & 0x07, 0x10000
        else:
            raise JsonError(at, f"invalid UTF-8 byte 0x{b0:x}")
        if self.pos + n >= self.end:
            raise JsonError(at, "truncated UTF-8 sequence")
        for i in range(1, n + 1):
            b = self.data[self.pos + i]
            if b & 0xC0 != 0x80:
                raise JsonError(at, "invalid UTF-8 sequence")
            cp = cp << 6 | (b & 0x3F)
        if cp < low or cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
            raise JsonError(at, "invalid UTF-8 sequence (overlong, surrogate or beyond U+10FFFF)")
        self.pos += n + 1
        return chr(cp)


def _java_double(d: float) -> str:
    """A float as Java's ``Double.toString`` writes it: ``1.5``, ``100.0``, ``1.0E7``, ``1.25E-5``."""
    if d == 0:
        return "-0.0" if math.copysign(1.0, d) < 0 else "0.0"
    if 1e-3 <= abs(d) < 1e7:
        return repr(d)
    sign, digits, exponent = decimal.Decimal(repr(abs(d))).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    power = len(digits) - 1 + int(exponent)
    return ("-" if d < 0 else "") + text[0] + "." + (text[1:] or "0") + f"E{power}"


def _kind(v: object) -> str:
    """What a JSON value is, for a message (``SafetensorsHeader.kind``)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return 'the string "' + (v[:40] + "..." if len(v) > 40 else v) + '"'
    if isinstance(v, int):
        return f"the number {v}"
    if isinstance(v, float):
        return f"the number {_java_double(v)}"
    if isinstance(v, list):
        return "a list"
    return "an object"


def _quoted(name: str) -> str:
    """A name quoted for a message; one over 80 characters cut to its first 64, with its length in UTF-16
    units (Java's ``String.length``)."""
    if len(name) <= 80:
        return f"'{name}'"
    return f"'{name[:64]}...' ({len(name.encode('utf-16-le')) // 2} characters)"


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


# ---------------------------------------------------------------------------------------------------------------
# checkpoints

class Checkpoint:
    """A validated checkpoint of one or more safetensors files, each held open on its fd.

    ``files`` in the order given (shards of an index or a directory by name); ``tensors`` maps every tensor
    name to its :class:`TensorInfo`, ordered by name. Close it (or use it as a context manager) to close
    every fd.
    """

    def __init__(self, files: list, tensors: dict, given: Sequence[str] = (), given_as: Optional[dict] = None):
        self.files = files
        self.tensors = tensors
        #: The paths as given to :func:`open_checkpoint` (where the selection looks for config.json, and the
        #: content identity for digest records).
        self.given = tuple(given)
        self._given_as = given_as or {}

    def given_as(self, f: "CheckpointFile") -> str:
        """The path given to :func:`open_checkpoint` through which the file ``f`` was found."""
        return self._given_as[id(f)]

    def select(self, patterns: Sequence[str]) -> list:
        """The tensors whose names match any of ``patterns`` (``*`` any run of characters, ``?`` one, the
        rest literal; the whole name must match), ordered by name. An empty list or ``*`` selects all; any
        other pattern that matches nothing raises :class:`CheckpointError` naming it."""
        if isinstance(patterns, str):
            raise TypeError("patterns must be a sequence of strings, not one string")
        if not patterns:
            return list(self.tensors.values())
        chosen: dict = {}
        for text in patterns:
            if not text:
                raise CheckpointError("tensor selection: empty tensor name pattern")
            regex = re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text),
                               re.DOTALL)
            matched = [name for name in self.tensors if regex.fullmatch(name)]
            if not matched and text != "*":
                raise CheckpointError(f"tensor selection: pattern '{text}' matches none of the {len(self.tensors)}"
                                      f" tensors of {self._describe_files()}")
            for name in matched:
                chosen[name] = self.tensors[name]
        return [chosen[name] for name in sorted(chosen)]

    def _describe_files(self) -> str:
        if len(self.files) == 1:
            return self.files[0].path
        return f"{len(self.files)} files in {os.path.dirname(_absolute(self.files[0].path))}"

    def check_unchanged(self, during: str = "since it was opened",
                        consequence: str = "what was read may not be what was validated; run again once the "
                                           "file is stable") -> None:
        """Raises :class:`CheckpointError` ("checkpoint PATH changed DURING (WHAT): CONSEQUENCE", naming
        any other changed file too) when a file changed since it was opened: its size, mtime or ctime (fstat
        of the fd), its header bytes (read again through the fd), or what its path names (stat of the path,
        following symlinks: same device and inode)."""
        first: Optional[str] = None
        others: list = []
        for f in self.files:
            what = f.changes()
            if not what:
                continue
            if first is None:
                first = f"checkpoint {f.path} changed {during} ({', '.join(what)})"
            else:
                others.append(f"{f.path} ({', '.join(what)})")
        if first is not None:
            also = f"; also changed: {', '.join(others)}" if others else ""
            raise CheckpointError(f"{first}{also}: {consequence}")

    def close(self) -> None:
        """Closes every file's fd once; later calls do nothing."""
        for f in self.files:
            f.close()

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Checkpoint({len(self.files)} files, {len(self.tensors)} tensors)"


def open_checkpoint(paths: Union[PathArg, Sequence[PathArg]]) -> Checkpoint:
    """Opens and validates a checkpoint: each path a ``.safetensors`` file, a ``*.safetensors.index.json``
    (its shards are checked against its weight_map both ways) or a directory (its single index, else every
    ``*.safetensors`` in it by name). Tensor names must be unique across files and no file may be given
    twice. Every file stays open on its fd; on any failure every fd opened is closed and
    :class:`CheckpointError` says why."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not paths:
        raise CheckpointError("no checkpoint path given")
    opened: list = []

    def open_file(where: str) -> CheckpointFile:
        fd = _open_fd(where)
        try:
            f = _read_file(where, fd)
        except BaseException:
            os.close(fd)
            raise
        opened.append(f)
        return f

    try:
        files: dict = {}
        given_as: dict = {}
        for p in paths:
            given = _display(p)
            for f in _resolve(given, open_file):
                key = os.path.normpath(_absolute(f.path))
                if key in files:
                    raise CheckpointError(f"{f.path}: given more than once (via {given})")
                files[key] = f
                given_as[id(f)] = given
        tensors: dict = {}
        for f in files.values():
            for t in f.tensors:
                other = tensors.setdefault(t.name, t)
                if other is not t:
                    raise CheckpointError(f"tensor '{t.name}' is in both {other.file.path} and {f.path}")
        return Checkpoint(list(files.values()), {name: tensors[name] for name in sorted(tensors)},
                          [_display(p) for p in paths], given_as)
    except BaseException:
        for f in opened:
            f.close()
        raise


def _resolve(p: str, open_file) -> list:
    if os.path.isdir(p):
        return _directory(p, open_file)
    if not os.path.exists(p):
        raise CheckpointError(f"{p}: no such file or directory")
    name = os.path.basename(p)
    if name.endswith(INDEX_SUFFIX):
        return _open_index(p, open_file)
    if name.endswith(FILE_SUFFIX):
        return [open_file(p)]
    raise CheckpointError(f"{p}: not a {FILE_SUFFIX} file, a *{INDEX_SUFFIX} or a directory")


def _directory(d: str, open_file) -> list:
    try:
        names = sorted(os.listdir(d), key=os.fsencode)
    except OSError as e:
        raise CheckpointError(f"{d}: cannot list: {e}") from None
    indexes = [n for n in names if n.endswith(INDEX_SUFFIX) and os.path.isfile(os.path.join(d, n))]
    shards = [n for n in names if n.endswith(FILE_SUFFIX) and os.path.isfile(os.path.join(d, n))]
    if len(indexes) > 1:
        raise CheckpointError(f"{d}: holds {len(indexes)} index files [{', '.join(indexes)}]: name the one to use")
    if indexes:
        return _open_index(_display(os.path.join(d, indexes[0])), open_file)
    if not shards:
        raise CheckpointError(f"{d}: holds no *{FILE_SUFFIX} file and no *{INDEX_SUFFIX}")
    return [open_file(_display(os.path.join(d, n))) for n in shards]


def _open_index(index: str, open_file) -> list:
    """The shards of a ``*.safetensors.index.json``, by name, once the weight_map and the shards agree."""
    weight_map = _weight_map(index, _read_index(index))
    directory = os.path.dirname(_absolute(index))
    shards: dict = {}
    for shard_name in sorted(set(weight_map.values())):
        shard = os.path.join(directory, shard_name)
        if not os.path.isfile(shard):
            tensor = next(t for t, s in weight_map.items() if s == shard_name)
            raise CheckpointError(f"{index}: weight_map names shard '{shard_name}' (for tensor '{tensor}'), but "
                                  f"{shard} does not exist")
        shards[shard_name] = open_file(shard)
    held = {shard_name: {t.name for t in shard.tensors} for shard_name, shard in shards.items()}
    for tensor, shard_name in weight_map.items():
        if tensor not in held[shard_name]:
            raise CheckpointError(f"{index}: weight_map puts tensor '{tensor}' in '{shard_name}', but that shard has"
                                  " no such tensor")
    for shard_name, shard in shards.items():
        for t in shard.tensors:
            mapped = weight_map.get(t.name)
            if mapped is None:
                raise CheckpointError(f"{index}: shard '{shard_name}' holds tensor '{t.name}', which weight_map "
                                      "does not list")
            if mapped != shard_name:
                raise CheckpointError(f"{index}: shard '{shard_name}' holds tensor '{t.name}', which weight_map "
                                      f"puts in '{mapped}'")
    return list(shards.values())


def _read_index(index: str, what: str = "index") -> bytes:
    """The bytes of a JSON file beside the checkpoint (an index, a config.json), at most 100 MiB."""
    try:
        with os.fdopen(os.open(index, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_INDEX_BYTES:
                raise CheckpointError(f"{index}: {what} is {size} bytes, over the limit of {MAX_INDEX_BYTES}")
            return f.read()
    except FileNotFoundError:
        raise CheckpointError(f"{index}: no such file") from None
    except OSError as e:
        raise CheckpointError(f"{index}: cannot read: {e}") from None


def _weight_map(index: str, data: bytes) -> dict:
    """tensor name -> shard file name, sorted by tensor name."""
    try:
        root = parse_json(data)
    except JsonError as e:
        raise CheckpointError(f"{index}: index JSON {e}") from None
    if type(root) is not dict:
        raise CheckpointError(f"{index}: index is not a JSON object")
    entries = root.get("weight_map")
    if type(entries) is not dict:
        raise CheckpointError(f"{index}: index has no weight_map object")
    for tensor, shard in entries.items():
        if type(shard) is not str:
            raise CheckpointError(f"{index}: weight_map entry for tensor '{tensor}' is not a file name but "
                                  f"{_kind(shard)}")
        if not shard or "/" in shard or shard in (".", "..") or "\0" in shard:
            raise CheckpointError(f"{index}: weight_map entry for tensor '{tensor}' is '{shard}', not a file name in "
                                  "the index's directory")
    return {tensor: entries[tensor] for tensor in sorted(entries)}


# ---------------------------------------------------------------------------------------------------------------
# the selection: which tensors are served

CONFIG_FILE = "config.json"
_ENGRAM_TENSOR = re.compile(r"(?:.*\.)?layers\.([0-9]+)\.engram\.embed\.(weight|scale)", re.DOTALL)
_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
#: Values in an E8M0 scale row per scale (docs/checkpoints.md: one E8M0 scale per 32 values).
_VALUES_PER_SCALE = 32


def format_bytes(n: int) -> str:
    """A byte count as the Java's ``Bytes.format`` writes it: ``100 B``, ``512.0 KiB``, ``1.2 GiB`` (one decimal,
    half up, in the largest binary unit that keeps the value at least 1)."""
    v = float(abs(n))
    if v < 1024:
        return f"{n} B"
    u = -1
    while v >= 1024 and u < len(_UNITS) - 1:
        v /= 1024
        u += 1
    # Java's %.1f rounds the shortest decimal form of the double half up; repr() is that form
    shown = decimal.Decimal(repr(v)).quantize(decimal.Decimal("0.1"), decimal.ROUND_HALF_UP)
    return f"{'-' if n < 0 else ''}{shown} {_UNITS[u]}"


@dataclass(frozen=True)
class Selection:
    """The tensors a checkpoint serves, chosen by the one rule of docs/checkpoints.md, "Which tensors are
    served" (the Java's ``Selection``): ``rule`` is ``"tables"`` (globs given), ``"config"`` (config.json's
    engram_layer_ids) or ``"all"``; ``tensors`` the :class:`TensorInfo` chosen, by name; ``patterns`` the
    fingerprint's patterns (the globs, the chosen tensors' exact names, or ``*``); ``description`` the one line
    ``serve`` logs, STATUS shows as ``selection`` and ``inspect`` prints after ``selection: ``."""

    rule: str
    tensors: tuple
    patterns: tuple
    description: str

    @property
    def warning(self) -> Optional[str]:
        """For the rule ``all``, the one line to show (a warning): every tensor is served, and how to choose."""
        if self.rule != "all":
            return None
        return (f"selecting every tensor of the checkpoint (no --tables, and no {CONFIG_FILE} naming {_LAYER_IDS}): "
                f"give --tables GLOB,... or the model's directory (its {CONFIG_FILE} names the Engram layers) to "
                "serve only the Engram tables")


_LAYER_IDS = "engram_layer_ids"
_NUM_EMBEDDINGS = "engram_num_embeddings"
_HEAD_DIM = "engram_head_dim"
_TEXT_CONFIG = "text_config"
#: The largest config.json read.
_MAX_CONFIG_BYTES = 16 << 20
#: What every message about a malformed config.json ends with.
_CONFIG_FIX = ": fix the model's config.json, or choose the tables with --tables"


def select_served(checkpoint: Checkpoint, tables: Sequence[str] = ()) -> Selection:
    """The tensors of ``checkpoint`` that ``serve`` serves (docs/checkpoints.md, "Which tensors are served"):
    1. ``tables`` (globs, as ``--tables``) when given; 2. otherwise, when the checkpoint was given as one
    directory or one ``*.safetensors.index.json`` whose directory's config.json names ``engram_layer_ids`` (at
    its top level, or in ``text_config``; the top level wins), exactly ``PREFIXlayers.L.engram.embed.weight``
    and ``.scale`` for each layer id L, PREFIX empty or ending in ``.``, checked against
    ``engram_num_embeddings`` and ``engram_head_dim`` where present; 3. otherwise every tensor. Raises
    :class:`CheckpointError`, one line, for a glob matching nothing and for a config.json that is not JSON,
    has Engram fields of the wrong type, names a tensor missing or twice, or disagrees with a shape."""
    if isinstance(tables, str):
        raise TypeError("tables must be a sequence of globs, not one string")
    if tables:
        chosen = checkpoint.select(list(tables))
        return Selection("tables", tuple(chosen), tuple(tables), f"--tables {','.join(tables)}: {_amount(chosen)}")
    directory = _model_directory(checkpoint)
    config = os.path.join(directory, CONFIG_FILE) if directory is not None else None
    fields = _engram_fields(config) if config is not None and os.path.exists(config) else None
    if fields is not None:
        chosen = _engram_tensors(checkpoint, config, *fields)
        names = [t.name for t in chosen]
        return Selection("config", tuple(chosen), tuple(names),
                         f"{CONFIG_FILE} {_LAYER_IDS} {_shape_text(fields[0])}: {_amount(chosen)} "
                         f"({names_in_short(names)})")
    every = list(checkpoint.tensors.values())
    return Selection("all", tuple(every), ("*",),
                     f"every tensor (no --tables, and no {CONFIG_FILE} naming {_LAYER_IDS}): {_amount(every)}")


def counted(n: int, what: str) -> str:
    """``1 table``, ``4 tables``."""
    return f"{n} {what}" + ("" if n == 1 else "s")


def _amount(tensors: Sequence[TensorInfo]) -> str:
    """``4 tensors, 1.2 GiB``."""
    return f"{counted(len(tensors), 'tensor')}, {format_bytes(sum(t.nbytes for t in tensors))}"


def _model_directory(checkpoint: Checkpoint) -> Optional[str]:
    """Where the model's config.json would be: the one directory given, or the one index's directory."""
    if len(checkpoint.given) != 1:
        return None
    given = checkpoint.given[0]
    if os.path.isdir(given):
        return given
    if not os.path.basename(given).endswith(INDEX_SUFFIX):
        return None
    return os.path.dirname(given) or os.path.dirname(_absolute(given))


def _engram_fields(config: str) -> Optional[tuple]:
    """(layer ids, rows per layer or None, head dim or None) from config.json (the Java's ``ModelConfig``), or
    None when it names no engram_layer_ids: read from the top level when it names them, else from
    ``text_config``, all from that one object; every Engram field present is checked."""
    try:
        size = os.path.getsize(config)
    except OSError as e:
        raise CheckpointError(f"{config}: cannot read: {e}") from None
    if size > _MAX_CONFIG_BYTES:
        raise CheckpointError(f"{config}: {size} bytes, over the limit of {_MAX_CONFIG_BYTES} for a {CONFIG_FILE}"
                              f"{_CONFIG_FIX}")
    try:
        root = parse_json(_read_index(config, CONFIG_FILE))
    except JsonError as e:
        raise CheckpointError(f"{config}: not JSON: at byte {e.position}: {e.problem}{_CONFIG_FIX}") from None
    if type(root) is not dict:
        raise CheckpointError(f"{config}: not a JSON object but {_kind(root)}{_CONFIG_FIX}")
    fields = root
    if _LAYER_IDS not in root:
        text = root.get(_TEXT_CONFIG)
        if text is None:
            return None
        if type(text) is not dict:
            raise CheckpointError(f"{config}: {_TEXT_CONFIG} is {_kind(text)}, not an object{_CONFIG_FIX}")
        if _LAYER_IDS not in text:
            return None
        fields = text
    distinct = "distinct non-negative integers"
    ids = _config_integers(config, _LAYER_IDS, fields[_LAYER_IDS], distinct)
    if not ids:
        raise CheckpointError(f"{config}: {_LAYER_IDS} is an empty list: it names no Engram layer{_CONFIG_FIX}")
    for i, v in enumerate(ids):
        if v in ids[:i]:
            raise CheckpointError(f"{config}: {_LAYER_IDS}[{i}] repeats layer {v}, not a list of {distinct}"
                                  f"{_CONFIG_FIX}")
    rows = None
    if _NUM_EMBEDDINGS in fields:
        rows = _config_integers(config, _NUM_EMBEDDINGS, fields[_NUM_EMBEDDINGS], "non-negative integers")
        if len(rows) != len(ids):
            raise CheckpointError(f"{config}: {_NUM_EMBEDDINGS} has {len(rows)} entries but {_LAYER_IDS} has "
                                  f"{len(ids)}: one per layer{_CONFIG_FIX}")
    dim = None
    if _HEAD_DIM in fields:
        dim = fields[_HEAD_DIM]
        if type(dim) is not int or dim <= 0 or dim % _VALUES_PER_SCALE:
            raise CheckpointError(f"{config}: {_HEAD_DIM} is {_config_value(dim)}, not a positive multiple of "
                                  f"{_VALUES_PER_SCALE} (one E8M0 scale per {_VALUES_PER_SCALE} values){_CONFIG_FIX}")
    return ids, rows, dim


def _config_integers(config: str, field: str, value: object, expected: str) -> list:
    if type(value) is not list:
        raise CheckpointError(f"{config}: {field} is {_config_value(value)}, not a list of {expected}{_CONFIG_FIX}")
    for i, v in enumerate(value):
        if type(v) is not int or v < 0:
            raise CheckpointError(f"{config}: {field}[{i}] is {_config_value(v)}, not a list of {expected}"
                                  f"{_CONFIG_FIX}")
    return list(value)


def _config_value(v: object) -> str:
    """A JSON value for a config.json message: an integer as itself, anything else as :func:`_kind` says."""
    return str(v) if type(v) is int else _kind(v)


def _engram_tensors(checkpoint: Checkpoint, config: str, ids: list, rows: Optional[list],
                    dim: Optional[int]) -> list:
    """Each layer's weight and scale, found once under any prefix ending in '.', checked against the config."""
    found: dict = {}
    for name in checkpoint.tensors:
        m = _ENGRAM_TENSOR.fullmatch(name)
        if m:
            found.setdefault((m.group(1), m.group(2)), []).append(name)

    def tensor(layer: int, kind: str) -> TensorInfo:
        base = f"layers.{layer}.engram.embed.{kind}"
        names = found.get((str(layer), kind), [])
        if not names:
            raise CheckpointError(f"{config}: {_LAYER_IDS} names layer {layer} but the checkpoint has no tensor {base}"
                                  f" (under any prefix ending in '.'): serve the files this {CONFIG_FILE} belongs to, "
                                  "or choose the tables with --tables")
        if len(names) > 1:
            raise CheckpointError(f"{config}: layer {layer}: two tensors are named {base} under different prefixes, "
                                  f"{_quoted(names[0])} and {_quoted(names[1])}: choose the tables with --tables")
        return checkpoint.tensors[names[0]]

    chosen = []
    for i, layer in enumerate(ids):
        weight, scale = tensor(layer, "weight"), tensor(layer, "scale")
        if rows is not None:
            for t in (weight, scale):
                if not t.shape or t.shape[0] != rows[i]:
                    has = f"has {t.shape[0]} rows" if t.shape else "has no rows (a scalar)"
                    raise CheckpointError(f"{config}: {_NUM_EMBEDDINGS}[{i}] is {rows[i]} but {t.name} {has}")
        if dim is not None:
            for t, columns, why in ((weight, dim, ""), (scale, dim // _VALUES_PER_SCALE,
                                                         f" (one scale per {_VALUES_PER_SCALE} values)")):
                if len(t.shape) != 2 or t.shape[1] != columns:
                    raise CheckpointError(f"{config}: {_HEAD_DIM} is {dim} but {t.name} is {t.describe()}, not "
                                          f"[rows, {columns}]{why}")
        chosen += [weight, scale]
    return sorted(chosen, key=_name)


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


def names_in_short(names: Sequence[str]) -> str:
    """A list of names as messages give it in short: the first, then ``, ...`` when there are more."""
    return "" if not names else names[0] + (", ..." if len(names) > 1 else "")


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


# ---------------------------------------------------------------------------------------------------------------
# content identity, and the fingerprint serve gives

@dataclass(frozen=True)
class ContentIdentity:
    """The content identities a checkpoint carries (docs/checkpoints.md, "Content identity"; the Java's
    ``ContentIdentity``), for the tables of a selection: ``files``, base name -> the whole file's SHA-256 (32
    bytes) of each Hugging Face snapshot file holding a selected table; ``tables``, table name -> (engram
    digest v1, sha256-tree-v1 as 32 bytes) from the version 2 digest record (``records``) of the path each
    table was found through; ``uncovered``, the selected tables such a record does not hold; ``notes``, the
    lines to show (a version 1 record, which gives no identity; the tables a record does not cover). Nothing
    is hashed to find them."""

    files: dict
    tables: dict
    records: tuple
    uncovered: tuple
    notes: tuple

    @property
    def level(self) -> str:
        """``headers``, ``record``, ``hf-snapshot`` or ``record+hf-snapshot``, as STATUS's content_identity."""
        levels = [name for name, present in (("record", self.tables), ("hf-snapshot", self.files)) if present]
        return "+".join(levels) or "headers"


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


# ---------------------------------------------------------------------------------------------------------------
# limits

def check_limits(tensors: Sequence[TensorInfo], fingerprint_bytes: bytes) -> None:
    """Checks the tables a daemon would serve and their canonical fingerprint against docs/checkpoints.md,
    "Limits", in ``Limits.check``'s order: table count; per table, name length (UTF-8 bytes) and rank; the
    fingerprint's size; the manifest's bound. Raises :class:`CheckpointError` with the Java's line."""
    count = len(tensors)
    if count > MAX_TABLES:
        raise CheckpointError(f"{count} tables selected, over the limit of {MAX_TABLES} {_LIMITS_REF}")
    for t in tensors:
        name_bytes = len(t.name.encode("utf-8"))
        if name_bytes > MAX_NAME_BYTES:
            raise CheckpointError(f"{t.file.path}: tensor {_quoted(t.name)}: the name is {name_bytes} bytes of UTF-8,"
                                  f" over the limit of {MAX_NAME_BYTES} {_LIMITS_REF}")
        if t.rank > MAX_RANK:
            raise CheckpointError(f"{t.file.path}: tensor {_quoted(t.name)}: rank {t.rank} ({t.describe()}) is over "
                                  f"the limit of {MAX_RANK} {_LIMITS_REF}")
    size = len(fingerprint_bytes)
    if size > MAX_FINGERPRINT_BYTES:
        raise CheckpointError(f"the fingerprint of the {count} selected tables is {size} bytes, over the limit of "
                              f"{MAX_FINGERPRINT_BYTES} (16 MiB) that a manifest and an expectation carry; serve fewer"
                              f" tables or shorter names {_LIMITS_REF}")
    manifest = _MANIFEST_FIXED_BYTES + size + sum(
        (_MANIFEST_REGION_BYTES if t.nbytes > 0 else 0) + _MANIFEST_TABLE_BYTES + len(t.name.encode("utf-8"))
        + len(t.dtype) + 8 * t.rank for t in tensors)
    if manifest > MAX_MANIFEST_BYTES:
        raise CheckpointError(f"the manifest of the {count} selected tables could take {manifest} bytes, over the "
                              f"limit of {MAX_MANIFEST_BYTES} (1 GiB, one frame) {_LIMITS_REF}")
