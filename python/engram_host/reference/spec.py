"""The reference workload's definition, bit for bit, in the standard library (and in NumPy when it is importable):
the token streams, the hashed row ids, the dequantisation of a gathered row to BF16 and the ``wkv`` projection.
docs/reference.md says the same in words; the PyTorch part (:mod:`engram_host.reference.gpu`) computes the ids and
the dequantisation to these exact bits on the GPU.

Everything here is integer or IEEE-754 arithmetic with one rounding a step, so the stdlib and the NumPy
implementations give the same bytes (the tests check it):

- **Token ids.** Stream ``s`` of seed ``seed`` has at position ``i`` the token ``mix64(stream_key(seed, s) + i) mod
  VOCAB``. A prefill chunk is stream 0 at positions 0..T-1; decode step ``k`` is one new token in each of ``B``
  sequences, sequence ``b`` being stream ``1 + b`` at position ``PROMPT + k``.
- **Row ids.** A token at position ``t`` has the context ``v[t-3], v[t-2], v[t-1], v[t]`` with ``v[i] = token[i] + 1``
  and ``v[i] = 0`` before the stream's start. For layer ``L``, n-gram order ``n`` in (2, 3, 4) and head ``h`` in 0..7
  (that order: 24 ids a token), ``z = head_key(seed, L, n, h)``, then ``z = mix64(z ^ v)`` for each of the last
  ``n`` context values, oldest first; the row id is ``z mod rows_L`` (z unsigned). ``mix64`` is splitmix64's
  finaliser on 64-bit unsigned integers.
- **Dequantisation.** A row is 256 F8_E4M3 bytes and 8 F8_E8M0 bytes. Value ``k`` is ``f32(e4m3(w[k]) *
  e8m0(s[k // 32]))`` with ``e4m3`` the OCP E4M3FN value (0x7F and 0xFF NaN, no infinities), ``e8m0(e) =
  2^(e - 127)`` (0 gives 2^-127, 255 NaN), the product rounded once to float32 (it is exact unless it overflows);
  then rounded to BF16 to nearest, ties to even, every NaN becoming 0x7FC0. That BF16 row is the lookup's output.
- **Projection.** ``wkv.weight`` [512, 256] with ``wkv.scale`` [512, 8] dequantised the same way to BF16; output
  ``j`` of a row is ``acc = +0.0; acc = f32(acc + f32(x[k] * wkv[j][k]))`` for k = 0..255 in order, then BF16 as
  above. (The GPU computes the projection with cuBLAS, BF16 inputs and float32 accumulation in its own order: its
  bits are compared with the same computation on the GPU, not with this one.)
- **Row ranges** of R ranks over ``rows``: contiguous, rank ``r`` from ``r * (rows // R) + min(r, rows % R)``, the
  first ``rows % R`` ranks one row more (as ``torch.tensor_split`` and ``numpy.array_split``).
"""

from __future__ import annotations

import struct
from array import array
from typing import Optional, Sequence

VOCAB = 129280
NGRAM_ORDERS = (2, 3, 4)
HEADS = 8
CONTEXT = max(NGRAM_ORDERS)
ROWS_PER_TOKEN = len(NGRAM_ORDERS) * HEADS  # 24
DIM = 256
BLOCK = 32
SCALES = DIM // BLOCK  # 8
ROW_BYTES = DIM + SCALES  # 264
WKV_ROWS = 512
PREFILL_TOKENS = 8192
DECODE_BATCH = 64
DECODE_STEPS = 8
PROMPT = 16  # decode steps follow a 16-token prompt in each sequence
DEFAULT_SEED = 26

MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_C1 = 0xBF58476D1CE4E5B9
_C2 = 0x94D049BB133111EB
_TOKENS_TAG = 0x746F6B656E73  # "tokens"
BF16_NAN = 0x7FC0
F32_NAN = 0x7FC00000


def mix64(z: int) -> int:
    """splitmix64's finaliser of a 64-bit unsigned integer."""
    z &= MASK64
    z = ((z ^ (z >> 30)) * _C1) & MASK64
    z = ((z ^ (z >> 27)) * _C2) & MASK64
    return z ^ (z >> 31)


def stream_key(seed: int, stream: int) -> int:
    return mix64((seed * _GOLDEN) ^ (_TOKENS_TAG << 16) ^ stream)


def head_key(seed: int, layer: int, order: int, head: int) -> int:
    return mix64(((seed * _GOLDEN) & MASK64) ^ (layer << 32) ^ (order << 16) ^ head)


def token(seed: int, stream: int, position: int) -> int:
    return mix64(stream_key(seed, stream) + position) % VOCAB


# ------------------------------------------------------------------------------------------ the workload

