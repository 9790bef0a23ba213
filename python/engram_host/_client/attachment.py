"""The one owner of an import's native resources (:class:`_Attachment`), and the token each view handed out
holds (:class:`_Export`): the memory is freed once, when the tables are closed and no view is alive.
"""

from __future__ import annotations

import threading
import weakref
from typing import Callable

from .. import errors as E


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
