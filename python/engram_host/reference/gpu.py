"""The reference engine's PyTorch part: per step what DeepSeek-V4.1's Engram layer does with the tables, on the GPU.

For each lookup (a prefill chunk of 8,192 tokens, then decode steps of 64 tokens) and each Engram layer: the row
ids are hashed from the token ids on the GPU (:mod:`.spec`'s definition, in int64 arithmetic that wraps as the
definition's mod 2^64), the ``embed.weight`` and ``embed.scale`` rows are gathered with ``torch.index_select``
(viewed as int64 words where the rows allow it: a copy either way), dequantised to BF16 (one E8M0 scale per 32
values, float32 product, round to nearest even, NaNs canonical: :mod:`.spec`'s bits exactly) and projected by the
layer's ``wkv`` (dequantised the same way; ``x @ wkv.T`` by cuBLAS with BF16 inputs and float32 accumulation,
reduced-precision reductions off, a fixed cuBLAS workspace so the choice of kernel is the same every run).

Where the tables come from:
- ``daemon``: ``engram_host.connect(device=0, expect=MODEL)``, the GPU views of the served tables (memfd and
  memfd-hugetlb: the daemon's memory registered read-only; cuda-vmm: imported into this process);
- ``self``: the engine loads them itself as vLLM does by default: ``safetensors`` ``safe_open``/``get_tensor``,
  then ``pin_memory()``, read by the GPU through the pinned memory's unified address (UVA);
- ``disk``: ``safetensors`` onto the GPU (HBM), for the expected outputs and the in-process check.

``wkv`` is read from the checkpoint by every engine alike (the package's reader; it is not a served table).

Every lookup's ids, gathered bytes, BF16 rows and projection are compared bit for bit (integer views, so NaNs
compare by their bits) with the same computation on the disk-loaded tables: in the same process (``check``) or
against the outputs that ``expect`` saved on the same GPU with the same kernels (``engine``). Same shapes, same
kernels, same device, so equality is the expected result and any difference is a wrong byte.

The parts, lowest first: :mod:`.gpu_ops` (PyTorch found; the definition as tensor operations), :mod:`.gpu_tables`
(where the tables come from), :mod:`.gpu_workload` (the lookups run, compared, cross-checked, timed); this module
holds the commands (``expect``, ``engine``, ``check``, ``rank``) and re-exports the names the parts took with them.
"""

from __future__ import annotations

import json
import os
import time

from . import spec
from .gpu_ops import dequant, lookup_layer, need_torch, project
from .gpu_tables import Tables, disk_tables_on_gpu, self_loaded_tables, served_tables
from .gpu_workload import Workload, bench, compare, cpu_cross_check, finite, run_all, to_cpu
from .layout import Layout

# the other names this module had before its parts moved (Unavailable: __main__'s)
from .gpu_ops import Hasher, Unavailable, as_u8, contexts, gather_view, need_safetensors  # noqa: F401
from .gpu_tables import pow2ceil  # noqa: F401
from .gpu_workload import CROSS_CHECK_ROWS  # noqa: F401


class Clock:
    """Seconds since the process was started: ENGRAM_REF_T0 (the driver's time.time() just before it spawned
    this process) when given, else since this module was imported."""

    def __init__(self):
        t0 = os.environ.get("ENGRAM_REF_T0")
        self.t0 = float(t0) if t0 else time.time()
        self.given = bool(t0)
        self.marks: dict = {}

    def mark(self, what: str) -> float:
        self.marks[what] = round(time.time() - self.t0, 4)
        return self.marks[what]


def emit(doc: dict) -> None:
    print(json.dumps(doc, sort_keys=True), flush=True)


def _device(torch, ordinal: int, start: bool = True):
    """The GPU as a torch.device; ``start``: start CUDA on it now (an engine connecting to the daemon leaves that
    to ``connect``, which starts PyTorch's CUDA beside the handshake)."""
    if start:
        torch.cuda.set_device(ordinal)
    return torch.device("cuda", ordinal)


def _meta(torch, layout: Layout, workload: Workload, device) -> dict:
    from .. import checkpoint
    served = checkpoint.served_fingerprint(layout.checkpoint, (), "")
    return {"format": "engram-reference-expected", "version": 1, "fingerprint": served.sha256_hex,
            "workload": workload.params(), "torch": str(torch.__version__),  # TorchVersion: not for weights_only
            "device": str(torch.cuda.get_device_name(device)), "cuda": str(torch.version.cuda)}