class Lookup:
    """One lookup of the workload: ``name`` (``prefill`` or ``decodeK``), and per token its context of 4 values
    (``v`` of positions t-3..t, oldest first)."""

    def __init__(self, name: str, contexts: list):
        self.name = name
        self.contexts = contexts  # list of 4-tuples of ints

    @property
    def tokens(self) -> int:
        return len(self.contexts)


def _context(seed: int, stream: int, t: int) -> tuple:
    return tuple(token(seed, stream, i) + 1 if i >= 0 else 0 for i in range(t - CONTEXT + 1, t + 1))


def prefill(seed: int = DEFAULT_SEED, tokens: int = PREFILL_TOKENS) -> Lookup:
    return Lookup("prefill", [_context(seed, 0, t) for t in range(tokens)])


def decode(step: int, seed: int = DEFAULT_SEED, batch: int = DECODE_BATCH) -> Lookup:
    return Lookup(f"decode{step}", [_context(seed, 1 + b, PROMPT + step) for b in range(batch)])


def workload(seed: int = DEFAULT_SEED, tokens: int = PREFILL_TOKENS, steps: int = DECODE_STEPS,
             batch: int = DECODE_BATCH) -> list:
    """The prefill chunk, then ``steps`` decode steps."""
    return [prefill(seed, tokens)] + [decode(k, seed, batch) for k in range(steps)]


def row_ids(lookup: Lookup, layer: int, rows: int, seed: int = DEFAULT_SEED) -> list:
    """The lookup's row ids for ``layer`` (a table of ``rows`` rows): 24 a token, token-major, as a flat list."""
    keys = [(n, head_key(seed, layer, n, h)) for n in NGRAM_ORDERS for h in range(HEADS)]
    out = []
    for ctx in lookup.contexts:
        for n, z in keys:
            for v in ctx[CONTEXT - n:]:
                z = mix64(z ^ v)
            out.append(z % rows)
    return out


