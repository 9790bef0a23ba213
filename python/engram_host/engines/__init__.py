"""What the engine patches of deploy/engines/ call: the tensors each engine's Engram seam expects, taken from an
engram-host daemon (docs/engines.md).

Importing this package, or :mod:`engram_host.engines.vllm` and :mod:`engram_host.engines.sglang`, imports neither
PyTorch nor an engine: both are imported inside the functions that need them.

Whether an engine takes its tables from the daemon is the environment's choice, read once per call of
:func:`open_tables`:

``ENGRAM_HOST_TABLES``
    ``off`` (or unset, or empty): the patched engine behaves as the unpatched one. ``fallback``: take the tables
    from the daemon; when no daemon listens (:class:`~engram_host.DaemonAbsent`), say so in one line and let the
    engine load them itself. ``require``: take them from the daemon or fail. In both modes a daemon that answers
    and refuses (a fingerprint mismatch, ``NOT_ALLOWED``, ``BUSY``, an untrusted daemon, a timeout) raises.
``ENGRAM_HOST_EXPECT``
    the model directory the daemon must serve (``expect=`` of :func:`engram_host.connect`); default: the engine's
    model path when it is a local directory. A model given as a Hugging Face id needs it: without it ``fallback``
    says so in one line and lets the engine load the tables itself, and ``require`` raises.
``ENGRAM_HOST_SOCKET``
    the daemon's socket, as for :func:`engram_host.connect`.
``ENGRAM_HOST_WAIT``
    seconds (0 or more) to keep retrying while the daemon answers ``NOT_READY`` (still loading); default 0.

The ranks of one engine decide together (:func:`serve_together`): given the engine's CPU process group, every
rank says what it got (the tables, nothing in ``fallback``, or an error) and all of them take the tables only
when every one got them; otherwise all load the tables themselves (``fallback``) or all raise. An engine whose
storage runs collectives (vLLM's ``DPSharedEngramStorage``, SGLang's shared host table) would otherwise hang
when one rank is served and another is not.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence, Tuple

from .. import errors as E
# The session with the daemon (the environment's choice, the imports kept, the ranks' decision): its own module.
from .session import (_ABSENT, _LOCK, _SAID, _SESSIONS, EXPECT_ENV, FAILED, LOCAL, MODE_ENV, MODES,  # noqa: F401
                      SERVED, WAIT_ENV, enabled, expectation, forget_sessions, group_min, logger, mode,
                      open_tables, serve_together, verdict, wait_seconds)


def table_name(names: Iterable[str], layer: int, part: str) -> str:
    """The one served name ``layers.LAYER.engram.embed.PART`` under whatever prefix ending in '.' it has."""
    suffix = f"layers.{layer}.engram.embed.{part}"
    names = list(names)
    found = [n for n in names if n == suffix or n.endswith("." + suffix)]
    if len(found) != 1:
        what = "no table" if not found else f"{len(found)} tables ({', '.join(found)})"
        raise E.EngramHostError(f"the daemon serves {what} named {suffix} (under any prefix); it serves: "
                                f"{', '.join(names) or 'nothing'}")
    return found[0]


def layer_tables(imported, layer: int, dim: int, block_size: int, num_embeddings: Optional[int] = None,
                 start: int = 0, rows: Optional[int] = None) -> Tuple[object, object]:
    """Layer ``layer``'s weight and scale :class:`~engram_host.Table`, checked against what the engine expects:
    F8_E4M3 ``[num_embeddings, dim]`` and F8_E8M0 ``[num_embeddings, dim // block_size]`` (any same rows when
    ``num_embeddings`` is None), and this rank's rows ``[start, start + rows)`` inside them.
    :class:`~engram_host.EngramHostError` naming the table otherwise (a daemon serving only one of the two
    tables, another layer's, another shape)."""
    if dim < 1 or block_size < 1 or dim % block_size:
        raise ValueError(f"dim {dim} is not a positive multiple of the block size {block_size}")
    w = imported[table_name(imported.tables, layer, "weight")]
    s = imported[table_name(imported.tables, layer, "scale")]
    if w.dtype != "F8_E4M3" or len(w.shape) != 2 or w.shape[1] != dim:
        raise E.EngramHostError(f"{w.name} is {w.dtype} {list(w.shape)}; the engine expects F8_E4M3 [rows, {dim}]")
    if s.dtype != "F8_E8M0" or tuple(s.shape) != (w.shape[0], dim // block_size):
        raise E.EngramHostError(f"{s.name} is {s.dtype} {list(s.shape)}; the engine expects F8_E8M0 "
                                f"[{w.shape[0]}, {dim // block_size}]")
    if num_embeddings is not None and w.shape[0] != num_embeddings:
        raise E.EngramHostError(f"{w.name} has {w.shape[0]} rows; the engine's config says {num_embeddings} (serve "
                                f"the engine's own model directory)")
    if rows is not None:
        check_rows(w, start, rows)
    return w, s


def check_rows(table, start: int, rows: int) -> None:
    """:class:`~engram_host.EngramHostError` unless rows ``[start, start + rows)`` lie inside ``table``."""
    total = table.shape[0]
    if not (0 <= start and rows >= 0 and start + rows <= total):
        raise E.EngramHostError(f"{table.name}: rows [{start}, {start + rows}) are outside its {total} rows")


def gpu_rows(table, start: int, rows: int, dtype_name: str):
    """Rows ``[start, start + rows)`` of ``table``'s GPU view as a ``[rows, cols]`` tensor of ``torch.<dtype_name>``:
    a view (``narrow``) of the same memory, no copy, which keeps the import alive."""
    import torch
    total, cols = table.shape
    check_rows(table, start, rows)
    t = table.to_torch(cpu=False)
    u8 = (t if t.dtype == torch.uint8 else t.view(torch.uint8)).reshape(total, -1)
    return u8.narrow(0, start, rows).view(getattr(torch, dtype_name))


def describe(tensor) -> dict:
    """What PyTorch reports of ``tensor``: dtype, shape, strides, device, data_ptr, is_pinned, storage_offset and
    nbytes, for the docs and the tests."""
    return {
        "dtype": str(tensor.dtype).replace("torch.", ""),
        "shape": list(tensor.shape),
        "strides": list(tensor.stride()),
        "device": str(tensor.device),
        "data_ptr": tensor.data_ptr(),
        "is_pinned": bool(tensor.is_pinned()),
        "storage_offset": tensor.storage_offset(),
        "nbytes": tensor.numel() * tensor.element_size(),
    }


def skip_weight(param, loaded_weight, *args, **kwargs) -> None:
    """A weight loader that loads nothing and never touches ``loaded_weight``: the patches give it to parameters
    whose memory is the daemon's (read-only; a write would fault)."""
    return None


def head_row_range(head_sizes: Sequence[int], num_shards: int, shard_rank: int) -> Tuple[int, int]:
    """vLLM's rows of hash-head shard ``shard_rank`` of ``num_shards``: whole heads, ``ceil(heads / shards)`` per
    shard, the last shard taking what is left (ParallelEngramEmbedding.__init__ of
    vllm/models/deepseek_v41/common/engram.py). ``ValueError`` where the engine's assert fails."""
    heads = len(head_sizes)
    if num_shards < 1 or not 0 <= shard_rank < num_shards:
        raise ValueError(f"shard {shard_rank} of {num_shards}")
    part = -(-heads // num_shards)
    if not (heads and (num_shards - 1) * part < heads):
        raise ValueError(f"{heads} hash heads over {num_shards} shards leave a shard without heads")
    head_start = shard_rank * part
    return sum(head_sizes[:head_start]), sum(head_sizes[:head_start + part])


def even_row_range(num_rows: int, tp_size: int, tp_rank: int) -> Tuple[int, int]:
    """SGLang's rows of TP rank ``tp_rank`` of ``tp_size``: ``[rows * r // tp, rows * (r + 1) // tp)``
    (EngramEmbedding.__init__ of python/sglang/srt/layers/engram.py)."""
    if tp_size < 1 or not 0 <= tp_rank < tp_size:
        raise ValueError(f"rank {tp_rank} of {tp_size}")
    return num_rows * tp_rank // tp_size, num_rows * (tp_rank + 1) // tp_size


__all__ = ["MODE_ENV", "EXPECT_ENV", "WAIT_ENV", "MODES", "FAILED", "LOCAL", "SERVED", "mode", "enabled", "expectation",
           "wait_seconds", "open_tables", "verdict", "group_min", "serve_together", "forget_sessions", "table_name",
           "layer_tables", "check_rows", "gpu_rows", "describe", "skip_weight", "head_row_range", "even_row_range"]
