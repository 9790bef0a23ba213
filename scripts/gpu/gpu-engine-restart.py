#!/usr/bin/env python3
"""Issue 26 section 3 on the GPU machine: an engine that really restarts (scripts/gpu/gpu-engine-restart.sh runs
this; its header says how). Steps, each chosen by --steps, in this order:

  generate  `engram-host generate --model` of GIB GiB of Engram tables (kept in WORK for a later call)
  expect    the reference workload on safetensors-loaded tables in HBM, saved: every engine's lookups are
            compared with it bit for bit (same GPU, same kernels); and its gather timed from HBM
  finite    a small model of finite values (the projection's check means something): per backend, a daemon and
            `reference check` (served and safetensors-loaded tables in one process, every lookup compared)
  engram    per backend: a daemon; optionally `reference check` at full size; N times a fresh engine process
            (`reference engine --source daemon`) timed from its spawn to the first lookup, every lookup
            checked, then SIGKILLed; the last one also times a prefill chunk's parts; then 4 rank processes at
            once, each its row range of the same views, checked against the same rows of the files
  self      the page cache warmed, N times the engine loading the tables itself (safetensors, then
            pin_memory(), as vLLM's default), timed and checked the same way, SIGKILLed
  cold      the page cache dropped (when this machine lets us), the same self-loading engine

Every engine's report is a JSON line in OUT/results.jsonl; OUT/summary.txt has the tables (median, min, max, n),
OUT/summary.json the same, OUT/checks.txt one PASS/FAIL line per check, OUT/log.txt the progress with times.
A step that no longer fits in --budget seconds is skipped and says so.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time

START = time.monotonic()
OUT = WORK = EH = MODEL = ""
ARGS = None
CHECKS = {"pass": 0, "fail": 0}
BACKENDS_ALL = ("memfd", "memfd-hugetlb", "cuda-vmm")


def log(msg: str) -> None:
    line = f"{time.strftime('%H:%M:%S')} +{time.monotonic() - START:6.1f}s {msg}"
    print(line, flush=True)
    with open(os.path.join(OUT, "log.txt"), "a") as f:
        f.write(line + "\n")


def check(ok: bool, what: str) -> bool:
    CHECKS["pass" if ok else "fail"] += 1
    line = f"{'PASS' if ok else 'FAIL'} {what}"
    log(line)
    with open(os.path.join(OUT, "checks.txt"), "a") as f:
        f.write(line + "\n")
    return ok


def failure_note(doc: dict) -> str:
    """': what went wrong' for a failed report, else ''."""
    return "" if doc.get("ok") else f": {doc.get('differences') or doc.get('failure')}"


def record(doc: dict) -> None:
    with open(os.path.join(OUT, "results.jsonl"), "a") as f:
        f.write(json.dumps(doc, sort_keys=True) + "\n")


def left() -> float:
    return ARGS.budget - (time.monotonic() - START)


def fits(need: float, what: str) -> bool:
    if left() >= need:
        return True
    log(f"SKIPPED {what}: {left():.0f} s of the budget left, about {need:.0f} s needed")
    record({"event": "skipped", "what": what, "left_s": round(left(), 1), "need_s": need})
    return False


def sh(cmd: list, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


# ------------------------------------------------------------------------------------------ processes

def spawn(args: list, tag: str) -> tuple:
    """A reference engine process, its start time (time.time() just before the spawn, given to it as
    ENGRAM_REF_T0) and a queue its stdout lines go to."""
    err = open(os.path.join(OUT, "engines", f"{tag}.err"), "w")
    t0 = time.time()
    p = subprocess.Popen([sys.executable, "-m", "engram_host.reference", *args], stdout=subprocess.PIPE,
                         stderr=err, text=True, env={**os.environ, "ENGRAM_REF_T0": repr(t0)})
    q: queue.Queue = queue.Queue()

    def pump():
        for line in p.stdout:
            q.put(line)
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return p, t0, q, err


def report_of(p, t0: float, q: queue.Queue, timeout: float) -> tuple:
    """The first JSON line the engine prints (or None: it exited or timed out), and when the driver saw it."""
    end = time.monotonic() + timeout
    while True:
        try:
            line = q.get(timeout=max(0.05, end - time.monotonic()))
        except queue.Empty:
            return None, time.time() - t0, "timed out"
        if line is None:
            p.wait()
            return None, time.time() - t0, f"exited {p.returncode}"
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line), time.time() - t0, None
            except ValueError:
                pass


def kill(p, t0: float) -> dict:
    """SIGKILL, as a crash: the engine's mappings and pinned memory go with the process."""
    if p.poll() is None:
        os.kill(p.pid, signal.SIGKILL)
    p.wait()
    return {"rc": p.returncode, "reaped_s": round(time.time() - t0, 3)}


