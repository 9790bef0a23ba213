"""The content identities a checkpoint carries: what ``served`` finds and ``fingerprint`` encodes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ContentIdentity:
    """The content identities a checkpoint carries (docs/checkpoints.md, "Content identity"; the Java's
    ``ContentIdentity``), for the tables of a selection: ``files``, base name -> the whole file's SHA-256 (32
    bytes) of each Hugging Face snapshot file holding a selected table; ``tables``, table name -> (engram
    digest v1, sha256-tree-v1 as 32 bytes) from the version 2 digest record (``records``) of the path each
    table was found through; ``uncovered``, the selected tables such a record does not hold; ``notes``, the
    lines to show (a version 1 record, which gives no identity; the tables a record does not cover). Nothing
    is hashed to find them."""

    files: dict
    tables: dict
    records: tuple
    uncovered: tuple
    notes: tuple

    @property
    def level(self) -> str:
        """``headers``, ``record``, ``hf-snapshot`` or ``record+hf-snapshot``, as STATUS's content_identity."""
        levels = [name for name, present in (("record", self.tables), ("hf-snapshot", self.files)) if present]
        return "+".join(levels) or "headers"
