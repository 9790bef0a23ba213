"""The reference engine's PyTorch part, its lowest floor: PyTorch and safetensors found (:class:`Unavailable` when
not), and :mod:`.spec`'s definition as tensor operations on the GPU: the row ids hashed from the contexts of a
lookup (int64 arithmetic that wraps as the definition's mod 2^64), the rows gathered, dequantised to BF16 and
projected by ``wkv`` (:mod:`.gpu` says how, and why the results are bit-exact)."""

from __future__ import annotations

import os

from . import spec


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
