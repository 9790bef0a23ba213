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

import logging
import math
import os
import threading
from typing import Callable, Dict, Iterable, Optional, Sequence, Tuple

from .. import errors as E

MODE_ENV = "ENGRAM_HOST_TABLES"
EXPECT_ENV = "ENGRAM_HOST_EXPECT"
WAIT_ENV = "ENGRAM_HOST_WAIT"
MODES = ("off", "fallback", "require")

logger = logging.getLogger("engram_host")

_LOCK = threading.Lock()
_SESSIONS: Dict[tuple, object] = {}  # (socket, expect, device) -> ImportedTables, or _ABSENT after a fallback
_ABSENT = object()
_SAID = set()  # the one-line notices already said in this process

#: What a rank got, as :func:`serve_together` reduces it over the engine's group (the minimum wins).
FAILED, LOCAL, SERVED = 0, 1, 2


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
    """What the daemon must serve: ``ENGRAM_HOST_EXPECT``, else ``model`` when it is a local directory;
    ``ValueError`` (one line naming ``ENGRAM_HOST_EXPECT``) for neither."""
    env = os.environ if environ is None else environ
    expect = env.get(EXPECT_ENV, "").strip()
    if expect:
        return expect
    if model and os.path.isdir(model):
        return os.fspath(model)
    raise ValueError(f"{EXPECT_ENV} is not set and the engine's model {model!r} is not a local directory: set "
                     f"{EXPECT_ENV}=MODEL_DIR, the directory that `engram-host serve --checkpoint` serves")


def wait_seconds(environ: Optional[dict] = None) -> float:
    """``ENGRAM_HOST_WAIT`` as seconds: unset or empty is 0; ``ValueError`` for anything but a finite number of
    seconds, 0 or more."""
    raw = (os.environ if environ is None else environ).get(WAIT_ENV, "").strip() or "0"
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{WAIT_ENV}={raw!r}: give seconds, 0 or more (e.g. {WAIT_ENV}=600)")
    return value


def _say_once(key, message: str, *args) -> None:
    with _LOCK:
        if key in _SAID:
            return
        _SAID.add(key)
    logger.warning(message, *args)


def open_tables(model: Optional[str] = None, device: Optional[int] = None, socket: Optional[str] = None):
    """The daemon's tables imported into this process with GPU views on ``device`` (default: PyTorch's current
    device), once per process and (socket, expectation, device): later calls return the same
    :class:`~engram_host.ImportedTables`, which this module keeps, so the lease and the memory last as long as
    the process. None when ``ENGRAM_HOST_TABLES`` is ``off``, or is ``fallback`` and either no daemon listens or
    the engine's model is no local directory and ``ENGRAM_HOST_EXPECT`` is unset (each said in one line on the
    logger ``engram_host``, once). Every other failure raises (the package's errors; ``ValueError`` for a bad
    ``ENGRAM_HOST_TABLES``, ``ENGRAM_HOST_WAIT`` or, in ``require``, a missing ``ENGRAM_HOST_EXPECT``)."""
    m = mode()
    if m == "off":
        return None
    wait_s = wait_seconds()
    try:
        expect = expectation(model)
    except ValueError as missing:
        if m != "fallback":
            raise ValueError(f"{missing} ({MODE_ENV}=require)") from None
        _say_once(("expect", model), "engram-host: %s; this engine loads its Engram tables from the checkpoint "
                  "itself (%s=fallback)", missing, MODE_ENV)
        return None
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


def verdict(mine: int, lowest: int) -> str:
    """What a rank does once the engine's group has reduced what each rank got (:data:`FAILED`, :data:`LOCAL`,
    :data:`SERVED`) to its minimum ``lowest``: ``"serve"`` (every rank got the tables), ``"local"`` (some rank
    got nothing in ``fallback`` and none failed: every rank loads the tables itself), ``"raise"`` (some rank
    failed: every rank raises, its own error if it has one). ``mine`` is this rank's own state."""
    if not FAILED <= mine <= SERVED or not FAILED <= lowest <= mine:
        raise ValueError(f"states {mine} (this rank) and {lowest} (the group's minimum) are not of 0..2 with the "
                         "minimum at most this rank's")
    return {SERVED: "serve", LOCAL: "local", FAILED: "raise"}[lowest]


def group_min(value: int, group) -> int:
    """The minimum of ``value`` over the ranks of ``group``, a CPU (gloo) ``torch.distributed`` process group
    (vLLM's and SGLang's ``GroupCoordinator.cpu_group``): one all-reduce that every rank of the group calls."""
    import torch
    import torch.distributed as dist
    t = torch.tensor([int(value)], dtype=torch.int32)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=group)
    return int(t.item())


def serve_together(take: Callable[[], Optional[tuple]], group=None):
    """Runs ``take`` (this rank's attempt: tensors, or None to load locally, or an exception) and, with ``group``,
    decides with the other ranks of the engine's process group through one all-reduce (:func:`group_min`) that
    every rank joins, whatever its attempt did: the tensors only when every rank got them; None on every rank
    when some rank got nothing (``fallback``), said in one line on a rank that had them; when some rank failed,
    its error on that rank and on every other an :class:`~engram_host.EngramHostError` saying so. Without
    ``group`` the rank decides alone."""
    result = error = None
    try:
        result = take()
        state = SERVED if result is not None else LOCAL
    except Exception as e:  # every rank must reach the all-reduce, whatever its attempt raised
        error, state = e, FAILED
    lowest = state if group is None else group_min(state, group)
    action = verdict(state, lowest)
    if action == "serve":
        return result
    if action == "local":
        if state == SERVED:
            _say_once("local", "engram-host: another rank of this engine's group cannot take its Engram tables from "
                      "the daemon and loads them itself, so this rank loads them itself too (%s=fallback: every "
                      "rank decides together)", MODE_ENV)
        return None
    if error is not None:
        raise error
    raise E.EngramHostError(f"engram-host: another rank of this engine's group failed to take its Engram tables "
                            f"from the daemon (its own error says why), so this rank stops too: every rank decides "
                            f"together (fix that rank's error, or set {MODE_ENV}=off)")


def forget_sessions() -> None:
    """Drops the imports :func:`open_tables` keeps (closing them); for tests. Tensors handed out stay valid."""
    with _LOCK:
        sessions = list(_SESSIONS.values())
        _SESSIONS.clear()
    for s in sessions:
        if s is not None and s is not _ABSENT:
            s.close()
    with _LOCK:
        _SAID.clear()


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
