"""Safetensors checkpoints as engram-host reads them (docs/checkpoints.md): strict validation of every file's
header, sharded checkpoints and directories, tensor selection (globs, and the rule of "Which tensors are served":
--tables, else the model's config.json, else every tensor), content identity (version 2 digest records, Hugging
Face snapshot links), the change check, the fingerprint (canonical encoding versions 1 and 2, decoding,
differences, shared identity) and the limits of docs/checkpoints.md, "Limits".

Every failure is a :class:`CheckpointError` whose message is one line naming the file, the tensor where
there is one, and the problem, in the words of the Java implementation
(``engram-host/checkpoint/src/main/java/io/engramhost/checkpoint``). Files are opened through one fd each
(``O_RDONLY|O_CLOEXEC|O_NONBLOCK``), validated from that fd, and kept open by the :class:`Checkpoint` so that
what is read later (:mod:`engram_host.digests`) is what was validated.
"""

from __future__ import annotations

# The parts, one concern each (engram_host/_checkpoint); this module is their one public face, as before the split.
from ._checkpoint.base import (CheckpointError, DTYPE_BITS, FILE_SUFFIX, INDEX_SUFFIX, LAYOUT_VERSION,
                               MAX_FINGERPRINT_BYTES, MAX_HEADER_LENGTH, MAX_INDEX_BYTES, MAX_MANIFEST_BYTES,
                               MAX_NAME_BYTES, MAX_RANK, MAX_TABLES, PathArg, byte_length, counted, names_in_short)
from ._checkpoint.strict_json import JsonError, parse_json
from ._checkpoint.safetensors import CheckpointFile, TensorInfo, snapshot_blob_sha256
from ._checkpoint.model import Checkpoint, open_checkpoint
from ._checkpoint.selection import CONFIG_FILE, Selection, format_bytes, select_served
from ._checkpoint.fingerprint import (ENGRAM_DIGEST, TREE_DIGEST, Fingerprint, FingerprintFile, FingerprintTable,
                                      decode_fingerprint, fingerprint, fingerprint_differences, fingerprint_sha256_hex,
                                      fingerprint_shares_identity)
from ._checkpoint.records import (RECORD_TREE_CHUNK, SIDECAR_DIRECTORY_FILE, SIDECAR_FORMAT, SIDECAR_MAX_BYTES,
                                  SIDECAR_SUFFIX, DigestRecord, is_sidecar, read_record, read_sidecar, record_beside)
from ._checkpoint.served import ContentIdentity, Served, content_identity, served_fingerprint
from ._checkpoint.limits import check_limits

__all__ = [
    "CheckpointError", "JsonError", "DTYPE_BITS", "MAX_HEADER_LENGTH", "FILE_SUFFIX", "INDEX_SUFFIX",
    "LAYOUT_VERSION", "MAX_NAME_BYTES", "MAX_RANK", "MAX_TABLES", "MAX_FINGERPRINT_BYTES", "MAX_MANIFEST_BYTES",
    "TensorInfo", "CheckpointFile", "Checkpoint", "open_checkpoint", "parse_json", "byte_length",
    "Fingerprint", "FingerprintFile", "FingerprintTable", "fingerprint", "fingerprint_sha256_hex",
    "decode_fingerprint", "fingerprint_differences", "fingerprint_shares_identity", "names_in_short", "counted",
    "ENGRAM_DIGEST", "TREE_DIGEST", "check_limits", "CONFIG_FILE", "Selection", "select_served", "format_bytes",
    "ContentIdentity", "content_identity", "Served", "served_fingerprint", "snapshot_blob_sha256",
]
# Also importable from here, as before: PathArg, MAX_INDEX_BYTES, and the digest record's names (RECORD_TREE_CHUNK,
# SIDECAR_*, DigestRecord, is_sidecar, read_record, read_sidecar, record_beside), which engram_host.digests re-exports.
