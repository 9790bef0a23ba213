"""Exceptions. Every error of this package is an :class:`EngramHostError`.

An ``ERROR`` from the daemon becomes the subclass of its code (docs/protocol.md, "ERROR"), with ``.code`` the
protocol's code and ``.details`` the daemon's detail lines; a code this package does not know becomes
:class:`EngramHostError` itself with that code. Errors found by the client (no daemon, a daemon it does not
trust, a daemon that broke the protocol, no answer in time, a content mismatch) have ``.code`` ``None``.
"""

from __future__ import annotations

import enum
from typing import Optional, Sequence


class ErrorCode(enum.IntEnum):
    """The protocol's error codes (docs/protocol.md, "ERROR"). Members are ints: ``ErrorCode.NOT_READY == 3``."""

    BAD_REQUEST = 1
    UNSUPPORTED_VERSION = 2
    NOT_READY = 3
    FINGERPRINT_MISMATCH = 4
    NOT_ALLOWED = 5
    STOPPING = 6
    INTERNAL = 7
    LOAD_FAILED = 8
    BUSY = 9
    TIMED_OUT = 10

    # As Python 3.11+ writes an IntEnum, on 3.10 too: the number, so messages read the same everywhere.
    __str__ = int.__repr__
    __format__ = int.__format__


class EngramHostError(Exception):
    """Base class. ``code``: the protocol's error code (an :class:`ErrorCode`, or a plain int for a code this
    package does not know), or None for errors the client found itself.
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
    code = ErrorCode.BAD_REQUEST
    name = code.name


class UnsupportedVersion(EngramHostError):
    code = ErrorCode.UNSUPPORTED_VERSION
    name = code.name


class NotReady(EngramHostError):
    code = ErrorCode.NOT_READY
    name = code.name


class FingerprintMismatch(EngramHostError):
    """The daemon serves something else than the expectation. ``details`` are the daemon's detail lines as it
    sent them, ``daemon_message`` its message, ``daemon_fingerprint`` its canonical fingerprint. The message
    (``str()``) is the client's, as docs/checkpoints.md ("How a client shows a mismatch") has it: one summary
    line, then ``shown``: at most :data:`SHOWN_DIFFERENCES` differences and how many more there are, or, for a
    SHA-256 expectation, both SHA-256s and the daemon's record in short."""

    code = ErrorCode.FINGERPRINT_MISMATCH
    name = code.name
    #: At most this many differences are shown under the summary.
    SHOWN_DIFFERENCES = 5

    def __init__(self, message: str, code: Optional[int] = None, details: Sequence[str] = (),
                 retryable: bool = False, daemon_fingerprint: bytes = b"", shown: Optional[Sequence[str]] = None,
                 daemon_message: Optional[str] = None):
        super().__init__(message, code, details, retryable, daemon_fingerprint)
        self.shown = self.details if shown is None else tuple(shown)
        self.daemon_message = daemon_message

    def __str__(self) -> str:
        return "\n".join([self.args[0] if self.args else ""] + ["  " + line for line in self.shown])


class NotAllowed(EngramHostError):
    code = ErrorCode.NOT_ALLOWED
    name = code.name


class Stopping(EngramHostError):
    code = ErrorCode.STOPPING
    name = code.name


class Internal(EngramHostError):
    code = ErrorCode.INTERNAL
    name = code.name


class LoadFailed(EngramHostError):
    code = ErrorCode.LOAD_FAILED
    name = code.name


class Busy(EngramHostError):
    code = ErrorCode.BUSY
    name = code.name


class TimedOut(EngramHostError):
    code = ErrorCode.TIMED_OUT
    name = code.name


BY_CODE = {c.code: c for c in (BadRequest, UnsupportedVersion, NotReady, FingerprintMismatch, NotAllowed, Stopping,
                               Internal, LoadFailed, Busy, TimedOut)}


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text: str) -> str:
    """``text`` with every control character (C0, DEL, C1) and line or paragraph separator escaped (``\\n``,
    ``\\r``, ``\\t``, else ``\\uXXXX``): a daemon's words keep to their line in an exception or a log."""
    if all(" " <= c < "\x7f" or c > "\x9f" and c not in "\u2028\u2029" for c in text):
        return text
    return "".join(_ESCAPES.get(c, f"\\u{ord(c):04x}") if c < " " or "\x7f" <= c <= "\x9f" or c in "\u2028\u2029"
                   else c for c in text)


def from_reply(code: int, message: str, details: Sequence[str], retryable: bool,
               daemon_fingerprint: bytes) -> EngramHostError:
    """The exception for a daemon's ERROR: its code's subclass, or the base class for an unknown code. The
    daemon's message and details are shown with :func:`one_line`."""
    message, details = one_line(message), [one_line(d) for d in details]
    try:
        code = ErrorCode(code)
    except ValueError:
        pass  # a code of a later protocol: the base class, with the daemon's message
    cls = BY_CODE.get(code)
    name = cls.name if cls else f"error code {code}"
    return (cls or EngramHostError)(f"{name}: {message}", code=code, details=details, retryable=retryable,
                                    daemon_fingerprint=daemon_fingerprint)


class DaemonAbsent(EngramHostError):
    """No daemon listens at the socket path: no socket file (ENOENT), or one nobody listens on (ECONNREFUSED),
    as a daemon killed with SIGKILL leaves. The only error :func:`engram_host.connect_or_load` falls back on."""

    def __init__(self, socket_path: str, reason: str):
        # what to do, as the Java client and engram-attach say it
        if "ENOENT" in reason:
            fix = ": start one (engram-host serve), or name the running one's socket with socket= or ENGRAM_HOST_SOCKET"
        elif "ECONNREFUSED" in reason:
            fix = ": the socket file is left from a daemon that is gone; the next daemon on this path removes it"
        else:
            fix = ""
        super().__init__(f"no daemon listens on {socket_path} ({reason}){fix}")
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


class StillAttaching(TimeoutError):
    """:meth:`engram_host.PendingTables.wait` ran out of its ``timeout`` before the background connect finished. Not
    an :class:`EngramHostError`: nothing failed, and the attach goes on (``wait()`` again, or ``close()``)."""
