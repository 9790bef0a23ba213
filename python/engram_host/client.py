"""The client: connect to the daemon, check it, import the tables, and hand them out as zero-copy views.

What happens in :func:`connect`, in order (docs/protocol.md):

1. the socket path is resolved as the Java CLI resolves it; ``ENOENT`` or ``ECONNREFUSED`` at ``connect`` is
   :class:`DaemonAbsent` (no daemon listens);
2. the daemon's uid (``SO_PEERCRED``) must be root's, this process's euid, or one listed in ``daemon_uid``;
3. HELLO offering versions 1 to 2; WELCOME must be encoded in an offered version, and in version 2 name the same
   uid as ``SO_PEERCRED``; an ERROR sent at accept (NOT_ALLOWED, BUSY) is raised as its subclass;
4. IMPORT with the expectation, retried every 100 ms while the daemon answers NOT_READY and ``wait`` lasts; a
   STOPPING answer within ``wait`` (a restart under way) is retried on a new connection (steps 1-3 again), a
   socket nobody listens on meanwhile tried again every 100 ms;
5. MANIFEST: every bound checked, one fd per region, the served fingerprint must meet the expectation;
6. every memfd's seals and size are checked before any region is mapped; memfds are mapped ``PROT_READ`` (and
   registered with CUDA, read-only, for a GPU view); cuda-vmm fds are imported into one VA range with read-only
   GPU access (and a HOST_NUMA CPU view with ``cpu_view``); the fds are closed once attached;
7. the connection stays open as the lease until :meth:`ImportedTables.close`, which sends BYE.
"""

from __future__ import annotations

import errno
import grp
import hashlib
import os
import pwd
import re
import select
import socket as _socket
import stat
import struct
import sys
import threading
import time
import weakref
from typing import Callable, Iterable, Optional, Sequence, Union

from . import _memory, _paths, _wire
from . import errors as E

DEFAULT_TIMEOUT = 10.0
NOT_READY_RETRY = 0.1

PathLike = Union[str, "os.PathLike[str]"]


# ------------------------------------------------------------------------------------------ expectations


def expectation_of(expect, tables: Sequence[str] = ()) -> _wire.Expectation:
    """``expect`` as connect() takes it: None (any), an :class:`Expectation`, a 64-hex-digit SHA-256, raw
    canonical fingerprint bytes (version 1 or 2), or a checkpoint: a path or a list of paths, whose structured
    fingerprint is computed here as :func:`expect_checkpoint` does, with ``tables`` (globs, as ``--tables``)
    choosing the tables; ``tables`` goes with a checkpoint only."""
    if _is_checkpoint(expect):
        return expect_checkpoint([expect] if isinstance(expect, (str, os.PathLike)) else list(expect), tables)
    if tables:
        raise ValueError("tables= chooses the tables of an expected checkpoint: give expect=PATH with it, or leave "
                         "tables out")
    if expect is None:
        return _wire.Expectation.any()
    if isinstance(expect, _wire.Expectation):
        return expect
    if isinstance(expect, (bytes, bytearray, memoryview)):
        return _wire.Expectation.structured(bytes(expect))
    if _is_sha256(expect):
        return _wire.Expectation.sha256(expect.lower())
    raise TypeError(f"expect: {type(expect).__name__} is none of None, a SHA-256 hex string, fingerprint bytes, "
                    "a checkpoint path or a list of them")


def _is_sha256(expect) -> bool:
    return isinstance(expect, str) and len(expect) == 64 and all(c in "0123456789abcdefABCDEF" for c in expect)


def _is_checkpoint(expect) -> bool:
    """Whether ``expect`` names a checkpoint: a path (not a SHA-256), or a list of paths."""
    return (isinstance(expect, os.PathLike) or (isinstance(expect, str) and not _is_sha256(expect))
            or isinstance(expect, (list, tuple)))


def expect_sha256(hex_digest: str) -> _wire.Expectation:
    """Expect the fingerprint whose SHA-256 (short form) is ``hex_digest``."""
    return _wire.Expectation.sha256(hex_digest)


def expect_checkpoint(paths: Sequence[PathLike], tables: Sequence[str] = (), backend: str = "") -> _wire.Expectation:
    """Expect the structured fingerprint of this checkpoint as ``serve --tables ... --backend ...`` would load it
    (docs/checkpoints.md): the tables chosen by ``tables`` (globs), else by the model's config.json
    (engram_layer_ids), else all of them; and the content identities the checkpoint
    carries, from a version 2 digest record beside it or a Hugging Face snapshot's links. Nothing is hashed."""
    from . import checkpoint
    with checkpoint.open_checkpoint([os.fspath(p) for p in paths]) as cp:
        return _wire.Expectation.structured(_served(cp, tables, backend).encoded)


def _served(cp, tables: Sequence[str], backend: str):
    """:func:`checkpoint.served_fingerprint`, the content identity's notes said through the logger. (The selection's
    warning, every tensor selected, is ``serve``'s and ``inspect``'s to say: an expectation that selects otherwise
    than the daemon is refused with one line naming both selections. The Java client says the same.)"""
    from . import checkpoint
    served = checkpoint.served_fingerprint(cp, list(tables), backend)
    for line in served.identity.notes:
        _say(line)
    return served


#: What the client says when the daemon's fingerprint and the expectation share no content identity.
HEADERS_ONLY = ("compared headers only: neither side has content identity in common; write a digest record "
                "(engram-host inspect --write-digests PATH) or serve from a Hugging Face snapshot to compare content")


def _say(line: str) -> None:
    """One line through the package's logger (``engram_host``, level WARNING): on stderr unless the application
    configured logging, and on stderr for ``python -m engram_host``. logging is imported on first use."""
    import logging
    logging.getLogger("engram_host").warning(line)


# ------------------------------------------------------------------------------------------ the owner


class _Export:
    """A token handed to each view (tensor, array, buffer): while one lives, the import's memory stays."""
    __slots__ = ("__weakref__", "attachment")

    def __init__(self, attachment: "_Attachment"):
        self.attachment = attachment


