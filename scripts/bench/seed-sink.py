#!/usr/bin/env python3
"""A seeding requester that keeps no byte: it asks an exporter (`serve --seed-listen`) for every table's ranges, over
and over, for SECONDS, and throws each range away as it arrives. Written from docs/seeding.md's wire format alone.

It stands for a peer on another node: the exporter does all of its own work (the handshake, the manifest, every
range sent from its regions), while this machine pays only for receiving into one reused buffer, not for a second
daemon's load (creating regions, faulting in pages, hashing). So an exporter's engines can be measured while it
seeds, without the requester's load on the same machine (scripts/gpu/gpu-seed-run.sh, SINK_ROUNDS).

    seed-sink.py HOST:PORT KEY_FILE STREAMS SECONDS [--tables NAME,...]

STREAMS connections at once (at most 64, the exporter's own limit), each asking for its next range before it reads
the current one, as the daemon's requester does. Prints one JSON line: bytes, seconds (from the first range asked
to the last byte), gib_s, ranges, and each DATA head checked against the range asked. Exits 1 with one line on any
refusal, ERROR frame or frame it did not expect. Standard library only.
"""
import hashlib
import hmac
import json
import os
import socket
import struct
import sys
import threading
import time

HELLO, CHALLENGE, PROOF, MANIFEST_REQUEST, MANIFEST, RANGE, DATA, ERROR = range(1, 9)
MAGIC = b"EGSD"
RANGE_BYTES = 64 << 20
READ = 1 << 20
CODES = {1: "BAD_REQUEST", 2: "NOT_AUTHENTICATED", 3: "BUSY", 4: "NOT_READY", 5: "TIMED_OUT", 6: "STOPPING"}


class Refused(Exception):
    pass


def exact(s, n):
    b = bytearray(n)
    v = memoryview(b)
    got = 0
    while got < n:
        k = s.recv_into(v[got:], n - got)
        if k == 0:
            raise Refused(f"the exporter closed the connection ({got} of {n} bytes of a frame read)")
        got += k
    return bytes(b)


def frame(s, expect, limit):
    t, z1, z2, n = struct.unpack("<BBHI", exact(s, 8))
    if t == ERROR and n <= 2 + 4 + 1024:
        p = exact(s, n)
        code, ln = struct.unpack_from("<HI", p)
        raise Refused(f"ERROR {CODES.get(code, code)}: {p[6:6 + ln].decode('utf-8', 'replace')}")
    if t != expect or z1 or z2 or n > limit:
        raise Refused(f"expected frame {expect}, got type {t} of {n} bytes")
    return n


def send(s, t, payload=b""):
    s.sendall(struct.pack("<BBHI", t, 0, 0, len(payload)) + payload)


def handshake(where, key):
    s = socket.create_connection(where, timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    nonce_c, id_c = os.urandom(32), os.urandom(16)
    send(s, HELLO, MAGIC + struct.pack("<HH", 1, 0) + nonce_c + id_c)
    p = exact(s, frame(s, CHALLENGE, 84))
    if len(p) != 84:
        raise Refused(f"CHALLENGE of {len(p)} bytes, not 84")
    version, _ = struct.unpack_from("<HH", p)
    nonce_s, id_s, proof_s = p[4:36], p[36:52], p[52:84]
    if version != 1:
        raise Refused(f"the exporter speaks seeding version {version}, this sink 1")
    msg = nonce_c + nonce_s + id_c + id_s
    want = hmac.new(key, b"engram-seed-v1 server" + msg, hashlib.sha256).digest()
    if not hmac.compare_digest(want, proof_s):
        raise Refused("the exporter's proof is wrong: it does not hold this key")
    send(s, PROOF, hmac.new(key, b"engram-seed-v1 client" + msg, hashlib.sha256).digest())
    send(s, MANIFEST_REQUEST)
    p = exact(s, frame(s, MANIFEST, 16 << 20))
    count = struct.unpack_from("<I", p, 32)[0]
    tables, at = [], 36
    for _ in range(count):
        ln = struct.unpack_from("<I", p, at)[0]
        name = p[at + 4:at + 4 + ln].decode("utf-8")
        size, _digest = struct.unpack_from("<QQ", p, at + 4 + ln)
        tables.append((name, size))
        at += 4 + ln + 16
    if at != len(p):
        raise Refused(f"MANIFEST: {len(p) - at} bytes left over")
    s.settimeout(60)
    return s, tables


def ranges(tables, only):
    out = []
    for i, (name, size) in enumerate(tables):
        if only and name not in only:
            continue
        for off in range(0, size, RANGE_BYTES):
            out.append((i, off, min(RANGE_BYTES, size - off)))
    return out


def stream(k, streams, where, key, only, deadline, totals, errors, lock):
    try:
        s, tables = handshake(where, key)
        mine = ranges(tables, only)[k::streams] or ranges(tables, only)[:1]
        if not mine:
            raise Refused("no table to ask for (--tables names none the exporter serves)")
        buf = memoryview(bytearray(READ))
        i = 0
        ask = lambda r: send(s, RANGE, struct.pack("<IQI", *r))  # noqa: E731
        ask(mine[0])
        first = time.monotonic()
        got = n = 0
        while True:
            cur = mine[i % len(mine)]
            more = time.monotonic() < deadline
            if more:
                ask(mine[(i + 1) % len(mine)])   # the next one asked for before this one is read
            length = frame(s, DATA, 12 + RANGE_BYTES) - 12
            table, offset = struct.unpack("<IQ", exact(s, 12))
            if (table, offset, length) != cur:
                raise Refused(f"DATA for table {table} at {offset} ({length} bytes), asked {cur}")
            left = length
            while left:
                r = s.recv_into(buf, min(left, READ))
                if r == 0:
                    raise Refused("the exporter closed the connection inside a DATA")
                left -= r
            got += length
            n += 1
            i += 1
            if not more:
                break
        with lock:
            totals.append((first, time.monotonic(), got, n))
        s.close()
    except (Refused, OSError, ValueError, struct.error) as e:
        with lock:
            errors.append(f"stream {k}: {e}")


def main(argv):
    if len(argv) not in (4, 6) or (len(argv) == 6 and argv[4] != "--tables"):
        print("usage: seed-sink.py HOST:PORT KEY_FILE STREAMS SECONDS [--tables NAME,...]", file=sys.stderr)
        return 2
    host, _, port = argv[0].rpartition(":")
    where = (host.strip("[]"), int(port))
    with open(argv[1], "rb") as f:
        key = f.read()
    streams, seconds = int(argv[2]), float(argv[3])
    if not 1 <= streams <= 64 or seconds <= 0:
        print("seed-sink: STREAMS 1-64 and SECONDS > 0", file=sys.stderr)
        return 2
    only = set(argv[5].split(",")) if len(argv) == 6 else set()
    deadline = time.monotonic() + seconds
    totals, errors, lock = [], [], threading.Lock()
    ts = [threading.Thread(target=stream, args=(k, streams, where, key, only, deadline, totals, errors, lock))
          for k in range(streams)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        print(f"seed-sink: {len(errors)} of {streams} streams failed; the first: {errors[0]}", file=sys.stderr)
        return 1
    t0, t1 = min(x[0] for x in totals), max(x[1] for x in totals)
    got = sum(x[2] for x in totals)
    print(json.dumps({"bytes": got, "seconds": round(t1 - t0, 3), "gib_s": round(got / (t1 - t0) / 2**30, 3),
                      "ranges": sum(x[3] for x in totals), "streams": streams}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
