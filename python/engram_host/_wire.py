"""The wire protocol of docs/protocol.md: messages with file descriptors, frames, parts and the codecs a
client needs. Standard library only.

Every bound of the document is checked here, where the bytes enter: a message's length on its 8-byte header
before any payload byte is read, the fd count before any filler is read, every string, count and blob while a
frame is decoded. A violation raises :class:`ProtocolError` naming the field; any fds that arrived with the
message are closed first.
"""

from __future__ import annotations

import array
import enum
import hashlib
import os
import socket
import struct
import time

from . import _regions
from .errors import one_line

MAGIC = 0x4D524745  # "EGRM" in byte order
MIN_VERSION = 1
MAX_VERSION = 2
HEADER_BYTES = 8
CONTINUED = 0x8000
MAX_PART_BODY = 1 << 20
MAX_FRAME = 1 << 30
MAX_V1_PAYLOAD = 64 << 20
MAX_V2_PAYLOAD = MAX_PART_BODY + HEADER_BYTES
MAX_PRE_VERSION_PAYLOAD = 65536
MAX_FDS = 65536
FDS_PER_SENDMSG = 253
FILLER = 0xFD
MAX_SHORT_STRING = 4096
MAX_DETAILS = 101
MAX_DETAIL = 4096
MAX_MESSAGE = 4096
MAX_TABLES = 1 << 20
MAX_RANK = 16
MAX_FINGERPRINT = 16 << 20
MAX_DEVICE = 1023

HELLO, WELCOME, IMPORT, MANIFEST, STATUS, STATUS_REPLY, STOP, STOP_ACK, ERROR, BYE, PART = range(1, 12)
TYPE_NAMES = {1: "HELLO", 2: "WELCOME", 3: "IMPORT", 4: "MANIFEST", 5: "STATUS", 6: "STATUS_REPLY", 7: "STOP",
              8: "STOP_ACK", 9: "ERROR", 10: "BYE", 11: "PART"}

# Region kinds on the wire (MANIFEST), and the backend each belongs to.
KIND_MEMFD, KIND_MEMFD_HUGETLB, KIND_VMM_HOST, KIND_VMM_DEVICE = 0, 1, 2, 3
KIND_BACKENDS = {0: "memfd", 1: "memfd-hugetlb", 2: "cuda-vmm", 3: "cuda-device"}

STATES = {0: "loading", 1: "ready", 2: "stopping", 3: "failed"}

DTYPE_BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64,
    "I64": 64, "U64": 64,
}


class ProtocolError(Exception):
    """A message that breaks docs/protocol.md; the connection it came on is unusable."""


class PeerClosed(ProtocolError):
    """The peer closed the connection (EOF) before a whole message arrived."""


class AnswerTimeout(ProtocolError):
    """No whole message arrived within the client's wait."""


class Record:
    """A plain record of the fields named in ``__slots__``, given positionally. Defining one costs far less than a
    dataclass, which an engine's start-up pays for every class (RestartBench, docs/python.md)."""
    __slots__ = ()

    def __init__(self, *values):
        if len(values) != len(self.__slots__):
            raise TypeError(f"{type(self).__name__} takes {len(self.__slots__)} fields, got {len(values)}")
        for k, v in zip(self.__slots__, values):
            setattr(self, k, v)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={getattr(self, k)!r}' for k in self.__slots__)})"

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    __hash__ = None


def type_name(t: int) -> str:
    return TYPE_NAMES.get(t & ~CONTINUED, f"type {t & ~CONTINUED}") + (" (continued)" if t & CONTINUED else "")


# ---------------------------------------------------------------------------------------------- frames


