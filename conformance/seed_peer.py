#!/usr/bin/env python3
"""A seeding requester written from docs/seeding.md ("Wire format, version 1", "Authentication", "Limits") and
docs/checkpoints.md (sha256-tree-v1) alone, with no engram-host code: it plays a peer of an exporter
(`serve --seed-listen`), honest or hostile, one case per call, and checks each answer against the documents.

    seed_peer.py HOST:PORT KEY_FILE CASE [RECORD]

Cases (each prints `PASS CASE: ...` and exits 0, or `FAIL CASE: ...` and exits 1):

  fetch RECORD    the handshake both ways, MANIFEST, then every table of the manifest in ranges of at most 64 MiB
                  (one asked ahead), each DATA head checked against its range, and every table's sha256-tree-v1
                  against RECORD (a digest record, version 2); the manifest's tables must be the record's
  wrong-proof     a PROOF made with another key: ERROR NOT_AUTHENTICATED, then the close
  other-key       this side holds another key: the exporter's proof in CHALLENGE does not verify
  oversized       a HELLO header announcing 1 GiB: ERROR BAD_REQUEST on the header alone (no payload sent)
  reserved        a HELLO whose header's reserved bytes are not 0: ERROR BAD_REQUEST
  bad-magic       a HELLO without the "EGSD" magic: ERROR BAD_REQUEST
  bad-version     a HELLO of version 2: ERROR BAD_REQUEST
  early-range     a RANGE instead of the PROOF: ERROR BAD_REQUEST
  silent          connects and sends nothing: ERROR TIMED_OUT after the 5 s handshake limit (4-9 s)
  busy            17 connections that do not authenticate: one of them (the 17th the exporter counts) gets ERROR
                  BUSY at once, the others nothing; once they are closed an honest peer is served (their places were
                  given back)
  bad-ranges      after MANIFEST, on a new connection each: a RANGE of a table the manifest does not list, past
                  its table's end, of 0 bytes, and of 64 MiB + 1: ERROR BAD_REQUEST each, naming the table where
                  there is one
  ahead           five RANGEs of one byte sent at once (120 bytes wait behind the first): five DATA in order; then
                  six at once (144 bytes): ERROR BAD_REQUEST
  idle            authenticated, then no request: ERROR TIMED_OUT after the 60 s between requests (55-70 s)
  no-read         asks for a range of its largest table (up to 64 MiB) on a socket with a small receive buffer and
                  reads nothing for 62 s: the exporter has ended the connection (a range's answer must be taken
                  within 60 s); what its kernel had buffered may arrive, nothing after it
                  (idle and no-read take a minute each: test_seed_peer.py runs the two at once)

Standard library only (python3 >= 3.9). Used by python/tests/test_seed_peer.py against a real daemon, and its wire
helpers by scripts/bench/seed-sink.py.
"""
import hashlib
import hmac
import json
import os
import select
import socket
import struct
import sys
import time

HELLO, CHALLENGE, PROOF, MANIFEST_REQUEST, MANIFEST, RANGE, DATA, ERROR = range(1, 9)
CODES = {1: "BAD_REQUEST", 2: "NOT_AUTHENTICATED", 3: "BUSY", 4: "NOT_READY", 5: "TIMED_OUT", 6: "STOPPING"}
MAX_RANGE = 64 << 20
LEAF = 16 << 20


class Refused(Exception):
    """The exporter answered ERROR (code, message), closed, or sent what the document does not allow."""

    def __init__(self, text, code=None):
        super().__init__(text)
        self.code = code


def exact(s, n):
    b = bytearray(n)
    v = memoryview(b)
    got = 0
    while got < n:
        k = s.recv_into(v[got:], n - got)
        if k == 0:
            raise Refused(f"the exporter closed the connection ({got} of {n} bytes read)")
        got += k
    return bytes(b)


def header(t, n, reserved=0):
    return struct.pack("<BBHI", t, reserved & 0xFF, 0, n)


def send(s, t, payload=b""):
    s.sendall(header(t, len(payload)) + payload)


