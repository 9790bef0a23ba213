"""The limits of docs/checkpoints.md, "Limits", checked once for what a daemon would serve: table count,
name length, rank, the fingerprint's size and the manifest's bound, in ``Limits.check``'s order.
"""

from __future__ import annotations

from typing import Sequence

from .base import (CheckpointError, MAX_FINGERPRINT_BYTES, MAX_MANIFEST_BYTES, MAX_NAME_BYTES, MAX_RANK, MAX_TABLES,
                   _LIMITS_REF, _MANIFEST_FIXED_BYTES, _MANIFEST_REGION_BYTES, _MANIFEST_TABLE_BYTES)
from .safetensors import TensorInfo
from .strict_json import _quoted


# ---------------------------------------------------------------------------------------------------------------
# limits

def check_limits(tensors: Sequence[TensorInfo], fingerprint_bytes: bytes) -> None:
    """Checks the tables a daemon would serve and their canonical fingerprint against docs/checkpoints.md,
    "Limits", in ``Limits.check``'s order: table count; per table, name length (UTF-8 bytes) and rank; the
    fingerprint's size; the manifest's bound. Raises :class:`CheckpointError` with the Java's line."""
    count = len(tensors)
    if count > MAX_TABLES:
        raise CheckpointError(f"{count} tables selected, over the limit of {MAX_TABLES} {_LIMITS_REF}")
    for t in tensors:
        name_bytes = len(t.name.encode("utf-8"))
        if name_bytes > MAX_NAME_BYTES:
            raise CheckpointError(f"{t.file.path}: tensor {_quoted(t.name)}: the name is {name_bytes} bytes of UTF-8,"
                                  f" over the limit of {MAX_NAME_BYTES} {_LIMITS_REF}")
        if t.rank > MAX_RANK:
            raise CheckpointError(f"{t.file.path}: tensor {_quoted(t.name)}: rank {t.rank} ({t.describe()}) is over "
                                  f"the limit of {MAX_RANK} {_LIMITS_REF}")
    size = len(fingerprint_bytes)
    if size > MAX_FINGERPRINT_BYTES:
        raise CheckpointError(f"the fingerprint of the {count} selected tables is {size} bytes, over the limit of "
                              f"{MAX_FINGERPRINT_BYTES} (16 MiB) that a manifest and an expectation carry; serve fewer"
                              f" tables or shorter names {_LIMITS_REF}")
    manifest = _MANIFEST_FIXED_BYTES + size + sum(
        (_MANIFEST_REGION_BYTES if t.nbytes > 0 else 0) + _MANIFEST_TABLE_BYTES + len(t.name.encode("utf-8"))
        + len(t.dtype) + 8 * t.rank for t in tensors)
    if manifest > MAX_MANIFEST_BYTES:
        raise CheckpointError(f"the manifest of the {count} selected tables could take {manifest} bytes, over the "
                              f"limit of {MAX_MANIFEST_BYTES} (1 GiB, one frame) {_LIMITS_REF}")
