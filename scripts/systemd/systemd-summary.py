#!/usr/bin/env python3
"""Summarises an OUT of scripts/systemd/systemd-scenario.sh, one JSON line per action (bench/systemd-runs.md):
the daemon's origin and checkpoint bytes read (STATUS), the imports begun during the action (ok, failed by error,
the longest wait), and the daemon pid the clients saw (SO_PEERCRED): for the imports begun during the action, and
for those begun after it was ready.

    scripts/systemd/systemd-summary.py OUT
"""
import collections
import json
import sys


def lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def main():
    out = sys.argv[1]
    acts, imps, holds = lines(f"{out}/actions.jsonl"), lines(f"{out}/import.jsonl"), lines(f"{out}/hold.jsonl")
    for i, a in enumerate(acts):
        t0 = a["t0"]
        t1 = a.get("t_ready", t0 + a["seconds"])
        nxt = acts[i + 1]["t0"] if i + 1 < len(acts) else float("inf")
        during = [m for m in imps if t0 <= m["start"] <= t1]
        failed = collections.Counter(m.get("error") for m in during if not m["ok"])
        after = [m for m in imps if t1 < m["start"] < nxt and m["ok"]]
        lease = [h for h in holds if h.get("event") == "lease" and h.get("ok") and t0 <= h["start"] < nxt]
        so = a.get("status_origin") or {}
        print(json.dumps({
            "n": a["n"], "action": a["action"], "seconds": a["seconds"], "how": so.get("how"),
            "checkpoint_bytes_read": so.get("checkpoint_bytes_read"), "main_pid": a.get("main_pid"),
            "imports_during": {"ok": sum(m["ok"] for m in during), "failed": dict(failed),
                               "longest_s": round(max((m["ms"] for m in during if m["ok"]), default=0) / 1000, 1),
                               "daemon_pid_seen": sorted({m["daemon_pid"] for m in during if m["ok"]})},
            "imports_after": {"ok": len(after), "daemon_pid_seen": sorted({m["daemon_pid"] for m in after})},
            "holder_new_lease": [{"after_s": round(h["start"] - t0, 1), "waited_s": round(h["ms"] / 1000, 1),
                                  "daemon_pid_seen": h["daemon_pid"]} for h in lease][:1],
            "pid1_store_memfds": a.get("pid1_store_memfds")}))
    ok = sum(m["ok"] for m in imps)
    print(json.dumps({"imports": len(imps), "ok": ok, "failed": dict(collections.Counter(
        m.get("error") for m in imps if not m["ok"]))}))


if __name__ == "__main__":
    main()