def frame(s, expect, limit):
    """The next frame's payload length, its header checked; an ERROR is raised as Refused with its code."""
    t, z1, z2, n = struct.unpack("<BBHI", exact(s, 8))
    if t == ERROR:
        if n < 6 or n > 6 + 1024:
            raise Refused(f"an ERROR of {n} bytes (the document allows 6 to 1030)")
        p = exact(s, n)
        code, ln = struct.unpack_from("<HI", p)
        if ln != n - 6:
            raise Refused(f"an ERROR whose message length {ln} is not its payload's {n - 6}")
        raise Refused(f"ERROR {CODES.get(code, code)}: {p[6:].decode('utf-8', 'replace')}", code)
    if t != expect or z1 or z2 or n > limit:
        raise Refused(f"expected frame type {expect}, got type {t} ({z1}, {z2}) of {n} bytes")
    return n


def hello_payload(nonce_c, id_c, magic=b"EGSD", version=1):
    return magic + struct.pack("<HH", version, 0) + nonce_c + id_c


def proofs(key, nonce_c, nonce_s, id_c, id_s):
    msg = nonce_c + nonce_s + id_c + id_s
    server = hmac.new(key, b"engram-seed-v1 server" + msg, hashlib.sha256).digest()
    client = hmac.new(key, b"engram-seed-v1 client" + msg, hashlib.sha256).digest()
    return server, client


