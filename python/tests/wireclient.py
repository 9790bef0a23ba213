"""A client of docs/protocol.md written from that document alone, with the standard library only and nothing of
the engram_host package, so that test_wire.py checks the daemon against the document rather than against the
package. It sends what it is told, malformed frames included, and decodes every daemon frame strictly."""
import array, fcntl, hashlib, json, mmap, os, socket, struct

MAGIC = 0x4D524745
T = dict(HELLO=1, WELCOME=2, IMPORT=3, MANIFEST=4, STATUS=5, STATUS_REPLY=6, STOP=7, STOP_ACK=8, ERROR=9, BYE=10,
         PART=11, TAKEOVER=16)
TN = {v: k for k, v in T.items()}
CODES = {1: "BAD_REQUEST", 2: "UNSUPPORTED_VERSION", 3: "NOT_READY", 4: "FINGERPRINT_MISMATCH", 5: "NOT_ALLOWED",
         6: "STOPPING", 7: "INTERNAL", 8: "LOAD_FAILED", 9: "BUSY", 10: "TIMED_OUT"}
CONT = 0x8000
MAX_PIECE = 1048576
F_GET_SEALS = 1034
F_SEAL_SEAL, F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE, F_SEAL_FUTURE_WRITE = 1, 2, 4, 8, 16


class ProtoError(Exception):
    pass


# ---- messages ----------------------------------------------------------------------------------------------

def send_msg(sock, payload, fds=(), fd_count=None, header=None):
    fds = list(fds)
    n = len(fds) if fd_count is None else fd_count
    hdr = header if header is not None else struct.pack("<II", len(payload), n)
    first = fds[:253]
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", first).tobytes())] if first else []
    sock.sendmsg([hdr], anc)
    if payload:
        sock.sendall(payload)
    rest = fds[253:]
    while rest:
        b, rest = rest[:253], rest[253:]
        sock.sendmsg([b"\xfd"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", b).tobytes())])


def _recv_some(sock, n, fds):
    data, anc, flags, _ = sock.recvmsg(n, socket.CMSG_SPACE(253 * 4), socket.MSG_CMSG_CLOEXEC)
    for lvl, typ, d in anc:
        if lvl == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(d[:len(d) - len(d) % 4])
            fds.extend(a)
    if flags & socket.MSG_CTRUNC:
        raise ProtoError("MSG_CTRUNC")
    return data


def recv_exact(sock, n, fds):
    buf = bytearray()
    while len(buf) < n:
        d = _recv_some(sock, n - len(buf), fds)
        if not d:
            raise EOFError(f"EOF after {len(buf)} of {n} bytes")
        buf += d
    return bytes(buf)


def recv_msg(sock, max_payload=1 << 30):
    """Returns (payload, fds). Raises EOFError on a clean EOF before a header."""
    fds = []
    try:
        hdr = recv_exact(sock, 8, fds)
        plen, fdc = struct.unpack("<II", hdr)
        if plen > max_payload:
            raise ProtoError(f"payload_length {plen} over {max_payload}")
        if fdc > 65536:
            raise ProtoError(f"fd_count {fdc}")
        payload = recv_exact(sock, plen, fds)
        while len(fds) < fdc:
            before = len(fds)
            f = recv_exact(sock, 1, fds)
            if f != b"\xfd" or len(fds) == before:
                raise ProtoError(f"bad filler {f!r} ({len(fds) - before} fds)")
        if len(fds) != fdc:
            raise ProtoError(f"fd count mismatch: header {fdc}, got {len(fds)}")
        return payload, fds
    except BaseException:
        for f in fds:
            os.close(f)
        raise


def frame(version, typ, body=b""):
    return struct.pack("<IHH", MAGIC, version, typ) + body


def parse_header(p):
    if len(p) < 8:
        raise ProtoError(f"frame of {len(p)} bytes")
    magic, ver, typ = struct.unpack_from("<IHH", p)
    if magic != MAGIC:
        raise ProtoError(f"magic {magic:#x}")
    return ver, typ, p[8:]


def recv_frame(sock):
    """Returns (version, type, body, fds, raw_message_sizes), reassembling parts."""
    payload, fds = recv_msg(sock)
    sizes = [len(payload)]
    ver, typ, body = parse_header(payload)
    if typ == T["PART"] or typ == T["PART"] | CONT:
        raise ProtoError("PART without a continued frame")
    if typ & CONT:
        if ver != 2:
            raise ProtoError(f"continued bit in version {ver}")
        if not (1 <= len(body) <= MAX_PIECE):
            raise ProtoError(f"first piece of {len(body)}")
        typ &= ~CONT
        pieces = [body]
        total = len(payload)
        while True:
            p2, f2 = recv_msg(sock)
            sizes.append(len(p2))
            if f2:
                for f in f2:
                    os.close(f)
                raise ProtoError("fds on a PART")
            v2, t2, b2 = parse_header(p2)
            if v2 != ver:
                raise ProtoError(f"PART version {v2}")
            if t2 not in (T["PART"], T["PART"] | CONT):
                raise ProtoError(f"expected PART, got {t2:#x}")
            if not (1 <= len(b2) <= MAX_PIECE):
                raise ProtoError(f"piece of {len(b2)}")
            pieces.append(b2)
            total += len(b2)
            if total > 1 << 30:
                raise ProtoError("over 1 GiB")
            if t2 == T["PART"]:
                break
        body = b"".join(pieces)
    return ver, typ, body, fds, sizes


# ---- decoding ----------------------------------------------------------------------------------------------

class R:
    def __init__(self, b):
        self.b, self.o = b, 0

    def take(self, n, what):
        if self.o + n > len(self.b):
            raise ProtoError(f"truncated at {what}")
        v = self.b[self.o:self.o + n]
        self.o += n
        return v

    def u(self, fmt, what):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))[0]

    def str16(self, what):
        n = self.u("H", what)
        if n > 4096:
            raise ProtoError(f"{what} length {n}")
        return self.take(n, what).decode("utf-8")

    def str32(self, what, limit):
        n = self.u("I", what)
        if n > limit:
            raise ProtoError(f"{what} length {n}")
        return self.take(n, what).decode("utf-8")

    def blob32(self, what, limit):
        n = self.u("I", what)
        if n > limit:
            raise ProtoError(f"{what} length {n}")
        return self.take(n, what)

    def end(self, what):
        if self.o != len(self.b):
            raise ProtoError(f"{len(self.b) - self.o} trailing bytes in {what}")


