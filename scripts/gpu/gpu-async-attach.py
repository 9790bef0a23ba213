#!/usr/bin/env python3
"""What an engine's critical path pays for the attach when it starts it in the background (issue 26, section 4).

Against a daemon that is already serving (this script starts none), each trial runs, in fresh processes (torch
imported first, as an engine has it, and not counted), in turn:

  model_only       the engine's own start-up alone: torch.cuda initialisation and a model build (LAYERS bf16
                   nn.Linear(HIDDEN, HIDDEN) made on the GPU, H2D_GIB GiB copied from host memory, one forward
                   pass, synchronised); with --startup reference, first the reference engine's own start-up
                   (engram_host.reference: CUDA on the device, the model directory's layout, the workload's hasher
                   and every layer's wkv read and dequantised onto the GPU; docs/reference.md);
  blocking         engram_host.connect(device=D) (blocking), then the same start-up;
  background       engram_host.connect(device=D, background=True), the same start-up, then pending.wait();
  background_idle  connect(background=True) then wait() at once: the background machinery's own cost.

Every variant that imports then uses the tables (use_ms, after total_ms): every table made a tensor and 64Ki rows of
each gathered, or with --startup reference the reference engine's first lookup (a prefill chunk: hashing, gathers,
dequantisation, projection), synchronised. Per variant and trial: the call's time on the caller (call_ms), the start-up's
(model_ms), how long wait() blocked after it (wait_ms), the time from the first call to model built and tables
usable (total_ms), and the import's own timings (attach_ms, total_ms on the worker, ...). The summary gives the
medians over the trials of:

  critical_path_ms           background call_ms + wait_ms: what the engine's thread spends in engram_host
  critical_path_vs_model_ms  background total_ms - model_only total_ms, trial by trial: the whole cost on the
                             critical path, the attach's competition with the start-up (driver locks, CPU) included
  blocking_extra_ms          blocking total_ms - model_only total_ms: what a blocking connect costs it
  model_slowdown_ms          background model_ms - model_only model_ms: the start-up slowed by the attach beside it
  background_overhead_ms     background_idle total_ms - blocking's connect alone (call_ms): the thread's own cost

--device -1 is a dry run without a GPU (CPU views, the model on the CPU: keep --layers and --hidden small).

Usage (the daemon's socket by --socket or $ENGRAM_HOST_SOCKET; PYTHONPATH must reach the engram_host package, e.g.
the repository's or the bundle's python/):

  PYTHONPATH=python python3 scripts/gpu/gpu-async-attach.py --socket /tmp/d.sock [--device 0] [--trials 5]
      [--layers 32] [--hidden 8192] [--h2d-gib 1] [--expect MODEL_DIR] [--out FILE.json]
      [--startup reference --model MODEL_DIR]   (the daemon must serve MODEL_DIR; it is then also expected)

Prints one JSON document (also to --out), and each child's result on stderr as it comes.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

VARIANTS = ("model_only", "blocking", "background", "background_idle")


def build_model(torch, device: int, layers: int, hidden: int, h2d_gib: float):
    """An engine's start-up on the GPU: CUDA's initialisation, weights made there, weights copied from the host,
    one forward pass (cuBLAS's start-up), synchronised. Device -1: on the CPU (the dry run)."""
    if device >= 0:
        torch.cuda.init()
    dev = torch.device("cuda", device) if device >= 0 else torch.device("cpu")
    model = torch.nn.Sequential(*[torch.nn.Linear(hidden, hidden, bias=False, device=dev, dtype=torch.bfloat16)
                                  for _ in range(layers)])
    copied = None
    if h2d_gib > 0:
        host = torch.empty(int(h2d_gib * (1 << 30)) // 2, dtype=torch.bfloat16).fill_(1.0)
        copied = host.to(dev)
        del host
    x = torch.randn(2048, hidden, device=dev, dtype=torch.bfloat16)
    with torch.no_grad():
        y = model(x)
    if device >= 0:
        torch.cuda.synchronize(dev)
    return model, copied, y


def start_up(torch, args) -> dict:
    """The engine's own start-up (the reference engine's, then the model build), synchronised; what use_tables
    needs afterwards."""
    kept: dict = {}
    if args.startup == "reference":
        from engram_host.reference import gpu as ref
        from engram_host.reference.layout import Layout
        device = ref._device(torch, args.device)  # torch.cuda.set_device: PyTorch's CUDA starts here
        layout = Layout(args.model)
        workload = ref.Workload(torch, layout, device, args.seed, args.tokens, args.steps, args.batch)
        wkv = ref.Tables(torch, layout, device, {})
        wkv.load_wkv()
        torch.cuda.synchronize(device)
        kept.update(ref=ref, layout=layout, workload=workload, wkv=wkv.wkv, device=device)
    if args.layers > 0 or args.h2d_gib > 0:
        kept["model"] = build_model(torch, args.device, args.layers, args.hidden, args.h2d_gib)
    return kept


def use_tables(torch, imported, kept: dict) -> float:
    """The reference engine's first lookup on the served tables; else every table as a tensor and a gather of
    64Ki rows of each on the GPU. Returns milliseconds."""
    t0 = time.perf_counter()
    if "ref" in kept:
        tables = kept["ref"].served_tables(torch, imported, kept["layout"], kept["device"])
        tables.wkv = kept["wkv"]
        kept["first_lookup"] = kept["workload"].run(tables, "prefill")
        torch.cuda.synchronize(kept["device"])
        return (time.perf_counter() - t0) * 1e3
    for table in imported.tables.values():
        t = table.to_torch()
        if t.dim() >= 1 and t.shape[0] > 0:
            ids = torch.randint(0, t.shape[0], (1 << 16,), device=t.device)
            torch.index_select(t.view(torch.uint8), 0, ids)
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def child(args) -> dict:
    import torch  # noqa: F401  (an engine has it imported before it connects)
    import engram_host
    kwargs = {"device": args.device if args.device >= 0 else None}
    if args.expect or args.model:
        kwargs["expect"] = args.expect or args.model
    out = {"variant": args.child}
    imported = None
    t0 = time.perf_counter()
    if args.child == "model_only":
        kept = start_up(torch, args)
        out["model_ms"] = (time.perf_counter() - t0) * 1e3
        out["total_ms"] = out["model_ms"]
    elif args.child == "blocking":
        imported = engram_host.connect(args.socket, **kwargs)
        t1 = time.perf_counter()
        out["call_ms"] = (t1 - t0) * 1e3
        kept = start_up(torch, args)
        out["model_ms"] = (time.perf_counter() - t1) * 1e3
        out["wait_ms"] = 0.0
    elif args.child == "background":
        pending = engram_host.connect(args.socket, background=True, **kwargs)
        t1 = time.perf_counter()
        out["call_ms"] = (t1 - t0) * 1e3
        kept = start_up(torch, args)
        t2 = time.perf_counter()
        out["model_ms"] = (t2 - t1) * 1e3
        out["ready_after_model"] = pending.ready()
        imported = pending.wait()
        out["wait_ms"] = (time.perf_counter() - t2) * 1e3
    elif args.child == "background_idle":
        pending = engram_host.connect(args.socket, background=True, **kwargs)
        t1 = time.perf_counter()
        out["call_ms"] = (t1 - t0) * 1e3
        imported = pending.wait()
        out["wait_ms"] = (time.perf_counter() - t1) * 1e3
        out["total_ms"] = (time.perf_counter() - t0) * 1e3
        kept = {}
        if args.startup == "reference":  # what use_tables needs, after the timed part
            kept = start_up(torch, argparse.Namespace(**{**vars(args), "layers": 0, "h2d_gib": 0.0}))
    else:
        raise SystemExit(f"unknown variant {args.child}")
    if imported is not None:
        out.setdefault("total_ms", (time.perf_counter() - t0) * 1e3)
        out["use_ms"] = use_tables(torch, imported, kept)
        out["import_timings"] = imported.timings
        out["tables"] = len(imported.tables)
        out["bytes"] = sum(t.nbytes for t in imported.tables.values())
        out["backends"] = sorted({t.backend for t in imported.tables.values()})
    del kept
    return out


def spread(values: list) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {}
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "all": [round(v, 3) for v in values]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", default=os.environ.get("ENGRAM_HOST_SOCKET"))
    ap.add_argument("--device", type=int, default=0, help="the GPU; -1: CPU views and a CPU model, a dry run of "
                    "this script on a machine without a GPU")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--h2d-gib", type=float, default=1.0)
    ap.add_argument("--expect", help="a model directory the daemon must serve (default: anything)")
    ap.add_argument("--startup", choices=["model", "reference"], default="model",
                    help="model: torch.cuda and the model build; reference: the reference engine's start-up first")
    ap.add_argument("--model", help="with --startup reference: the model directory the daemon serves")
    ap.add_argument("--seed", type=int, default=26, help=argparse.SUPPRESS)
    ap.add_argument("--tokens", type=int, default=8192, help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=8, help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=64, help=argparse.SUPPRESS)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out")
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.socket:
        ap.error("no daemon socket: --socket PATH or ENGRAM_HOST_SOCKET")
    if args.startup == "reference" and not args.model:
        ap.error("--startup reference needs --model MODEL_DIR (the directory the daemon serves)")
    if args.child:
        print("RESULT " + json.dumps(child(args)), flush=True)
        return 0

    import engram_host
    status = engram_host.status(args.socket)
    if status.get("state") != "ready":
        raise SystemExit(f"the daemon on {args.socket} is {status.get('state')}, not ready")
    variants = [v for v in args.variants.split(",") if v]
    runs = {v: [] for v in variants}
    base = [sys.executable, os.path.abspath(__file__), "--socket", args.socket, "--device", str(args.device),
            "--layers", str(args.layers), "--hidden", str(args.hidden), "--h2d-gib", str(args.h2d_gib)]
    if args.expect:
        base += ["--expect", args.expect]
    base += ["--startup", args.startup, "--seed", str(args.seed), "--tokens", str(args.tokens), "--steps",
             str(args.steps), "--batch", str(args.batch)]
    if args.model:
        base += ["--model", args.model]
    for trial in range(args.trials):
        order = variants[trial % len(variants):] + variants[:trial % len(variants)]  # rotated, so none is always first
        for v in order:
            p = subprocess.run(base + ["--child", v], capture_output=True, text=True, timeout=600)
            line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if p.returncode != 0 or line is None:
                print(f"trial {trial} {v}: exit {p.returncode}: {p.stderr[-3000:]}", file=sys.stderr)
                raise SystemExit(1)
            r = json.loads(line[len("RESULT "):])
            r["trial"] = trial
            runs[v].append(r)
            print(f"trial {trial} {v}: " + json.dumps({k: r[k] for k in ("call_ms", "model_ms", "wait_ms", "total_ms")
                                                         if k in r}), file=sys.stderr, flush=True)

    def per_trial(f):
        out = []
        for t in range(args.trials):
            try:
                out.append(f(t))
            except (KeyError, IndexError):
                pass
        return out

    def at(v, t):
        return next(r for r in runs[v] if r["trial"] == t)

    summary = {}
    if "background" in runs:
        summary["critical_path_ms"] = spread(per_trial(lambda t: at("background", t)["call_ms"]
                                                       + at("background", t)["wait_ms"]))
        summary["background_call_ms"] = spread([r["call_ms"] for r in runs["background"]])
        summary["wait_block_ms"] = spread([r["wait_ms"] for r in runs["background"]])
        summary["ready_after_model"] = [r["ready_after_model"] for r in runs["background"]]
        summary["attach_ms_on_worker"] = spread([r["import_timings"].get("attach_ms") for r in runs["background"]])
        summary["import_total_ms_on_worker"] = spread([r["import_timings"].get("total_ms")
                                                       for r in runs["background"]])
    if "background" in runs and "model_only" in runs:
        summary["critical_path_vs_model_ms"] = spread(per_trial(lambda t: at("background", t)["total_ms"]
                                                                - at("model_only", t)["total_ms"]))
        summary["model_slowdown_ms"] = spread(per_trial(lambda t: at("background", t)["model_ms"]
                                                        - at("model_only", t)["model_ms"]))
    if "blocking" in runs and "model_only" in runs:
        summary["blocking_extra_ms"] = spread(per_trial(lambda t: at("blocking", t)["total_ms"]
                                                        - at("model_only", t)["total_ms"]))
        summary["blocking_connect_ms"] = spread([r["call_ms"] for r in runs["blocking"]])
    if "background_idle" in runs and "blocking" in runs:
        summary["background_overhead_ms"] = spread(per_trial(lambda t: at("background_idle", t)["total_ms"]
                                                             - at("blocking", t)["call_ms"]))
    any_import = next((r for v in runs for r in runs[v] if "bytes" in r), {})
    doc = {
        "what": "gpu-async-attach: the engine's critical path with connect(background=True)",
        "socket": args.socket, "device": args.device, "trials": args.trials,
        "daemon": {"backend": status.get("backend"), "bytes": status.get("bytes"),
                   "gib": round((status.get("bytes") or 0) / 2**30, 3), "version": status.get("version")},
        "imported": {k: any_import.get(k) for k in ("tables", "bytes", "backends")},
        "model": {"startup": args.startup, "reference_model": args.model, "layers": args.layers,
                  "hidden": args.hidden, "dtype": "bfloat16", "h2d_gib": args.h2d_gib},
        "summary": summary,
        "variants": {v: {k: spread([r.get(k) for r in rs]) for k in ("call_ms", "model_ms", "wait_ms", "total_ms",
                                                                      "use_ms")} for v, rs in runs.items()},
        "runs": runs,
    }
    try:
        import torch
        doc["torch"] = torch.__version__
        doc["gpu"] = torch.cuda.get_device_name(args.device) if args.device >= 0 else None
    except ImportError:
        pass
    text = json.dumps(doc, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
