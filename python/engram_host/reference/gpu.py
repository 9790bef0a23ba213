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
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Optional

from . import spec
from .layout import Layout


class Unavailable(Exception):
    """PyTorch, float8 or a GPU is missing: the message is one line."""


def need_torch():
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, set before CUDA starts
    try:
        import torch
    except ImportError as e:
        raise Unavailable(f"needs PyTorch with float8 and a CUDA GPU (import torch failed: {e}); the CPU part is "
                          "'python -m engram_host.reference cpu'") from None
    if not hasattr(torch, "float8_e4m3fn"):
        raise Unavailable(f"needs PyTorch with torch.float8_e4m3fn (2.1 or later); this is {torch.__version__}")
    if not torch.cuda.is_available():
        raise Unavailable(f"needs a CUDA GPU: torch.cuda.is_available() is False (PyTorch {torch.__version__})")
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    return torch


def need_safetensors():
    try:
        from safetensors import safe_open
    except ImportError as e:
        raise Unavailable(f"needs the safetensors package to load the tables from disk (import failed: {e})") from None
    return safe_open


# ------------------------------------------------------------------------------------------ the definition on the GPU

def _s64(v: int) -> int:
    v &= spec.MASK64
    return v - (1 << 64) if v >= 1 << 63 else v


def _srl(t, s: int):
    return (t >> s) & ((1 << (64 - s)) - 1)


def _mix(t):
    t = (t ^ _srl(t, 30)) * _s64(spec._C1)
    t = (t ^ _srl(t, 27)) * _s64(spec._C2)
    return t ^ _srl(t, 31)


def _umod(t, m):
    """t (int64 holding uint64 bits) mod m (m < 2^62, an int or an int64 tensor)."""
    return ((_srl(t, 1) % m) * 2 + (t & 1)) % m


def _values(torch, keys, positions):
    """v = token + 1 at each position (0 before the start): keys int64 [S, 1], positions int64 [P] -> [S, P]."""
    tok = _umod(_mix(keys + positions.unsqueeze(0)), spec.VOCAB)
    return torch.where(positions.unsqueeze(0) >= 0, tok + 1, torch.zeros_like(tok))


def contexts(torch, lookup_name: str, seed: int, tokens: int, batch: int, device):
    """int64 [N, 4] contexts of a lookup (``prefill`` or ``decodeK``), as spec.prefill / spec.decode."""
    if lookup_name == "prefill":
        keys = torch.tensor([[_s64(spec.stream_key(seed, 0))]], dtype=torch.int64, device=device)
        v = _values(torch, keys, torch.arange(-(spec.CONTEXT - 1), tokens, device=device))[0]
        return torch.stack([v[j:j + tokens] for j in range(spec.CONTEXT)], dim=1)
    step = int(lookup_name[len("decode"):])
    keys = torch.tensor([[_s64(spec.stream_key(seed, 1 + b))] for b in range(batch)], dtype=torch.int64,
                        device=device)
    at = spec.PROMPT + step
    return _values(torch, keys, torch.arange(at - spec.CONTEXT + 1, at + 1, device=device))


class Hasher:
    """Row ids of every layer at once on the GPU: [N, 4] contexts -> {layer: int64 [N * 24]}."""

    def __init__(self, torch, layers: list, seed: int, device):
        self.torch = torch
        self.layers = [L.layer for L in layers]
        combos = [(n, h) for n in spec.NGRAM_ORDERS for h in range(spec.HEADS)]
        self.keys = torch.tensor([[_s64(spec.head_key(seed, L.layer, n, h)) for n, h in combos] for L in layers],
                                 dtype=torch.int64, device=device)  # [layers, 24]
        self.rows = torch.tensor([L.rows for L in layers], dtype=torch.int64, device=device).view(1, -1, 1)
        orders = torch.tensor([n for n, _ in combos], device=device)
        # context value j (oldest first) enters the n-grams of order n >= 4 - j
        self.masks = [(orders >= spec.CONTEXT - j).view(1, 1, -1) for j in range(spec.CONTEXT)]

    def __call__(self, ctx) -> dict:
        torch = self.torch
        z = self.keys.unsqueeze(0).expand(ctx.shape[0], -1, -1)  # [N, layers, 24]
        for j in range(spec.CONTEXT):
            z = torch.where(self.masks[j], _mix(z ^ ctx[:, j].reshape(-1, 1, 1)), z)
        ids = _umod(z, self.rows)
        return {L: ids[:, i, :].reshape(-1) for i, L in enumerate(self.layers)}