def dec_welcome(body, version):
    r = R(body)
    w = dict(version=r.u("H", "version"), pid=r.u("i", "pid"), daemon_version=r.str16("daemon_version"),
             backend=r.str16("backend"), instance=r.str16("instance"), state=r.u("B", "state"))
    if version >= 2:
        w["uid"] = r.u("I", "uid")
    r.end("WELCOME")
    return w


def dec_error(body):
    r = R(body)
    e = dict(code=r.u("H", "code"), retryable=r.u("B", "retryable"), message=r.str32("message", 4096))
    dc = r.u("I", "detail_count")
    if dc > 101:
        raise ProtoError(f"detail_count {dc}")
    e["details"] = [r.str32("detail", 4096) for _ in range(dc)]
    e["daemon_fingerprint"] = r.blob32("daemon_fingerprint", 16 << 20)
    r.end("ERROR")
    e["name"] = CODES.get(e["code"], str(e["code"]))
    return e


DTYPE_BITS = {"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
              "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
              "C64": 64, "F64": 64, "I64": 64, "U64": 64}


def dec_manifest(body, nfds):
    r = R(body)
    m = dict(fp_sha=r.take(32, "fingerprint_sha256"), fingerprint=r.blob32("fingerprint", 16 << 20))
    rc = r.u("I", "region_count")
    if rc != nfds:
        raise ProtoError(f"region_count {rc} != fds {nfds}")
    m["regions"] = [dict(kind=r.u("B", "kind"), size=r.u("Q", "size"), numa_node=r.u("i", "numa"),
                         device=r.u("i", "device")) for _ in range(rc)]
    tc = r.u("I", "table_count")
    if tc > 1048576:
        raise ProtoError("table_count")
    tabs = []
    for _ in range(tc):
        t = dict(name=r.str16("name"), dtype=r.str16("dtype"))
        rank = r.u("B", "rank")
        if rank > 16:
            raise ProtoError("rank")
        t["shape"] = [r.u("q", "shape") for _ in range(rank)]
        t.update(bytes=r.u("Q", "bytes"), region=r.u("i", "region"), offset=r.u("Q", "offset"),
                 digest=r.u("Q", "digest"), kind=r.u("B", "kind"), numa_node=r.u("i", "numa"),
                 device=r.u("i", "device"))
        tabs.append(t)
    r.end("MANIFEST")
    m["tables"] = tabs
    return m


