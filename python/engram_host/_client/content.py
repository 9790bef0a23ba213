"""The content check (docs/checkpoints.md): every CPU-readable table's sha256-tree-v1 digest over the mapped
bytes against a trusted one, from sidecars or computed from the checkpoint's files.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .. import _wire, errors as E

if TYPE_CHECKING:
    from .owner import TablesOwner


CONTENT_ALGORITHM = "sha256-tree-v1"
NOT_CPU_READABLE = "not checked: not CPU-readable"


class ContentReport(_wire.Record):
    """What :meth:`ImportedTables.verify_content` found: ``tables``, per table (status, digest or None), and
    ``summary``, which ``import --json`` prints as ``content_check``."""
    __slots__ = ("tables", "summary")


def _verify_content(imported: TablesOwner, sources: list, threads: int) -> ContentReport:
    from .. import digests
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