def err_tail(tag: str) -> str:
    try:
        with open(os.path.join(OUT, "engines", f"{tag}.err")) as f:
            lines = [line.strip() for line in f if line.strip()]
        return " | ".join(lines[-3:])
    except OSError:
        return ""


def engine_once(args: list, tag: str, doc_extra: dict, timeout: float = 240) -> dict:
    p, t0, q, err = spawn(args, tag)
    doc, seen, why = report_of(p, t0, q, timeout)
    killed = kill(p, t0)
    err.close()
    if doc is None:
        doc = {"event": "engine", "ok": False, "failure": f"{why}: {err_tail(tag)}"}
    doc.update(doc_extra)
    doc["tag"] = tag
    doc["driver"] = {"report_seen_s": round(seen, 3), **killed}
    record(doc)
    return doc


def common(model: str) -> list:
    return ["--model", model, "--seed", str(ARGS.seed), "--tokens", str(ARGS.tokens), "--steps", str(ARGS.steps),
            "--batch", str(ARGS.batch)]


class Daemon:
    def __init__(self, model: str, backend: str, tag: str):
        self.socket = os.path.join(WORK, f"r26-{tag}.sock")
        self.backend = backend
        self.log = open(os.path.join(OUT, "daemons", f"serve-{tag}.log"), "w")
        t0 = time.monotonic()
        self.p = subprocess.Popen([EH, "serve", "--checkpoint", model, "--backend", backend, "--socket", self.socket,
                                   "--threads", str(ARGS.threads)], stdout=self.log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
        self.ready = False
        ready = self.socket + ".ready"
        while time.monotonic() - t0 < ARGS.daemon_timeout:
            try:
                with open(ready) as f:
                    if f"pid={self.p.pid}\n" in f.read():
                        self.ready = True
                        break
            except FileNotFoundError:
                pass
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        self.ready_s = round(time.monotonic() - t0, 3)
        self.status = {}
        if self.ready:
            s = sh([EH, "status", "--socket", self.socket, "--json"])
            try:
                self.status = json.loads(s.stdout)
            except ValueError:
                pass
        record({"event": "daemon", "tag": tag, "backend": backend, "ready": self.ready, "wall_ready_s": self.ready_s,
                "ready_s": self.status.get("ready_s"), "read_s": (self.status.get("load") or {}).get("read_s"),
                "selection": (self.status.get("selection") or {}).get("description")})
        log(f"daemon {tag} ({backend}): {'ready' if self.ready else 'NOT ready'} in {self.ready_s} s"
            + ("" if self.ready else f": {self.tail()}"))

    def tail(self) -> str:
        self.log.flush()
        with open(self.log.name) as f:
            return " | ".join(line.strip() for line in f.readlines()[-3:])

    def stop(self) -> None:
        if self.p.poll() is None:
            sh([EH, "stop", "--socket", self.socket], timeout=60)
            try:
                self.p.wait(60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


class HugePages:
    """nr_hugepages raised for memfd-hugetlb (root only), and put back."""

    def __init__(self, table_bytes: int):
        self.path = "/proc/sys/vm/nr_hugepages"
        with open(self.path) as f:
            self.before = int(f.read())
        self.want = table_bytes // (2 << 20) + 512

    def reserve(self) -> bool:
        try:
            with open(self.path, "w") as f:
                f.write(str(self.want))
            with open(self.path) as f:
                got = int(f.read())
        except OSError as e:
            log(f"huge pages: cannot write {self.path}: {e}")
            return False
        log(f"huge pages: asked {self.want}, have {got}")
        return got >= self.want

    def restore(self) -> None:
        try:
            with open(self.path, "w") as f:
                f.write(str(self.before))
        except OSError:
            pass


# ------------------------------------------------------------------------------------------ steps

def model_files(model: str) -> list:
    return sorted(os.path.join(model, f) for f in os.listdir(model) if f.endswith(".safetensors"))


def warm(model: str) -> float:
    t0 = time.monotonic()
    buf = bytearray(64 << 20)
    for path in model_files(model):
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass
    return round(time.monotonic() - t0, 2)


def step_generate() -> None:
    rows = ARGS.gib * (1 << 30) // (2 * 264)
    if os.path.exists(os.path.join(MODEL, "config.json")):
        log(f"model {MODEL}: there already")
        return
    sh(["rm", "-rf", *[os.path.join(WORK, d) for d in os.listdir(WORK) if d.startswith("model-")]])
    t0 = time.monotonic()
    g = sh([EH, "generate", "--model", "--out", MODEL, "--rows", str(rows)], timeout=900)
    check(g.returncode == 0, f"generate --model {ARGS.gib} GiB ({rows} rows a layer) in "
                             f"{time.monotonic() - t0:.1f} s: {(g.stdout + g.stderr).strip().splitlines()[-1:]}")
    if g.returncode != 0:
        raise SystemExit(1)


def expected_path() -> str:
    return os.path.join(WORK, f"expected-{ARGS.gib}-s{ARGS.seed}-t{ARGS.tokens}-d{ARGS.steps}x{ARGS.batch}.pt")


def step_expect() -> None:
    args = ["expect", *common(MODEL), "--out", expected_path(), "--reuse", "--bench"]
    p, t0, q, err = spawn(args, "expect")
    doc, seen, why = report_of(p, t0, q, 420)
    p.wait()
    err.close()
    if doc is None:
        check(False, f"expect: {why}: {err_tail('expect')}")
        raise SystemExit(1)
    record({**doc, "tag": "expect", "wall_s": round(seen, 2)})
    if doc.get("reused"):
        log(f"expect: {expected_path()} reused (same model, workload, torch and GPU)")
        return
    check(doc["cpu_cross_check"]["ok"], f"expect: the GPU's ids and BF16 rows equal spec's computed on the CPU "
                                        f"({doc['cpu_cross_check']['implementation']}, "
                                        f"{doc['cpu_cross_check']['layer_lookups']} layer-lookups)")
    b = doc.get("bench", {}).get("prefill", {})
    log(f"expect: tables loaded to HBM {doc.get('load_s')}; finite x {doc['finite_x']}, y {doc['finite_y']}; "
        f"prefill from HBM: gather share {b.get('gather_share')}, {b.get('median_ms')}")


def backends() -> list:
    return [b for b in ARGS.backends.split(",") if b]


def table_bytes(model: str) -> int:
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from engram_host.reference.layout import Layout
    with Layout(model) as layout:
        return sum(layout.tensor(n).nbytes for n in layout.table_names)


def with_daemon(model: str, backend: str, tag: str, body) -> None:
    huge = None
    if backend == "memfd-hugetlb":
        huge = HugePages(table_bytes(model))
        if not huge.reserve():
            check(False, f"{tag}: huge pages for memfd-hugetlb could not be reserved")
            huge.restore()
            return
    d = Daemon(model, backend, tag)
    try:
        if check(d.ready, f"{tag}: daemon ready ({d.ready_s} s)"):
            body(d)
    finally:
        d.stop()
        if huge is not None:
            huge.restore()


def step_finite() -> None:
    fin = os.path.join(WORK, f"finite-{ARGS.finite_rows}")
    if not os.path.exists(os.path.join(fin, "config.json")):
        sh([sys.executable, "-m", "engram_host.reference", "make-finite", "--out", fin,
            "--rows", str(ARGS.finite_rows)])
    for b in backends():
        if not fits(40, f"finite check {b}"):
            return

        def body(d, b=b):
            doc = engine_once(["check", *common(fin), "--socket", d.socket, "--backend", b], f"finite-check-{b}",
                              {"model": "finite"}, timeout=240)
            check(bool(doc.get("ok")), f"finite model, {b}: every lookup's ids, rows, BF16 rows and projection served "
                                       f"= safetensors-loaded (finite y {doc.get('finite_y')}); CPU cross-check "
                                       f"{(doc.get('cpu_cross_check') or {}).get('ok')}" + failure_note(doc))
        with_daemon(fin, b, f"finite-{b}", body)


def restart_loop(source: str, backend: str, extra: list, n: int, tag: str, est: float, cold: bool = False) -> list:
    docs = []
    for i in range(1, n + 1):
        if not fits(est, f"{tag} restart {i}"):
            break
        extra_doc = {"restart": i, "cold": cold, "label": tag}
        if cold:
            if not drop_caches():
                break
        elif source == "self":  # warm before each: the previous engine's pinned copy may have pushed pages out
            extra_doc["warm_s"] = warm(MODEL)
            log(f"page cache warmed again: {extra_doc['warm_s']} s to read the model's files")
        bench = ["--bench"] if i == n and not cold else []
        t = time.monotonic()
        doc = engine_once(["engine", *common(MODEL), "--source", source, "--expected", expected_path(), "--hold",
                           *extra, *bench], f"{tag}-{i}", extra_doc)
        est = max(est, (time.monotonic() - t) * 1.3)
        first = (doc.get("t") or {}).get("first_lookup")
        check(doc.get("ok") is True, f"{tag} restart {i}: first lookup at {first} s from the process's start, "
                                     f"{doc.get('checked_lookups')} lookups bitwise equal to the disk-loaded ones"
                                     + failure_note(doc))
        docs.append(doc)
    return docs


def step_engram() -> None:
    for b in backends():
        if not fits(60, f"engram {b}"):
            return

        def body(d, b=b):
            if b in ARGS.check_full.split(","):
                if fits(90, f"full-size check {b}"):
                    doc = engine_once(["check", *common(MODEL), "--socket", d.socket, "--backend", b],
                                      f"check-{b}", {"model": "generated"}, timeout=300)
                    check(bool(doc.get("ok")), f"{b} full size: every lookup served = safetensors-loaded in one process"
                                               + failure_note(doc))
            restart_loop("daemon", b, ["--socket", d.socket, "--backend", b], ARGS.n, f"engram-{b}", 15)
            if fits(60, f"ranks {b}"):
                ranks(d, b)
        with_daemon(MODEL, b, b, body)


def ranks(d, b: str) -> None:
    procs = []
    for r in range(ARGS.ranks):
        tag = f"rank-{b}-{r}"
        procs.append((tag, *spawn(["rank", *common(MODEL), "--socket", d.socket, "--backend", b, "--rank", str(r),
                                   "--ranks", str(ARGS.ranks), "--hold"], tag)))
    docs = []
    for tag, p, t0, q, err in procs:
        doc, seen, why = report_of(p, t0, q, 300)
        docs.append((tag, p, t0, err, doc, seen, why))
    for tag, p, t0, err, doc, seen, why in docs:
        killed = kill(p, t0)
        err.close()
        if doc is None:
            doc = {"event": "rank", "ok": False, "failure": f"{why}: {err_tail(tag)}"}
        doc.update({"tag": tag, "driver": {"report_seen_s": round(seen, 3), **killed}})
        record(doc)
        check(bool(doc.get("ok")), f"{tag}: rows {doc.get('row_ranges')}, {doc.get('rows_looked_up')} rows looked up, "
                                   f"bitwise equal to the same rows of the files; first lookup at "
                                   f"{(doc.get('t') or {}).get('first_lookup')} s" + failure_note(doc))


def step_self() -> None:
    if not fits(60, "self"):
        return
    restart_loop("self", "", ["--backend", "self"], ARGS.n, "self-warm", 60)


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as e:
        record({"event": "cold", "possible": False, "why": str(e)})
        log(f"cold: the page cache cannot be dropped here ({e}): no cold measurement")
        return False
    # the libraries (not the tables) back in the cache: what is cold is the model's files
    sh([sys.executable, "-c", "import torch, safetensors, engram_host.reference.gpu; torch.cuda.init()"], timeout=120)
    record({"event": "cold", "possible": True})
    return True


def step_cold() -> None:
    if not fits(120, "cold"):
        return
    restart_loop("self", "", ["--backend", "self"], ARGS.cold_n, "self-cold", 120, cold=True)


# ------------------------------------------------------------------------------------------ summary

def stats(values: list) -> dict:
    return {"n": len(values), "median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)} if values else {"n": 0}


def fmt(s: dict) -> str:
    return f"{s['median']:7.3f} [{s['min']:.3f}-{s['max']:.3f}]" if s.get("n") else "      -"


def summary() -> None:
    docs = []
    try:
        with open(os.path.join(OUT, "results.jsonl")) as f:
            docs = [json.loads(line) for line in f if line.strip()]
    except OSError:
        pass
    lines = [f"== issue 26 section 3: engine restart, GIB={ARGS.gib}, N={ARGS.n}, {time.strftime('%Y-%m-%d %H:%M:%S')}"]
    out: dict = {"restarts": {}, "bench": {}, "ranks": {}, "checks": dict(CHECKS)}
    labels = []
    for d in docs:
        if d.get("event") == "engine" and d.get("label") and d.get("label") not in labels:
            labels.append(d["label"])
    lines.append("time to first Engram lookup, seconds from the engine process's spawn (median [min-max] over n "
                 "restarts; SIGKILL between them); every lookup bitwise equal to the disk-loaded ones: ok/n")
    lines.append(f"{'engine':24} {'n':>2} {'ok':>3}  {'first lookup':>22}  {'after import torch':>22}  "
                 f"{'import torch':>22}  {'tables ready (views)':>22}")
    for label in labels:
        rs = [d for d in docs if d.get("label") == label and d.get("event") == "engine"]
        good = [d for d in rs if d.get("ok") is True and d.get("t")]
        first = [d["t"]["first_lookup"] for d in good]
        torch_t = [d["t"]["torch"] for d in good]
        after = [d["t"]["first_lookup"] - d["t"]["torch"] for d in good]
        views = [d["t"]["views"] for d in good]
        row = {"n": len(rs), "ok": len(good), "first_lookup_s": stats(first), "after_import_torch_s": stats(after),
               "import_torch_s": stats(torch_t), "views_s": stats(views)}
        out["restarts"][label] = row
        lines.append(f"{label:24} {len(rs):>2} {len(good):>3}  {fmt(row['first_lookup_s']):>22}  "
                     f"{fmt(row['after_import_torch_s']):>22}  {fmt(row['import_torch_s']):>22}  "
                     f"{fmt(row['views_s']):>22}")
        for d in rs:
            if d.get("bench"):
                out["bench"][label] = d["bench"]
            if d.get("load") and label.startswith("self"):
                out["restarts"][label]["pinned"] = {k: v for k, v in d["load"].items() if "bytes" in k}
    for d in docs:
        if d.get("tag") == "expect" and d.get("bench"):
            out["bench"]["hbm (safetensors to GPU memory)"] = d["bench"]
    if out["bench"]:
        lines.append("")
        lines.append(f"a prefill chunk's Engram work on the GPU ({ARGS.tokens} tokens x 24 rows x 2 layers; a decode "
                     f"step {ARGS.batch} tokens; median ms over 20 chunks of fresh ids, CUDA events; the Engram "
                     "layer's work only, no model around it): the gather's share")
        lines.append(f"{'tables':32} {'rows':>7} {'ids':>7} {'gather w':>9} {'gather s':>9} {'dequant':>8} "
                     f"{'project':>8} {'total':>8} {'share':>6} {'GB/s':>6}")
        for label, bch in out["bench"].items():
            for kind in ("prefill", "decode"):
                b = bch.get(kind)
                if not b:
                    continue
                m = b["median_ms"]
                lines.append(f"{(label + ' ' + kind)[:32]:32} {b['rows']:>7} {m['ids']:7.3f} {m['gather_weight']:9.3f} "
                             f"{m['gather_scale']:9.3f} {m['dequant']:8.3f} {m['project']:8.3f} {m['total']:8.3f} "
                             f"{b['gather_share']:6.3f} {b['gather_GBps']:6.1f}")
    rk = [d for d in docs if d.get("event") == "rank"]
    if rk:
        lines.append("")
        lines.append(f"{ARGS.ranks} rank processes at once on the same daemon's views, each its contiguous row range, "
                     "against the same rows of the files")
        for b in sorted({d.get("backend", "?") for d in rk}):
            mine = [d for d in rk if d.get("backend") == b]
            ok = sum(1 for d in mine if d.get("ok"))
            first = [d["t"]["first_lookup"] for d in mine if d.get("ok") and d.get("t")]
            out["ranks"][b] = {"ranks": len(mine), "ok": ok,
                               "rows_looked_up": sum(d.get("rows_looked_up", 0) for d in mine),
                               "first_lookup_s": stats(first),
                               "row_ranges": {str(d.get("rank")): d.get("row_ranges") for d in mine}}
            lines.append(f"{b:16} {ok}/{len(mine)} ok, rows looked up {out['ranks'][b]['rows_looked_up']}, first "
                         f"lookup {fmt(stats(first))} s")
    cold = [d for d in docs if d.get("event") == "cold"]
    if cold:
        lines.append("")
        lines.append("cold page cache: " + ("dropped before each cold run (echo 3 > /proc/sys/vm/drop_caches)"
                                            if cold[0].get("possible") else f"not possible here: {cold[0].get('why')}"))
    skipped = [d for d in docs if d.get("event") == "skipped"]
    for d in skipped:
        lines.append(f"skipped: {d['what']} ({d['left_s']} s left)")
    daemon_eng = {k: v for k, v in out["restarts"].items() if k.startswith("engram-") and v["first_lookup_s"]["n"]}
    self_warm = out["restarts"].get("self-warm", {}).get("first_lookup_s", {})
    if daemon_eng and self_warm.get("n"):
        best = min(daemon_eng, key=lambda k: daemon_eng[k]["first_lookup_s"]["median"])
        x = daemon_eng[best]["first_lookup_s"]["median"]
        y = self_warm["median"]
        lines.append("")
        lines.append(f"headline: engine restart, time to first Engram lookup: {x:.2f} s with engram-host "
                     f"({best[len('engram-'):]}) vs {y:.2f} s loading itself (warm page cache)")
        out["headline"] = {"engram_host_s": x, "backend": best[len("engram-"):], "self_s": y}
    lines.append(f"checks: {CHECKS['pass']} passed, {CHECKS['fail']} failed")
    with open(os.path.join(OUT, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(OUT, "summary.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    print("\n".join(lines), flush=True)


def merge(dirs: list) -> int:
    """The summary of several calls' results (each call's OUT), as one: results.jsonl and checks.txt concatenated
    into --out, then :func:`summary`."""
    global OUT
    OUT = os.path.abspath(ARGS.out)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "results.jsonl"), "w") as res, open(os.path.join(OUT, "checks.txt"), "w") as chk:
        for d in dirs:
            for name, into in (("results.jsonl", res), ("checks.txt", chk)):
                try:
                    with open(os.path.join(d, name)) as f:
                        text = f.read()
                except OSError:
                    continue
                into.write(text)
                if name == "checks.txt":
                    CHECKS["pass"] += sum(1 for line in text.splitlines() if line.startswith("PASS"))
                    CHECKS["fail"] += sum(1 for line in text.splitlines() if line.startswith("FAIL"))
    envs = []
    for d in dirs:
        try:
            with open(os.path.join(d, "results.jsonl")) as f:
                envs += [json.loads(line) for line in f if '"environment"' in line]
        except OSError:
            pass
    envs = [e for e in envs if e.get("event") == "environment"]
    if envs:
        ARGS.gib = envs[0].get("gib", ARGS.gib)
        ARGS.n = envs[0].get("n", ARGS.n)
    summary()
    return 0 if CHECKS["fail"] == 0 else 1


def environment() -> None:
    env = {"gib": ARGS.gib, "n": ARGS.n, "steps": ARGS.steps_run, "backends": backends(), "model": MODEL}
    for name, cmd in (("gpu", ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]),
                      ("kernel", ["uname", "-r"]), ("cpus", ["nproc"]), ("memory", ["free", "-g"]),
                      ("version", [EH, "--version"]),
                      ("python", [sys.executable, "-c",
                                  "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"
                                  "; import safetensors; print('safetensors', safetensors.__version__)"
                                  "; import importlib.util as u; print('numpy', bool(u.find_spec('numpy')))"])):
        try:
            r = sh(cmd, timeout=60)
            env[name] = r.stdout.strip() or " | ".join(r.stderr.strip().splitlines()[-1:])
        except Exception as e:
            env[name] = f"({e})"
    try:
        with open("/proc/sys/vm/nr_hugepages") as f:
            env["nr_hugepages"] = f.read().strip()
    except OSError:
        pass
    record({"event": "environment", **env})
    log("environment: " + json.dumps(env))


def main() -> int:
    global OUT, WORK, EH, MODEL, ARGS, ROOT
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--eh", help="the engram-host launcher (the release's bin/engram-host)")
    p.add_argument("--work", help="where the model and the expected outputs are kept")
    p.add_argument("--out", required=True)
    p.add_argument("--summarize", nargs="+", metavar="DIR",
                   help="no run: the summary of these runs' results.jsonl and checks.txt together, into --out")
    p.add_argument("--gib", type=int, default=int(os.environ.get("GIB", 39)))
    p.add_argument("--n", type=int, default=int(os.environ.get("N", 5)), help="restarts per engine")
    p.add_argument("--cold-n", type=int, default=int(os.environ.get("COLD_N", 1)))
    p.add_argument("--steps", dest="steps_run", default=os.environ.get("STEPS", "generate expect finite engram self cold"))
    p.add_argument("--backends", default=os.environ.get("BACKENDS", ",".join(BACKENDS_ALL)).replace(" ", ","))
    p.add_argument("--check-full", default=os.environ.get("CHECK_FULL", "cuda-vmm").replace(" ", ","),
                   help="backends also checked at full size in one process (served and safetensors-loaded)")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--finite-rows", type=int, default=200000)
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--daemon-timeout", type=float, default=180)
    p.add_argument("--budget", type=float, default=float(os.environ.get("BUDGET_S", 560)))
    p.add_argument("--seed", type=int, default=26)
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--steps-decode", dest="steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=64)
    ARGS = p.parse_args()
    ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    if ARGS.summarize:
        return merge(ARGS.summarize)
    if not ARGS.eh or not ARGS.work:
        p.error("--eh and --work are needed for a run")
    OUT, WORK, EH = os.path.abspath(ARGS.out), os.path.abspath(ARGS.work), ARGS.eh
    MODEL = os.path.join(WORK, f"model-{ARGS.gib}")
    for d in (OUT, WORK, os.path.join(OUT, "engines"), os.path.join(OUT, "daemons")):
        os.makedirs(d, exist_ok=True)
    steps = ARGS.steps_run.split()
    unknown = [s for s in steps if s not in ("generate", "expect", "finite", "engram", "self", "cold")]
    if unknown:
        p.error(f"unknown steps {unknown}")
    environment()
    try:
        if "generate" in steps:
            step_generate()
        if not os.path.exists(os.path.join(MODEL, "config.json")):
            check(False, f"no model at {MODEL}: run the generate step")
            return 1
        if any(s in steps for s in ("expect", "engram", "self", "cold")):
            step_expect()
        for name, fn in (("finite", step_finite), ("engram", step_engram), ("self", step_self), ("cold", step_cold)):
            if name in steps:
                log(f"== {name}")
                fn()
    finally:
        summary()
    return 0 if CHECKS["fail"] == 0 else 1


ROOT = ""
if __name__ == "__main__":
    sys.exit(main())
