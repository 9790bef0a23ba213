"""What a connect returns: :class:`ImportedTables`, the tables, the lease (the connection, ended with BYE) and
the memory behind the views.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Callable, Optional, Sequence

from .. import _wire, errors as E
from .attachment import _Attachment
from .content import ContentReport, _verify_content
from .options import PathLike
from .tables import Table
from .watch import _Watch


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
