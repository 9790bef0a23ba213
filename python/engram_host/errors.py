"""Exceptions. Every error of this package is an :class:`EngramHostError`.

An ``ERROR`` from the daemon becomes the subclass of its code (docs/protocol.md, "ERROR"), with ``.code`` the
protocol's code and ``.details`` the daemon's detail lines; a code this package does not know becomes
:class:`EngramHostError` itself with that code. Errors found by the client (no daemon, a daemon it does not
trust, a daemon that broke the protocol, no answer in time, a content mismatch) have ``.code`` ``None``.
"""

from __future__ import annotations

from typing import Optional, Sequence


class EngramHostError(Exception):
    """Base class. ``code``: the protocol's error code, or None for errors the client found itself.
    ``details``: the daemon's detail lines (a fingerprint mismatch lists its differences there)."""

    code: Optional[int] = None
    name = "ERROR"

    def __init__(self, message: str, code: Optional[int] = None, details: Sequence[str] = (),
                 retryable: bool = False, daemon_fingerprint: bytes = b""):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.details = tuple(details)
        self.retryable = retryable
        self.daemon_fingerprint = daemon_fingerprint

    def __str__(self) -> str:
        text = super().__str__()
        if self.details:
            text += "\n" + "\n".join("  " + d for d in self.details)
        return text


class BadRequest(EngramHostError):
    code, name = 1, "BAD_REQUEST"


class UnsupportedVersion(EngramHostError):
    code, name = 2, "UNSUPPORTED_VERSION"


class NotReady(EngramHostError):
    code, name = 3, "NOT_READY"


class FingerprintMismatch(EngramHostError):
    code, name = 4, "FINGERPRINT_MISMATCH"


class NotAllowed(EngramHostError):
    code, name = 5, "NOT_ALLOWED"


class Stopping(EngramHostError):
    code, name = 6, "STOPPING"


class Internal(EngramHostError):
    code, name = 7, "INTERNAL"


class LoadFailed(EngramHostError):
    code, name = 8, "LOAD_FAILED"


class Busy(EngramHostError):
    code, name = 9, "BUSY"


class TimedOut(EngramHostError):
    code, name = 10, "TIMED_OUT"


BY_CODE = {c.code: c for c in (BadRequest, UnsupportedVersion, NotReady, FingerprintMismatch, NotAllowed, Stopping,
                               Internal, LoadFailed, Busy, TimedOut)}


def from_reply(code: int, message: str, details: Sequence[str], retryable: bool,
               daemon_fingerprint: bytes) -> EngramHostError:
    """The exception for a daemon's ERROR: its code's subclass, or the base class for an unknown code."""
    cls = BY_CODE.get(code)
    name = cls.name if cls else f"error code {code}"
    return (cls or EngramHostError)(f"{name}: {message}", code=code, details=details, retryable=retryable,
                                    daemon_fingerprint=daemon_fingerprint)


class DaemonAbsent(EngramHostError):
    """No daemon listens at the socket path: no socket file (ENOENT), or one nobody listens on (ECONNREFUSED),
    as a daemon killed with SIGKILL leaves. The only error :func:`engram_host.connect_or_load` falls back on."""

    def __init__(self, socket_path: str, reason: str):
        super().__init__(f"no daemon listens on {socket_path} ({reason})")
        self.socket_path = socket_path
        self.reason = reason


class DaemonNotTrusted(EngramHostError):
    """The peer is not a daemon this client trusts: its uid (SO_PEERCRED, WELCOME) or a memfd without seals."""


class ProtocolViolation(EngramHostError):
    """The daemon sent something docs/protocol.md does not allow; the connection was closed."""


class NoAnswer(EngramHostError):
    """The daemon did not answer within the client's wait, or closed the connection instead of answering."""


class ContentMismatch(EngramHostError):
    """The content check (sha256-tree-v1) found a table whose mapped bytes differ from the trusted digest, or
    a table without a trusted digest. The tables were closed."""


class CudaUnavailable(EngramHostError):
    """A GPU view was asked for but the CUDA driver cannot be used; the message says why."""
