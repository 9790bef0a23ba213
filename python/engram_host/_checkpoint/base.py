"""What every part of the checkpoint reader shares (docs/checkpoints.md): :class:`CheckpointError`, the dtypes'
widths, the file suffixes, the limits of "Limits", a tensor's byte length, and the few phrases messages are made of.
"""

from __future__ import annotations

import math
import os
from typing import Sequence, Union

#: Every safetensors dtype and its width in bits, in the Java enum's order (which error messages list): one
#: table of the dtypes, the manifest's (docs/checkpoints.md).
from .._wire import DTYPE_BITS
from ..errors import EngramHostError


PathArg = Union[str, "os.PathLike[str]"]


class CheckpointError(EngramHostError):
    """A checkpoint (or a fingerprint, or a digest sidecar) that cannot be used; the message is one line."""


# ---------------------------------------------------------------------------------------------------------------
# dtypes, shapes, limits

#: The largest safetensors header accepted (as the reference implementation): 100 MiB.
MAX_HEADER_LENGTH = 100 << 20
FILE_SUFFIX = ".safetensors"
INDEX_SUFFIX = ".safetensors.index.json"
#: The largest index file read.
MAX_INDEX_BYTES = 100 << 20
#: The layout version a fingerprint describes today (``Fingerprint.LAYOUT_VERSION``).
LAYOUT_VERSION = 1

MAX_NAME_BYTES = 4096
MAX_RANK = 16
MAX_TABLES = 1 << 20
MAX_FINGERPRINT_BYTES = 16 << 20
MAX_MANIFEST_BYTES = 1 << 30
# Bytes of a manifest besides names, dtypes and dims (Limits.java): fixed part, per region, per table.
_MANIFEST_FIXED_BYTES = 8 + 32 + 4 + 4 + 4
_MANIFEST_REGION_BYTES = 1 + 8 + 4 + 4
_MANIFEST_TABLE_BYTES = 2 + 2 + 1 + 8 + 4 + 8 + 8 + 1 + 4 + 4

_I64_MAX = (1 << 63) - 1
_LIMITS_REF = "(docs/checkpoints.md, Limits)"


def _shape_text(shape: Sequence[int]) -> str:
    """A shape as Java's ``Arrays.toString`` writes it: ``[10, 256]``."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def byte_length(dtype: str, shape: Sequence[int]) -> int:
    """Bytes of a tensor of ``dtype`` and ``shape``: numel * bits / 8 (1 element for ``[]``, none when a
    dimension is 0). Raises ValueError (the Java's words) when numel or the bit count passes 2^63, or when a
    sub-byte dtype's bit count is not a multiple of 8; KeyError for an unknown dtype."""
    bits = DTYPE_BITS[dtype]
    numel = 0 if 0 in shape else math.prod(shape)
    if numel > _I64_MAX:
        raise ValueError(f"shape {_shape_text(shape)} has more than 2^63 elements")
    bit_count = numel * bits
    if bit_count > _I64_MAX:
        raise ValueError(f"{dtype} {_shape_text(shape)} is larger than 2^63 bits")
    if bit_count % 8:
        raise ValueError(f"{dtype} {_shape_text(shape)} has {numel} elements of {bits} bits = {bit_count} bits,"
                         " not a whole number of bytes")
    return bit_count // 8

def counted(n: int, what: str) -> str:
    """``1 table``, ``4 tables``."""
    return f"{n} {what}" + ("" if n == 1 else "s")

def names_in_short(names: Sequence[str]) -> str:
    """A list of names as messages give it in short: the first, then ``, ...`` when there are more."""
    return "" if not names else names[0] + (", ..." if len(names) > 1 else "")