def connect(where, timeout=10, rcvbuf=None):
    """A TCP connection; with rcvbuf, the receive buffer set before the connect (so the window stays that small)."""
    if rcvbuf is None:
        s = socket.create_connection(where, timeout=timeout)
    else:
        s = socket.socket(socket.AF_INET6 if ":" in where[0] else socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            s.settimeout(timeout)
            s.connect(where)
        except BaseException:
            s.close()
            raise
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def challenge(s, key):
    """Sends HELLO, reads and checks CHALLENGE; returns (proof_c to send, proof_s matched)."""
    nonce_c, id_c = os.urandom(32), os.urandom(16)
    send(s, HELLO, hello_payload(nonce_c, id_c))
    p = exact(s, frame(s, CHALLENGE, 84))
    if len(p) != 84:
        raise Refused(f"CHALLENGE of {len(p)} bytes, not 84")
    version, zero = struct.unpack_from("<HH", p)
    if version != 1 or zero:
        raise Refused(f"CHALLENGE of version {version} ({zero}), this peer speaks 1")
    nonce_s, id_s, proof_s = p[4:36], p[36:52], p[52:84]
    server, client = proofs(key, nonce_c, nonce_s, id_c, id_s)
    return client, hmac.compare_digest(server, proof_s)


def handshake(where, key, timeout=10, rcvbuf=None):
    """A connection past PROOF and MANIFEST: (socket, [(name, bytes, engram digest v1)], fingerprint hex)."""
    s = connect(where, timeout, rcvbuf)
    try:
        client, ok = challenge(s, key)
        if not ok:
            raise Refused("the exporter's proof is wrong: it does not hold this key")
        send(s, PROOF, client)
        send(s, MANIFEST_REQUEST)
        p = exact(s, frame(s, MANIFEST, 16 << 20))
        tables, fingerprint = manifest(p)
        s.settimeout(60)
        return s, tables, fingerprint
    except BaseException:
        s.close()
        raise


def manifest(p):
    if len(p) < 36:
        raise Refused(f"MANIFEST of {len(p)} bytes, shorter than its head")
    count = struct.unpack_from("<I", p, 32)[0]
    tables, at = [], 36
    for i in range(count):
        if at + 4 > len(p):
            raise Refused(f"MANIFEST: table {i} cut short")
        ln = struct.unpack_from("<I", p, at)[0]
        if at + 4 + ln + 16 > len(p):
            raise Refused(f"MANIFEST: table {i}'s name of {ln} bytes does not fit")
        name = p[at + 4:at + 4 + ln].decode("utf-8")
        size, digest = struct.unpack_from("<QQ", p, at + 4 + ln)
        tables.append((name, size, digest))
        at += 4 + ln + 16
    if at != len(p):
        raise Refused(f"MANIFEST: {len(p) - at} bytes left over")
    return tables, p[:32].hex()


def ask(s, table, offset, length):
    send(s, RANGE, struct.pack("<IQI", table, offset, length))


def data(s, table, offset, length, sink, buf=None):
    """Reads one DATA, checks its head against the range asked, and hands its bytes to sink in pieces (views of buf,
    a reused buffer, valid until sink returns)."""
    n = frame(s, DATA, 12 + MAX_RANGE)
    t, o = struct.unpack("<IQ", exact(s, 12))
    if (t, o, n - 12) != (table, offset, length):
        raise Refused(f"DATA of table {t} at {o} ({n - 12} bytes), asked table {table} at {offset} ({length})")
    buf = buf if buf is not None else memoryview(bytearray(1 << 20))
    left = length
    while left:
        r = s.recv_into(buf, min(left, len(buf)))
        if r == 0:
            raise Refused("the exporter closed the connection inside a DATA")
        sink(buf[:r])
        left -= r


class TreeDigest:
    """docs/checkpoints.md's sha256-tree-v1, fed in pieces of any size."""

    def __init__(self):
        self.leaves, self.total, self.cur, self.in_cur = [], 0, hashlib.sha256(), 0

    def update(self, b):
        v = memoryview(b)
        while len(v):
            k = min(len(v), LEAF - self.in_cur)
            self.cur.update(v[:k])
            self.in_cur += k
            self.total += k
            v = v[k:]
            if self.in_cur == LEAF:
                self.leaves.append(self.cur.digest())
                self.cur, self.in_cur = hashlib.sha256(), 0

    def hexdigest(self):
        leaves = self.leaves + ([self.cur.digest()] if self.in_cur else [])
        return hashlib.sha256(b"engram-sha256-tree-v1" + struct.pack("<QQ", self.total, LEAF) + b"".join(leaves)).hexdigest()


def expect_error(s, code, pattern=None):
    try:
        while True:   # DATA frames before the ERROR are read and dropped
            n = frame(s, DATA, 12 + MAX_RANGE)
            exact(s, n)
    except Refused as e:
        if e.code != code:
            raise Refused(f"expected ERROR {CODES[code]}, got: {e}")
        if pattern and pattern not in str(e):
            raise Refused(f"expected ERROR {CODES[code]} saying '{pattern}', got: {e}")
        try:
            rest = s.recv(1)
        except OSError:
            rest = b""
        if rest:
            raise Refused(f"the exporter sent more after {e}")
        return str(e)


def case_fetch(where, key, record):
    with open(record) as f:
        rec = json.load(f)
    if rec.get("version") != 2:
        raise Refused(f"{record} is not a digest record of version 2")
    s, tables, _ = handshake(where, key)
    with s:
        names = sorted(t[0] for t in tables)
        if names != sorted(rec["tables"]):
            raise Refused(f"the manifest lists {names}, the record {sorted(rec['tables'])}")
        total = 0
        for i, (name, size, _) in enumerate(tables):
            tree = TreeDigest()
            ranges = [(i, off, min(MAX_RANGE, size - off)) for off in range(0, size, MAX_RANGE)]
            if ranges:
                ask(s, *ranges[0])
            for k, r in enumerate(ranges):
                if k + 1 < len(ranges):
                    ask(s, *ranges[k + 1])   # one asked ahead, as the document allows
                data(s, *r, tree.update)
            got = tree.hexdigest()
            want = rec["tables"][name]["sha256-tree-v1"]
            if got != want:
                raise Refused(f"table '{name}': sha256-tree-v1 {got}, the record says {want}")
            total += size
    return f"{len(tables)} tables, {total} bytes, every sha256-tree-v1 the record's"


def case_wrong_proof(where, key, _):
    with connect(where) as s:
        _, ok = challenge(s, key)
        if not ok:
            raise Refused("the exporter's proof does not verify with the right key")
        send(s, PROOF, hmac.new(b"another key" * 4, b"x", hashlib.sha256).digest())
        return expect_error(s, 2)


def case_other_key(where, key, _):
    with connect(where) as s:
        _, ok = challenge(s, os.urandom(32))
        if ok:
            raise Refused("the exporter's proof verified with a key it does not hold")
        return "the exporter's proof does not verify with another key"


def raw_hello(where, head, payload=b""):
    with connect(where) as s:
        s.sendall(head + payload)
        return expect_error(s, 1)


def case_oversized(where, key, _):
    return raw_hello(where, header(HELLO, 1 << 30))


def case_reserved(where, key, _):
    return raw_hello(where, header(HELLO, 56, reserved=1), hello_payload(os.urandom(32), os.urandom(16)))


def case_bad_magic(where, key, _):
    return raw_hello(where, header(HELLO, 56), hello_payload(os.urandom(32), os.urandom(16), magic=b"EGSX"))


def case_bad_version(where, key, _):
    return raw_hello(where, header(HELLO, 56), hello_payload(os.urandom(32), os.urandom(16), version=2))


def case_early_range(where, key, _):
    with connect(where) as s:
        challenge(s, key)
        send(s, RANGE, struct.pack("<IQI", 0, 0, 1))
        return expect_error(s, 1)


def timed_out(s, limit, low, high):
    """Waits on s for ERROR TIMED_OUT, which must come between low and high seconds (the document says limit)."""
    t0 = time.monotonic()
    with s:
        msg = expect_error(s, 5)
    dt = time.monotonic() - t0
    if not low <= dt <= high:
        raise Refused(f"TIMED_OUT after {dt:.1f} s, the document says {limit} s")
    return f"{msg} after {dt:.1f} s"


def case_silent(where, key, _):
    return timed_out(connect(where, timeout=15), 5, 4.0, 9.0)


def case_busy(where, key, _):
    held = []
    try:
        for _ in range(17):
            held.append(connect(where))
        # the exporter's I/O threads may count the 17 in another order than they connected: exactly one of them
        # (whichever came 17th to the count) is refused with BUSY at once, the others wait for their HELLO
        busy, end = [], time.monotonic() + 3
        while time.monotonic() < end and not busy:
            ready, _, _ = select.select(held, [], [], 0.1)
            busy = ready
        if len(busy) != 1:
            raise Refused(f"{len(busy)} of 17 unauthenticated connections were answered within 3 s, not 1")
        msg = expect_error(busy[0], 3)
        time.sleep(0.3)
        ready, _, _ = select.select([h for h in held if h is not busy[0]], [], [], 0)
        if ready:
            raise Refused(f"{len(ready)} more of the 17 were answered before their handshake deadline")
    finally:
        for h in held:
            h.close()
    for attempt in range(50):   # the exporter frees each place when it sees the close
        try:
            s, tables, _ = handshake(where, key)
            s.close()
            return f"{msg}; an honest peer served after the 17 closed ({len(tables)} tables)"
        except Refused as e:
            if e.code != 3:
                raise
            time.sleep(0.1)
    raise Refused("still BUSY 5 s after the 17 connections closed")


def case_bad_ranges(where, key, _):
    said = []
    s, tables, _ = handshake(where, key)
    s.close()
    name, size, _ = tables[0]
    for table, offset, length, names in ((len(tables), 0, 1, None), (0, size, 1, name), (0, 0, 0, name),
                                         (0, 0, MAX_RANGE + 1, name)):
        s, _, _ = handshake(where, key)
        with s:
            ask(s, table, offset, length)
            said.append(expect_error(s, 1, names))
    return "; ".join(said)


def case_ahead(where, key, _):
    s, tables, _ = handshake(where, key)
    with s:
        s.sendall(b"".join(header(RANGE, 16) + struct.pack("<IQI", 0, k, 1) for k in range(5)))
        for k in range(5):
            data(s, 0, k, 1, lambda b: None)
    s, _, _ = handshake(where, key)
    with s:
        s.sendall(b"".join(header(RANGE, 16) + struct.pack("<IQI", 0, k, 1) for k in range(6)))
        msg = expect_error(s, 1)
    return f"five at once answered in order; six at once: {msg}"


def case_idle(where, key, _):
    """An authenticated peer that asks for nothing: the exporter ends it after 60 s between requests (docs/seeding.md,
    "Limits"). Takes a minute: python/tests/test_seed_peer.py's MinuteLimitsTest runs it beside no-read."""
    s, _, _ = handshake(where, key)
    s.settimeout(75)
    return timed_out(s, 60, 55.0, 70.0)


def case_no_read(where, key, _):
    """A peer that asks for a range of its largest table and never reads: the exporter ends the connection once the
    range has waited 60 s to be taken. What its kernel had already buffered may still arrive (on loopback all of it
    can), but no more: the connection ends without the idle limit's ERROR, which would come only had the range been
    taken. Takes a minute: MinuteLimitsTest runs it beside idle."""
    s, tables, _ = handshake(where, key, rcvbuf=64 << 10)
    with s:
        i = max(range(len(tables)), key=lambda k: tables[k][1])
        length = min(MAX_RANGE, tables[i][1])
        ask(s, i, 0, length)
        t0 = time.monotonic()
        time.sleep(62)
        got, ended, head, tail = 0, None, b"", b""
        s.settimeout(5)
        try:
            while True:
                b = s.recv(1 << 20)
                if not b:
                    ended = "closed"
                    break
                if len(head) < 20:
                    head = (head + b)[:20]
                past = got + len(b) - (20 + length)   # bytes beyond the DATA: a frame after it
                if past > 0:
                    tail += b[-past:] if past <= len(b) else b
                got += len(b)
        except socket.timeout:
            ended = None
        except OSError as e:
            ended = f"reset ({e.strerror})"
        if ended is None:
            raise Refused(f"the connection is still open {time.monotonic() - t0:.0f} s after a range nobody read")
        if len(head) < 20 or head[0] != DATA:
            raise Refused(f"the exporter answered with {got} bytes, not a DATA: a refusal of the range?")
        if tail:
            raise Refused(f"{len(tail)} bytes came after the range ({tail[:60]!r}): the range was taken, and the"
                          " connection ended by another limit")
        if got >= 20 + length and length > 32 << 20:
            raise Refused(f"all {length} bytes of the range came once this side read: the exporter held the"
                          " connection until the range was taken, not 60 s")
    return (f"{ended} {time.monotonic() - t0:.0f} s after a range of {length} bytes was asked and left unread; "
            f"{got - 20} of its bytes had been sent (what the sockets held), nothing after them")


CASES = {"fetch": case_fetch, "wrong-proof": case_wrong_proof, "other-key": case_other_key,
         "oversized": case_oversized, "reserved": case_reserved, "bad-magic": case_bad_magic,
         "bad-version": case_bad_version, "early-range": case_early_range, "silent": case_silent,
         "busy": case_busy, "bad-ranges": case_bad_ranges, "ahead": case_ahead, "idle": case_idle,
         "no-read": case_no_read}


def main(argv):
    if len(argv) not in (3, 4) or argv[2] not in CASES or (argv[2] == "fetch") != (len(argv) == 4):
        print("usage: seed_peer.py HOST:PORT KEY_FILE CASE [RECORD]; cases: " + ", ".join(CASES), file=sys.stderr)
        return 2
    host, _, port = argv[0].rpartition(":")
    where = (host.strip("[]"), int(port))
    with open(argv[1], "rb") as f:
        key = f.read()
    try:
        print(f"PASS {argv[2]}: {CASES[argv[2]](where, key, argv[3] if len(argv) == 4 else None)}")
        return 0
    except (Refused, OSError, ValueError, struct.error) as e:
        print(f"FAIL {argv[2]}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