def cmd_expect(args, clock: Clock) -> int:
    torch = need_torch()
    clock.mark("torch")
    device = _device(torch, args.device)
    with Layout(args.model) as layout:
        workload = Workload(torch, layout, device, args.seed, args.tokens, args.steps, args.batch)
        meta = _meta(torch, layout, workload, device)
        sidecar = args.out + ".meta.json"
        if args.reuse and os.path.exists(args.out) and os.path.exists(sidecar):
            try:
                with open(sidecar) as f:
                    old = json.load(f)
            except (OSError, ValueError):
                old = None
            if old == json.loads(json.dumps(meta)):
                emit({"event": "expect", "reused": True, "out": args.out, "meta": meta})
                return 0
        load: dict = {}
        tables = disk_tables_on_gpu(torch, layout, device, load)
        tables.load_wkv()
        clock.mark("loaded")
        results = run_all(torch, workload, tables)
        torch.cuda.synchronize()
        clock.mark("computed")
        cross = cpu_cross_check(torch, layout, workload, results)
        doc = {"event": "expect", "out": args.out, "meta": meta, "load_s": load, "cpu_cross_check": cross,
               "finite_x": finite(torch, results, "x"), "finite_y": finite(torch, results, "y"),
               "gather_dtype": {str(L): str(v[0].dtype) for L, v in tables.gather.items()}}
        tmp = args.out + ".tmp"
        if os.path.exists(sidecar):
            os.remove(sidecar)
        torch.save({"meta": meta, "lookups": to_cpu(results)}, tmp)
        os.replace(tmp, args.out)
        with open(sidecar, "w") as f:
            json.dump(meta, f, sort_keys=True)
        clock.mark("saved")
        if args.bench:
            doc["bench"] = bench(torch, workload, tables, args.bench_reps)
        doc["t"] = clock.marks
        doc["ok"] = cross["ok"]
        emit(doc)
        return 0 if cross["ok"] else 1


def _check_against_expected(torch, args, workload: Workload, results: dict, meta: dict, device) -> tuple:
    expected = torch.load(args.expected, map_location=device, weights_only=True)
    want_meta = dict(expected["meta"])
    diffs = []
    for k in ("fingerprint", "workload", "torch", "device"):
        if want_meta.get(k) != meta.get(k):
            diffs.append(f"expected outputs of another {k}: {want_meta.get(k)} vs {meta.get(k)}")
    if not diffs:
        for name in workload.names:
            diffs += compare(torch, results[name], {int(L): v for L, v in expected["lookups"][name].items()}, name)
    return diffs, len(workload.names)


def cmd_engine(args, clock: Clock) -> int:
    """A restarting engine: its tables from the daemon or loaded itself; the first lookup timed from the process's
    start; every lookup checked against the expected outputs; then it holds (until killed) or exits."""
    clock.mark("python")
    torch = need_torch()
    clock.mark("torch")
    import engram_host
    device = _device(torch, args.device, start=args.source != "daemon")
    doc: dict = {"event": "engine", "source": args.source, "backend": args.backend, "pid": os.getpid(),
                 "t0_from_driver": clock.given}
    with Layout(args.model) as layout:
        imported = None
        if args.source == "daemon":
            imported = engram_host.connect(args.socket, device=args.device, expect=args.model, timeout=args.timeout)
            clock.mark("connected")
            torch.cuda.set_device(device)
            doc["connect_timings_ms"] = imported.timings
            doc["served_backend"] = sorted({t.backend for t in imported.tables.values()})
            tables = served_tables(torch, imported, layout, device)
        else:
            load: dict = {}
            tables = self_loaded_tables(torch, layout, device, load)
            clock.mark("loaded")
            doc["load"] = load
        clock.mark("views")
        tables.load_wkv()
        clock.mark("wkv")
        workload = Workload(torch, layout, device, args.seed, args.tokens, args.steps, args.batch)
        results = {"prefill": workload.run(tables, "prefill")}
        torch.cuda.synchronize()
        clock.mark("first_lookup")
        for name in workload.names[1:]:
            results[name] = workload.run(tables, name)
        torch.cuda.synchronize()
        clock.mark("workload")
        meta = _meta(torch, layout, workload, device)
        if args.expected:
            diffs, n = _check_against_expected(torch, args, workload, results, meta, device)
            doc["checked_lookups"] = n
            doc["differences"] = diffs[:20]
            doc["ok"] = not diffs
            clock.mark("checked")
        else:
            doc["ok"] = None
        doc["finite_x"] = finite(torch, results, "x")
        doc["finite_y"] = finite(torch, results, "y")
        del results
        if args.bench:
            doc["bench"] = bench(torch, workload, tables, args.bench_reps)
        doc["t"] = clock.marks
        emit(doc)
        if args.hold:
            while True:  # an engine serving: the driver kills it (SIGKILL)
                time.sleep(3600)
        if imported is not None:
            del tables
            imported.close()
    return 0 if doc["ok"] is not False else 1


