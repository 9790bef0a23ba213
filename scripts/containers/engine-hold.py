#!/usr/bin/env python3
"""An engine for scripts/containers/podman-scenario.sh: imports every table from the daemon, checks every table's
content against a trusted digest record, and holds its views until SIGTERM. On SIGUSR1 it checks the bytes again
through the same mappings (the daemon may have been taken over, stopped or be gone by then) and prints one JSON line.

  engine-hold.py --expect SHA256|MODEL_DIR --trusted SIDECAR_OR_MODEL_DIR [--socket PATH] [--wait S]

Each line on stdout is one JSON object with "event": imported, checked, gone, error. Exit 0 on SIGTERM after the
last check passed, 1 on any failure.
"""
import argparse, json, os, signal, sys, threading, time

import engram_host


def emit(**kv):
    kv.setdefault("t", round(time.time(), 3))
    print(json.dumps(kv, sort_keys=True), flush=True)


def ns(name):
    try:
        return os.readlink(f"/proc/self/ns/{name}")
    except OSError as e:
        return f"? {e}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--expect", required=True)
    ap.add_argument("--trusted", required=True, nargs="+")
    ap.add_argument("--socket", default=None)
    ap.add_argument("--wait", type=float, default=600.0)
    ap.add_argument("--once", action="store_true", help="check once and exit (no holding)")
    a = ap.parse_args()

    t0 = time.perf_counter()
    imp = engram_host.connect(socket=a.socket, expect=a.expect, wait=a.wait)
    total = sum(t.nbytes for t in imp.tables.values())
    emit(event="imported", uid=os.getuid(), tables=len(imp.tables), bytes=total, gib=round(total / 2**30, 3),
         backends=sorted({t.backend for t in imp.tables.values()}), fingerprint=imp.fingerprint,
         daemon_pid_peercred=imp.daemon_pid, daemon_pid_welcome=imp.daemon.pid, daemon_uid=imp.daemon.uid,
         import_ms=round((time.perf_counter() - t0) * 1000, 1),
         ns={n: ns(n) for n in ("cgroup", "ipc", "mnt", "net", "pid", "time", "user", "uts")}, shm=shm())
    gone = threading.Event()
    imp.on_daemon_gone(lambda reason: (emit(event="gone", reason=reason), gone.set()))
    ok = check(imp, a.trusted, "first")
    if a.once or not ok:
        imp.close()
        return 0 if ok else 1

    requests = []
    signal.signal(signal.SIGUSR1, lambda *_: requests.append("usr1"))
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop:
        if requests:
            requests.clear()
            ok = check(imp, a.trusted, "again") and ok
        time.sleep(0.2)
    imp.close()
    emit(event="closed", ok=ok)
    return 0 if ok else 1


def shm():
    st = os.statvfs("/dev/shm")
    return {"size_mib": st.f_blocks * st.f_frsize // 2**20}


def check(imp, trusted, what):
    t = time.perf_counter()
    try:
        rep = imp.verify_content(trusted)
    except Exception as e:  # ContentMismatch, or anything else: reported, and the engine fails
        emit(event="error", what=what, error=f"{type(e).__name__}: {e}")
        return False
    statuses = {n: s for n, (s, _d) in rep.tables.items()} if isinstance(rep.tables, dict) else rep.tables
    emit(event="checked", what=what, summary=rep.summary, tables=statuses,
         daemon_gone=imp.daemon_gone(), check_s=round(time.perf_counter() - t, 2))
    return True


if __name__ == "__main__":
    sys.exit(main())