def dec_status(body):
    r = R(body)
    s = r.str32("json", 1 << 30)
    r.end("STATUS_REPLY")
    return json.loads(s)


# ---- encoding ----------------------------------------------------------------------------------------------

def s16(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<H", len(b)) + b


def hello_body(minv=1, maxv=2, pid=None, name="wireclient"):
    return struct.pack("<HHi", minv, maxv, os.getpid() if pid is None else pid) + s16(name)


def import_body(flags=0, device=-1, expectation=0, payload=b""):
    b = struct.pack("<iiB", flags, device, expectation)
    if expectation == 1:
        b += payload
    elif expectation == 2:
        b += struct.pack("<I", len(payload)) + payload
    return b


# ---- fingerprint -------------------------------------------------------------------------------------------

def dec_fingerprint(b):
    r = R(b)
    if r.take(4, "magic") != b"EGFP":
        raise ProtoError("fp magic")
    ver, flags = r.u("H", "v"), r.u("H", "f")
    fp = dict(version=ver, flags=flags, layout=r.u("i", "layout"), backend=r.str32("backend", 1 << 24))
    fp["patterns"] = [r.str32("pattern", 1 << 24) for _ in range(r.u("I", "pc"))]
    fp["files"] = [(r.str32("n", 1 << 24), r.u("Q", "size"), r.take(32, "sha")) for _ in range(r.u("I", "fc"))]
    tabs = []
    for _ in range(r.u("I", "tc")):
        name, dt = r.str32("n", 1 << 24), r.str32("dt", 64)
        rank = r.u("I", "rank")
        dims = [r.u("Q", "d") for _ in range(rank)]
        tabs.append((name, dt, dims, r.u("Q", "bytes")))
    fp["tables"] = tabs
    r.end("fingerprint")
    return fp


def enc_fingerprint(fp):
    def s(x):
        x = x.encode()
        return struct.pack("<I", len(x)) + x
    b = b"EGFP" + struct.pack("<HHi", fp["version"], fp["flags"], fp["layout"]) + s(fp["backend"])
    b += struct.pack("<I", len(fp["patterns"])) + b"".join(s(p) for p in fp["patterns"])
    b += struct.pack("<I", len(fp["files"])) + b"".join(s(n) + struct.pack("<Q", z) + h for n, z, h in fp["files"])
    b += struct.pack("<I", len(fp["tables"]))
    for n, dt, dims, nb in fp["tables"]:
        b += s(n) + s(dt) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        b += struct.pack("<Q", nb)
    return b


# ---- digests -----------------------------------------------------------------------------------------------

P1, P2, P3, P4, P5 = 11400714785074694791, 14029467366897019727, 1609587929392839161, 9650029242287828579, \
    2870177450012600261
M64 = (1 << 64) - 1


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _round(acc, inp):
    acc = (acc + inp * P2) & M64
    return (_rotl(acc, 31) * P1) & M64


def _merge(acc, val):
    acc ^= _round(0, val)
    return (acc * P1 + P4) & M64


def xxh64(data, seed=0):
    n = len(data)
    i = 0
    if n >= 32:
        v1, v2, v3, v4 = (seed + P1 + P2) & M64, (seed + P2) & M64, seed, (seed - P1) & M64
        lim = n - 32
        q = struct.Struct("<4Q")
        mv = memoryview(data)
        while i <= lim:
            a, b, c, d = q.unpack_from(mv, i)
            v1 = _rotl((v1 + a * P2) & M64, 31) * P1 & M64
            v2 = _rotl((v2 + b * P2) & M64, 31) * P1 & M64
            v3 = _rotl((v3 + c * P2) & M64, 31) * P1 & M64
            v4 = _rotl((v4 + d * P2) & M64, 31) * P1 & M64
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & M64
        h = _merge(h, v1); h = _merge(h, v2); h = _merge(h, v3); h = _merge(h, v4)
    else:
        h = (seed + P5) & M64
    h = (h + n) & M64
    while i + 8 <= n:
        k = _round(0, struct.unpack_from("<Q", data, i)[0])
        h ^= k
        h = (_rotl(h, 27) * P1 + P4) & M64
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from("<I", data, i)[0] * P1) & M64
        h = (_rotl(h, 23) * P2 + P3) & M64
        i += 4
    while i < n:
        h ^= (data[i] * P5) & M64
        h = (_rotl(h, 11) * P1) & M64
        i += 1
    h ^= h >> 33
    h = (h * P2) & M64
    h ^= h >> 29
    h = (h * P3) & M64
    h ^= h >> 32
    return h


