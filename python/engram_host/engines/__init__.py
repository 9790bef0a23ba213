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
    model path when it is a local directory.
``ENGRAM_HOST_SOCKET``
    the daemon's socket, as for :func:`engram_host.connect`.
``ENGRAM_HOST_WAIT``
    seconds to keep retrying while the daemon answers ``NOT_READY`` (still loading); default 0.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Dict, Iterable, Optional, Sequence, Tuple

from .. import errors as E

MODE_ENV = "ENGRAM_HOST_TABLES"
EXPECT_ENV = "ENGRAM_HOST_EXPECT"
WAIT_ENV = "ENGRAM_HOST_WAIT"
MODES = ("off", "fallback", "require")

logger = logging.getLogger("engram_host")

_LOCK = threading.Lock()
_SESSIONS: Dict[tuple, object] = {}  # (socket, expect, device) -> ImportedTables, or None after a fallback
_ABSENT = object()


def mode(environ: Optional[dict] = None) -> str:
    """``ENGRAM_HOST_TABLES`` as one of :data:`MODES`; ``ValueError`` for anything else."""
    value = (os.environ if environ is None else environ).get(MODE_ENV, "").strip().lower() or "off"
    if value not in MODES:
        raise ValueError(f"{MODE_ENV}={value!r}: use off, fallback or require")
    return value


def enabled(environ: Optional[dict] = None) -> bool:
    """Whether ``ENGRAM_HOST_TABLES`` asks for the daemon's tables (``fallback`` or ``require``)."""
    return mode(environ) != "off"


def expectation(model: Optional[str], environ: Optional[dict] = None) -> str:
    """What the daemon must serve: ``ENGRAM_HOST_EXPECT``, else ``model`` when it is a local directory."""
    env = os.environ if environ is None else environ
    expect = env.get(EXPECT_ENV, "").strip()
    if expect:
        return expect
    if model and os.path.isdir(model):
        return os.fspath(model)
    raise ValueError(f"{EXPECT_ENV} is not set and the engine's model {model!r} is not a local directory: set "
                     f"{EXPECT_ENV}=MODEL_DIR, the directory that `engram-host serve --checkpoint` serves")


def open_tables(model: Optional[str] = None, device: Optional[int] = None, socket: Optional[str] = None):
    """The daemon's tables imported into this process with GPU views on ``device`` (default: PyTorch's current
    device), once per process and (socket, expectation, device): later calls return the same
    :class:`~engram_host.ImportedTables`, which this module keeps, so the lease and the memory last as long as
    the process. None when ``ENGRAM_HOST_TABLES`` is ``off``, or is ``fallback`` and no daemon listens (said in one
    line on the logger ``engram_host``, once). Every other failure raises (the package's errors)."""
    m = mode()
    if m == "off":
        return None
    expect = expectation(model)
    if device is None:
        import torch
        device = torch.cuda.current_device()
    key = (socket or os.environ.get("ENGRAM_HOST_SOCKET", ""), expect, int(device))
    with _LOCK:
        found = _SESSIONS.get(key)
        if found is _ABSENT:
            return None
        if found is not None:
            return found
        from ..client import connect
        wait = os.environ.get(WAIT_ENV, "").strip() or "0"
        try:
            wait_s = float(wait)
        except ValueError:
            raise ValueError(f"{WAIT_ENV}={wait!r}: give seconds") from None
        try:
            imported = connect(socket, expect=expect, device=int(device), wait=wait_s)
        except E.DaemonAbsent as absent:
            if m != "fallback":
                raise
            _SESSIONS[key] = _ABSENT
            logger.warning("engram-host: %s; this engine loads its Engram tables from the checkpoint itself (start "
                           "`engram-host serve --checkpoint %s`, or set %s=off to stop asking)", absent, expect,
                           MODE_ENV)
            return None
        imported.on_daemon_gone(lambda reason: logger.warning(
            "engram-host: the daemon is gone (%s); this engine keeps its Engram tables, and its next start needs "
            "a daemon (or %s=fallback to load them itself)", reason, MODE_ENV))
        _SESSIONS[key] = imported
        return imported


def forget_sessions() -> None:
    """Drops the imports :func:`open_tables` keeps (closing them); for tests. Tensors handed out stay valid."""
    with _LOCK:
        sessions = list(_SESSIONS.values())
        _SESSIONS.clear()
    for s in sessions:
        if s is not None and s is not _ABSENT:
            s.close()


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


def layer_tables(imported, layer: int, dim: int, block_size: int) -> Tuple[object, object]:
    """Layer ``layer``'s weight and scale :class:`~engram_host.Table`, checked: F8_E4M3 ``[rows, dim]`` and
    F8_E8M0 ``[rows, dim // block_size]`` with the same rows."""
    w = imported[table_name(imported.tables, layer, "weight")]
    s = imported[table_name(imported.tables, layer, "scale")]
    if w.dtype != "F8_E4M3" or len(w.shape) != 2 or w.shape[1] != dim:
        raise E.EngramHostError(f"{w.name} is {w.dtype} {list(w.shape)}; the engine expects F8_E4M3 [rows, {dim}]")
    if s.dtype != "F8_E8M0" or tuple(s.shape) != (w.shape[0], dim // block_size):
        raise E.EngramHostError(f"{s.name} is {s.dtype} {list(s.shape)}; the engine expects F8_E8M0 "
                                f"[{w.shape[0]}, {dim // block_size}]")
    return w, s


def gpu_rows(table, start: int, rows: int, dtype_name: str):
    """Rows ``[start, start + rows)`` of ``table``'s GPU view as a ``[rows, cols]`` tensor of ``torch.<dtype_name>``:
    a view (``narrow``) of the same memory, no copy, which keeps the import alive."""
    import torch
    total, cols = table.shape
    if not (0 <= start and rows >= 0 and start + rows <= total):
        raise E.EngramHostError(f"{table.name}: rows [{start}, {start + rows}) are outside its {total} rows")
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


__all__ = ["MODE_ENV", "EXPECT_ENV", "WAIT_ENV", "MODES", "mode", "enabled", "expectation", "open_tables", "forget_sessions",
           "table_name", "layer_tables", "gpu_rows", "describe", "skip_weight", "head_row_range", "even_row_range"]
