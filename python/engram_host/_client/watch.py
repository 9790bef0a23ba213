"""Telling when the daemon goes: EOF (or an error) on the lease connection, watched by one thread.
"""

from __future__ import annotations

import os
import select
import threading
from typing import Callable, Optional


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
