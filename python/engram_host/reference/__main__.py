"""``python -m engram_host.reference COMMAND``: the reference engine (docs/reference.md).

- ``cpu``: the workload on the CPU (NumPy, else the standard library), from the checkpoint's files and, with
  ``--socket``, from a daemon's CPU views (memfd backends), compared bit for bit; no PyTorch.
- ``make-finite``: a small model in V4.1's layout with finite values (the projection's check means something).
- ``expect``, ``engine``, ``check``, ``rank``: the PyTorch part on a GPU (:mod:`engram_host.reference.gpu`).

Each prints one JSON document a line; exit 0 when every comparison was bitwise equal, 1 on a difference or a
failure (one line on stderr), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from . import spec

PROG = "python -m engram_host.reference"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        print(f"{PROG}: {message}", file=sys.stderr)
        sys.exit(2)


def _workload_args(p, tokens: int, steps: int, batch: int) -> None:
    p.add_argument("--model", required=True, metavar="DIR", help="The model directory (config.json names the layers).")
    p.add_argument("--seed", type=int, default=spec.DEFAULT_SEED, help="The workload's seed (default %(default)s).")
    p.add_argument("--tokens", type=int, default=tokens, help="Tokens of the prefill chunk (default %(default)s).")
    p.add_argument("--steps", type=int, default=steps, help="Decode steps after it (default %(default)s).")
    p.add_argument("--batch", type=int, default=batch, help="Tokens a decode step (default %(default)s).")


def _gpu_args(p, socket: bool) -> None:
    p.add_argument("--device", type=int, default=0, help="GPU ordinal (default 0).")
    if socket:
        p.add_argument("--socket", help="The daemon's socket (default as engram_host.connect).")
        p.add_argument("--backend", default="", help="A label for the report: the daemon's backend.")
        p.add_argument("--timeout", type=float, default=60.0, help="Seconds for each answer (default 60).")
    p.add_argument("--bench", action="store_true", help="Also time the parts of a prefill chunk (CUDA events).")
    p.add_argument("--bench-reps", type=int, default=20, help="Chunks timed (default 20).")


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog=PROG, description="The reference engine: V4.1's Engram lookups, checked bit for bit.")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    c = sub.add_parser("cpu", help="The workload on the CPU from disk (and a daemon's CPU views), compared.")
    _workload_args(c, 64, 2, 8)
    c.add_argument("--socket", help="Also import from this daemon (CPU views: a memfd backend) and compare.")
    c.add_argument("--impl", choices=["auto", "numpy", "stdlib", "both"], default="auto",
                   help="auto: NumPy when importable, else the standard library; both: each, compared.")
    c.add_argument("--project-rows", type=int, default=None,
                   help="Rows of each lookup and layer to project (default: all with NumPy alone, 2 with stdlib).")

    f = sub.add_parser("make-finite", help="Write a small V4.1-layout model whose values are finite.")
    f.add_argument("--out", required=True, metavar="DIR")
    f.add_argument("--rows", type=int, default=100000)
    f.add_argument("--seed", type=int, default=7)

    e = sub.add_parser("expect", help="GPU: the workload on safetensors-loaded tables in HBM; save the outputs.")
    _workload_args(e, spec.PREFILL_TOKENS, spec.DECODE_STEPS, spec.DECODE_BATCH)
    e.add_argument("--out", required=True, metavar="FILE", help="Where to save the expected outputs (torch.save).")
    e.add_argument("--reuse", action="store_true", help="Keep FILE when it was made for the same model and workload.")
    _gpu_args(e, socket=False)

    g = sub.add_parser("engine", help="GPU: a (re)starting engine, timed from its process start to the first lookup.")
    _workload_args(g, spec.PREFILL_TOKENS, spec.DECODE_STEPS, spec.DECODE_BATCH)
    g.add_argument("--source", choices=["daemon", "self"], default="daemon",
                   help="daemon: connect to engram-host; self: safetensors then pin_memory(), as vLLM's default.")
    g.add_argument("--expected", metavar="FILE", help="The outputs of 'expect' to compare every lookup with.")
    g.add_argument("--hold", action="store_true", help="After the report, keep running until killed.")
    _gpu_args(g, socket=True)

    k = sub.add_parser("check", help="GPU: served and safetensors-loaded tables in one process, compared.")
    _workload_args(k, spec.PREFILL_TOKENS, spec.DECODE_STEPS, spec.DECODE_BATCH)
    _gpu_args(k, socket=True)

    r = sub.add_parser("rank", help="GPU: one of R ranks, its row range of the served views, against the files.")
    _workload_args(r, spec.PREFILL_TOKENS, spec.DECODE_STEPS, spec.DECODE_BATCH)
    r.add_argument("--rank", type=int, required=True)
    r.add_argument("--ranks", type=int, default=4)
    r.add_argument("--hold", action="store_true", help="After the report, keep running until killed.")
    _gpu_args(r, socket=True)
    return top


def cmd_cpu(args) -> int:
    from . import cpu
    from .layout import Layout, disk_buffers, served_buffers
    started = time.monotonic()
    have = cpu.available_impls()
    if args.impl == "auto":
        impls = have[:1]
    elif args.impl == "both":
        impls = have
    else:
        if args.impl not in have:
            raise RuntimeError(f"--impl {args.impl}: NumPy is not importable here")
        impls = [args.impl]
    rows = args.project_rows
    if rows is None and "stdlib" in impls:
        rows = 2
    lookups = spec.workload(args.seed, args.tokens, args.steps, args.batch)
    doc = {"event": "cpu", "impls": impls, "numpy": "numpy" in have, "lookups": [lk.name for lk in lookups],
           "project_rows": rows, "workload": {"seed": args.seed, "prefill_tokens": args.tokens,
                                              "decode_steps": args.steps, "decode_batch": args.batch}}
    ok = True
    with Layout(args.model) as layout:
        doc["layers"] = {str(L.layer): L.rows for L in layout.layers}
        disk = disk_buffers(layout)
        results = {impl: cpu.run(disk, layout, lookups, impl, args.seed, rows) for impl in impls}
        doc["digest"] = {impl: cpu.digest(r) for impl, r in results.items()}
        first = results[impls[0]]
        doc["finite_x"] = round(cpu.finite_fraction(first, "x"), 6)
        doc["finite_y"] = round(cpu.finite_fraction(first, "y"), 6)
        if len(impls) > 1:
            diffs = cpu.differences(results[impls[0]], results[impls[1]])
            doc["impl_differences"] = diffs[:20]
            ok &= not diffs
        if args.socket:
            import engram_host
            with engram_host.connect(args.socket, expect=args.model) as imported:
                doc["served_backend"] = sorted({t.backend for t in imported.tables.values()})
                served = served_buffers(imported, layout)
                doc["served"] = {}
                for impl in impls:
                    diffs = cpu.differences(cpu.run(served, layout, lookups, impl, args.seed, rows), results[impl])
                    doc["served"][impl] = diffs[:20]
                    ok &= not diffs
                del served
        del disk
    doc["ok"] = ok
    doc["seconds"] = round(time.monotonic() - started, 3)
    print(json.dumps(doc, sort_keys=True), flush=True)
    return 0 if ok else 1


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.command is None:
        parser().print_help(sys.stderr)
        return 2
    try:
        if args.command == "cpu":
            return cmd_cpu(args)
        if args.command == "make-finite":
            from .synthetic import write_finite_model
            print(write_finite_model(args.out, args.rows, seed=args.seed))
            return 0
        from . import gpu
        clock = gpu.Clock()
        return {"expect": gpu.cmd_expect, "engine": gpu.cmd_engine, "check": gpu.cmd_check,
                "rank": gpu.cmd_rank}[args.command](args, clock)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # one line, as the package's command line
        from .gpu_ops import Unavailable
        what = str(e) if isinstance(e, Unavailable) else f"{type(e).__name__}: {e}"
        print(f"{PROG} {args.command}: {what}".splitlines()[0], file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
