"""``connect(..., background=True)``: the import on a thread of its own (:class:`PendingTables`), stopped
when its handle is closed or collected, and at the interpreter's exit.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import TYPE_CHECKING, Callable, Optional

from .. import errors as E
from .cancel import _Cancel

if TYPE_CHECKING:
    from .imported import ImportedTables


#: How long, at the interpreter's exit, it waits for background connects still running to stop (each stops at its
#: next step, or when the driver call it is in returns, and frees what it attached); then the exit goes on.
EXIT_WAIT = 5.0


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
