"""The engine's session with the daemon (docs/engines.md): whether to take the tables (``ENGRAM_HOST_TABLES``,
``ENGRAM_HOST_EXPECT``, ``ENGRAM_HOST_WAIT``), the one import per process and (socket, expectation, device) that
:func:`open_tables` keeps, and how the ranks of one engine decide together (:func:`serve_together`).
"""

from __future__ import annotations

import logging
import math
import os
import threading
from typing import Callable, Dict, Optional

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
