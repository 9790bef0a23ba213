#!/usr/bin/env python3
"""A seeding requester that keeps no byte: it asks an exporter (`serve --seed-listen`) for every table's ranges, over
and over, for SECONDS, and throws each range away as it arrives. Its wire code is conformance/seed_peer.py's,
written from docs/seeding.md alone.

It stands for a peer on another node: the exporter does all of its own work (the handshake, the manifest, every
range sent from its regions), while this machine pays only for receiving into one reused buffer, not for a second
daemon's load (creating regions, faulting in pages, hashing). So an exporter's engines can be measured while it
seeds, without the requester's load on the same machine (scripts/gpu/gpu-seed-run.sh, SINK_ROUNDS).

    seed-sink.py HOST:PORT KEY_FILE STREAMS SECONDS [--tables NAME,...]

STREAMS connections at once (1 to 64, the exporter's own limit), each asking for its next range before it reads the
current one, as the daemon's requester does, and checking each DATA head against the range asked. Prints one JSON
line: bytes, seconds (from the first range asked to the last byte), gib_s, ranges, streams. Exits 1 with one line on
any refusal, ERROR frame or frame it did not expect. Standard library only.
"""
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "conformance"))
import seed_peer as wire  # noqa: E402


def ranges(tables, only):
    out = []
    for i, (name, size, _) in enumerate(tables):
        if only and name not in only:
            continue
        out += [(i, off, min(wire.MAX_RANGE, size - off)) for off in range(0, size, wire.MAX_RANGE)]
    return out


def stream(k, streams, where, key, only, deadline, totals, errors, lock):
    try:
        s, tables, _ = wire.handshake(where, key)
        with s:
            every = ranges(tables, only)
            if not every:
                raise wire.Refused("no table to ask for (--tables names none the exporter serves)")
            mine = every[k::streams] or every[k % len(every):][:1]
            buf = memoryview(bytearray(1 << 20))
            drop = lambda b: None  # noqa: E731
            wire.ask(s, *mine[0])
            first = time.monotonic()
            got = n = 0
            while True:
                cur = mine[n % len(mine)]
                more = time.monotonic() < deadline
                if more:
                    wire.ask(s, *mine[(n + 1) % len(mine)])   # the next one asked before this one is read
                wire.data(s, *cur, drop, buf)
                got += cur[2]
                n += 1
                if not more:
                    break
        with lock:
            totals.append((first, time.monotonic(), got, n))
    except (wire.Refused, OSError, ValueError) as e:
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