def _canonical(torch, x):
    """Every NaN of a BF16 tensor as 0x7FC0."""
    bits = x.view(torch.int16)
    nan = torch.full((), spec.BF16_NAN, dtype=torch.int16, device=x.device)
    return torch.where(torch.isnan(x), nan, bits).view(torch.bfloat16)


def dequant(torch, w, s):
    """uint8 [n, 256] E4M3 and uint8 [n, 8] E8M0 -> BF16 [n, 256], spec's bits."""
    n = w.shape[0]
    wf = w.view(torch.float8_e4m3fn).to(torch.float32)
    e = s.to(torch.int32)
    bits = torch.where(e == 0, 0x00400000, torch.where(e == 255, spec.F32_NAN, e << 23))
    x = (wf.view(n, -1, spec.BLOCK) * bits.view(torch.float32).unsqueeze(-1)).view(n, -1)
    return _canonical(torch, x.to(torch.bfloat16))


def project(torch, x, wkv):
    return _canonical(torch, torch.matmul(x, wkv.t()))


def gather_view(torch, t):
    """A uint8 [rows, W] table as int64 words [rows, W/8] when its address and rows allow (fewer, wider copies)."""
    if t.dim() == 2 and t.shape[1] % 8 == 0 and t.data_ptr() % 8 == 0:
        return t.view(torch.int64)
    return t


def lookup_layer(torch, gw, gs, wkv, ids) -> dict:
    n = ids.numel()
    w = torch.index_select(gw, 0, ids).view(torch.uint8).view(n, spec.DIM)
    s = torch.index_select(gs, 0, ids).view(torch.uint8).view(n, spec.SCALES)
    x = dequant(torch, w, s)
    return {"ids": ids, "weight": w, "scale": s, "x": x, "y": project(torch, x, wkv)}


def as_u8(torch, t, shape):
    """A table tensor (float8 of any kind, or the raw uint8 bytes where PyTorch lacks the dtype) as uint8 [shape]."""
    return (t if t.dtype == torch.uint8 else t.view(torch.uint8)).reshape(shape)


# ------------------------------------------------------------------------------------------ tables

class Tables:
    """Gather views of each layer's weight and scale on the GPU, and its wkv as BF16 on the GPU."""

    def __init__(self, torch, layout: Layout, device, gather: dict, keep=()):
        self.torch = torch
        self.layout = layout
        self.device = device
        self.gather = gather  # layer -> (weight view, scale view)
        self.keep = list(keep)
        self.wkv = {}

    def load_wkv(self) -> None:
        torch = self.torch
        for L in self.layout.layers:
            w = torch.frombuffer(bytearray(self.layout.read(L.wkv)), dtype=torch.uint8).view(spec.WKV_ROWS, spec.DIM)
            s = torch.frombuffer(bytearray(self.layout.read(L.wkv_scale)),
                                 dtype=torch.uint8).view(spec.WKV_ROWS, spec.SCALES)
            self.wkv[L.layer] = dequant(torch, w.to(self.device), s.to(self.device))


def served_tables(torch, imported, layout: Layout, device) -> Tables:
    gather = {}
    for L in layout.layers:
        w = as_u8(torch, imported[L.weight].to_torch(), (L.rows, spec.DIM))
        s = as_u8(torch, imported[L.scale].to_torch(), (L.rows, spec.SCALES))
        gather[L.layer] = (gather_view(torch, w), gather_view(torch, s))
    return Tables(torch, layout, device, gather)


def disk_tables_on_gpu(torch, layout: Layout, device, timings: Optional[dict] = None) -> Tables:
    """safetensors -> the GPU's memory (the expected outputs' and the in-process check's tables)."""
    safe_open = need_safetensors()
    gather = {}
    for L in layout.layers:
        pair = []
        for name, width in ((L.weight, spec.DIM), (L.scale, spec.SCALES)):
            t0 = time.perf_counter()
            with safe_open(layout.tensor(name).file.path, framework="pt") as f:
                t = f.get_tensor(name)
                g = as_u8(torch, t, (L.rows, width)).to(device)
                del t
            if timings is not None:
                timings[name] = round(time.perf_counter() - t0, 3)
            pair.append(gather_view(torch, g))
        gather[L.layer] = tuple(pair)
    return Tables(torch, layout, device, gather)


