""":func:`connect`: its arguments checked, then the import in order (docs/protocol.md): the handshake, IMPORT
retried while the daemon loads (NOT_READY) or restarts (STOPPING), the MANIFEST checked, every region attached,
and the tables handed out; a failure at any step leaves nothing open.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Optional, Sequence

from .. import _memory, _paths, _wire, errors as E
from .attach import _attach
from .attach_cuda import _GpuPrep, _warm_torch_cuda
from .attachment import _Attachment
from .background import PendingTables
from .cancel import _Cancel, _NOT_CANCELLABLE
from .expectations import HEADERS_ONLY, _expectation_later, _say, expectation_of
from .handshake import _Connected, _handshake, _refusal
from .imported import ImportedTables
from .manifest import _mismatch, _served_mismatch
from .options import DEFAULT_TIMEOUT, NOT_READY_RETRY, _ms, _trusted_uids, check_arguments
from .tables import Table
from .transport import _receive


def connect(socket: Optional[str] = None, expect=None, device: Optional[int] = None, cpu_view: bool = False,
            wait: float = 0.0, daemon_uid=None, *, instance: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT,
            populate: bool = False, name: str = "engram_host (python)", tables: Sequence[str] = (),
            accept_future_write_seal: bool = False, background: bool = False):
    """Imports the daemon's tables. ``socket``: a path or template (default as the Java CLI: ``--socket``,
    ``$ENGRAM_HOST_SOCKET``, then the per-user default). ``expect``: see :func:`expectation_of`; ``tables``:
    with ``expect=PATH``, globs choosing its tables, as ``serve --tables``. ``device``: a
    GPU ordinal for GPU views (memfds registered read-only, cuda-vmm imported with read-only access, the
    daemon's device tensors of that GPU included), or None for CPU views only. ``cpu_view``: also map
    cuda-vmm tables for the CPU, and make :meth:`Table.to_torch` return CPU tensors. ``wait``: seconds to keep
    retrying while the daemon is starting (no socket yet, or one nobody listens on yet: every 100 ms), loading
    (NOT_READY) or stopping for a restart (STOPPING: on a new connection); with ``wait=0`` (the default) no daemon
    raises :class:`DaemonAbsent` at once. ``daemon_uid``: a uid (or several) to trust besides root's and this process's own.
    ``timeout``: seconds to wait for each answer. ``accept_future_write_seal``: also take memfds sealed
    FUTURE_WRITE instead of WRITE, as a daemon of an older build seals them (only during an upgrade:
    FUTURE_WRITE leaves writable a mapping made before it; docs/security.md).

    ``background``: return at once a :class:`PendingTables` while the whole import (the socket's connect, the
    handshake, the expected checkpoint's headers, the manifest, the attach) runs on a thread of its own; its
    :meth:`PendingTables.wait` returns these :class:`ImportedTables` or raises what this call would have raised.
    Arguments of the wrong type or value raise here, before any thread starts.

    Raises :class:`DaemonAbsent` when no daemon listens, the code's subclass of :class:`EngramHostError` for a
    daemon's ERROR, :class:`DaemonNotTrusted`, :class:`ProtocolViolation` or :class:`NoAnswer`.
    """
    return _begin(True, socket, expect, device, cpu_view, wait, daemon_uid, instance=instance, timeout=timeout,
                  populate=populate, name=name, tables=tables, accept_future_write_seal=accept_future_write_seal,
                  background=background)


def _begin(wait_for_start: bool, socket: Optional[str] = None, expect=None, device: Optional[int] = None,
           cpu_view: bool = False, wait: float = 0.0, daemon_uid=None, *, instance: Optional[str] = None,
           timeout: float = DEFAULT_TIMEOUT, populate: bool = False, name: str = "engram_host (python)",
           tables: Sequence[str] = (), accept_future_write_seal: bool = False, background: bool = False):
    """:func:`connect`; ``wait_for_start`` False: a daemon absent is final at once, whatever ``wait`` says (for
    :func:`connect_or_load`, whose fallback it decides)."""
    t_start = time.perf_counter_ns()
    check_arguments(device, wait, timeout)
    if not background:
        expectation = expectation_of(expect, tables)
        path = _paths.socket_path(socket, instance, device)
        return _connect(path, expectation, device, cpu_view, wait, daemon_uid, timeout, populate, name,
                        accept_future_write_seal, t_start, _NOT_CANCELLABLE, wait_for_start)
    # On the caller's thread: only what checks the arguments. A checkpoint's headers (expect=PATH) are read on the
    # worker, and a socket template with {device_uuid} (which asks the CUDA driver) is resolved there.
    _trusted_uids(daemon_uid)
    expectation = _expectation_later(expect, tables)
    if "{device_uuid}" in _paths.template(socket):
        # the template's form is checked now with a UUID of the real one's length; the driver is asked on the worker
        _paths.socket_path_checked(socket, instance, device)
        path = None
    else:
        path = _paths.socket_path(socket, instance, device)
    shown = path if path is not None else _paths.template(socket)

    def run(token: _Cancel) -> ImportedTables:
        resolved = path if path is not None else _paths.socket_path(socket, instance, device)
        wanted = expectation() if callable(expectation) else expectation
        token.check()
        return _connect(resolved, wanted, device, cpu_view, wait, daemon_uid, timeout, populate, name,
                        accept_future_write_seal, t_start, token, wait_for_start)

    return PendingTables(run, shown)


def _reconnect(path: str, daemon_uid, timeout: float, name: str, token: "_Cancel", deadline: float) -> _Connected:
    """A new handshake after a STOPPING answer: while ``deadline`` (time.monotonic) lasts, a socket nobody listens
    on yet (the stopped daemon removed it; its successor has not bound it) is tried again every 100 ms."""
    while True:
        token.sleep(NOT_READY_RETRY)
        try:
            return _handshake(path, daemon_uid, timeout, name, token)
        except E.DaemonAbsent:
            if time.monotonic() >= deadline:
                raise


def _connect(path: str, expectation: _wire.Expectation, device: Optional[int], cpu_view: bool, wait: float,
             daemon_uid, timeout: float, populate: bool, name: str, accept_future_write_seal: bool, t_start: int,
             token: "_Cancel", wait_for_start: bool = True) -> ImportedTables:
    """:func:`connect`'s import, its arguments checked; ``token`` says when a background connect was closed (it is
    looked at between the steps, and the socket shut down to wake a wait for the daemon's answer)."""
    gpu = _GpuPrep(device) if device is not None else None
    torch_warm = None
    if device is not None and "torch" in sys.modules:
        torch_warm = threading.Thread(target=_warm_torch_cuda, name="engram-torch-cuda-init", daemon=True)
        torch_warm.start()
    timings: dict = {}
    deadline = time.monotonic() + wait
    try:
        t0 = time.perf_counter_ns()
        while True:
            try:
                c = _handshake(path, daemon_uid, timeout, name, token)
                break
            except E.DaemonAbsent:
                # a daemon still starting (its socket not bound yet): within the wait, asked again every 100 ms
                if not wait_for_start or time.monotonic() >= deadline:
                    raise
                token.sleep(NOT_READY_RETRY)
        timings["handshake_ms"] = _ms(time.perf_counter_ns() - t0)
    except BaseException:
        if gpu is not None:
            gpu.discard()
        raise
    attachment = _Attachment()
    fds: list = []
    try:
        t0 = time.perf_counter_ns()
        while True:
            token.check()
            c.channel.send(_wire.encode_import(c.channel.version, -1 if device is None else device, expectation))
            msg = _receive(c.channel, path, c.channel.version)
            fds = msg.fds
            if msg.msg_type == _wire.ERROR:
                reply = _wire.decode_error(_wire.Reader(msg.body, "ERROR"))
                if reply.code == E.ErrorCode.NOT_READY and time.monotonic() < deadline:
                    token.sleep(NOT_READY_RETRY)
                    continue
                if reply.code == E.ErrorCode.STOPPING and time.monotonic() < deadline:
                    # a restart under way: the daemon closes this connection; the next one answers on a new one
                    token.close(c.channel.sock)
                    c = _reconnect(path, daemon_uid, timeout, name, token, deadline)
                    continue
                if reply.code == E.ErrorCode.FINGERPRINT_MISMATCH:
                    raise _mismatch(reply, path, expectation)
                raise _refusal(reply)
            if msg.msg_type != _wire.MANIFEST:
                raise _wire.ProtocolError(f"expected MANIFEST, got {_wire.type_name(msg.msg_type)}")
            break
        manifest = _wire.decode_manifest(_wire.Reader(msg.body, "MANIFEST"), len(fds), _memory.PAGE_SIZE)
        why, headers_only = _served_mismatch(manifest, expectation)
        if why is not None:
            raise E.ProtocolViolation(f"the daemon on {path} answered an expectation it does not meet: {why}")
        timings["manifest_ms"] = _ms(time.perf_counter_ns() - t0)
        if gpu is not None:
            t0 = time.perf_counter_ns()
            attachment.device = gpu.wait()
            timings["gpu_prepare_ms"] = _ms(gpu.nanos)
            timings["gpu_prepare_wait_ms"] = _ms(time.perf_counter_ns() - t0)
            gpu = None
        if torch_warm is not None:
            # PyTorch's start-up ran beside the context's creation; it ends before the attach, whose long driver
            # calls (cuMemSetAccess, cuMemHostRegister) it would otherwise run into.
            t0 = time.perf_counter_ns()
            torch_warm.join()
            timings["torch_init_wait_ms"] = _ms(time.perf_counter_ns() - t0)
        t0 = time.perf_counter_ns()
        cpu, gpu_addr, region_timings = _attach(manifest, fds, attachment, device, cpu_view, populate, path, timings,
                                                accept_future_write_seal, token.check)
        fds = []
        timings["attach_ms"] = _ms(time.perf_counter_ns() - t0)
        token.check()
        timings["total_ms"] = _ms(time.perf_counter_ns() - t_start)
        # the daemon's pid as SO_PEERCRED gave it, in this process's pid namespace (0 when not visible from it);
        # WELCOME's pid (c.welcome.pid) is the daemon's own view, which from another namespace names another process
        if headers_only:  # said once the tables are the engine's, not for an import refused after all
            _say(HEADERS_ONLY)
        token.release(c.channel.sock)  # the connection is the lease now: a cancel no longer shuts it down
        imported = ImportedTables("daemon", manifest.fingerprint_sha256.hex(), attachment, device, cpu_view,
                                  c.channel, c.welcome, c.peer_pid, timings, region_timings)
        for e, run in zip(manifest.tables, _wire.table_runs(manifest)):
            base_cpu = cpu[e.region] if e.region >= 0 else 0
            base_gpu = gpu_addr[e.region] if e.region >= 0 else 0
            # a run of regions is mapped back to back (one VmmImport, in region order): its bytes are contiguous
            imported.tables[e.name] = Table(imported, e, base_cpu + e.offset if base_cpu else 0,
                                            base_gpu + e.offset if base_gpu else 0, e.digest,
                                            _wire.KIND_BACKENDS[e.kind], run)
        return imported
    except _wire.ProtocolError as e:
        _abandon(c, fds, attachment, gpu, token)
        raise E.ProtocolViolation(f"the daemon on {path} broke the protocol: {e}") from None
    except BaseException:
        _abandon(c, fds, attachment, gpu, token)
        raise


def _abandon(c: _Connected, fds: list, attachment: _Attachment, gpu: Optional[_GpuPrep], token: "_Cancel") -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    attachment.free_now()
    if gpu is not None:
        gpu.discard()
    token.close(c.channel.sock)
