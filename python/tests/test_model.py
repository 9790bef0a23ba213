"""The published model layout end to end (issue #25): ``engram-host generate --model`` checkpoints served by real
daemons (``engram-host serve`` processes) and imported by the package with ``connect(expect=MODEL_DIR)``: the
selection by config.json, content identity from a digest record or a Hugging Face snapshot, and a record that
disagrees with the files. Every daemon of the module starts at once in setUpModule."""

import hashlib
import json
import logging
import os
import shutil
import struct
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import engram_host  # noqa: E402
from engram_host import errors as E  # noqa: E402
from engram_host.digests import engram_digest_hex  # noqa: E402
from support import (Daemon, generate, hf_snapshot, java_work_dir, run_cli, safetensors_tables,  # noqa: E402
                     table_names)

ROWS = 2048
CHANGED = "layers.14.engram.embed.weight"  # the table whose byte the changed copies differ in
AT = 1000  # ... at this offset of its data
QUIET = logging.NullHandler()


def locate(directory: str, name: str) -> tuple:
    """(file, offset in it, bytes) of tensor ``name`` in the .safetensors files of ``directory``, by this test's
    own reading of the headers."""
    for f in sorted(os.listdir(directory)):
        if not f.endswith(".safetensors"):
            continue
        path = os.path.join(directory, f)
        with open(path, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
        if name in header:
            begin, end = header[name]["data_offsets"]
            return path, 8 + n + begin, end - begin
    raise AssertionError(f"no tensor {name} in {directory}")


def change_byte(directory: str, name: str = CHANGED, at: int = AT) -> str:
    """Flips every bit of one byte of tensor ``name``'s data in place (same size, same header). Returns the file."""
    path, offset, nbytes = locate(directory, name)
    assert at < nbytes
    with open(path, "r+b") as f:
        f.seek(offset + at)
        b = f.read(1)[0]
        f.seek(offset + at)
        f.write(bytes([b ^ 0xFF]))
    return path


def copy(source: str, name: str, changed: bool = False) -> str:
    out = shutil.copytree(source, os.path.join(WORK, name))
    if changed:
        change_byte(out)
    return out


def record(directory: str) -> dict:
    """``inspect --write-digests DIRECTORY``, and the record it wrote (a version 2 one)."""
    run_cli("inspect", "--write-digests", directory)
    with open(os.path.join(directory, "engram-digests.json")) as f:
        doc = json.load(f)
    assert doc["version"] == 2, doc
    return doc["tables"]


def setUpModule():
    global WORK, M, MP, PLAIN2, REC1, REC2, BAD, SNAP, SNAP2, D, DP, DPLAIN2, DREC2, DSNAP, DBAD, RECORDS, BAD_RECORD
    WORK = java_work_dir("engram-py-model-")
    logging.getLogger("engram_host").addHandler(QUIET)
    M = generate(os.path.join(WORK, "m"), rows=ROWS, model=True)
    MP = generate(os.path.join(WORK, "mp"), rows=ROWS, model=True, prefix="model.")
    PLAIN2 = copy(M, "plain2", changed=True)  # M with one byte changed, no record on either
    REC1, REC2 = copy(M, "rec1"), copy(M, "rec2", changed=True)  # the same two, each with its record
    RECORDS = {REC1: record(REC1), REC2: record(REC2)}
    BAD = copy(M, "bad")  # a record, then a byte changed under it
    BAD_RECORD = record(BAD)
    change_byte(BAD)
    SNAP = hf_snapshot(M, os.path.join(WORK, "hf"))
    SNAP2 = hf_snapshot(PLAIN2, os.path.join(WORK, "hf2"))
    daemons = [Daemon(p, wait_ready=False) for p in (M, MP, PLAIN2, REC2, SNAP, BAD)]
    D, DP, DPLAIN2, DREC2, DSNAP, DBAD = daemons
    for d in daemons[:-1]:
        d.wait_ready()


def tearDownModule():
    logging.getLogger("engram_host").removeHandler(QUIET)
    for d in (D, DP, DPLAIN2, DREC2, DSNAP, DBAD):
        d.close()
    shutil.rmtree(WORK, ignore_errors=True)


class PublishedModelTest(unittest.TestCase):
    """``generate --model``: config.json chooses the four Engram tables out of the model's sixteen tensors."""

    def check(self, daemon: Daemon, model: str, prefix: str) -> None:
        names = table_names(prefix=prefix)
        s = engram_host.status(daemon.socket)
        self.assertEqual("ready", s["state"])
        self.assertEqual("config", s["selection"]["rule"])
        self.assertEqual(4, s["selection"]["tables"])
        self.assertEqual(f"config.json engram_layer_ids [1, 14]: 4 tensors, 1.0 MiB ({prefix}layers.1.engram.embed."
                         "scale, ...)", s["selection"]["description"])
        self.assertEqual("headers", s["content_identity"])
        self.assertEqual(names, [t["name"] for t in s["tables"]])
        on_disk = safetensors_tables([model])
        self.assertEqual(16, len(on_disk), "the whole model's shape")
        with self.assertLogs("engram_host", "WARNING") as logs:
            with engram_host.connect(daemon.socket, expect=model) as imported:
                self.assertEqual(names, sorted(imported.tables))
                for name in names:
                    dtype, shape, data = on_disk[name]
                    t = imported.tables[name]
                    self.assertEqual((dtype, shape, len(data)), (t.dtype, t.shape, t.nbytes), name)
                    self.assertEqual(data, bytes(t.buffer()), name)
                self.assertEqual(("F8_E4M3", (ROWS, 256)), (imported.tables[names[1]].dtype,
                                                            imported.tables[names[1]].shape))
                self.assertEqual(("F8_E8M0", (ROWS, 8)), (imported.tables[names[0]].dtype,
                                                          imported.tables[names[0]].shape))
        # no record and no snapshot on either side: the client says, once, that headers alone were compared
        self.assertEqual([engram_host.client.HEADERS_ONLY], [r.getMessage() for r in logs.records])

    def test_the_config_chooses_the_engram_tables(self):
        self.check(D, M, "")

    def test_under_a_prefix(self):
        self.check(DP, MP, "model.")

    def test_the_other_models_config_is_another_selection(self):
        with self.assertRaises(E.FingerprintMismatch) as cm:
            engram_host.connect(D.socket, expect=MP)
        self.assertIn("selection: the daemon serves 4 tables by [layers.1.engram.embed.scale, ... (4 patterns)]; "
                      "this expectation selects 4 tables by [model.layers.1.engram.embed.scale, ... (4 patterns)]",
                      cm.exception.details)


class ChangedByteTest(unittest.TestCase):
    """The same headers and one byte of other content."""

    def test_without_a_record_only_headers_are_compared(self):
        with self.assertLogs("engram_host", "WARNING") as logs:
            with engram_host.connect(DPLAIN2.socket, expect=M) as imported:
                path, offset, _ = locate(M, CHANGED)
                with open(path, "rb") as f:
                    f.seek(offset + AT)
                    original = f.read(1)[0]
                self.assertEqual(original ^ 0xFF, bytes(imported.tables[CHANGED].buffer())[AT],
                                 "the daemon serves the changed byte, and nothing could tell")
        self.assertEqual([engram_host.client.HEADERS_ONLY], [r.getMessage() for r in logs.records])

    def test_with_records_the_changed_table_is_named(self):
        s = engram_host.status(DREC2.socket)
        self.assertEqual(("ready", "record"), (s["state"], s["content_identity"]))
        expected, actual = RECORDS[REC1][CHANGED], RECORDS[REC2][CHANGED]
        self.assertNotEqual(expected, actual)
        self.assertEqual({n: d for n, d in RECORDS[REC1].items() if n != CHANGED},
                         {n: d for n, d in RECORDS[REC2].items() if n != CHANGED}, "one table differs")
        with self.assertNoLogs("engram_host", "WARNING"), self.assertRaises(E.FingerprintMismatch) as cm:
            engram_host.connect(DREC2.socket, expect=REC1)
        e = cm.exception
        details = (f"table '{CHANGED}': content differs: engram-digest-v1 expected {expected['engram-digest-v1']}, "
                   f"actual {actual['engram-digest-v1']}",
                   f"table '{CHANGED}': content differs: sha256-tree-v1 expected {expected['sha256-tree-v1']}, "
                   f"actual {actual['sha256-tree-v1']}")
        self.assertEqual(details, e.details)
        served = hashlib.sha256(e.daemon_fingerprint).hexdigest()
        self.assertEqual([f"FINGERPRINT_MISMATCH: the daemon on {DREC2.socket} serves fingerprint {served}, not the "
                          "expected checkpoint: 2 differences"] + ["  " + d for d in details], str(e).splitlines())
        # its own files: the identity in common is compared, so nothing is said
        with self.assertNoLogs("engram_host", "WARNING"):
            with engram_host.connect(DREC2.socket, expect=REC2) as imported:
                self.assertEqual(table_names(), sorted(imported.tables))
                self.assertEqual(safetensors_tables([REC2])[CHANGED][2], bytes(imported.tables[CHANGED].buffer()))
        # a record's engram digest v1 is the table's, as the daemon computes it at load
        for name, digests in RECORDS[REC2].items():
            self.assertEqual(digests["engram-digest-v1"], engram_digest_hex(safetensors_tables([REC2])[name][2]), name)


class RecordDisagreesTest(unittest.TestCase):
    def test_serve_refuses_to_load_naming_the_tensor_and_the_record(self):
        self.assertEqual(1, DBAD.proc.wait(60), DBAD.log())
        path, _, _ = locate(BAD, CHANGED)
        actual = engram_digest_hex(safetensors_tables([BAD])[CHANGED][2])
        recorded = BAD_RECORD[CHANGED]["engram-digest-v1"]
        self.assertNotEqual(recorded, actual)
        record_path = os.path.join(BAD, "engram-digests.json")
        said = [line for line in DBAD.log().splitlines() if line.startswith("engram-host serve: ")]
        self.assertEqual([f"engram-host serve: {path}: tensor '{CHANGED}': its bytes have engram digest v1 {actual}, "
                          f"but the digest record {record_path} says {recorded}; refusing to serve it: restore the "
                          f"file, or if it changed on purpose write the record again with engram-host inspect "
                          f"--write-digests {BAD}"], said)
        self.assertNotIn(" ready: ", DBAD.log(), "it never became ready")
        if os.path.exists(DBAD.socket + ".ready"):
            with open(DBAD.socket + ".ready") as f:
                self.assertNotIn(f"pid={DBAD.pid}\n", f.read(), "it never said it was ready")


class HfSnapshotTest(unittest.TestCase):
    """A Hugging Face cache snapshot of the model: each file's identity is its blob's name."""

    def test_the_snapshot_is_its_own_identity(self):
        s = engram_host.status(DSNAP.socket)
        self.assertEqual(("ready", "config", "hf-snapshot"),
                         (s["state"], s["selection"]["rule"], s["content_identity"]))
        link = os.path.join(SNAP, os.path.basename(locate(M, CHANGED)[0]))
        self.assertTrue(os.readlink(link).startswith("../../blobs/"), os.readlink(link))
        with self.assertNoLogs("engram_host", "WARNING"):
            with engram_host.connect(DSNAP.socket, expect=SNAP) as imported:
                self.assertEqual(table_names(), sorted(imported.tables))
                on_disk = safetensors_tables([M])
                for name in table_names():
                    self.assertEqual(on_disk[name][2], bytes(imported.tables[name].buffer()), name)

    def test_a_snapshot_of_other_bytes_is_named_by_its_file(self):
        file = os.path.basename(locate(M, CHANGED)[0])
        with open(os.path.join(M, file), "rb") as f:
            served = hashlib.sha256(f.read()).hexdigest()
        with open(os.path.join(PLAIN2, file), "rb") as f:
            other = hashlib.sha256(f.read()).hexdigest()
        with self.assertRaises(E.FingerprintMismatch) as cm:
            engram_host.connect(DSNAP.socket, expect=SNAP2)
        self.assertEqual((f"file '{file}': content differs: SHA-256 expected {other}, actual {served}",),
                         cm.exception.details)


if __name__ == "__main__":
    unittest.main()
