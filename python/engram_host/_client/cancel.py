"""How a connect is told to stop: the token a background connect's worker looks at between the import's steps
(:class:`_Cancel`), and the one of a connect on the caller's thread, which nothing cancels (:data:`_NOT_CANCELLABLE`).
"""

from __future__ import annotations

import socket as _socket
import threading
import time
from typing import Optional


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
