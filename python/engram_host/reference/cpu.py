"""The reference engine's CPU part: the workload of :mod:`engram_host.reference.spec` computed on the CPU, from
tables read from the checkpoint's files or from a served import's CPU views, in NumPy when it is importable and in
the standard library otherwise (or both, to check one against the other). Every lookup gives, per layer, its row
ids, the gathered weight and scale bytes, the BF16 rows (``x``) and their ``wkv`` projection (``y``), each as bytes
so that two runs compare bit for bit."""

from __future__ import annotations

import hashlib
from array import array
from typing import Optional

from . import spec
from .layout import Layout

FIELDS = ("ids", "weight", "scale", "x", "y")


def available_impls() -> list:
    return (["numpy"] if spec.numpy_or_none() is not None else []) + ["stdlib"]


def wkv_bits(layout: Layout, L, impl: str):
    """The layer's wkv dequantised to BF16 bits: array 'H' (stdlib) or uint16 [512, 256] (numpy)."""
    w = layout.read(L.wkv)
    s = layout.read(L.wkv_scale)
    if impl == "numpy":
        np = spec.numpy_or_none()
        return spec.np_dequant_rows(np, np.frombuffer(w, np.uint8).reshape(spec.WKV_ROWS, spec.DIM),
                                    np.frombuffer(s, np.uint8).reshape(spec.WKV_ROWS, spec.SCALES))
    return spec.dequant_rows(w, s)


def lookup(buffers: dict, L, lookup_: spec.Lookup, impl: str, wkv, seed: int,
           project_rows: Optional[int]) -> dict:
    """One layer of one lookup from ``buffers`` (name -> bytes-like of the whole table)."""
    if impl == "numpy":
        np = spec.numpy_or_none()
        ids = spec.np_row_ids(np, lookup_, L.layer, L.rows, seed)
        w = np.frombuffer(buffers[L.weight], np.uint8).reshape(L.rows, spec.DIM)[ids]
        s = np.frombuffer(buffers[L.scale], np.uint8).reshape(L.rows, spec.SCALES)[ids]
        x = spec.np_dequant_rows(np, w, s)
        y = spec.np_project_rows(np, x, wkv, project_rows)
        return {"ids": ids.astype("<i8").tobytes(), "weight": w.tobytes(), "scale": s.tobytes(),
                "x": x.astype("<u2").tobytes(), "y": y.astype("<u2").tobytes()}
    ids = spec.row_ids(lookup_, L.layer, L.rows, seed)
    bw, bs = buffers[L.weight], buffers[L.scale]
    d, c = spec.DIM, spec.SCALES
    w = b"".join(bw[i * d:(i + 1) * d] for i in ids)
    s = b"".join(bs[i * c:(i + 1) * c] for i in ids)
    x = spec.dequant_rows(w, s)
    y = spec.project_rows(x, wkv, project_rows)
    return {"ids": array("q", ids).tobytes(), "weight": w, "scale": s, "x": x.tobytes(), "y": y.tobytes()}


def run(buffers: dict, layout: Layout, lookups: list, impl: str, seed: int = spec.DEFAULT_SEED,
        project_rows: Optional[int] = None) -> dict:
    """{lookup name: {layer id: {field: bytes}}} for every lookup and layer."""
    wkv = {L.layer: wkv_bits(layout, L, impl) for L in layout.layers}
    return {lk.name: {L.layer: lookup(buffers, L, lk, impl, wkv[L.layer], seed, project_rows)
                      for L in layout.layers} for lk in lookups}


def differences(a: dict, b: dict) -> list:
    """'LOOKUP layer L FIELD: ...' for each output that is not bitwise equal (or is missing)."""
    out = []
    for name in sorted(set(a) | set(b)):
        la, lb = a.get(name), b.get(name)
        if la is None or lb is None:
            out.append(f"{name}: only in {'the first' if lb is None else 'the second'}")
            continue
        for layer in sorted(set(la) | set(lb)):
            for f in FIELDS:
                va, vb = la.get(layer, {}).get(f), lb.get(layer, {}).get(f)
                if va != vb:
                    where = "lengths differ" if va is None or vb is None or len(va) != len(vb) else \
                        f"first difference at byte {next(i for i, (p, q) in enumerate(zip(va, vb)) if p != q)}"
                    out.append(f"{name} layer {layer} {f}: {where}")
    return out


def digest(result: dict) -> str:
    """SHA-256 over every output in order: one hex string naming a whole run's bytes."""
    h = hashlib.sha256()
    for name in sorted(result):
        for layer in sorted(result[name]):
            for f in FIELDS:
                h.update(result[name][layer][f])
    return h.hexdigest()


def finite_fraction(result: dict, field: str) -> float:
    """The fraction of BF16 values of ``field`` (x or y) that are finite: how much of the comparison is of
    numbers rather than of NaNs (random synthetic bytes make most rows NaN or infinite somewhere)."""
    total = finite = 0
    for per_layer in result.values():
        for out in per_layer.values():
            v = array("H")
            v.frombytes(out[field])
            total += len(v)
            finite += sum(1 for b in v if (b & 0x7F80) != 0x7F80)
    return finite / total if total else 0.0