class _Attachment:
    """The one owner of an import's native resources: memfd mappings, CUDA registrations, VMM imports,
    anonymous memory, the retained primary context. They are freed once, when the :class:`ImportedTables` has
    been closed and no view handed out is alive; before anything is unmapped or unregistered the device is
    synchronised, so no kernel still reading it is cut off."""

    def __init__(self):
        self._lock = threading.Lock()
        self._undo: list[tuple[str, Callable[[], None]]] = []
        self._exports = 0
        self._held = True
        self.freed = False
        self.device = None  # a _cuda.Device once a GPU resource exists
        self.release_errors: list[str] = []

    def add(self, what: str, undo: Callable[[], None]) -> None:
        self._undo.append((what, undo))

    def export(self) -> _Export:
        with self._lock:
            if self.freed:
                raise E.EngramHostError("the imported tables are closed and their memory is freed")
            self._exports += 1
        token = _Export(self)
        weakref.finalize(token, self._unexport)
        return token

    def live_exports(self) -> int:
        return self._exports

    def _unexport(self) -> None:
        with self._lock:
            self._exports -= 1
            free = not self._held and self._exports == 0 and not self.freed
            if free:
                self.freed = True
        if free:
            self._free()

    def release(self) -> None:
        """The ImportedTables lets go; frees now unless views are still alive."""
        with self._lock:
            if not self._held:
                return
            self._held = False
            free = self._exports == 0 and not self.freed
            if free:
                self.freed = True
        if free:
            self._free()

    def free_now(self) -> None:
        """For a failed import: frees whatever was attached, views or not (none were handed out)."""
        with self._lock:
            self._held = False
            if self.freed:
                return
            self.freed = True
        self._free()

    def _free(self) -> None:
        if self.device is not None:
            try:
                self.device.synchronize()
            except Exception as e:  # still free what we can; the error is kept for the caller
                self.release_errors.append(f"synchronize before release: {e}")
        for what, undo in reversed(self._undo):
            try:
                undo()
            except Exception as e:
                self.release_errors.append(f"{what}: {e}")
        self._undo.clear()
        self.device = None  # the primary context's retain goes with the last reference (_cuda.Device)
        if self.release_errors:
            import sys
            print(f"engram_host: releasing the imported tables: {'; '.join(self.release_errors)}", file=sys.stderr)


# ------------------------------------------------------------------------------------------ tables


class Table:
    """One imported table: ``name``, ``dtype`` (the safetensors dtype string), ``shape``, ``nbytes``,
    ``digest`` (the daemon's engram digest v1), ``backend``, ``numa_node``, ``device`` (the GPU the table's
    memory lives on, or None for host memory), ``region`` (its first region, -1 for none) and ``regions`` (every
    region it lies in: more than one for a cuda-vmm host table over a run of regions, docs/protocol.md, mapped
    back to back so that its bytes are contiguous), and its views: ``cpu_address``/``gpu_address`` (0 when it has
    none), :meth:`to_torch`, :meth:`to_numpy`, :meth:`buffer`."""

    def __init__(self, imported: "ImportedTables", entry: _wire.TableEntry, cpu_address: int, gpu_address: int,
                 digest: Optional[int], backend: str, regions: Optional[range] = None):
        self._imported = imported
        self.name = entry.name
        self.dtype = entry.dtype
        self.shape = tuple(entry.shape)
        self.nbytes = entry.nbytes
        self.region = entry.region
        self.regions = tuple(regions if regions is not None else
                             (range(entry.region, entry.region + 1) if entry.region >= 0 else ()))
        self.offset = entry.offset
        self.backend = backend
        self.numa_node = entry.numa_node
        self.device = entry.device if entry.device >= 0 else None
        self.cpu_address = cpu_address
        self.gpu_address = gpu_address
        self._digest = digest

    def __repr__(self) -> str:
        return (f"Table({self.name!r}, {self.dtype}, {list(self.shape)}, {self.nbytes} bytes, {self.backend}, "
                f"numa_node={self.numa_node}, device={self.device})")

    @property
    def digest(self) -> int:
        """The engram digest v1 of the bytes: the daemon's, or for a load from disk computed here on first use
        (in pure Python; slow for large tables)."""
        if self._digest is None:
            from . import digests
            self._digest = digests.engram_digest(self.buffer())
        return self._digest

    @property
    def digest_hex(self) -> str:
        return f"{self.digest:016x}"

    @property
    def has_cpu_view(self) -> bool:
        return self.cpu_address != 0 or (self.nbytes == 0 and self.device is None)

    @property
    def has_gpu_view(self) -> bool:
        return self.gpu_address != 0 or (self.nbytes == 0 and self._imported.gpu_device is not None)

    def _token(self) -> _Export:
        self._imported._check_open()
        return self._imported._attachment.export()

    def buffer(self) -> memoryview:
        """A read-only memoryview of the CPU view (format ``B``, ``nbytes`` long). Keeps the memory alive."""
        if self.nbytes == 0:
            return memoryview(b"")
        if not self.cpu_address:
            raise E.EngramHostError(f"table {self.name}: no CPU view ({self.backend}; import with cpu_view=True)")
        arr = _memory.view(self.cpu_address, self.nbytes)
        arr._engram_owner = self._token()  # the array holds the token; the memoryview holds the array
        return memoryview(arr).cast("B").toreadonly()

    def to_numpy(self):
        """A read-only NumPy array over the CPU view with the checkpoint's dtype and shape; dtypes NumPy lacks
        (F8_*, BF16, F4, F6_*) come back as uint8 of shape [nbytes]. Zero-copy; keeps the memory alive."""
        from . import _tensors
        if self.nbytes and not self.cpu_address:
            raise E.EngramHostError(f"table {self.name}: no CPU view ({self.backend}; import with cpu_view=True)")
        return _tensors.numpy_array(self.cpu_address, self.nbytes, self.dtype, self.shape, self._token())

    def to_torch(self, cpu: Optional[bool] = None):
        """A zero-copy PyTorch tensor with the checkpoint's dtype and shape: on the GPU view when the import
        named a device, on the CPU view when it did not or when ``connect(cpu_view=True)``; ``cpu`` overrides.
        Dtypes the running PyTorch lacks come back as uint8 of shape [nbytes] (docs/python.md). The tensor keeps
        the mapping, registration or import alive until it is freed. Writing through it is an error: SIGSEGV on
        the CPU, a sticky CUDA error on the GPU."""
        from . import _tensors
        if cpu is None:
            cpu = self._imported.cpu_view or self._imported.gpu_device is None
        token = self._token()
        if cpu:
            if self.nbytes and not self.cpu_address:
                raise E.EngramHostError(f"table {self.name}: no CPU view ({self.backend}; import with cpu_view=True)")
            return _tensors.torch_tensor(self.cpu_address, self.nbytes, self.dtype, self.shape, None, token)
        if self.nbytes and not self.gpu_address:
            raise E.EngramHostError(f"table {self.name}: no GPU view (import with device=N)")
        return _tensors.torch_tensor(self.gpu_address, self.nbytes, self.dtype, self.shape,
                                     self._imported.gpu_device, token)


# ------------------------------------------------------------------------------------------ watching