class Reader:
    """Decodes one frame's body; every read is bounded by the bytes left and names its field."""

    def __init__(self, body: bytes | memoryview, what: str):
        self._b = memoryview(body)
        self._p = 0
        self._what = what

    def _take(self, n: int, field_name: str) -> memoryview:
        if n > len(self._b) - self._p:
            raise ProtocolError(f"{self._what}: {field_name} needs {n} bytes at byte {self._p} but "
                                f"{len(self._b) - self._p} are left")
        v = self._b[self._p:self._p + n]
        self._p += n
        return v

    def _unpack(self, fmt: str, field_name: str) -> int:
        return struct.unpack(fmt, self._take(struct.calcsize(fmt), field_name))[0]

    def u8(self, f: str) -> int:
        return self._unpack("<B", f)

    def u16(self, f: str) -> int:
        return self._unpack("<H", f)

    def u32(self, f: str) -> int:
        return self._unpack("<I", f)

    def i32(self, f: str) -> int:
        return self._unpack("<i", f)

    def u64(self, f: str) -> int:
        return self._unpack("<Q", f)

    def i64(self, f: str) -> int:
        return self._unpack("<q", f)

    def raw(self, n: int, f: str) -> bytes:
        return bytes(self._take(n, f))

    def _text(self, n: int, f: str) -> str:
        b = self._take(n, f)
        try:
            return str(b, "utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"{self._what}: {f} is not valid UTF-8 ({e.reason} at byte {e.start})") from None

    def str16(self, f: str) -> str:
        n = self.u16(f + " length")
        if n > MAX_SHORT_STRING:
            raise ProtocolError(f"{self._what}: {f} is {n} bytes, over the limit of {MAX_SHORT_STRING}")
        return self._text(n, f)

    def str32(self, f: str, limit: int) -> str:
        n = self.u32(f + " length")
        if n > limit:
            raise ProtocolError(f"{self._what}: {f} is {n} bytes, over the limit of {limit}")
        return self._text(n, f)

    def blob32(self, f: str, limit: int) -> bytes:
        n = self.u32(f + " length")
        if n > limit:
            raise ProtocolError(f"{self._what}: {f} is {n} bytes, over the limit of {limit}")
        return self.raw(n, f)

    def end(self) -> None:
        left = len(self._b) - self._p
        if left:
            raise ProtocolError(f"{self._what}: {left} trailing bytes after the last field")


def frame_header(msg_type: int, version: int) -> bytes:
    return struct.pack("<IHH", MAGIC, version, msg_type)


def _str16(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > MAX_SHORT_STRING:
        raise ValueError(f"string of {len(b)} bytes is over the limit of {MAX_SHORT_STRING}")
    return struct.pack("<H", len(b)) + b


def encode_hello(pid: int, client: str) -> bytes:
    """HELLO is always encoded as version 1 and offers versions 1 to 2."""
    return frame_header(HELLO, 1) + struct.pack("<HHi", MIN_VERSION, MAX_VERSION, pid) + _str16(client)


def encode_empty(msg_type: int, version: int) -> bytes:
    return frame_header(msg_type, version)


def encode_import(version: int, device: int, expectation: "Expectation") -> bytes:
    if not -1 <= device <= MAX_DEVICE:
        raise ValueError(f"device {device} is not -1 or a GPU ordinal 0..{MAX_DEVICE}")
    body = struct.pack("<iiB", 0, device, expectation.kind)
    if expectation.kind == ExpectationKind.SHA256:
        body += expectation.data
    elif expectation.kind == ExpectationKind.STRUCTURED:
        body += struct.pack("<I", len(expectation.data)) + expectation.data
    return frame_header(IMPORT, version) + body


class ExpectationKind(enum.IntEnum):
    """IMPORT's ``expectation`` byte (docs/protocol.md, "IMPORT")."""

    ANY = 0
    SHA256 = 1
    STRUCTURED = 2

    # As Python 3.11+ writes an IntEnum, on 3.10 too: the number, so messages read the same everywhere.
    __str__ = int.__repr__
    __format__ = int.__format__


class Expectation(Record):
    """What the client expects the daemon to serve: an :class:`ExpectationKind` and its bytes (none, a SHA-256,
    or a structured fingerprint's canonical encoding)."""
    __slots__ = ("kind", "data")

    def __init__(self, kind: int, data: bytes = b""):
        super().__init__(ExpectationKind(kind), data)

    @staticmethod
    def any() -> "Expectation":
        return Expectation(ExpectationKind.ANY)

    @staticmethod
    def sha256(hex_or_bytes: str | bytes) -> "Expectation":
        if isinstance(hex_or_bytes, str):
            try:
                raw = bytes.fromhex(hex_or_bytes)
            except ValueError:
                raw = b""
            if len(raw) != 32 or len(hex_or_bytes) != 64:
                raise ValueError(f"expected fingerprint '{hex_or_bytes}' is not 64 hex digits (a SHA-256)")
        else:
            raw = bytes(hex_or_bytes)
            if len(raw) != 32:
                raise ValueError(f"a SHA-256 has 32 bytes, not {len(raw)}")
        return Expectation(ExpectationKind.SHA256, raw)

    @staticmethod
    def structured(canonical: bytes) -> "Expectation":
        if len(canonical) > MAX_FINGERPRINT:
            raise ValueError(f"a structured fingerprint of {len(canonical)} bytes is over the limit of "
                             f"{MAX_FINGERPRINT} (16 MiB)")
        return Expectation(ExpectationKind.STRUCTURED, bytes(canonical))


class Welcome(Record):
    __slots__ = ("version", "pid", "daemon_version", "backend", "instance", "state", "uid")


def decode_welcome(r: Reader, frame_version: int) -> Welcome:
    version = r.u16("version")
    if version != frame_version:
        raise ProtocolError(f"WELCOME: chose version {version} but is encoded as version {frame_version}")
    pid = r.i32("pid")
    daemon_version = r.str16("daemon_version")
    backend = r.str16("backend")
    instance = r.str16("instance")
    state = r.u8("state")
    if state not in STATES:
        raise ProtocolError(f"WELCOME: state {state} is not 0 to 3")
    uid = r.u32("uid") if version >= 2 else None
    r.end()
    return Welcome(version, pid, daemon_version, backend, instance, STATES[state], uid)


class Region(Record):
    __slots__ = ("kind", "size", "numa_node", "device")


class TableEntry(Record):
    __slots__ = ("name", "dtype", "shape", "nbytes", "region", "offset", "digest", "kind", "numa_node", "device")


class Manifest(Record):
    __slots__ = ("fingerprint_sha256", "fingerprint", "regions", "tables")


def table_bytes(dtype: str, shape: tuple) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * DTYPE_BITS[dtype] // 8


def table_runs(manifest: "Manifest") -> list:
    """The regions each table of a decoded (so checked) manifest lies in, in the order of ``manifest.tables``: an
    empty range for an empty table, its region, or for a cuda-vmm host table over several regions the run from
    its ``region`` on (docs/protocol.md, "A table over several regions"; the arithmetic is ``_regions``')."""
    return _regions.table_runs(manifest.regions, manifest.tables)


def decode_manifest(r: Reader, fd_count: int, base_page: int) -> Manifest:
    """MANIFEST, with every check a client owes (docs/protocol.md, MANIFEST)."""
    sha = r.raw(32, "fingerprint_sha256")
    fp = r.blob32("fingerprint", MAX_FINGERPRINT)
    if hashlib.sha256(fp).digest() != sha:
        raise ProtocolError("MANIFEST: fingerprint_sha256 is not the SHA-256 of the fingerprint it carries")
    region_count = r.u32("region_count")
    if region_count > MAX_FDS:
        raise ProtocolError(f"MANIFEST: region_count {region_count} is over the limit of {MAX_FDS}")
    if region_count != fd_count:
        raise ProtocolError(f"MANIFEST lists {region_count} regions but {fd_count} fds arrived")
    regions = []
    for i in range(region_count):
        kind = r.u8(f"region {i} kind")
        if kind not in KIND_BACKENDS:
            raise ProtocolError(f"MANIFEST: region {i} kind {kind} is not a region kind on the wire")
        size = r.u64(f"region {i} size")
        node = r.i32(f"region {i} numa_node")
        device = r.i32(f"region {i} device")
        if size == 0:
            raise ProtocolError(f"MANIFEST: region {i} has size 0")
        if kind in (KIND_MEMFD, KIND_MEMFD_HUGETLB) and size % base_page:
            raise ProtocolError(f"MANIFEST: memfd region {i} has size {size}, not a whole number of "
                                f"{base_page}-byte pages")
        if kind == KIND_VMM_DEVICE and not 0 <= device <= MAX_DEVICE:
            raise ProtocolError(f"MANIFEST: device region {i} names GPU {device}")
        if kind != KIND_VMM_DEVICE and device != -1:
            raise ProtocolError(f"MANIFEST: host region {i} names GPU {device}; host regions carry -1")
        if node < -1:
            raise ProtocolError(f"MANIFEST: region {i} has numa_node {node}")
        regions.append(Region(kind, size, node, device))
    table_count = r.u32("table_count")
    if table_count > MAX_TABLES:
        raise ProtocolError(f"MANIFEST: table_count {table_count} is over the limit of {MAX_TABLES}")
    tables = []
    names = set()
    runs: list = []  # the regions' _regions.Runs, built for the first table over several regions
    for i in range(table_count):
        name = r.str16(f"table {i} name")
        if one_line(name) != name:   # the daemon refuses such names; an engine would print it
            raise ProtocolError(f"MANIFEST: table {i} {name!r}: its name holds a control character or a line "
                                f"separator")
        dtype = r.str16(f"table {name!r} dtype")
        if dtype not in DTYPE_BITS:
            raise ProtocolError(f"MANIFEST: table {name!r} has dtype {dtype!r}, not a safetensors dtype")
        rank = r.u8(f"table {name!r} rank")
        if rank > MAX_RANK:
            raise ProtocolError(f"MANIFEST: table {name!r} has rank {rank}, over the limit of {MAX_RANK}")
        shape = tuple(r.i64(f"table {name!r} shape[{k}]") for k in range(rank))
        if any(d < 0 for d in shape):
            raise ProtocolError(f"MANIFEST: table {name!r} has a negative dimension {list(shape)}")
        nbytes = r.u64(f"table {name!r} bytes")
        if nbytes != table_bytes(dtype, shape):
            raise ProtocolError(f"MANIFEST: table {name!r} is {dtype} {list(shape)}, which is "
                                f"{table_bytes(dtype, shape)} bytes, but the manifest says {nbytes}")
        region = r.i32(f"table {name!r} region")
        offset = r.u64(f"table {name!r} offset")
        digest = r.u64(f"table {name!r} digest")
        kind = r.u8(f"table {name!r} kind")
        node = r.i32(f"table {name!r} numa_node")
        device = r.i32(f"table {name!r} device")
        if kind not in KIND_BACKENDS:
            raise ProtocolError(f"MANIFEST: table {name!r} kind {kind} is not a region kind on the wire")
        if name in names:
            raise ProtocolError(f"MANIFEST: table {name!r} is listed twice")
        names.add(name)
        if region == -1:
            if nbytes != 0 or offset != 0 or node != -1:
                raise ProtocolError(f"MANIFEST: table {name!r} has no region but {nbytes} bytes at offset {offset} "
                                    f"on node {node}; an empty table has 0, 0 and -1")
        else:
            if not 0 <= region < region_count:
                raise ProtocolError(f"MANIFEST: table {name!r} names region {region} of {region_count}")
            why = _regions.place_problem(name, nbytes, region, offset, kind, node, device, kind == KIND_VMM_HOST,
                                         regions, runs)
            if why is not None:
                raise ProtocolError(f"MANIFEST: {why}")
        tables.append(TableEntry(name, dtype, shape, nbytes, region, offset, digest, kind, node, device))
    r.end()
    return Manifest(sha, fp, regions, tables)


class ErrorReply(Record):
    __slots__ = ("code", "retryable", "message", "details", "daemon_fingerprint")


def decode_error(r: Reader) -> ErrorReply:
    code = r.u16("code")
    retryable = r.u8("retryable")
    if retryable > 1:
        raise ProtocolError(f"ERROR: retryable is {retryable}, not 0 or 1")
    message = r.str32("message", MAX_MESSAGE)
    count = r.u32("detail_count")
    if count > MAX_DETAILS:
        raise ProtocolError(f"ERROR: detail_count {count} is over the limit of {MAX_DETAILS}")
    details = tuple(r.str32(f"detail {i}", MAX_DETAIL) for i in range(count))
    fp = r.blob32("daemon_fingerprint", MAX_FINGERPRINT)
    r.end()
    return ErrorReply(code, bool(retryable), message, details, fp)


def decode_status_reply(r: Reader) -> str:
    text = r.str32("json", MAX_FRAME)
    r.end()
    return text


# ---------------------------------------------------------------------------------------------- messages


class Incoming(Record):
    """One whole frame from the daemon (parts joined) and the fds that came with it; the caller owns the fds."""
    __slots__ = ("msg_type", "version", "body", "fds")

    def close_fds(self) -> None:
        fds, self.fds = self.fds, []
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass


class Channel:
    """A connected stream socket that carries messages with fds (docs/protocol.md, "Messages and file
    descriptors"). Reads are bounded by ``timeout`` seconds per answer."""

    _ANC = socket.CMSG_SPACE(FDS_PER_SENDMSG * 4)

    def __init__(self, sock: socket.socket, timeout: float):
        self.sock = sock
        self.timeout = timeout
        self.version = 0  # the chosen version, once WELCOME chose one

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def send(self, payload: bytes) -> None:
        """Sends one message without fds (all a client ever sends)."""
        data = struct.pack("<II", len(payload), 0) + payload
        self.sock.settimeout(self.timeout)
        try:
            self.sock.sendall(data)
        except socket.timeout:
            raise AnswerTimeout(f"the daemon took no bytes for {self.timeout:g} s") from None

    # -- receiving

    def _recv(self, n: int, fds: list, deadline_left: float) -> bytes:
        """Up to n bytes (at least 1) and the fds that ride on them; raises on EOF, MSG_CTRUNC, timeout."""
        self.sock.settimeout(deadline_left)
        try:
            data, anc, flags, _ = self.sock.recvmsg(n, self._ANC, socket.MSG_CMSG_CLOEXEC)
        except socket.timeout:
            raise AnswerTimeout("timed out") from None
        except ConnectionResetError:
            raise PeerClosed("the connection was reset") from None
        for level, kind, cdata in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(cdata[:len(cdata) - len(cdata) % a.itemsize])
                fds.extend(a)
        if flags & socket.MSG_CTRUNC:
            raise ProtocolError("file descriptors were lost in transit (MSG_CTRUNC)")
        if not data:
            raise PeerClosed("the daemon closed the connection")
        return data

    def _read_exact(self, n: int, fds: list, deadline: float) -> bytes:
        chunks = []
        left = n
        while left:
            b = self._recv(min(left, 1 << 20), fds, _left(deadline))
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks)

    def receive_message(self, max_payload: int, deadline: float) -> tuple[bytes, list]:
        """One message: header, payload, then fillers until every fd arrived. Returns (payload, fds)."""
        fds: list = []
        try:
            header = self._read_exact(HEADER_BYTES, fds, deadline)
            length, fd_count = struct.unpack("<II", header)
            if length > max_payload:
                raise ProtocolError(f"a message of {length} bytes is over the limit of {max_payload} here")
            if fd_count > MAX_FDS:
                raise ProtocolError(f"a message with {fd_count} fds is over the limit of {MAX_FDS}")
            payload = self._read_exact(length, fds, deadline)
            fillers = -(-max(fd_count - FDS_PER_SENDMSG, 0) // FDS_PER_SENDMSG)
            for i in range(fillers):
                before = len(fds)
                b = self._recv(1, fds, _left(deadline))
                if b[0] != FILLER:
                    raise ProtocolError(f"filler {i} is 0x{b[0]:02x}, not 0xFD")
                if len(fds) == before:
                    raise ProtocolError(f"filler {i} carried no fds")
            if len(fds) != fd_count:
                raise ProtocolError(f"the message announced {fd_count} fds but {len(fds)} arrived")
            return payload, fds
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise

    def receive(self, version: int) -> Incoming:
        """One whole frame, parts joined (version 2), checked: magic, version, known type, fds only with
        MANIFEST. ``version`` is the chosen one, whose frames must carry exactly it; before a version is chosen
        pass 0: then the frame is an ERROR encoded as version 1 or a WELCOME encoded in a version this client
        offered (its body is checked by :func:`decode_welcome`)."""
        deadline = time.monotonic() + self.timeout
        max_payload = MAX_V2_PAYLOAD if version >= 2 else MAX_V1_PAYLOAD if version == 1 else MAX_PRE_VERSION_PAYLOAD
        payload, fds = self.receive_message(max_payload, deadline)
        try:
            msg_type, frame_version = _check_frame(payload, version)
            if version == 0 and msg_type != WELCOME and frame_version != 1:
                raise ProtocolError(f"{type_name(msg_type)} encoded as version {frame_version} before a version was "
                                    "chosen; it must be version 1")
            body_parts = [memoryview(payload)[HEADER_BYTES:]]
            total = len(payload)
            if msg_type & CONTINUED:
                if version < 2:
                    raise ProtocolError("a continued frame before version 2 was chosen")
                msg_type &= ~CONTINUED
                _check_piece(len(body_parts[0]), 0)
                more = True
                index = 1
                while more:
                    part, part_fds = self.receive_message(max_payload, deadline)
                    if part_fds:
                        for fd in part_fds:
                            os.close(fd)
                        raise ProtocolError(f"PART {index} carried fds")
                    t, _ = _check_frame(part, version)
                    if t & ~CONTINUED != PART:
                        raise ProtocolError(f"expected PART {index} of a continued frame, got {type_name(t)}")
                    more = bool(t & CONTINUED)
                    piece = memoryview(part)[HEADER_BYTES:]
                    _check_piece(len(piece), index)
                    total += len(piece)
                    if total > MAX_FRAME:
                        raise ProtocolError(f"a frame of over {MAX_FRAME} bytes (1 GiB), the limit")
                    body_parts.append(piece)
                    index += 1
            elif msg_type == PART:
                raise ProtocolError("a PART without a continued frame before it")
            if msg_type not in TYPE_NAMES or msg_type in (HELLO, IMPORT, STATUS, STOP, BYE):
                raise ProtocolError(f"{type_name(msg_type)} is not a message a daemon sends")
            if fds and msg_type != MANIFEST:
                raise ProtocolError(f"{type_name(msg_type)} arrived with {len(fds)} fds; only MANIFEST carries fds")
            body = b"".join(body_parts) if len(body_parts) > 1 else bytes(body_parts[0])
            return Incoming(msg_type, frame_version, body, fds)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise AnswerTimeout("timed out")
    return left


def _check_frame(payload: bytes, version: int) -> tuple[int, int]:
    if len(payload) < HEADER_BYTES:
        raise ProtocolError(f"a frame of {len(payload)} bytes is shorter than its 8-byte header")
    magic, v, t = struct.unpack_from("<IHH", payload)
    if magic != MAGIC:
        raise ProtocolError(f"bad magic 0x{magic:08x}")
    if version and v != version:
        raise ProtocolError(f"{type_name(t)} is encoded as version {v}, not the chosen version {version}")
    if not version and not MIN_VERSION <= v <= MAX_VERSION:
        raise ProtocolError(f"{type_name(t)} is encoded as version {v}; this client offered {MIN_VERSION} to "
                            f"{MAX_VERSION}")
    return t, v


def _check_piece(n: int, index: int) -> None:
    if not 1 <= n <= MAX_PART_BODY:
        raise ProtocolError(f"piece {index} of a continued frame holds {n} bytes; each holds 1 to {MAX_PART_BODY}")
