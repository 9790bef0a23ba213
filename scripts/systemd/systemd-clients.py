#!/usr/bin/env python3
"""The clients of scripts/systemd/systemd-scenario.sh, on the Python package (standard library only; a JVM start
costs 17-31 s under TCG). One JSON line per event on stdout, each with "t" (CLOCK_REALTIME seconds, as `date +%s.%N`).

    systemd-clients.py hold SOCKET [TIMEOUT]     a lease held; when the daemon goes (onDaemonGone), a new import,
                                                 retried until it succeeds: an engine that restarts its import
    systemd-clients.py import SOCKET [TIMEOUT]   imports in a loop (connect, check, close, 0.3 s pause), each
                                                 import's start, duration, outcome, daemon pid and fingerprint
    systemd-clients.py status SOCKET             the daemon's STATUS document, one line

TIMEOUT: seconds each answer may take (default 60: a daemon restarting under TCG takes longer than the client's
default of 10 s to accept a connection waiting in its backlog).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import engram_host  # noqa: E402


def emit(**d):
    d = {"t": round(time.time(), 3), **d}
    print(json.dumps(d), flush=True)


def one(sock, timeout):
    t0 = time.time()
    try:
        tables = engram_host.connect(sock, timeout=timeout, wait=timeout)
    except Exception as e:  # every failure is recorded, none ends the loop
        return None, dict(start=round(t0, 3), ms=round((time.time() - t0) * 1000), ok=False,
                          error=type(e).__name__, message=str(e)[:300])
    mapped = sum(t.nbytes for t in tables.tables.values())
    return tables, dict(start=round(t0, 3), ms=round((time.time() - t0) * 1000), ok=True, daemon_pid=tables.daemon_pid,
                        tables=len(tables.tables), bytes=mapped, fingerprint=str(tables.fingerprint)[:16])


def main():
    mode, sock = sys.argv[1], sys.argv[2]
    timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 60.0
    if mode == "status":
        print(json.dumps(engram_host.status(sock, timeout=timeout)))
        return
    if mode == "import":
        n = 0
        while True:
            n += 1
            tables, r = one(sock, timeout)
            if tables is not None:
                tables.close()
            emit(event="import", n=n, **r)
            time.sleep(0.3)
    if mode == "hold":
        while True:
            tables, r = one(sock, timeout)
            emit(event="lease", **r)
            if tables is None:
                time.sleep(0.5)
                continue
            while tables.daemon_gone() is None:
                time.sleep(0.1)
            emit(event="gone", daemon_pid=tables.daemon_pid, reason=tables.daemon_gone())
            tables.close()
    raise SystemExit("usage: systemd-clients.py hold|import|status SOCKET [TIMEOUT]")


if __name__ == "__main__":
    main()