class _Watch:
    """Tells when the daemon goes: EOF (or an error) on the lease connection. One thread, started by the first
    callback. Not the daemon's pid: a takeover moves the lease to a successor process and the pid that answered
    the import exits while the tables stay served (docs/protocol.md, "The lease")."""

    def __init__(self, lease_fd: int):
        self._lease_fd = lease_fd
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._callbacks: list[Callable[[str], None]] = []
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self.reason: Optional[str] = None
        self._closed = False

    def on_gone(self, callback: Callable[[str], None]) -> None:
        with self._lock:
            reason = self.reason
            if reason is None:
                self._callbacks.append(callback)
                if self._thread is None and not self._closed:
                    self._thread = threading.Thread(target=self._run, name="engram-daemon-watch", daemon=True)
                    self._thread.start()
        if reason is not None:
            callback(reason)

    def check(self) -> Optional[str]:
        """Why the daemon is gone, or None; looks without waiting when no thread watches."""
        if self._thread is None and self.reason is None and not self._closed:
            self._poll(0)
        return self.reason

    def _poll(self, timeout_ms: Optional[int]) -> bool:
        p = select.poll()
        p.register(self._lease_fd, select.POLLIN)
        p.register(self._wake_r, select.POLLIN)
        for fd, ev in p.poll(timeout_ms):
            if fd == self._wake_r:
                return False
            if fd == self._lease_fd:
                if ev & (select.POLLHUP | select.POLLERR):
                    self._fire("the daemon closed the lease connection")
                    return False
                try:
                    data = os.read(self._lease_fd, 4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self._fire("the daemon closed the lease connection")
                    return False
        return True

    def _run(self) -> None:
        while self.reason is None and not self._closed:
            if not self._poll(None):
                return

    def _fire(self, reason: str) -> None:
        with self._lock:
            if self.reason is not None:
                return
            self.reason = reason
            callbacks = list(self._callbacks)
        for cb in callbacks:
            try:
                cb(reason)
            except Exception as e:  # a callback's failure must not stop the others
                import sys
                print(f"engram_host: on_daemon_gone callback failed: {e!r}", file=sys.stderr)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)


# ------------------------------------------------------------------------------------------ imported tables


class ImportedTables:
    """What :func:`connect` returns: the tables (``.tables``, name to :class:`Table`), the lease, and the
    memory behind the views. A context manager; :meth:`close` ends the lease (BYE) and frees the memory once no
    view handed out is alive."""

    def __init__(self, source: str, fingerprint: str, attachment: _Attachment, gpu_device: Optional[int],
                 cpu_view: bool, channel: Optional[_wire.Channel], welcome: Optional[_wire.Welcome],
                 daemon_pid: int, timings: dict, region_timings: Sequence[dict]):
        self.source = source
        self.fingerprint = fingerprint
        self.gpu_device = gpu_device
        self.cpu_view = cpu_view
        self.daemon = welcome
        self.daemon_pid = daemon_pid
        self.timings = timings
        self.region_timings = list(region_timings)
        self.tables: dict[str, Table] = {}
        self._attachment = attachment
        self._channel = channel
        self._watch = _Watch(channel.fileno()) if channel is not None else None
        self._closed = False
        self._close_lock = threading.Lock()
        self._finalizer = weakref.finalize(self, ImportedTables._finalize, channel, self._watch, attachment)

    def __enter__(self) -> "ImportedTables":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getitem__(self, name: str) -> Table:
        return self.tables[name]

    def _check_open(self) -> None:
        if self._closed:
            raise E.EngramHostError("the imported tables are closed")

    @property
    def closed(self) -> bool:
        return self._closed

    def on_daemon_gone(self, callback: Callable[[str], None]) -> None:
        """Calls ``callback(reason)`` once, from a watcher thread, when the daemon goes away (its lease
        connection closes or its process exits); at once if it is already gone. The tables stay valid: the
        callback only tells the engine that its next restart would pay a full load. Never fires for a load
        from disk."""
        if self._watch is not None:
            self._watch.on_gone(callback)

    def daemon_gone(self) -> Optional[str]:
        """Why the daemon is gone, or None while it serves (or for a load from disk)."""
        return self._watch.check() if self._watch is not None else None

    def verify_content(self, sources: Sequence[PathLike], threads: Optional[int] = None) -> "ContentReport":
        """The content check (docs/checkpoints.md): every CPU-readable table's sha256-tree-v1 digest, computed over
        the mapped bytes on ``threads`` threads (default: one per CPU), must equal a trusted one, from sidecars
        (``*.engram-digests.json``, ``engram-digests.json``) or computed from a checkpoint's files. Tables without a
        CPU view are reported "not checked: not CPU-readable". On any difference, or a table without a trusted
        digest, the tables are closed and :class:`ContentMismatch` raised naming them."""
        return _verify_content(self, [os.fspath(p) for p in sources], threads or os.cpu_count() or 1)

    def live_views(self) -> int:
        """How many views (tensors, arrays, buffers) handed out are still alive."""
        return self._attachment.live_exports()

    @property
    def memory_freed(self) -> bool:
        """True once every mapping, registration and import of this import has been released."""
        return self._attachment.freed

    def close(self) -> None:
        """Ends the lease (BYE, then the connection is closed) and lets go of the memory: it is freed now, or
        when the last view handed out is freed. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._finalizer.detach()
        ImportedTables._finalize(self._channel, self._watch, self._attachment)

    @staticmethod
    def _finalize(channel: Optional[_wire.Channel], watch: Optional[_Watch], attachment: _Attachment) -> None:
        if channel is not None:
            try:
                channel.sock.settimeout(1.0)
                channel.send(_wire.encode_empty(_wire.BYE, channel.version))
            except (OSError, _wire.ProtocolError):
                pass  # the daemon may be gone: nothing to clean up but the socket
            if watch is not None:
                watch.close()
            channel.close()
        attachment.release()


# ------------------------------------------------------------------------------------------ content check

CONTENT_ALGORITHM = "sha256-tree-v1"
NOT_CPU_READABLE = "not checked: not CPU-readable"


class ContentReport(_wire.Record):
    """What :meth:`ImportedTables.verify_content` found: ``tables``, per table (status, digest or None), and
    ``summary``, which ``import --json`` prints as ``content_check``."""
    __slots__ = ("tables", "summary")


def _verify_content(imported: ImportedTables, sources: list, threads: int) -> ContentReport:
    from . import digests
    imported._check_open()
    t0 = time.perf_counter()
    sidecars = [p for p in sources if digests.is_sidecar(p)]
    if sidecars and len(sidecars) != len(sources):
        raise ValueError("--verify-content: give sidecars (*.engram-digests.json) or a checkpoint, not both")
    if sidecars:
        trusted: dict = {}
        for p in sources:
            for name, d in digests.read_sidecar(p).items():
                other = trusted.setdefault(name, d)
                if other != d:
                    raise ValueError(f"--verify-content: the sidecars give table '{name}' two digests: {other} and {d}")
        source = " ".join(sources)
    else:
        trusted = digests.trusted_digests_from_checkpoint(sources, list(imported.tables), threads)
        source = "checkpoint " + " ".join(sources)
    trusted_s = time.perf_counter() - t0
    readable = [t for t in imported.tables.values() if t.has_cpu_view]
    t1 = time.perf_counter()
    mapped = digests.tree_digest_all([t.buffer() for t in readable], threads)
    seconds = time.perf_counter() - t1
    by_table = {t.name: (NOT_CPU_READABLE, None) for t in imported.tables.values()}
    problems = []
    for t, d in zip(readable, mapped):
        expected = trusted.get(t.name)
        if expected is None:
            problems.append(f"table '{t.name}' has no trusted digest in {source}")
        elif expected != d:
            problems.append(f"table '{t.name}': the mapped bytes have digest {d} but {source} says {expected}")
        by_table[t.name] = ("verified", d)
    if problems:
        imported.close()
        more = "" if len(problems) == 1 else f" (and {len(problems) - 1} more tables)"
        raise E.ContentMismatch(f"content check ({CONTENT_ALGORITHM}) failed: {problems[0]}{more}; the tables were "
                                "closed", details=problems)
    nbytes = sum(t.nbytes for t in readable)
    summary = {"algorithm": CONTENT_ALGORITHM, "trusted": source, "verified": len(readable),
               "not_checked": len(imported.tables) - len(readable), "bytes": nbytes, "trusted_s": trusted_s,
               "check_s": seconds, "gb_per_s": nbytes / seconds / 1e9 if seconds > 0 else 0.0, "threads": threads}
    return ContentReport(by_table, summary)


# ------------------------------------------------------------------------------------------ in the background

#: How long, at the interpreter's exit, it waits for background connects still running to stop (each stops at its
#: next step, or when the driver call it is in returns, and frees what it attached); then the exit goes on.
EXIT_WAIT = 5.0


class _Cancelled(Exception):
    """Raised inside a background connect's worker once its handle was closed; never reaches the caller."""