def cmd_check(args, clock: Clock) -> int:
    """Served and disk-loaded tables in one process, every lookup of the workload compared bit for bit."""
    torch = need_torch()
    import engram_host
    device = _device(torch, args.device)
    with Layout(args.model) as layout:
        imported = engram_host.connect(args.socket, device=args.device, expect=args.model, timeout=args.timeout)
        served = served_tables(torch, imported, layout, device)
        served.load_wkv()
        load: dict = {}
        disk = disk_tables_on_gpu(torch, layout, device, load)
        disk.load_wkv()
        workload = Workload(torch, layout, device, args.seed, args.tokens, args.steps, args.batch)
        diffs = []
        a_all = {}
        for name in workload.names:
            ids = workload.ids(name)
            a, b = workload.run(served, name, ids), workload.run(disk, name, ids)
            diffs += compare(torch, a, b, name)
            a_all[name] = a
        cross = cpu_cross_check(torch, layout, workload, a_all)
        doc = {"event": "check", "backend": args.backend,
               "served_backend": sorted({t.backend for t in imported.tables.values()}),
               "lookups": workload.names, "rows_per_lookup": {n: int(sum(v["ids"].numel() for v in a_all[n].values()))
                                                               for n in workload.names},
               "differences": diffs[:20], "cpu_cross_check": cross, "finite_x": finite(torch, a_all, "x"),
               "finite_y": finite(torch, a_all, "y"), "disk_load_s": load, "workload": workload.params()}
        doc["ok"] = not diffs and cross["ok"]
        if args.bench:
            doc["bench_served"] = bench(torch, workload, served, args.bench_reps)
            doc["bench_hbm"] = bench(torch, workload, disk, args.bench_reps)
        emit(doc)
        del a_all, served, disk
        imported.close()
        return 0 if doc["ok"] else 1


def cmd_rank(args, clock: Clock) -> int:
    """One of R rank processes: its contiguous row range of every served table (a narrowed view of the same
    mapping), the workload's rows that fall in it gathered with local ids, checked against the same rows read
    from the checkpoint's files."""
    clock.mark("python")
    torch = need_torch()
    clock.mark("torch")
    import engram_host
    device = _device(torch, args.device, start=False)
    doc: dict = {"event": "rank", "rank": args.rank, "ranks": args.ranks, "backend": args.backend, "pid": os.getpid()}
    with Layout(args.model) as layout:
        imported = engram_host.connect(args.socket, device=args.device, expect=args.model, timeout=args.timeout)
        clock.mark("connected")
        torch.cuda.set_device(device)
        full = served_tables(torch, imported, layout, device)
        ranges = {L.layer: spec.row_ranges(L.rows, args.ranks)[args.rank] for L in layout.layers}
        gather = {}
        for L in layout.layers:
            lo, hi = ranges[L.layer]
            gw, gs = full.gather[L.layer]
            gather[L.layer] = (gw[lo:hi], gs[lo:hi])
        mine = Tables(torch, layout, device, gather)
        mine.load_wkv()
        clock.mark("views")
        workload = Workload(torch, layout, device, args.seed, args.tokens, args.steps, args.batch)
        diffs, rows, first = [], 0, None
        disk_u8 = {}
        for L in layout.layers:
            for name, width in ((L.weight, spec.DIM), (L.scale, spec.SCALES)):
                import warnings
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # a read-only mapping: frombuffer warns, nothing writes
                    disk_u8[name] = torch.frombuffer(layout.file_bytes(name), dtype=torch.uint8).view(L.rows, width)
        for name in workload.names:
            ids = workload.ids(name)
            sel = {}
            got = {}
            for L in layout.layers:
                lo, hi = ranges[L.layer]
                g = ids[L.layer]
                sel[L.layer] = g[(g >= lo) & (g < hi)]
                got[L.layer] = lookup_layer(torch, *mine.gather[L.layer], mine.wkv[L.layer], sel[L.layer] - lo)
            if first is None:
                torch.cuda.synchronize()
                first = clock.mark("first_lookup")
            want = {}
            for L in layout.layers:  # the same rows, read from the checkpoint's files
                lo, _ = ranges[L.layer]
                cpu_ids = sel[L.layer].cpu()
                w = torch.index_select(disk_u8[L.weight], 0, cpu_ids).to(device)
                s = torch.index_select(disk_u8[L.scale], 0, cpu_ids).to(device)
                x = dequant(torch, w, s)
                want[L.layer] = {"ids": sel[L.layer] - lo, "weight": w, "scale": s, "x": x,
                                 "y": project(torch, x, mine.wkv[L.layer])}
                rows += cpu_ids.numel()
            diffs += compare(torch, got, want, name)
        clock.mark("checked")
        doc.update({"row_ranges": {str(k): list(v) for k, v in ranges.items()}, "rows_looked_up": rows,
                    "lookups": workload.names, "differences": diffs[:20], "ok": not diffs, "t": clock.marks,
                    "connect_timings_ms": imported.timings})
        emit(doc)
        if args.hold:
            while True:
                time.sleep(3600)
        del disk_u8, mine, full
        imported.close()
        return 0 if doc["ok"] else 1