def pow2ceil(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else n


def _device_pointer(host: int, notes: dict) -> int:
    """The GPU's address of pinned host memory, as vLLM's view of a pinned tensor takes it
    (cuMemHostGetDevicePointer, in the context PyTorch made current); with unified addressing it is ``host``."""
    try:
        from .. import _cuda
        p = _cuda.HostRegistration._device_pointer(_cuda._driver(), host)
        notes["device_pointer"] = "cuMemHostGetDevicePointer" + ("" if p == host else " (not the host address)")
        return p
    except Exception as e:
        notes["device_pointer"] = f"the host address (cuMemHostGetDevicePointer failed: {e})"
        return host


def self_loaded_tables(torch, layout: Layout, device, timings: dict) -> Tables:
    """The engine's own load, as vLLM's default: safetensors get_tensor, then pin_memory(), read through UVA."""
    from .._tensors import torch_tensor
    safe_open = need_safetensors()
    gather, keep = {}, []
    pinned_bytes = asked = 0
    for L in layout.layers:
        pair = []
        for name, width in ((L.weight, spec.DIM), (L.scale, spec.SCALES)):
            t0 = time.perf_counter()
            with safe_open(layout.tensor(name).file.path, framework="pt") as f:
                t = f.get_tensor(name)
                t1 = time.perf_counter()
                pinned = as_u8(torch, t, (L.rows, width)).pin_memory()
                del t
            t2 = time.perf_counter()
            timings[name] = {"get_tensor_s": round(t1 - t0, 3), "pin_memory_s": round(t2 - t1, 3)}
            asked += pinned.numel()
            pinned_bytes += pow2ceil(pinned.numel())
            keep.append(pinned)
            uva = torch_tensor(_device_pointer(pinned.data_ptr(), timings), pinned.numel(), "U8", (L.rows, width),
                               device.index, pinned)
            pair.append(gather_view(torch, uva))
        gather[L.layer] = tuple(pair)
    timings["pinned_bytes_asked"] = asked
    timings["pinned_bytes_power_of_two"] = pinned_bytes
    try:  # what PyTorch's pinned allocator holds (PyTorch 2.6 and later)
        timings["host_memory_stats"] = {k: v for k, v in torch.cuda.host_memory_stats().items() if "bytes" in k}
    except Exception as e:
        timings["host_memory_stats"] = f"unavailable: {e}"
    return Tables(torch, layout, device, gather, keep)


# ------------------------------------------------------------------------------------------ running the workload

class Workload:
    """The lookups' names and, built on the GPU, their contexts; ``run`` does one lookup on some tables."""

    def __init__(self, torch, layout: Layout, device, seed: int, tokens: int, steps: int, batch: int):
        self.torch = torch
        self.layout = layout
        self.device = device
        self.seed, self.tokens, self.steps, self.batch = seed, tokens, steps, batch
        self.names = ["prefill"] + [f"decode{k}" for k in range(steps)]
        self.hasher = Hasher(torch, layout.layers, seed, device)

    def params(self) -> dict:
        return {"seed": self.seed, "prefill_tokens": self.tokens, "decode_steps": self.steps,
                "decode_batch": self.batch, "rows": {str(L.layer): L.rows for L in self.layout.layers}}

    def ids(self, name: str) -> dict:
        return self.hasher(contexts(self.torch, name, self.seed, self.tokens, self.batch, self.device))

    def run(self, tables: Tables, name: str, ids: Optional[dict] = None) -> dict:
        ids = self.ids(name) if ids is None else ids
        return {L: lookup_layer(self.torch, *tables.gather[L], tables.wkv[L], ids[L]) for L in ids}


def _bits(torch, t):
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


def compare(torch, got: dict, want: dict, name: str) -> list:
    """The fields of one lookup that are not bitwise equal, as 'LOOKUP layer L FIELD (N of M elements differ)'."""
    out = []
    for L in sorted(want):
        for f in ("ids", "weight", "scale", "x", "y"):
            a = _bits(torch, got[L][f])
            b = _bits(torch, want[L][f]).to(a.device)
            if a.shape != b.shape or a.dtype != b.dtype:
                out.append(f"{name} layer {L} {f}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}")
            elif not torch.equal(a, b):
                out.append(f"{name} layer {L} {f} ({int((a != b).sum())} of {a.numel()} elements differ)")
    return out


def finite(torch, results: dict, field: str) -> float:
    total = fin = 0
    for per_layer in results.values():
        for out in per_layer.values():
            t = out[field]
            total += t.numel()
            fin += int(torch.isfinite(t).sum())
    return round(fin / total, 6) if total else 0.0


CROSS_CHECK_ROWS = 24 * 1024  # of a prefill chunk's rows, the first this many are dequantised on the CPU too


def cpu_cross_check(torch, layout: Layout, workload: Workload, results: dict) -> dict:
    """The GPU's ids and BF16 rows against :mod:`.spec` computed on the CPU from the gathered bytes (NumPy for
    every lookup when it is there, the ids of all rows and the BF16 rows of the first 24,576 of a prefill chunk;
    else the standard library on the first decode step)."""
    np = spec.numpy_or_none()
    names = workload.names if np is not None else [n for n in workload.names if n != "prefill"][:1]
    bad, checked = [], 0
    for name in names:
        lk = spec.prefill(workload.seed, workload.tokens) if name == "prefill" else \
            spec.decode(int(name[6:]), workload.seed, workload.batch)
        for L in layout.layers:
            out = results[name][L.layer]
            ids = out["ids"].cpu()
            n = min(CROSS_CHECK_ROWS, ids.numel())
            w, s = out["weight"][:n].cpu(), out["scale"][:n].cpu()
            x = out["x"][:n].view(torch.int16).cpu()
            if np is not None:
                want_ids = torch.from_numpy(spec.np_row_ids(np, lk, L.layer, L.rows, workload.seed))
                want_x = torch.from_numpy(spec.np_dequant_rows(np, w.numpy(), s.numpy()).view(np.int16))
            else:
                want_ids = torch.tensor(spec.row_ids(lk, L.layer, L.rows, workload.seed), dtype=torch.int64)
                xb = spec.dequant_rows(bytes(w.reshape(-1).tolist()), bytes(s.reshape(-1).tolist()))
                want_x = torch.frombuffer(bytearray(xb.tobytes()), dtype=torch.int16).view(x.shape)
            if not torch.equal(ids, want_ids):
                bad.append(f"{name} layer {L.layer} ids")
            if not torch.equal(x, want_x.view(x.shape)):
                bad.append(f"{name} layer {L.layer} x")
            checked += 1
    return {"implementation": "numpy" if np is not None else "stdlib", "lookups": names, "layer_lookups": checked,
            "differences": bad, "ok": not bad}


def bench(torch, workload: Workload, tables: Tables, reps: int = 20, warmup: int = 3) -> dict:
    """The GPU time of each part of a prefill chunk and of a decode step (CUDA events, medians over ``reps``
    chunks of fresh ids, so the rows are not the L2 cache's): ids, gather of weight and scale rows, dequantisation,
    projection; the gather's share of the chunk's Engram work."""
    import statistics
    out = {}
    for kind, tokens in (("prefill", workload.tokens), ("decode", workload.batch)):
        parts: dict = {}
        seeds = [workload.seed + 1000 + r for r in range(reps + warmup)]
        for i, seed in enumerate(seeds):
            ctx = contexts(torch, "prefill", seed, tokens, workload.batch, workload.device)
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(2 + 4 * len(workload.layout.layers))]
            ev[0].record()
            ids = workload.hasher(ctx)
            ev[1].record()
            k = 2
            for L in workload.layout.layers:
                gw, gs = tables.gather[L.layer]
                n = ids[L.layer].numel()
                w = torch.index_select(gw, 0, ids[L.layer]).view(torch.uint8).view(n, spec.DIM)
                ev[k].record()
                s = torch.index_select(gs, 0, ids[L.layer]).view(torch.uint8).view(n, spec.SCALES)
                ev[k + 1].record()
                x = dequant(torch, w, s)
                ev[k + 2].record()
                project(torch, x, tables.wkv[L.layer])
                ev[k + 3].record()
                k += 4
            torch.cuda.synchronize()
            if i < warmup:
                continue
            t = {"ids": ev[0].elapsed_time(ev[1])}
            prev = ev[1]
            k = 2
            for _ in workload.layout.layers:
                for part in ("gather_weight", "gather_scale", "dequant", "project"):
                    t[part] = t.get(part, 0.0) + prev.elapsed_time(ev[k])
                    prev = ev[k]
                    k += 1
            t["total"] = ev[0].elapsed_time(ev[-1])
            for p, v in t.items():
                parts.setdefault(p, []).append(v)
        med = {p: round(statistics.median(v), 4) for p, v in parts.items()}
        rows = tokens * spec.ROWS_PER_TOKEN * len(workload.layout.layers)
        gather = med["gather_weight"] + med["gather_scale"]
        out[kind] = {"tokens": tokens, "rows": rows, "reps": reps, "median_ms": med,
                     "gather_share": round(gather / med["total"], 4) if med["total"] else None,
                     "gather_rows_per_s": round(rows / (gather / 1e3)) if gather else None,
                     "gather_GBps": round(rows * spec.ROW_BYTES / (gather / 1e3) / 1e9, 2) if gather else None}
    return out


def run_all(torch, workload: Workload, tables: Tables) -> dict:
    return {name: workload.run(tables, name) for name in workload.names}


def to_cpu(results: dict) -> dict:
    return {name: {L: {f: t.cpu() for f, t in out.items()} for L, out in per.items()} for name, per in results.items()}


# ------------------------------------------------------------------------------------------ commands

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
