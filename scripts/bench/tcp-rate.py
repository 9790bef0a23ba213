#!/usr/bin/env python3
"""The transport alone, for seeding's rate against its stages (bench/seed-runs.md; docs/seeding.md, "What it costs"):
TCP from a file in the page cache to a receiver that only takes the bytes, as the exporter sends a range (sendfile(2) from the
region's pages) and the requester reads it (recv_into a buffer; the seeder reads into the region and hashes, which
this does not). STREAMS connections at once, as the seeder opens --threads of them.

    tcp-rate.py recv ADDR:PORT STREAMS [memfd]  listens; prints one JSON line once every stream has ended
    tcp-rate.py send ADDR:PORT STREAMS FILE BYTES   sends BYTES in all (split over the streams) from FILE

The receiver's figure is the bytes over the time from the first byte of any stream to the last byte of all
(as STATUS's origin.seeded.seconds counts from the first range to the last). With `memfd` the receiver reads into
fresh memfd pages, each byte once (a mapping of the stream's share, faulted in as it lands, as the seeder's region
is), not into one reused buffer: the transport plus the page faults, without the hashing. Standard library only: it runs
wherever the Python client does (the GPU machine too).
"""
import json
import os
import socket
import sys
import threading
import time

CHUNK = 64 << 20  # the seeder's range


def addr(s):
    host, _, port = s.rpartition(":")
    return host.strip("[]"), int(port)


def recv(where, streams, into_memfd=False):
    srv = socket.socket(socket.AF_INET6 if ":" in where[0] else socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(where)
    srv.listen(streams)
    print("listening", flush=True)
    srv.settimeout(30)
    got = [0] * streams
    first = [None] * streams
    last = [None] * streams

    def take(k, conn):
        size = int.from_bytes(conn.recv(8, socket.MSG_WAITALL), "little")  # the sender says its share first
        if into_memfd:
            import mmap
            fd = os.memfd_create(f"tcp-rate-{k}")
            os.ftruncate(fd, max(size, 1))
            region = mmap.mmap(fd, max(size, 1))
            os.close(fd)
            whole = memoryview(region)
        buf = bytearray(8 << 20)
        view = memoryview(buf)
        n = 0
        while True:
            if into_memfd:
                if n >= size:
                    if conn.recv(1):
                        raise OSError("more bytes than the share the sender announced")
                    break
                r = conn.recv_into(whole[n:n + (8 << 20)])
            else:
                r = conn.recv_into(view)
            if r == 0:
                break
            if first[k] is None:
                first[k] = time.perf_counter()
            n += r
        if into_memfd:
            whole.release()
            region.close()
        last[k] = time.perf_counter()
        got[k] = n
        conn.close()

    threads = []
    for k in range(streams):
        conn, _ = srv.accept()
        conn.settimeout(60)
        t = threading.Thread(target=take, args=(k, conn))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    total = sum(got)
    starts = [f for f in first if f is not None]
    seconds = max(last) - min(starts) if starts else 0.0
    print(json.dumps({"bytes": total, "streams": streams, "seconds": round(seconds, 4),
                      "gib_s": round(total / seconds / 2**30, 4) if seconds > 0 else 0.0}), flush=True)


def send(where, streams, path, total):
    size = os.path.getsize(path)
    share = [total // streams + (1 if k < total % streams else 0) for k in range(streams)]
    errors = []

    def push(k):
        try:
            fd = os.open(path, os.O_RDONLY)
            deadline = time.monotonic() + 10
            while True:
                try:
                    s = socket.create_connection(where, timeout=5)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            s.settimeout(None)  # blocking: os.sendfile on a socket with a timeout gives EAGAIN
            left = share[k]
            s.sendall(left.to_bytes(8, "little"))  # its share first: a memfd receiver sizes its mapping by it
            off = (k * (size // streams)) % size
            while left > 0:
                n = min(left, CHUNK, size - off)
                sent = os.sendfile(s.fileno(), fd, off, n)
                if sent == 0:
                    raise OSError("sendfile sent nothing")
                left -= sent
                off = (off + sent) % size
            s.close()
            os.close(fd)
        except Exception as e:  # noqa: BLE001 - reported below, the exit status says it
            errors.append(f"stream {k}: {e}")

    threads = [threading.Thread(target=push, args=(k,)) for k in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        sys.exit("tcp-rate send: " + "; ".join(errors))


def main(argv):
    if len(argv) in (3, 4) and argv[0] == "recv" and argv[3:] in ([], ["memfd"]):
        recv(addr(argv[1]), int(argv[2]), argv[3:] == ["memfd"])
    elif len(argv) == 5 and argv[0] == "send":
        send(addr(argv[1]), int(argv[2]), argv[3], int(argv[4]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