def row_ranges(rows: int, ranks: int) -> list:
    """[lo, hi) of each rank: contiguous, the first ``rows % ranks`` ranks one row more."""
    base, extra = divmod(rows, ranks)
    out = []
    lo = 0
    for r in range(ranks):
        hi = lo + base + (1 if r < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


# ------------------------------------------------------------------------------------------ numbers

def e4m3(code: int) -> float:
    """The OCP E4M3FN value of a byte (exact in float32): bias 7, no infinities, S.1111.111 NaN."""
    sign = -1.0 if code & 0x80 else 1.0
    e = (code >> 3) & 0xF
    m = code & 7
    if e == 0xF and m == 7:
        return float("nan")
    if e == 0:
        return sign * m * 2.0 ** -9
    return sign * (1 + m / 8) * 2.0 ** (e - 7)


def e8m0(code: int) -> float:
    """2^(code - 127); 255 is NaN (0 is 2^-127, a float32 subnormal)."""
    return float("nan") if code == 255 else 2.0 ** (code - 127)


_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")


def f32(v: float) -> float:
    """``v`` rounded to float32 (to nearest even; beyond the range an infinity), as a Python float."""
    a = array("f", (v,))  # a C cast: IEEE rounding, overflow to inf
    return a[0]


def f32_bits(v: float) -> int:
    return _U32.unpack(array("f", (v,)).tobytes())[0]


def bf16_bits_of_f32_bits(bits: int) -> int:
    """float32 bits to BF16 bits: to nearest, ties to even; every NaN 0x7FC0."""
    if (bits & 0x7F800000) == 0x7F800000 and (bits & 0x7FFFFF):
        return BF16_NAN
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def bf16_value(bits: int) -> float:
    return _F32.unpack(_U32.pack(bits << 16))[0]


_DEQUANT: Optional[array] = None  # BF16 bits of (e8m0 code << 8 | e4m3 code)
_BF16_FLOAT: Optional[list] = None


def dequant_table() -> array:
    """The BF16 bits of every (scale byte, value byte) pair, ``table[s << 8 | w]``, by the definition above."""
    global _DEQUANT
    if _DEQUANT is None:
        t = array("H", bytes(2 * 65536))
        values = [e4m3(c) for c in range(256)]
        for s in range(256):
            scale = e8m0(s)
            for w in range(256):
                t[(s << 8) | w] = bf16_bits_of_f32_bits(f32_bits(values[w] * scale))
        _DEQUANT = t
    return _DEQUANT


def bf16_floats() -> list:
    """The float value of each of the 65536 BF16 bit patterns (NaNs as NaN)."""
    global _BF16_FLOAT
    if _BF16_FLOAT is None:
        _BF16_FLOAT = list(_F32.iter_unpack(array("I", range(0, 1 << 32, 1 << 16)).tobytes()))
        _BF16_FLOAT = [v[0] for v in _BF16_FLOAT]
    return _BF16_FLOAT


# ------------------------------------------------------------------------------------------ stdlib compute

def dequant_rows(weight: bytes, scale: bytes, dim: int = DIM) -> array:
    """BF16 bits (array 'H', ``n * dim``) of ``n`` rows: ``weight`` n*dim bytes, ``scale`` n*dim/32 bytes."""
    table = dequant_table()
    n = len(weight) // dim
    out = array("H", bytes(2 * n * dim))
    blocks = dim // BLOCK
    for r in range(n):
        base = r * dim
        for b in range(blocks):
            s = scale[r * blocks + b] << 8
            at = base + b * BLOCK
            for k in range(at, at + BLOCK):
                out[k] = table[s | weight[k]]
    return out


def project_rows(x: array, wkv: array, rows: Optional[int] = None, dim: int = DIM) -> array:
    """BF16 bits (array 'H', ``n * 512``) of the projection of the first ``rows`` (default all) rows of ``x`` (BF16
    bits, ``n * dim``) by ``wkv`` (BF16 bits, ``512 * dim``): sequential float32 accumulation, as defined above."""
    floats = bf16_floats()
    out_dim = len(wkv) // dim
    n = len(x) // dim if rows is None else rows
    w = [[floats[b] for b in wkv[j * dim:(j + 1) * dim]] for j in range(out_dim)]
    out = array("H", bytes(2 * n * out_dim))
    cell = array("f", (0.0,))
    lo, hi = 1.1754943508222875e-38, 3.4028234663852886e+38
    for r in range(n):
        xr = [floats[b] for b in x[r * dim:(r + 1) * dim]]
        for j in range(out_dim):
            acc = 0.0
            for a, b in zip(xr, w[j]):
                p = a * b  # exact in float64 (BF16 x BF16); a float32 rounding only outside its normal range
                if not (lo <= abs(p) < hi or p == 0.0):
                    cell[0] = p
                    p = cell[0]
                cell[0] = acc + p
                acc = cell[0]
            cell[0] = acc
            out[r * out_dim + j] = bf16_bits_of_f32_bits(_U32.unpack(cell.tobytes())[0])
    return out


# ------------------------------------------------------------------------------------------ NumPy compute

def numpy_or_none():
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def np_row_ids(np, lookup: Lookup, layer: int, rows: int, seed: int = DEFAULT_SEED):
    """:func:`row_ids` in NumPy (uint64 arithmetic wraps as the definition's mod 2^64): int64 [tokens * 24]."""
    ctx = np.array(lookup.contexts, dtype=np.uint64).reshape(-1, CONTEXT)
    c1, c2 = np.uint64(_C1), np.uint64(_C2)

    def mix(z):
        z = (z ^ (z >> np.uint64(30))) * c1
        z = (z ^ (z >> np.uint64(27))) * c2
        return z ^ (z >> np.uint64(31))

    cols = []
    with np.errstate(over="ignore"):
        for n in NGRAM_ORDERS:
            for h in range(HEADS):
                z = np.full(ctx.shape[0], head_key(seed, layer, n, h), dtype=np.uint64)
                for j in range(CONTEXT - n, CONTEXT):
                    z = mix(z ^ ctx[:, j])
                cols.append(z % np.uint64(rows))
    return np.stack(cols, axis=1).reshape(-1).astype(np.int64)


def _np_tables(np):
    values = np.array([e4m3(c) for c in range(256)], dtype=np.float32)
    scales = np.array([e8m0(c) for c in range(256)], dtype=np.float32)
    return values, scales


def np_bf16_bits(np, x32):
    bits = x32.view(np.uint32).astype(np.uint64)
    out = ((bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)).astype(np.uint16)
    out[np.isnan(x32)] = BF16_NAN
    return out


def np_dequant_rows(np, weight, scale, dim: int = DIM):
    """weight uint8 [n, dim], scale uint8 [n, dim/32] -> BF16 bits uint16 [n, dim]."""
    values, scales = _np_tables(np)
    n = weight.shape[0]
    with np.errstate(all="ignore"):
        x32 = values[weight].reshape(n, dim // BLOCK, BLOCK) * scales[scale][:, :, None]
    return np_bf16_bits(np, x32.reshape(n, dim))


def np_project_rows(np, x, wkv, rows: Optional[int] = None):
    """x BF16 bits uint16 [n, dim], wkv BF16 bits uint16 [512, dim] -> BF16 bits uint16 [rows, 512]."""
    if rows is not None:
        x = x[:rows]
    xf = (x.astype(np.uint32) << np.uint32(16)).view(np.float32)
    wf = (wkv.astype(np.uint32) << np.uint32(16)).view(np.float32)
    acc = np.zeros((xf.shape[0], wf.shape[0]), dtype=np.float32)
    with np.errstate(all="ignore"):
        for k in range(xf.shape[1]):
            acc = acc + xf[:, k:k + 1] * wf[:, k]
    return np_bf16_bits(np, acc)


def bits_bytes(values: Sequence[int]) -> bytes:
    return array("H", values).tobytes()