class _Cancel:
    """How a background connect is told to stop: a flag its worker looks at between the import's steps, and the
    socket the worker may be waiting on, shut down (under the lock, never after its close) so that the wait ends."""

    def __init__(self):
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._sock: Optional[_socket.socket] = None

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        with self._lock:
            self._event.set()
            self._shutdown()

    def _shutdown(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(_socket.SHUT_RDWR)
            except OSError:
                pass

    def watch(self, sock: _socket.socket) -> None:
        """The socket the worker is about to wait on."""
        with self._lock:
            self._sock = sock
            if self._event.is_set():
                self._shutdown()

    def release(self, sock: _socket.socket) -> None:
        """The socket is the lease now: a cancel no longer touches it."""
        with self._lock:
            if self._sock is sock:
                self._sock = None

    def close(self, sock: _socket.socket) -> None:
        with self._lock:
            if self._sock is sock:
                self._sock = None
            sock.close()

    def check(self) -> None:
        if self._event.is_set():
            raise _Cancelled()

    def sleep(self, seconds: float) -> None:
        if self._event.wait(seconds):
            raise _Cancelled()


class _NotCancellable(_Cancel):
    """The token of a connect on the caller's own thread: nothing to look at, nothing to shut down."""

    def watch(self, sock: _socket.socket) -> None:
        pass

    def check(self) -> None:
        pass

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


_NOT_CANCELLABLE = _NotCancellable()

#: Background connects whose worker runs, for the exit's wait.
_RUNNING: "set[_Background]" = set()
_RUNNING_LOCK = threading.Lock()
_EXIT_HOOKED = False


def _at_exit() -> None:
    """Stops every background connect still running and waits up to :data:`EXIT_WAIT` for their workers, so that
    the exit neither waits for an attach nobody will use nor cuts a driver call of one short."""
    with _RUNNING_LOCK:
        running = list(_RUNNING)
    for b in running:
        b.cancel()
    deadline = time.monotonic() + EXIT_WAIT
    for b in running:
        b.thread.join(max(0.0, deadline - time.monotonic()))


class _Background:
    """A background connect's state, shared by its worker thread and its :class:`PendingTables` (which the worker
    does not reference, so that a handle dropped unclosed can be collected and stop the attach)."""

    def __init__(self, run: Callable[[_Cancel], ImportedTables], what: str):
        global _EXIT_HOOKED
        self.what = what
        self.token = _Cancel()
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.result: Optional[ImportedTables] = None
        self.error: Optional[BaseException] = None
        self.error_traceback = None  # the worker's, so that each wait() raises it as it happened
        self.closed = False
        self.taken = False
        self.thread = threading.Thread(target=self._run, args=(run,), name="engram-attach", daemon=True)
        with _RUNNING_LOCK:
            if not _EXIT_HOOKED:
                import atexit
                atexit.register(_at_exit)
                _EXIT_HOOKED = True
            _RUNNING.add(self)
        try:
            self.thread.start()
        except BaseException:
            with _RUNNING_LOCK:
                _RUNNING.discard(self)
            raise

    def _run(self, run: Callable[[_Cancel], ImportedTables]) -> None:
        try:
            try:
                imported = run(self.token)
            except BaseException as e:
                with self.lock:
                    if not self.token.cancelled:
                        self.error, self.error_traceback = e, e.__traceback__
                return
            with self.lock:
                keep = not self.token.cancelled
                if keep:
                    self.result = imported
            if not keep:
                imported.close()  # closed meanwhile: nobody will take these
        finally:
            self.done.set()
            with _RUNNING_LOCK:
                _RUNNING.discard(self)

    def cancel(self) -> None:
        """Stops the attach at its next step (the worker frees what it attached) and closes tables it finished."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            imported, self.result = self.result, None
            self.token.cancel()
        if imported is not None:
            imported.close()

    def collected(self) -> None:
        """The handle was garbage-collected unclosed: tables handed out by wait() stay the caller's; anything else
        is stopped and freed."""
        with self.lock:
            if self.taken:
                return
        self.cancel()


class PendingTables:
    """What ``connect(..., background=True)`` returns at once: the import, running on a daemon thread of its own
    (``engram-attach``). :meth:`ready` says without waiting whether it has finished; :meth:`wait` returns its
    :class:`ImportedTables` or raises what ``connect`` would have raised; :meth:`close` (or leaving ``with``) stops
    it and frees everything it attached, and closes its tables if it had finished. A handle dropped without
    ``close()`` stops an attach whose tables :meth:`wait` has not handed out. At the interpreter's exit, an attach
    still running is stopped (waiting up to :data:`EXIT_WAIT` seconds for its worker)."""

    def __init__(self, run: Callable[[_Cancel], ImportedTables], what: str):
        self._state = _Background(run, what)
        self._finalizer = weakref.finalize(self, _Background.collected, self._state)
        self._finalizer.atexit = False  # the exit's own hook stops what still runs

    def __repr__(self) -> str:
        s = self._state
        state = ("closed" if s.closed else "failed" if s.error is not None else "ready" if s.done.is_set()
                 else "attaching")
        return f"PendingTables({s.what!r}, {state})"

    def __enter__(self) -> "PendingTables":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def ready(self) -> bool:
        """True once :meth:`wait` would not wait: the import finished, with tables or with an error, or was closed."""
        return self._state.closed or self._state.done.is_set()

    @property
    def closed(self) -> bool:
        return self._state.closed

    def wait(self, timeout: Optional[float] = None) -> ImportedTables:
        """The imported tables, once the attach has finished (the same object on every call): waits up to
        ``timeout`` seconds (None: as long as it takes). Raises the error ``connect`` would have raised (the same
        exception object on every call), :class:`StillAttaching` (a :class:`TimeoutError`) when ``timeout`` passes
        first, the attach going on, and :class:`EngramHostError` once the handle is closed."""
        s = self._state
        if not s.closed and not s.done.wait(timeout):
            raise E.StillAttaching(f"the background connect to {s.what} is still attaching after {timeout:g} s; it "
                                   "goes on: wait() again, or close() to stop it")
        with s.lock:
            if s.closed:
                raise E.EngramHostError(f"the background connect to {s.what} was closed")
            if s.error is not None:
                raise s.error.with_traceback(s.error_traceback)
            s.taken = True
            return s.result

    def cancel(self) -> None:
        """Stops the import without waiting: the worker stops at its next step (or when the driver call it is in
        returns) and frees what it attached; finished tables are closed. Idempotent."""
        self._state.cancel()

    def close(self) -> None:
        """:meth:`cancel`, then waits until the worker has freed everything (its fds, mappings, registrations,
        imports and the connection, so the daemon ends the lease). Tables :meth:`wait` returned are closed too (as
        :meth:`ImportedTables.close`: views handed out keep their memory until they are freed). Idempotent."""
        self._finalizer.detach()
        s = self._state
        s.cancel()
        if s.thread is not threading.current_thread():
            s.thread.join()


# ------------------------------------------------------------------------------------------ connecting


class _Connected(_wire.Record):
    __slots__ = ("path", "channel", "peer_pid", "peer_uid", "welcome")


def _connect_socket(path: str, timeout: float) -> _socket.socket:
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    s.settimeout(timeout)
    try:
        s.connect(path)
    except FileNotFoundError:
        s.close()
        raise E.DaemonAbsent(path, "no socket file: ENOENT") from None
    except ConnectionRefusedError:
        s.close()
        raise E.DaemonAbsent(path, "connection refused: ECONNREFUSED") from None
    except OSError as e:
        s.close()
        hint = f": {access_hint(path)}" if e.errno in (errno.EACCES, errno.EPERM) else ""
        raise E.EngramHostError(f"cannot connect to {path}: {errno.errorcode.get(e.errno, e.errno)} "
                                f"({e.strerror}){hint}") from None
    return s


def _attributes(path: str) -> Optional[str]:
    """``mode 0700, owner uid 0 (root), group 0 (root)``, not following a link; None when unreadable."""
    try:
        st = os.lstat(path)
    except OSError:
        return None

    def named(number: int, lookup) -> str:
        try:
            return f" ({lookup(number)[0]})"
        except (KeyError, OSError):
            return ""
    return (f"mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}{named(st.st_uid, pwd.getpwuid)}, "
            f"group {st.st_gid}{named(st.st_gid, grp.getgrgid)}")


def _describe(path: str) -> str:
    a = _attributes(path)
    return path if a is None else f"{path} ({a})"


def access_hint(path: str, uid: Optional[int] = None) -> str:
    """What to do when ``connect`` to the socket ``path`` fails with EACCES or EPERM, in one line, as the Java and C
    clients say it: the first directory down to the socket this uid may not search (its mode, owner and group),
    else the socket's own mode; and the fix, the daemon's ``--allow-uid`` naming this uid and a directory that lets
    it search (docs/security.md, "Other uids")."""
    uid = os.geteuid() if uid is None else uid
    effective = os.access in os.supports_effective_ids
    abspath = os.path.abspath(path)
    directory = os.path.dirname(abspath)
    admit = f"the daemon must admit uid {uid} (serve --allow-uid {uid})"
    parts = [p for p in directory.split("/") if p]
    current = "/"
    for i in range(len(parts) + 1):
        if i > 0:
            current = "/" + "/".join(parts[:i])
        if not os.access(current, os.X_OK, effective_ids=effective):
            return (f"uid {uid} may not search {_describe(current)}: {admit}, and {current} must let it search "
                    f"(chmod o+x {current}, or g+x with uid {uid} in its group; a socket directory the daemon creates "
                    f"with --allow-uid is mode 0711)")
    if not os.access(abspath, os.W_OK, effective_ids=effective):
        a = _attributes(abspath)
        return (f"the socket{'' if a is None else f' ({a})'} lets only its owner connect: {admit}; the socket is "
                f"then mode 0666 and each peer's uid is checked")
    return (f"neither the socket's mode nor its directory {_describe(directory)} shuts uid {uid} out (an ACL or a "
            f"security module may): {admit}, and the socket and its directory must let it in")


def _trusted_uids(daemon_uid) -> list[int]:
    if daemon_uid is None:
        return []
    uids = [daemon_uid] if isinstance(daemon_uid, int) else list(daemon_uid)
    for u in uids:
        if not isinstance(u, int) or not 0 <= u < 0xFFFFFFFF:
            raise ValueError(f"daemon_uid: {u!r} is not a uid")
    return uids


def _handshake(path: str, daemon_uid, timeout: float, name: str, token: Optional["_Cancel"] = None) -> _Connected:
    token = token or _NOT_CANCELLABLE
    sock = _connect_socket(path, timeout)
    channel = _wire.Channel(sock, timeout)
    token.watch(sock)
    try:
        pid, uid, _gid = struct.unpack("3i", sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED,
                                                             struct.calcsize("3i")))
        uid &= 0xFFFFFFFF
        me = os.geteuid()
        extra = _trusted_uids(daemon_uid)
        if uid not in (0, me) and uid not in extra:
            trusted = ["0 (root)"] + ([f"{me} (this client's euid)"] if me != 0 else []) + \
                [f"{u} (daemon_uid)" for u in extra]
            raise E.DaemonNotTrusted(
                f"refusing the daemon on {path}: its uid (SO_PEERCRED, pid {pid}) is {uid}, and this client trusts "
                f"only the uids {', '.join(trusted)}; if that user's daemon is meant to serve you, pass "
                f"daemon_uid={uid} (--daemon-uid {uid})")
        try:
            channel.send(_wire.encode_hello(os.getpid(), name))
        except (BrokenPipeError, ConnectionResetError):
            pass  # a daemon that refuses at accept writes its ERROR and closes: it is still there to read
        msg = _receive(channel, path, 0)
        if msg.msg_type == _wire.ERROR:
            raise _refusal(_wire.decode_error(_wire.Reader(msg.body, "ERROR")))
        if msg.msg_type != _wire.WELCOME:
            raise _wire.ProtocolError(f"expected WELCOME, got {_wire.type_name(msg.msg_type)}")
        welcome = _wire.decode_welcome(_wire.Reader(msg.body, "WELCOME"), msg.version)
        if welcome.uid is not None and welcome.uid != uid:
            raise E.DaemonNotTrusted(f"refusing the daemon on {path}: its WELCOME says uid {welcome.uid} but "
                                     f"SO_PEERCRED says uid {uid} (pid {pid})")
        channel.version = welcome.version
        return _Connected(path, channel, pid, uid, welcome)
    except _wire.ProtocolError as e:
        token.close(sock)
        raise E.ProtocolViolation(f"the daemon on {path} broke the protocol: {e}") from None
    except BaseException:
        token.close(sock)
        raise


def _receive(channel: _wire.Channel, path: str, version: int) -> _wire.Incoming:
    try:
        return channel.receive(version)
    except _wire.AnswerTimeout:
        raise E.NoAnswer(f"the daemon on {path} did not answer within {channel.timeout:g} s") from None
    except _wire.PeerClosed as e:
        raise E.NoAnswer(f"the daemon on {path} closed the connection: {e}") from None


def _refusal(reply: _wire.ErrorReply) -> E.EngramHostError:
    return E.from_reply(reply.code, reply.message, reply.details, reply.retryable, reply.daemon_fingerprint)


#: The line the daemon ends a longer list of differences with (docs/protocol.md, "IMPORT").
_MORE = re.compile(r"\.\.\. and ([0-9]+) more differences")


def _mismatch(reply: _wire.ErrorReply, path: str, expectation: _wire.Expectation) -> E.FingerprintMismatch:
    """A FINGERPRINT_MISMATCH refusal of ``expectation``, shown as docs/checkpoints.md, "How a client shows a
    mismatch" says: one summary line, then the daemon's differences (at most 5, then how many more there are);
    for a SHA-256 expectation, both SHA-256s and the daemon's record in short. Which of the two is chosen by
    the kind of expectation this client sent, not by the daemon's words."""
    from . import checkpoint
    served = hashlib.sha256(reply.daemon_fingerprint).hexdigest() if reply.daemon_fingerprint else None
    served_text = f"fingerprint {served}" if served else "a fingerprint it did not send"
    if expectation.kind == _wire.ExpectationKind.SHA256:
        count = 1
        shown = [f"expected fingerprint {expectation.data.hex()} but the daemon serves {served or served_text}"]
        if reply.daemon_fingerprint:
            shown.append(_record_in_short(reply.daemon_fingerprint))
    else:
        listed = list(reply.details)
        m = _MORE.fullmatch(listed[-1]) if listed else None
        unlisted = int(m.group(1)) if m else 0
        if m:
            listed.pop()
        count = len(listed) + unlisted
        shown = listed[:E.FingerprintMismatch.SHOWN_DIFFERENCES]
        if count > len(shown):
            shown.append(f"... and {checkpoint.counted(count - len(shown), 'more difference')}")
    shown = [E.one_line(line) for line in shown]   # the daemon's words, on their lines
    summary = (f"{E.ErrorCode.FINGERPRINT_MISMATCH.name}: the daemon on {path} serves {served_text}, not the expected "
               f"checkpoint: {checkpoint.counted(count, 'difference')}")
    return E.FingerprintMismatch(summary, code=E.ErrorCode.FINGERPRINT_MISMATCH, details=reply.details,
                                 retryable=reply.retryable, daemon_fingerprint=reply.daemon_fingerprint, shown=shown,
                                 daemon_message=reply.message)


def _record_in_short(canonical: bytes) -> str:
    """The daemon's fingerprint in one line: ``the daemon serves 4 tables from 2 files: NAME, ...``."""
    from . import checkpoint
    try:
        fp = checkpoint.decode_fingerprint(canonical)
    except checkpoint.CheckpointError as e:
        return f"the daemon's record could not be decoded: {e}"
    names = checkpoint.names_in_short([t.name for t in fp.tables])
    return (f"the daemon serves {checkpoint.counted(len(fp.tables), 'table')} from "
            f"{checkpoint.counted(len(fp.files), 'file')}" + (f": {names}" if names else ""))


def _served_mismatch(manifest: _wire.Manifest, expectation: _wire.Expectation) -> tuple:
    """Why the manifest does not meet the expectation as the daemon itself judges it, or None; and whether a
    structured expectation was met by headers alone (no content identity in common: :data:`HEADERS_ONLY`)."""
    served = manifest.fingerprint_sha256
    if expectation.kind == _wire.ExpectationKind.ANY:
        return None, False
    if expectation.kind == _wire.ExpectationKind.SHA256:
        return (None if served == expectation.data else
                f"fingerprint {served.hex()}, not the expected {expectation.data.hex()}"), False
    from . import checkpoint
    try:
        actual = checkpoint.decode_fingerprint(manifest.fingerprint)
    except Exception as e:
        return f"its structured fingerprint is malformed: {e}", False
    expected = checkpoint.decode_fingerprint(expectation.data)
    d = checkpoint.fingerprint_differences(expected, actual)
    if d:
        return "; ".join(d[:3]), False
    return None, not checkpoint.fingerprint_shares_identity(expected, actual)


def _ask(path: str, daemon_uid, timeout: float, request: int, answer: int, name: str) -> _wire.Incoming:
    """One request with an empty body on a fresh connection (STATUS, STOP), and its answer of type ``answer``."""
    c = _handshake(path, daemon_uid, timeout, name)
    try:
        c.channel.send(_wire.encode_empty(request, c.channel.version))
        msg = _receive(c.channel, path, c.channel.version)
        if msg.msg_type == _wire.ERROR:
            raise _refusal(_wire.decode_error(_wire.Reader(msg.body, "ERROR")))
        if msg.msg_type != answer:
            raise _wire.ProtocolError(f"expected {_wire.type_name(answer)}, got {_wire.type_name(msg.msg_type)}")
        return msg
    except _wire.ProtocolError as e:
        raise E.ProtocolViolation(f"the daemon on {path} broke the protocol: {e}") from None
    finally:
        c.channel.close()


def status(socket: Optional[str] = None, *, instance: Optional[str] = None, device: Optional[int] = None,
           daemon_uid=None, timeout: float = DEFAULT_TIMEOUT) -> dict:
    """The daemon's STATUS document, parsed."""
    import json
    path = _paths.socket_path(socket, instance, device)
    msg = _ask(path, daemon_uid, timeout, _wire.STATUS, _wire.STATUS_REPLY, "engram_host status")
    try:
        return json.loads(_wire.decode_status_reply(_wire.Reader(msg.body, "STATUS_REPLY")))
    except (_wire.ProtocolError, ValueError) as e:
        raise E.ProtocolViolation(f"the daemon on {path} broke the protocol: STATUS_REPLY: {e}") from None


def stop(socket: Optional[str] = None, *, instance: Optional[str] = None, device: Optional[int] = None,
         daemon_uid=None, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Asks the daemon to stop; returns once it acknowledged. Clients keep their mappings."""
    msg = _ask(_paths.socket_path(socket, instance, device), daemon_uid, timeout, _wire.STOP, _wire.STOP_ACK,
               "engram_host stop")
    if msg.body:
        raise E.ProtocolViolation(f"the daemon broke the protocol: STOP_ACK has a body of {len(msg.body)} bytes")


class _GpuPrep:
    """cuInit and the primary context, on a thread while the handshake runs (ctypes drops the GIL in calls)."""

    def __init__(self, ordinal: int):
        self.ordinal = ordinal
        self.device = None
        self.error: Optional[BaseException] = None
        self.nanos = 0
        self._thread = threading.Thread(target=self._run, name="engram-gpu-prepare", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        t0 = time.perf_counter_ns()
        try:
            from . import _cuda
            if not _cuda.available():
                raise E.CudaUnavailable(f"a GPU view needs CUDA: {_cuda.unavailable_reason()}")
            self.device = _cuda.Device(self.ordinal)
        except BaseException as e:
            self.error = e
        self.nanos = time.perf_counter_ns() - t0

    def wait(self):
        self._thread.join()
        if self.error is not None:
            raise self.error
        return self.device

    def discard(self) -> None:
        self._thread.join()
        self.device = None  # releases the primary context's retain unless another owner holds it


def _warm_torch_cuda() -> None:
    """PyTorch's own CUDA start-up (torch.cuda.init), run on a thread during the handshake and the context's
    creation, so that the first to_torch() does not pay it. Only where the process has imported torch already; a
    failure is left for to_torch() to report."""
    try:
        sys.modules["torch"].cuda.init()
    except Exception:
        pass


def _ms(ns: int) -> float:
    return round(ns / 1e6, 3)


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
    if device is not None and not 0 <= device <= _wire.MAX_DEVICE:
        raise ValueError(f"device {device} is not a GPU ordinal 0..{_wire.MAX_DEVICE}")
    for what, value in (("wait", wait), ("timeout", timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{what}: {value!r} is not a number of seconds")
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


def _expectation_later(expect, tables: Sequence[str]):
    """For a background connect: the expectation now when it costs nothing, else (a checkpoint, whose headers are
    read) a function that builds it on the worker; either way, an ``expect`` or ``tables`` of the wrong kind is
    refused now, as :func:`expectation_of` refuses it."""
    if not _is_checkpoint(expect):
        return expectation_of(expect, tables)
    paths = [expect] if isinstance(expect, (str, os.PathLike)) else list(expect)
    for p in paths:
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(f"expect: {type(p).__name__} in the list of checkpoint paths is not a path")
    if isinstance(tables, (str, bytes)) or not all(isinstance(t, str) for t in tables):
        raise TypeError(f"tables: {tables!r} is not a list of globs")
    chosen = list(tables)
    return lambda: expectation_of(paths, chosen)


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


def _region_what(manifest: _wire.Manifest, i: int) -> str:
    r = manifest.regions[i]
    names = [t.name for t in manifest.tables if t.region == i]  # a memfd region's: no run reaches into one
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    label = "no tables" if not names else ("table " if len(names) == 1 else "tables ") + shown
    return f"region {i} ({_wire.KIND_BACKENDS[r.kind]}, {r.size} bytes; {label})"


def _check_runs_contiguous(manifest: _wire.Manifest, addresses: list) -> None:
    """Every run of regions a table lies in is mapped back to back, so that the table's bytes are one range from its
    first region's address plus its offset (docs/protocol.md, "How to map a region"). VmmImport maps the regions in
    order at offsets rounded to their granularity, of which every region size is a multiple: this holds unless the
    import changed."""
    n = len(manifest.regions)
    starts = [0] * (n + 1)   # each region checked once, whatever the tables (a run's regions after its first)
    owner = [None] * n
    for t, run in zip(manifest.tables, _wire.table_runs(manifest)):
        if len(run) > 1:
            starts[run.start + 1] += 1
            starts[run.stop] -= 1
            owner[run.start + 1] = owner[run.start + 1] or t.name
    inside, name = 0, None
    for i in range(n):
        inside += starts[i]
        name = owner[i] or name
        if inside > 0 and addresses[i] != addresses[i - 1] + manifest.regions[i - 1].size:
            raise E.EngramHostError(f"table {name}: region {i} of its run is mapped at 0x{addresses[i]:x}, not "
                                    f"right after region {i - 1} (0x{addresses[i - 1]:x} + "
                                    f"{manifest.regions[i - 1].size}); refused")


def _attach(manifest: _wire.Manifest, fds: list, attachment: _Attachment, device: Optional[int], cpu_view: bool,
            populate: bool, path: str, timings: dict, accept_future_write_seal: bool = False,
            check: Callable[[], None] = lambda: None) -> tuple[list, list, list]:
    """Maps every region; every resource goes to ``attachment``. Closes every fd, on success or failure.
    ``check`` is called before each region's attach (a background connect's cancellation raises there)."""
    n = len(fds)
    cpu = [0] * n
    gpu = [0] * n
    per_region: list[dict] = [{} for _ in range(n)]
    try:
        for i, r in enumerate(manifest.regions):  # every memfd, before any is mapped
            if r.kind in (_wire.KIND_MEMFD, _wire.KIND_MEMFD_HUGETLB):
                try:
                    _memory.check_memfd(fds[i], r.size, _region_what(manifest, i), accept_future_write_seal)
                except ValueError as e:
                    raise E.DaemonNotTrusted(f"the daemon on {path}: {e}; refused") from None
        vmm: list[int] = []
        dev: list[int] = []
        map_ns = reg_ns = 0
        for i, r in enumerate(manifest.regions):
            if r.kind == _wire.KIND_VMM_HOST:
                vmm.append(i)
                continue
            if r.kind == _wire.KIND_VMM_DEVICE:
                dev.append(i)
                continue
            check()
            t0 = time.perf_counter_ns()
            addr = _memory.map_read_only(fds[i], r.size, populate)
            attachment.add(f"munmap of region {i}", lambda a=addr, s=r.size: _memory.unmap(a, s))
            cpu[i] = addr
            t1 = time.perf_counter_ns()
            per_region[i]["mmap_ms"] = _ms(t1 - t0)
            map_ns += t1 - t0
            if device is not None:
                from . import _cuda
                reg = _cuda.HostRegistration(attachment.device, addr, r.size)
                attachment.add(f"cuMemHostUnregister of region {i}", reg.close)
                gpu[i] = reg.device_pointer
                t2 = time.perf_counter_ns()
                per_region[i]["register_ms"] = _ms(t2 - t1)
                reg_ns += t2 - t1
        timings["map_ms"] = _ms(map_ns)
        if device is not None:
            timings["register_ms"] = _ms(reg_ns)
        for label, which, with_cpu in (("vmm", vmm, cpu_view), ("device", dev, False)):
            if not which:
                continue
            first = manifest.regions[which[0]]
            if device is None:
                raise E.EngramHostError(f"{_wire.KIND_BACKENDS[first.kind]} memory needs a GPU to attach: import "
                                        "with a device (device=N, --gpu --device N)")
            check()
            from . import _cuda
            imp = _cuda.VmmImport(attachment.device,
                                  [(fds[i], manifest.regions[i].size,
                                    "host" if manifest.regions[i].kind == _wire.KIND_VMM_HOST else "device",
                                    manifest.regions[i].numa_node) for i in which],
                                  cpu_view=with_cpu, read_only=True)
            attachment.add(f"release of the {label} import", imp.close)
            for j, i in enumerate(which):
                gpu[i] = imp.address_of(j)
                if with_cpu:
                    cpu[i] = imp.address_of(j)
            if label == "vmm":
                _check_runs_contiguous(manifest, gpu)
            for k, v in imp.timings.items():
                timings[f"{label}_{k}"] = _ms(v) if isinstance(v, int) else v
            for i in which:
                per_region[i] = {k: (_ms(v) if isinstance(v, int) else v) for k, v in imp.timings.items()}
        return cpu, gpu, per_region
    finally:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass


# ------------------------------------------------------------------------------------------ fallback


def connect_or_load(checkpoint: Union[PathLike, Sequence[PathLike]], socket: Optional[str] = None, expect=None,
                    device: Optional[int] = None, cpu_view: bool = False, wait: float = 0.0, daemon_uid=None, *,
                    tables: Sequence[str] = (), threads: Optional[int] = None, notice=None,
                    **kwargs) -> ImportedTables:
    """:func:`connect`, or, only when no daemon listens at the socket (no socket file, or a socket whose connect
    is refused, as a killed daemon leaves), a load of ``checkpoint`` (``tables``: globs choosing the tables, of
    ``expect=PATH`` too; without them the model's config.json or every tensor, as ``serve``) into this
    process's own memory, said in one line on stderr (or to ``notice``). ``.source`` says which happened.
    Whatever a live daemon answers (a refusal, a mismatch, BUSY, a timeout) and a daemon this client does not
    trust raise: none of them turns into a slow disk load."""
    if kwargs.get("background"):
        raise TypeError("connect_or_load has no background= (only connect has): its fallback is decided by the "
                        "connect, on the caller's thread")
    paths = [checkpoint] if isinstance(checkpoint, (str, os.PathLike)) else list(checkpoint)
    try:
        # a daemon absent is final at once: the disk load is the fallback, not a wait for a daemon that may never come
        return _begin(False, socket, expect, device, cpu_view, wait, daemon_uid,
                      tables=tables if _is_checkpoint(expect) else (), **kwargs)
    except E.DaemonAbsent as absent:
        line = (f"engram-host: no daemon listens on {absent.socket_path} ({absent.reason}): loading "
                f"{', '.join(os.fspath(p) for p in paths)} from disk")
        if notice is None:
            import sys
            print(line, file=sys.stderr)
        else:
            notice(line)
        return load_from_disk(paths, tables=tables, device=device, threads=threads)


def load_from_disk(paths: Sequence[PathLike], tables: Sequence[str] = (), device: Optional[int] = None,
                   threads: Optional[int] = None) -> ImportedTables:
    """Loads the tables of a checkpoint that ``serve`` would serve (``tables``: globs; without them the model's
    config.json or every tensor) into anonymous memory of this process (the fallback), reading through the fds
    the checkpoint was validated from, and refusing a file that changed during the load. Its fingerprint is the
    one ``serve`` would have, content identities included. With ``device``, each table is registered with CUDA
    for a GPU view (which pins it)."""
    from concurrent.futures import ThreadPoolExecutor
    from . import checkpoint
    t_start = time.perf_counter_ns()
    threads = threads or os.cpu_count() or 1
    attachment = _Attachment()
    try:
        with checkpoint.open_checkpoint([os.fspath(p) for p in paths]) as cp:
            served = _served(cp, tables, "")
            selected = list(served.selection.tensors)
            bases = []
            for t in selected:
                base = 0
                if t.nbytes:
                    base = _memory.map_anonymous(t.nbytes)
                    attachment.add(f"munmap of table {t.name}", lambda a=base, s=t.nbytes: _memory.unmap(a, s))
                bases.append(base)
            chunk = 16 << 20
            jobs = [(t, b, off) for t, b in zip(selected, bases) for off in range(0, t.nbytes, chunk)]

            def read(job) -> None:
                t, base, off = job
                n = min(chunk, t.nbytes - off)
                buf = memoryview(_memory.view(base + off, n)).cast("B")
                done = 0
                while done < n:
                    got = os.preadv(t.file.fd, [buf[done:]], t.offset + off + done)
                    if got <= 0:
                        raise E.EngramHostError(f"{t.file.path}: tensor '{t.name}': file ended at offset "
                                                f"{t.offset + off + done}")
                    done += got

            with ThreadPoolExecutor(max_workers=threads) as pool:
                list(pool.map(read, jobs))
            cp.check_unchanged()
        gpu = [0] * len(selected)
        if device is not None:
            from . import _cuda
            if not _cuda.available():
                raise E.CudaUnavailable(f"a GPU view needs CUDA: {_cuda.unavailable_reason()}")
            attachment.device = _cuda.Device(device)
            for i, (t, base) in enumerate(zip(selected, bases)):
                if base:
                    reg = _cuda.HostRegistration(attachment.device, base, t.nbytes)
                    attachment.add(f"cuMemHostUnregister of table {t.name}", reg.close)
                    gpu[i] = reg.device_pointer
        total = _ms(time.perf_counter_ns() - t_start)
        imported = ImportedTables("disk", served.sha256_hex, attachment, device, False, None,
                                  None, -1, {"disk_load_ms": total, "total_ms": total}, [])
        for i, (t, base) in enumerate(zip(selected, bases)):
            e = _wire.TableEntry(t.name, t.dtype, tuple(t.shape), t.nbytes, i if t.nbytes else -1, 0, 0, 255, -1, -1)
            imported.tables[t.name] = Table(imported, e, base, gpu[i], None, "disk")
        return imported
    except BaseException:
        attachment.free_now()
        raise
