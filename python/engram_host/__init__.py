"""engram_host: the Python client of engram-host (docs/python.md).

Imports the tables an engram-host daemon keeps resident, over its Unix socket, as zero-copy read-only views:
PyTorch tensors on the GPU or the CPU, NumPy arrays, or memoryviews. The protocol core uses the standard library
only; PyTorch and NumPy are imported when a view of theirs is asked for; the GPU path calls the CUDA driver
through ctypes.

    import engram_host
    with engram_host.connect(device=0) as tables:
        weight = tables["engram.layers.1.embedding.weight"].to_torch()   # float8_e4m3fn on cuda:0, no copy
"""

__version__ = "0.1.0"

from ._paths import socket_path
from ._wire import Expectation, ExpectationKind
from .client import (ImportedTables, PendingTables, Table, connect, connect_or_load, expect_checkpoint, expect_sha256,
                     load_from_disk, status, stop)
from .errors import (BadRequest, Busy, ContentMismatch, CudaUnavailable, DaemonAbsent, DaemonNotTrusted,
                     EngramHostError, ErrorCode, FingerprintMismatch, Internal, LoadFailed, NoAnswer, NotAllowed,
                     NotReady, ProtocolViolation, StillAttaching, Stopping, TimedOut, UnsupportedVersion)

PROTOCOL_VERSIONS = (1, 2)

__all__ = [
    "connect", "connect_or_load", "load_from_disk", "status", "stop", "socket_path", "ImportedTables", "PendingTables",
    "Table",
    "Expectation", "ExpectationKind", "expect_sha256", "expect_checkpoint", "ErrorCode", "EngramHostError",
    "BadRequest", "UnsupportedVersion", "NotReady", "FingerprintMismatch", "NotAllowed", "Stopping", "Internal",
    "LoadFailed", "Busy", "TimedOut",
    "DaemonAbsent", "DaemonNotTrusted", "ProtocolViolation", "NoAnswer", "ContentMismatch", "CudaUnavailable",
    "StillAttaching", "PROTOCOL_VERSIONS",
]
