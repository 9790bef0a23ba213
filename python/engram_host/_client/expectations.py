"""What an import expects (``connect(expect=...)``): any checkpoint, a fingerprint's SHA-256, its canonical
bytes, or a checkpoint's paths, whose structured fingerprint is computed here as ``serve`` would select and serve it;
and the one line said when both sides share no content identity.
"""

from __future__ import annotations

import os
from typing import Sequence

from .. import _wire
from .options import PathLike


def expectation_of(expect, tables: Sequence[str] = ()) -> _wire.Expectation:
    """``expect`` as connect() takes it: None (any), an :class:`Expectation`, a 64-hex-digit SHA-256, raw
    canonical fingerprint bytes (version 1 or 2), or a checkpoint: a path or a list of paths, whose structured
    fingerprint is computed here as :func:`expect_checkpoint` does, with ``tables`` (globs, as ``--tables``)
    choosing the tables; ``tables`` goes with a checkpoint only."""
    if _is_checkpoint(expect):
        return expect_checkpoint([expect] if isinstance(expect, (str, os.PathLike)) else list(expect), tables)
    if tables:
        raise ValueError("tables= chooses the tables of an expected checkpoint: give expect=PATH with it, or leave "
                         "tables out")
    if expect is None:
        return _wire.Expectation.any()
    if isinstance(expect, _wire.Expectation):
        return expect
    if isinstance(expect, (bytes, bytearray, memoryview)):
        return _wire.Expectation.structured(bytes(expect))
    if _is_sha256(expect):
        return _wire.Expectation.sha256(expect.lower())
    raise TypeError(f"expect: {type(expect).__name__} is none of None, a SHA-256 hex string, fingerprint bytes, "
                    "a checkpoint path or a list of them")


def _is_sha256(expect) -> bool:
    return isinstance(expect, str) and len(expect) == 64 and all(c in "0123456789abcdefABCDEF" for c in expect)


def _is_checkpoint(expect) -> bool:
    """Whether ``expect`` names a checkpoint: a path (not a SHA-256), or a list of paths."""
    return (isinstance(expect, os.PathLike) or (isinstance(expect, str) and not _is_sha256(expect))
            or isinstance(expect, (list, tuple)))


def expect_sha256(hex_digest: str) -> _wire.Expectation:
    """Expect the fingerprint whose SHA-256 (short form) is ``hex_digest``."""
    return _wire.Expectation.sha256(hex_digest)


def expect_checkpoint(paths: Sequence[PathLike], tables: Sequence[str] = (), backend: str = "") -> _wire.Expectation:
    """Expect the structured fingerprint of this checkpoint as ``serve --tables ... --backend ...`` would load it
    (docs/checkpoints.md): the tables chosen by ``tables`` (globs), else by the model's config.json
    (engram_layer_ids), else all of them; and the content identities the checkpoint
    carries, from a version 2 digest record beside it or a Hugging Face snapshot's links. Nothing is hashed."""
    from .. import checkpoint
    with checkpoint.open_checkpoint([os.fspath(p) for p in paths]) as cp:
        return _wire.Expectation.structured(_served(cp, tables, backend).encoded)


def _served(cp, tables: Sequence[str], backend: str):
    """:func:`checkpoint.served_fingerprint`, the content identity's notes said through the logger. (The selection's
    warning, every tensor selected, is ``serve``'s and ``inspect``'s to say: an expectation that selects otherwise
    than the daemon is refused with one line naming both selections. The Java client says the same.)"""
    from .. import checkpoint
    served = checkpoint.served_fingerprint(cp, list(tables), backend)
    for line in served.identity.notes:
        _say(line)
    return served


#: What the client says when the daemon's fingerprint and the expectation share no content identity.
HEADERS_ONLY = ("compared headers only: neither side has content identity in common; write a digest record "
                "(engram-host inspect --write-digests PATH) or serve from a Hugging Face snapshot to compare content")


def _say(line: str) -> None:
    """One line through the package's logger (``engram_host``, level WARNING): on stderr unless the application
    configured logging, and on stderr for ``python -m engram_host``. logging is imported on first use."""
    import logging
    logging.getLogger("engram_host").warning(line)


def _expectation_later(expect, tables: Sequence[str]):
    """For a background connect: the expectation now when it costs nothing, else (a checkpoint, whose headers are
    read) a function that builds it on the worker; either way, an ``expect`` or ``tables`` of the wrong kind is
    refused now, as :func:`expectation_of` refuses it."""
    if not _is_checkpoint(expect):
        return expectation_of(expect, tables)
    paths = [expect] if isinstance(expect, (str, os.PathLike)) else list(expect)
    for p in paths:
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(f"expect: {type(p).__name__} in the list of checkpoint paths is not a path")
    if isinstance(tables, (str, bytes)) or not all(isinstance(t, str) for t in tables):
        raise TypeError(f"tables: {tables!r} is not a list of globs")
    chosen = list(tables)
    return lambda: expectation_of(paths, chosen)
