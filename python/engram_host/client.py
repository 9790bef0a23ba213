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

Each step has its module in ``engram_host/_client`` (:mod:`engram_host._client`); this module is their one public
face, as before the split.
"""

from __future__ import annotations

from ._client.options import DEFAULT_TIMEOUT, NOT_READY_RETRY, PathLike
from ._client.transport import access_hint
from ._client.control import status, stop
from ._client.expectations import HEADERS_ONLY, expect_checkpoint, expect_sha256, expectation_of
from ._client.tables import Table
from ._client.content import CONTENT_ALGORITHM, NOT_CPU_READABLE, ContentReport
from ._client.imported import ImportedTables
from ._client.background import EXIT_WAIT, PendingTables
from ._client.connect import connect
from ._client.disk import connect_or_load, load_from_disk

__all__ = [
    "DEFAULT_TIMEOUT", "NOT_READY_RETRY", "PathLike", "access_hint", "status", "stop", "HEADERS_ONLY",
    "expect_checkpoint", "expect_sha256", "expectation_of", "Table", "CONTENT_ALGORITHM", "NOT_CPU_READABLE",
    "ContentReport", "ImportedTables", "EXIT_WAIT", "PendingTables", "connect", "connect_or_load", "load_from_disk",
]
