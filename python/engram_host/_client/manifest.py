"""What a client makes of the daemon's answer to its expectation: a FINGERPRINT_MISMATCH shown as
docs/checkpoints.md says, and a MANIFEST whose fingerprint does not meet the expectation it answers.
"""

from __future__ import annotations

import hashlib
import re

from .. import _wire, errors as E


#: The line the daemon ends a longer list of differences with (docs/protocol.md, "IMPORT").
_MORE = re.compile(r"\.\.\. and ([0-9]+) more differences")


def _mismatch(reply: _wire.ErrorReply, path: str, expectation: _wire.Expectation) -> E.FingerprintMismatch:
    """A FINGERPRINT_MISMATCH refusal of ``expectation``, shown as docs/checkpoints.md, "How a client shows a
    mismatch" says: one summary line, then the daemon's differences (at most 5, then how many more there are);
    for a SHA-256 expectation, both SHA-256s and the daemon's record in short. Which of the two is chosen by
    the kind of expectation this client sent, not by the daemon's words."""
    from .. import checkpoint
    served = hashlib.sha256(reply.daemon_fingerprint).hexdigest() if reply.daemon_fingerprint else None
    served_text = f"fingerprint {served}" if served else "a fingerprint it did not send"
    if expectation.kind == _wire.ExpectationKind.SHA256:
        count = 1
        shown = [f"expected fingerprint {expectation.data.hex()} but the daemon serves {served or served_text}"]
        if reply.daemon_fingerprint:
            shown.append(_record_in_short(reply.daemon_fingerprint))
    else:
        listed = list(reply.details)
        m = _MORE.fullmatch(listed[-1]) if listed else None
        unlisted = int(m.group(1)) if m else 0
        if m:
            listed.pop()
        count = len(listed) + unlisted
        shown = listed[:E.FingerprintMismatch.SHOWN_DIFFERENCES]
        if count > len(shown):
            shown.append(f"... and {checkpoint.counted(count - len(shown), 'more difference')}")
    shown = [E.one_line(line) for line in shown]   # the daemon's words, on their lines
    summary = (f"{E.ErrorCode.FINGERPRINT_MISMATCH.name}: the daemon on {path} serves {served_text}, not the expected "
               f"checkpoint: {checkpoint.counted(count, 'difference')}")
    return E.FingerprintMismatch(summary, code=E.ErrorCode.FINGERPRINT_MISMATCH, details=reply.details,
                                 retryable=reply.retryable, daemon_fingerprint=reply.daemon_fingerprint, shown=shown,
                                 daemon_message=reply.message)


def _record_in_short(canonical: bytes) -> str:
    """The daemon's fingerprint in one line: ``the daemon serves 4 tables from 2 files: NAME, ...``."""
    from .. import checkpoint
    try:
        fp = checkpoint.decode_fingerprint(canonical)
    except checkpoint.CheckpointError as e:
        return f"the daemon's record could not be decoded: {e}"
    names = checkpoint.names_in_short([t.name for t in fp.tables])
    return (f"the daemon serves {checkpoint.counted(len(fp.tables), 'table')} from "
            f"{checkpoint.counted(len(fp.files), 'file')}" + (f": {names}" if names else ""))


def _served_mismatch(manifest: _wire.Manifest, expectation: _wire.Expectation) -> tuple:
    """Why the manifest does not meet the expectation as the daemon itself judges it, or None; and whether a
    structured expectation was met by headers alone (no content identity in common: :data:`HEADERS_ONLY`)."""
    served = manifest.fingerprint_sha256
    if expectation.kind == _wire.ExpectationKind.ANY:
        return None, False
    if expectation.kind == _wire.ExpectationKind.SHA256:
        return (None if served == expectation.data else
                f"fingerprint {served.hex()}, not the expected {expectation.data.hex()}"), False
    from .. import checkpoint
    try:
        actual = checkpoint.decode_fingerprint(manifest.fingerprint)
    except Exception as e:
        return f"its structured fingerprint is malformed: {e}", False
    expected = checkpoint.decode_fingerprint(expectation.data)
    d = checkpoint.fingerprint_differences(expected, actual)
    if d:
        return "; ".join(d[:3]), False
    return None, not checkpoint.fingerprint_shares_identity(expected, actual)