def engram_digest(mv):
    C = 64 << 20
    hs = b"".join(struct.pack("<Q", xxh64(mv[i:i + C])) for i in range(0, len(mv), C))
    return xxh64(hs)


def tree_digest(mv):
    C = 16 << 20
    leaves = b"".join(hashlib.sha256(mv[i:i + C]).digest() for i in range(0, len(mv), C))
    return hashlib.sha256(b"engram-sha256-tree-v1" + struct.pack("<QQ", len(mv), C) + leaves).hexdigest()


# ---- a session ---------------------------------------------------------------------------------------------

class Conn:
    def __init__(self, path, timeout=10.0):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        self.s.connect(path)
        cred = self.s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        self.peer_pid, self.peer_uid, self.peer_gid = struct.unpack("3i", cred)
        if self.peer_uid not in (0, os.geteuid()):
            raise ProtoError(f"daemon uid {self.peer_uid}")
        self.version = 1  # until WELCOME: HELLO and any daemon frame before it are version 1

    def send(self, version, typ, body=b"", fds=()):
        send_msg(self.s, frame(version, typ, body), fds)

    def recv(self):
        ver, typ, body, fds, sizes = recv_frame(self.s)
        self.last_sizes = sizes
        if ver != self.version and typ != T["WELCOME"]:
            for f in fds:
                os.close(f)
            raise ProtoError(f"frame version {ver}, but version {self.version} is in force")
        return ver, typ, body, fds

    def recv_error(self):
        ver, typ, body, fds = self.recv()
        if typ != T["ERROR"]:
            raise ProtoError(f"expected ERROR, got {TN.get(typ, typ)}")
        e = dec_error(body)
        e["frame_version"] = ver
        return e

    def hello(self, minv=1, maxv=2):
        self.send(1, T["HELLO"], hello_body(minv, maxv))
        ver, typ, body, fds = self.recv()
        if typ == T["ERROR"]:
            e = dec_error(body)
            e["frame_version"] = ver
            return e
        assert typ == T["WELCOME"], typ
        if ver not in range(max(minv, 1), min(maxv, 2) + 1):
            raise ProtoError(f"WELCOME in version {ver}, outside {minv}-{maxv}")
        w = dec_welcome(body, ver)
        assert w["version"] == ver, (w, ver)
        if ver >= 2:
            assert w["uid"] == self.peer_uid, (w, self.peer_uid)
        self.version = ver
        self.welcome = w
        return w

    def eof(self, wait=2.0):
        """True if the daemon closed the connection (after reading whatever is there)."""
        self.s.settimeout(wait)
        try:
            while True:
                d = self.s.recv(65536)
                if not d:
                    return True
        except (socket.timeout, BlockingIOError):
            return False
        except ConnectionResetError:
            return True
        finally:
            self.s.settimeout(10)

    def close(self):
        self.s.close()


def check_seals_and_map(fd, size):
    seals = fcntl.fcntl(fd, F_GET_SEALS)
    need = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW
    if seals & need != need or not seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE):
        raise ProtoError(f"seals {seals:#x}")
    st = os.fstat(fd)
    if st.st_size < size:
        raise ProtoError(f"fstat size {st.st_size} < {size}")
    return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ), seals
