"""The reference engine's workload on the GPU: the lookups (a prefill chunk, then decode steps) run on some tables,
their results compared bit for bit, checked against :mod:`.spec` on the CPU, and timed part by part."""

from __future__ import annotations

from typing import Optional

from . import spec
from .gpu_ops import Hasher, contexts, dequant, lookup_layer, project
from .gpu_tables import Tables
from .layout import Layout


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
