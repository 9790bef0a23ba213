"""The client's own judgements, without a daemon: expectations built from paths (the selection, the content
identities), the "compared headers only" line, the mismatch message of docs/checkpoints.md ("How a client shows a
mismatch"), and the typed codes and kinds."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import tempfile
import unittest

import engram_host
from engram_host import _wire, client
from engram_host._client import attach as attaching, manifest as answers
from engram_host import errors as E
from engram_host._checkpoint.fingerprint import _encode
from engram_host.checkpoint import (Fingerprint, FingerprintFile, FingerprintTable, decode_fingerprint,
                                    fingerprint_sha256_hex)
from tests.support import hf_snapshot, write_published

SOCKET = "/run/engram-host/default.sock"
NAMES = ["layers.1.engram.embed.scale", "layers.1.engram.embed.weight", "layers.14.engram.embed.scale",
         "layers.14.engram.embed.weight"]


def daemon_fingerprint(identity: bool = False) -> bytes:
    tables = tuple(FingerprintTable(n, "U8", (1,), 1, 7 if identity else None) for n in NAMES)
    files = (FingerprintFile("model-00001.safetensors", 10, b"\x01" * 32),
             FingerprintFile("model-00014.safetensors", 10, b"\x02" * 32))
    return _encode(Fingerprint(1, "memfd", tuple(NAMES), files, tables))


def reply(details, fingerprint: bytes = b"") -> _wire.ErrorReply:
    return _wire.ErrorReply(E.ErrorCode.FINGERPRINT_MISMATCH, False, "fingerprint mismatch: the daemon serves x",
                            tuple(details), fingerprint)


STRUCTURED = _wire.Expectation.structured(_encode(Fingerprint(1, "", ("*",), (), ())))


class MismatchMessageTest(unittest.TestCase):
    def test_a_structured_expectation_shows_the_daemons_differences(self) -> None:
        fp = daemon_fingerprint()
        sha = hashlib.sha256(fp).hexdigest()
        details = ["selection: the daemon serves 4 tables by [layers.1.engram.embed.scale, ... (4 patterns)]; this "
                   "expectation selects 52 tables by [*]",
                   f"table 'layers.1.engram.embed.weight': content differs: sha256-tree-v1 expected {'3f' * 32}, "
                   f"actual {'0c' * 32}"]
        e = answers._mismatch(reply(details, fp), SOCKET, STRUCTURED)
        self.assertIsInstance(e, E.FingerprintMismatch)
        self.assertEqual(E.ErrorCode.FINGERPRINT_MISMATCH, e.code)
        self.assertEqual(fp, e.daemon_fingerprint)
        self.assertEqual(tuple(details), e.details)
        self.assertEqual("fingerprint mismatch: the daemon serves x", e.daemon_message)
        self.assertEqual([f"FINGERPRINT_MISMATCH: the daemon on {SOCKET} serves fingerprint {sha}, not the expected "
                          "checkpoint: 2 differences"] + ["  " + d for d in details], str(e).splitlines())

    def test_at_most_five_differences_then_how_many_more(self) -> None:
        details = [f"table 't{i}': missing" for i in range(7)]
        lines = str(answers._mismatch(reply(details, daemon_fingerprint()), SOCKET, STRUCTURED)).splitlines()
        self.assertTrue(lines[0].endswith(": 7 differences"), lines[0])
        self.assertEqual(["  " + d for d in details[:5]] + ["  ... and 2 more differences"], lines[1:])
        # the daemon lists 100 and counts the rest (docs/protocol.md): they count too
        listed = [f"table 't{i}': missing" for i in range(100)] + ["... and 900 more differences"]
        e = answers._mismatch(reply(listed, daemon_fingerprint()), SOCKET, STRUCTURED)
        lines = str(e).splitlines()
        self.assertTrue(lines[0].endswith(": 1000 differences"), lines[0])
        self.assertEqual(["  " + d for d in listed[:5]] + ["  ... and 995 more differences"], lines[1:])
        self.assertEqual(tuple(listed), e.details, "the daemon's lines as it sent them")
        six = str(answers._mismatch(reply(details[:6], b""), SOCKET, STRUCTURED)).splitlines()
        self.assertEqual("  ... and 1 more difference", six[-1])
        five = str(answers._mismatch(reply(details[:5], b""), SOCKET, STRUCTURED)).splitlines()
        self.assertEqual(f"FINGERPRINT_MISMATCH: the daemon on {SOCKET} serves a fingerprint it did not send, not the "
                         "expected checkpoint: 5 differences", five[0])
        self.assertEqual(6, len(five))

    def test_a_sha256_expectation_shows_both_and_the_daemons_record_in_short(self) -> None:
        fp = daemon_fingerprint()
        sha = hashlib.sha256(fp).hexdigest()
        expected = "ab" * 32
        # what the daemon words its line does not matter: the kind of expectation sent decides
        for details in ([f"expected fingerprint {expected} but the daemon serves {sha}"], ["other words"], []):
            with self.subTest(details):
                e = answers._mismatch(reply(details, fp), SOCKET, _wire.Expectation.sha256(expected))
                self.assertEqual([
                    f"FINGERPRINT_MISMATCH: the daemon on {SOCKET} serves fingerprint {sha}, not the expected "
                    "checkpoint: 1 difference",
                    f"  expected fingerprint {expected} but the daemon serves {sha}",
                    "  the daemon serves 4 tables from 2 files: layers.1.engram.embed.scale, ...",
                ], str(e).splitlines())
        one = _encode(Fingerprint(1, "", ("*",), (), (FingerprintTable("t", "U8", (1,), 1),)))
        e = answers._mismatch(reply([], one), SOCKET, _wire.Expectation.sha256(expected))
        self.assertEqual("  the daemon serves 1 table from 0 files: t", str(e).splitlines()[2])
        e = answers._mismatch(reply([], b"EGFP"), SOCKET, _wire.Expectation.sha256(expected))
        self.assertEqual("  the daemon's record could not be decoded: fingerprint at byte 4: u16 needs 2 bytes but "
                         "only 0 are left", str(e).splitlines()[2])
        e = answers._mismatch(reply([], b""), SOCKET, _wire.Expectation.sha256(expected))
        self.assertEqual([f"FINGERPRINT_MISMATCH: the daemon on {SOCKET} serves a fingerprint it did not send, not the "
                          "expected checkpoint: 1 difference",
                          f"  expected fingerprint {expected} but the daemon serves a fingerprint it did not send"],
                         str(e).splitlines())

    def test_a_structured_expectation_never_gets_the_record(self) -> None:
        details = [f"expected fingerprint {'00' * 32} but the daemon serves {'11' * 32}"]
        e = answers._mismatch(reply(details, daemon_fingerprint()), SOCKET, STRUCTURED)
        self.assertEqual(2, len(str(e).splitlines()))


class HeadersOnlyTest(unittest.TestCase):
    """The line said once when a structured expectation is met without any content identity compared."""

    def met(self, expected: bytes, served: bytes, kind=_wire.ExpectationKind.STRUCTURED) -> list:
        """The lines connect says for this expectation met (it says them once the tables are attached)."""
        manifest = _wire.Manifest(hashlib.sha256(served).digest(), served, [], [])
        expectation = {_wire.ExpectationKind.STRUCTURED: _wire.Expectation.structured(expected),
                       _wire.ExpectationKind.SHA256: _wire.Expectation.sha256(hashlib.sha256(served).digest()),
                       _wire.ExpectationKind.ANY: _wire.Expectation.any()}[kind]
        why, headers_only = answers._served_mismatch(manifest, expectation)
        self.assertIsNone(why)
        return [client.HEADERS_ONLY] if headers_only else []

    def test_says_so_once_when_no_identity_is_shared(self) -> None:
        headers, identity = daemon_fingerprint(), daemon_fingerprint(identity=True)
        self.assertEqual([client.HEADERS_ONLY], self.met(headers, headers))
        self.assertEqual([client.HEADERS_ONLY], self.met(identity, headers), "identities on one side only")
        self.assertEqual([client.HEADERS_ONLY], self.met(headers, identity))
        self.assertEqual([], self.met(identity, identity))
        self.assertEqual([], self.met(headers, headers, _wire.ExpectationKind.SHA256))
        self.assertEqual([], self.met(headers, headers, _wire.ExpectationKind.ANY))
        self.assertEqual("compared headers only: neither side has content identity in common; write a digest record "
                         "(engram-host inspect --write-digests PATH) or serve from a Hugging Face snapshot to compare "
                         "content", client.HEADERS_ONLY)


class ExpectationTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="engram-client-test-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def test_a_path_is_expected_as_serve_would_serve_it(self) -> None:
        d = write_published(os.path.join(self.dir, "m"))
        e = client.expectation_of(d)
        self.assertEqual(engram_host.ExpectationKind.STRUCTURED, e.kind)
        fp = decode_fingerprint(e.data)
        self.assertEqual((tuple(NAMES), NAMES), (fp.patterns, [t.name for t in fp.tables]))
        self.assertEqual(e, client.expectation_of([d]))
        self.assertEqual(e, engram_host.expect_checkpoint([d]))
        globbed = decode_fingerprint(client.expectation_of(d, ["*.weight"]).data)
        self.assertEqual((("*.weight",), 5), (globbed.patterns, len(globbed.tables)))
        self.assertEqual(globbed, decode_fingerprint(engram_host.expect_checkpoint([d], ["*.weight"]).data))
        snapshot = decode_fingerprint(client.expectation_of(hf_snapshot(d, os.path.join(self.dir, "cache"))).data)
        self.assertTrue(all(f.content_sha256 is not None for f in snapshot.files), "the snapshot's identities")
        with self.assertNoLogs("engram_host", "WARNING"):  # serve's warning, not the client's (the Java's alike)
            every = decode_fingerprint(client.expectation_of(os.path.join(d, "model-00001.safetensors")).data)
        self.assertEqual(("*",), every.patterns)

    def test_tables_go_with_a_path_only(self) -> None:
        for expect in (None, "ab" * 32, b"EGFP", _wire.Expectation.any()):
            with self.subTest(expect), self.assertRaises(ValueError) as caught:
                client.expectation_of(expect, ["*"])
            self.assertEqual("tables= chooses the tables of an expected checkpoint: give expect=PATH with it, or "
                             "leave tables out", str(caught.exception))

    def test_other_expectations_as_before(self) -> None:
        self.assertEqual(_wire.Expectation.any(), client.expectation_of(None))
        sha = "AB" * 32
        by_sha = client.expectation_of(sha)
        self.assertEqual((engram_host.ExpectationKind.SHA256, bytes.fromhex(sha)), (by_sha.kind, by_sha.data))
        v1 = daemon_fingerprint()
        self.assertEqual(_wire.Expectation(engram_host.ExpectationKind.STRUCTURED, v1), client.expectation_of(v1))
        self.assertEqual(bytes(_wire.encode_import(2, -1, client.expectation_of(v1)))[8 + 9 + 4:], v1,
                         "a structured expectation in today's encoding goes as it is")
        self.assertEqual(64, len(fingerprint_sha256_hex(v1)))


class TypedCodesTest(unittest.TestCase):
    def test_error_codes_and_expectation_kinds_are_int_enums(self) -> None:
        self.assertEqual(list(range(1, 11)), [c.value for c in E.ErrorCode])
        self.assertEqual(["BAD_REQUEST", "UNSUPPORTED_VERSION", "NOT_READY", "FINGERPRINT_MISMATCH", "NOT_ALLOWED",
                          "STOPPING", "INTERNAL", "LOAD_FAILED", "BUSY", "TIMED_OUT"], [c.name for c in E.ErrorCode])
        for code, cls in E.BY_CODE.items():
            self.assertIs(E.ErrorCode(code), cls.code)
            self.assertEqual(cls.code.name, cls.name)
            self.assertEqual(int(code), cls.code)
        self.assertEqual(4, E.FingerprintMismatch.code)
        self.assertEqual("3 3", f"{E.ErrorCode.NOT_READY} {str(E.ErrorCode.NOT_READY)}", "written as numbers")
        self.assertEqual([0, 1, 2], [k.value for k in engram_host.ExpectationKind])
        self.assertEqual(["ANY", "SHA256", "STRUCTURED"], [k.name for k in engram_host.ExpectationKind])
        known = E.from_reply(9, "busy", (), True, b"")
        self.assertIs(E.ErrorCode.BUSY, known.code)
        self.assertIsInstance(known, E.Busy)
        unknown = E.from_reply(42, "later", (), False, b"")
        self.assertEqual((42, "error code 42: later"), (unknown.code, str(unknown)))
        self.assertIs(type(unknown), E.EngramHostError)
        with self.assertRaises(ValueError):
            _wire.Expectation(3)


MIB = 1 << 20


def manifest_body(regions, tables) -> bytes:
    """A MANIFEST body (docs/protocol.md): regions (kind, size, numa_node, device), tables (name, bytes, region,
    offset, kind, numa_node, device), every table U8 of shape [bytes]."""
    fp = b"fingerprint"
    out = [hashlib.sha256(fp).digest(), struct.pack("<I", len(fp)), fp, struct.pack("<I", len(regions))]
    out += [struct.pack("<BQii", *r) for r in regions]
    out.append(struct.pack("<I", len(tables)))
    for name, nbytes, region, offset, kind, node, device in tables:
        n = name.encode()
        out += [struct.pack("<H", len(n)), n, struct.pack("<H2s", 2, b"U8"), struct.pack("<Bq", 1, nbytes),
                struct.pack("<QiQQBii", nbytes, region, offset, 0, kind, node, device)]
    return b"".join(out)


def decode(regions, tables) -> _wire.Manifest:
    return _wire.decode_manifest(_wire.Reader(manifest_body(regions, tables), "MANIFEST"), len(regions), 4096)


class RegionRunTest(unittest.TestCase):
    """A cuda-vmm host table (kind 2) over a run of regions (docs/protocol.md, "A table over several regions"),
    checked when the MANIFEST is decoded, before anything is mapped."""

    VMM = (2, 2 * MIB, 0, -1)

    def test_a_sound_run_is_accepted_and_its_regions_are_the_run(self) -> None:
        m = decode([self.VMM, self.VMM, (2, 4 * MIB, 0, -1), (0, 4096, 0, -1)],
                   [("a", 3 * MIB, 0, 0, 2, 0, -1), ("b", 4 * MIB, 2, 0, 2, 0, -1), ("c", 100, 3, 0, 0, 0, -1),
                    ("d", 0, -1, 0, 2, -1, -1)])
        self.assertEqual([[0, 1], [2], [3], []], [list(r) for r in _wire.table_runs(m)])
        m = decode([self.VMM] * 3, [("a", 5 * MIB, 0, MIB, 2, 0, -1)])  # from an offset, to the last byte
        self.assertEqual([[0, 1, 2]], [list(r) for r in _wire.table_runs(m)])

    def test_a_run_must_be_mapped_back_to_back(self) -> None:
        m = decode([self.VMM] * 3, [("a", 3 * MIB, 0, 0, 2, 0, -1), ("b", MIB, 2, 0, 2, 0, -1)])
        base = 1 << 40
        attaching._check_runs_contiguous(m, [base, base + 2 * MIB, base + 8 * MIB])  # b's region may lie anywhere
        with self.assertRaisesRegex(E.EngramHostError, "table a: region 1 of its run is mapped at 0x[0-9a-f]+, not "
                                                       "right after region 0"):
            attaching._check_runs_contiguous(m, [base, base + 4 * MIB, base + 8 * MIB])

    def test_a_run_too_short_or_not_all_alike_is_refused(self) -> None:
        cases = [
            ([(0, 4096, 0, -1)] * 2, [("t", 8192, 0, 0, 0, 0, -1)],
             r"table 't' \[0, \+8192\) does not fit in region 0 of 4096 bytes; only a cuda-vmm host table"),
            ([self.VMM] * 2, [("t", 5 * MIB, 0, 0, 2, 0, -1)],
             r"table 't' \[0, \+5242880\) at region 0 runs past the last region, 1, with 1048576 bytes left"),
            ([self.VMM, (2, 2 * MIB, 1, -1)], [("t", 4 * MIB, 0, 0, 2, 0, -1)],
             "table 't' says kind 2, node 0, device -1 but region 1 of its run from region 0 has 2, 1, -1"),
            ([self.VMM, (0, 2 * MIB, 0, -1)], [("t", 4 * MIB, 0, 0, 2, 0, -1)],
             "table 't' says kind 2, node 0, device -1 but region 1 of its run from region 0 has 0, 0, -1"),
            ([self.VMM, self.VMM, (2, 2 * MIB, 1, -1)], [("t", 5 * MIB, 0, 0, 2, 0, -1)],
             "but region 2 of its run from region 0 has 2, 1, -1"),
            ([self.VMM] * 2, [("t", 1, 0, 2 * MIB, 2, 0, -1)],
             r"table 't' \[2097152, \+1\) does not fit in region 0 of 2097152 bytes$"),
        ]
        for regions, tables, pattern in cases:
            with self.subTest(pattern=pattern):
                with self.assertRaises(_wire.ProtocolError) as cm:
                    decode(regions, tables)
                self.assertRegex(str(cm.exception), pattern)
                self.assertNotIn("\n", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
