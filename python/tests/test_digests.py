"""engram_host.digests: XXH64 against the reference vectors and a plain implementation, engram digest v1
against values the Java daemon computed, sha256-tree-v1 against the vectors of docs/checkpoints.md over
every kind of buffer and over file regions, the sidecar's strict reading, and digests equal to the sidecar
bin/engram-host writes."""

from __future__ import annotations

import array
import ctypes
import json
import mmap
import os
import struct
import subprocess
import tempfile
import threading
import tracemalloc
import unittest
from unittest import mock

from engram_host import digests
from engram_host.checkpoint import CheckpointError
from engram_host.digests import (engram_digest, engram_digest_hex, is_sidecar, read_sidecar, tree_digest,
                                 tree_digest_all, tree_digest_fd, trusted_digests_from_checkpoint, xxh64)
from tests.test_checkpoint import (LAUNCHER, QUICK_JVM, TempDirTest, every_dtype_tensors, java_reason, no_fd_leak,
                                   pattern, write_safetensors)

PRIME32 = 2654435761
M = (1 << 64) - 1
MiB = 1 << 20


def sanity_buffer(size: int) -> bytes:
    """xxHash's sanity buffer: byte i is the top byte of a 32-bit generator squared at every step."""
    out = bytearray(size)
    gen = PRIME32
    for i in range(size):
        out[i] = gen >> 24
        gen = gen * gen & 0xFFFFFFFF
    return bytes(out)


def plain_xxh64(data: bytes, seed: int = 0) -> int:
    """XXH64 as the specification states it, one lane at a time: the reference for the fast version."""
    p1, p2, p3, p4, p5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                          0x27D4EB2F165667C5)

    def rotl(x: int, r: int) -> int:
        return (x << r | x >> (64 - r)) & M

    def rnd(acc: int, lane: int) -> int:
        return rotl((acc + lane * p2) & M, 31) * p1 & M

    n, p = len(data), 0
    if n >= 32:
        v = [(seed + p1 + p2) & M, (seed + p2) & M, seed & M, (seed - p1) & M]
        while p + 32 <= n:
            for i in range(4):
                v[i] = rnd(v[i], struct.unpack_from("<Q", data, p + 8 * i)[0])
            p += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & M
        for lane in v:
            h = ((h ^ rnd(0, lane)) * p1 + p4) & M
    else:
        h = (seed + p5) & M
    h = (h + n) & M
    while p + 8 <= n:
        h = (rotl(h ^ rnd(0, struct.unpack_from("<Q", data, p)[0]), 27) * p1 + p4) & M
        p += 8
    if p + 4 <= n:
        h = (rotl(h ^ (struct.unpack_from("<I", data, p)[0] * p1 & M), 23) * p2 + p3) & M
        p += 4
    while p < n:
        h = rotl(h ^ (data[p] * p5 & M), 11) * p1 & M
        p += 1
    h = (h ^ h >> 33) * p2 & M
    h = (h ^ h >> 29) * p3 & M
    return h ^ h >> 32


class Xxh64Test(unittest.TestCase):
    def test_matches_the_published_vectors(self) -> None:
        sanity = sanity_buffer(101)
        for data, seed, expected in ((b"", 0, 0xEF46DB3751D8E999), (b"", PRIME32, 0xAC75FDA2929B17EF),
                                     (sanity[:1], 0, 0x4FCE394CC88952D8), (sanity[:1], PRIME32, 0x739840CB819FA723),
                                     (sanity[:14], 0, 0xCFFA8DB881BC3A3D), (sanity[:14], PRIME32, 0x5B9611585EFCC9CB),
                                     (sanity, 0, 0x0EAB543384F878AD), (sanity, PRIME32, 0xCAA65939306F1E21),
                                     (b"a", 0, 0xD24EC4F1A98C6E5B), (b"abc", 0, 0x44BC2CF5AD770999),
                                     (b"Nobody inspects the spammish repetition", 0, 0xFBCEA83C8A378BF1)):
            with self.subTest(length=len(data), seed=seed):
                self.assertEqual(expected, xxh64(data, seed))

    def test_matches_the_plain_form_at_every_length(self) -> None:
        data = pattern(2 * MiB + 200, 7)
        for seed in (0, PRIME32, M):
            for n in list(range(0, 300)) + [MiB - 1, MiB, MiB + 33, 2 * MiB + 129]:
                self.assertEqual(plain_xxh64(data[:n], seed), xxh64(data[:n], seed), f"length {n}, seed {seed}")

    def test_takes_any_buffer(self) -> None:
        data = pattern(1000, 3)
        expected = xxh64(data)
        words = array.array("I")
        words.frombytes(data)
        c = (ctypes.c_ubyte * len(data)).from_buffer_copy(data)
        for buf in (bytearray(data), memoryview(data), words, c, memoryview(b"x" + data)[1:]):
            self.assertEqual(expected, xxh64(buf), type(buf))


class EngramDigestTest(unittest.TestCase):
    def test_small_inputs(self) -> None:
        self.assertEqual(0xEF46DB3751D8E999, engram_digest(b""))
        self.assertEqual("ef46db3751d8e999", engram_digest_hex(b""))
        self.assertEqual(xxh64(struct.pack("<Q", xxh64(b"abc"))), engram_digest(b"abc"))
        self.assertEqual("b32a991d315bd521", engram_digest_hex(b"abc"), "as the daemon's STATUS showed it")

    def test_more_than_one_chunk_as_the_daemon_computes_it(self) -> None:
        # 64 MiB + 1000 bytes of pattern(); the value is the one the Java daemon's STATUS gave for that table
        self.assertEqual("5909f0aa50ea76cf", engram_digest_hex(pattern(64 * MiB + 1000)))


TREE_VECTORS = {
    0: "0c4278d99b29da1ade86fade7817d53950883f0f46c9863a0865f5fe56f47c13",
    16 * MiB: "b2389fdc476ff72d0f3186cc3ebbbe376e5e1b122c9f13f8809ba5e106eee342",
    40 * MiB: "feed4b9bb7e2dc88ae4b5d108ed1cf94881677e9f7a26ec32e976e102d300c95",
}
ABC = "85c49fe9df25db81b88aee2da59492bbc1e83fe63cd65dbf42e05f6678fce185"


class TreeDigestTest(TempDirTest):
    @classmethod
    def setUpClass(cls) -> None:
        cls.data = pattern(40 * MiB)

    def test_matches_the_documented_vectors_on_any_number_of_threads(self) -> None:
        self.assertEqual(ABC, tree_digest(b"abc"))
        for n, expected in TREE_VECTORS.items():
            for threads in (1, 2, 3):
                self.assertEqual(expected, tree_digest(memoryview(self.data)[:n], threads), f"{n} bytes, {threads}")

    def test_digests_any_buffer_without_copying_it(self) -> None:
        expected = TREE_VECTORS[40 * MiB]
        with mmap.mmap(-1, len(self.data)) as mapped:
            mapped[:] = self.data
            over_mapping = (ctypes.c_ubyte * len(self.data)).from_buffer(mapped)
            words = array.array("I")
            words.frombytes(self.data[:16 * MiB])
            tracemalloc.start()
            try:
                self.assertEqual(expected, tree_digest(over_mapping, 2))
                self.assertEqual(TREE_VECTORS[16 * MiB], tree_digest(words, 2))
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            self.assertLess(peak, MiB, "no copy of the bytes")
            del over_mapping
        self.assertEqual(expected, tree_digest(bytearray(self.data)))

    def test_digests_file_regions_through_the_fd(self) -> None:
        path = self.path("data")
        with open(path, "wb") as f:
            f.write(b"hdr" + self.data)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.addCleanup(os.close, fd)
        self.assertEqual(TREE_VECTORS[40 * MiB], tree_digest_fd(fd, 3, 40 * MiB, 2))
        self.assertEqual(TREE_VECTORS[0], tree_digest_fd(fd, 7, 0))
        tracemalloc.start()
        try:
            self.assertEqual(TREE_VECTORS[40 * MiB], tree_digest_fd(fd, 3, 40 * MiB, 1))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        self.assertLess(peak, 17 * MiB, "one 16 MiB leaf in flight per thread")
        self.assertEqual([ABC, TREE_VECTORS[16 * MiB], TREE_VECTORS[0], tree_digest(b"hdr")],
                         tree_digest_all([b"abc", (fd, 3, 16 * MiB), b"", (fd, 0, 3)], 2))
        self.assertEqual([], tree_digest_all([], 2))

    def test_names_the_region_of_a_failed_read_and_leaves_no_thread(self) -> None:
        path = self.path("short")
        with open(path, "wb") as f:
            f.write(bytes(10))
        threads = threading.active_count()
        with no_fd_leak(self):
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                with self.assertRaises(CheckpointError) as caught:
                    tree_digest_all([self.data, (fd, 0, 100, "short: tensor 't'"), self.data], 2)
            finally:
                os.close(fd)
        self.assertEqual("short: tensor 't': reading 100 bytes at offset 0: pread(short: tensor 't', off=10) failed: "
                         "EIO (Input/output error); unexpected end of file after 10 bytes", str(caught.exception))
        with self.assertRaises(CheckpointError) as caught:
            tree_digest_fd(fd, 0, 5)
        self.assertEqual(f"fd {fd}: reading 5 bytes at offset 0: pread(fd {fd}, len=5, off=0) failed: EBADF (Bad file "
                         "descriptor)", str(caught.exception))
        self.assertEqual(threads, threading.active_count())
        with self.assertRaises(ValueError):
            tree_digest_fd(0, -1, 5)
        with self.assertRaises(ValueError):
            tree_digest(b"abc", 0)


class RecordFileTest(TempDirTest):
    """Writes a record and reads the one-line error of reading it."""
    D1 = "0c4278d99b29da1ade86fade7817d53950883f0f46c9863a0865f5fe56f47c13"

    def read_error(self, text: str) -> str:
        path = self.path("m.safetensors.engram-digests.json")
        with open(path, "w") as f:
            f.write(text)
        with no_fd_leak(self), self.assertRaises(CheckpointError) as caught:
            read_sidecar(path)
        prefix = f"{path}: "
        self.assertTrue(str(caught.exception).startswith(prefix), str(caught.exception))
        return str(caught.exception)[len(prefix):]

    def doc(self, **changes) -> str:
        doc = {"format": "engram-content-digests", "version": 1, "algorithm": "sha256-tree-v1",
               "chunk_bytes": 16777216, "tables": {"a": self.D1}}
        doc.update(changes)
        return json.dumps(doc)


class SidecarTest(RecordFileTest):
    def test_knows_sidecars_by_name(self) -> None:
        self.assertTrue(is_sidecar("/d/m.safetensors.engram-digests.json"))
        self.assertTrue(is_sidecar("/d/engram-digests.json"))
        self.assertFalse(is_sidecar("/d/m.safetensors"))
        self.assertFalse(is_sidecar("/d/x-engram-digests.json"))

    def test_reads_strictly(self) -> None:
        path = self.path("engram-digests.json")
        with open(path, "w") as f:
            f.write(self.doc(tables={"b": self.D1, "a": ABC}) + "\n")
        self.assertEqual({"b": self.D1, "a": ABC}, read_sidecar(path))
        self.assertEqual("not a digest sidecar: JSON at byte 1: unexpected end of input, expected a string key",
                         self.read_error("{"))
        self.assertEqual("not a digest sidecar: not a JSON object but a list", self.read_error("[]"))
        self.assertEqual("'format' is the string \"other\", this build reads only \"engram-content-digests\"",
                         self.read_error(self.doc(format="other")))
        self.assertEqual("'version' is the number 3, this build reads only 1 and 2",
                         self.read_error(self.doc(version=3)))
        self.assertEqual("'version' is the number 1.0, this build reads only 1 and 2",
                         self.read_error(self.doc(version=1.0)))
        self.assertEqual("'version' is true, this build reads only 1 and 2", self.read_error(self.doc(version=True)))
        self.assertEqual("unexpected field 'algorithm' (expected format, version, chunk_bytes, tables)",
                         self.read_error(self.doc(version=2)), "version 2 has no 'algorithm'")
        self.assertEqual("'algorithm' is the string \"xxh64\", this build reads only \"sha256-tree-v1\"",
                         self.read_error(self.doc(algorithm="xxh64")))
        self.assertEqual("'chunk_bytes' is the number 1024, this build reads only 16777216",
                         self.read_error(self.doc(chunk_bytes=1024)))
        self.assertEqual("'tables' is not an object of table name to digest but a list",
                         self.read_error(self.doc(tables=[])))
        self.assertEqual("table 'a': digest is the number 5, not 64 lower-case hex digits",
                         self.read_error(self.doc(tables={"a": 5})))
        self.assertEqual(f"table 'a': digest is the string \"{self.D1.upper()[:40]}...\", not 64 lower-case hex digits",
                         self.read_error(self.doc(tables={"a": self.D1.upper()})))
        self.assertEqual("a table has an empty name", self.read_error(self.doc(tables={"": self.D1})))
        repeated = self.doc()[:-2] + f', "a": "{self.D1}"' + "}}"
        at = repeated.rindex('"a"')
        self.assertEqual(f'not a digest sidecar: JSON at byte {at}: duplicate key "a"',
                         self.read_error(repeated))
        self.assertEqual("not a digest sidecar: no 'format'", self.read_error('{"tables":{}}'))
        self.assertEqual("unexpected field 'extra' (expected format, version, algorithm, chunk_bytes, tables)",
                         self.read_error(self.doc(extra=0)))
        missing = self.path("none.engram-digests.json")
        with self.assertRaises(CheckpointError) as caught:
            read_sidecar(missing)
        self.assertEqual(f"{missing}: no such file", str(caught.exception))


class RecordV2Test(RecordFileTest):
    """Version 2 (docs/checkpoints.md, "The digest record, version 2"): both digests per table."""

    E1 = "0123456789abcdef"

    def doc2(self, **changes) -> str:
        doc = {"format": "engram-content-digests", "version": 2, "chunk_bytes": 16777216,
               "tables": {"b": {"engram-digest-v1": self.E1, "sha256-tree-v1": self.D1},
                          "a": {"sha256-tree-v1": ABC, "engram-digest-v1": "ef46db3751d8e999"}}}
        doc.update(changes)
        return json.dumps(doc, separators=(",", ":")) + "\n"

    def test_reads_both_digests(self) -> None:
        from engram_host.digests import read_record
        path = self.path("engram-digests.json")
        with open(path, "w") as f:
            f.write(self.doc2())
        record = read_record(path)
        self.assertEqual((path, 2), (record.path, record.version))
        self.assertEqual({"b": (self.E1, self.D1), "a": ("ef46db3751d8e999", ABC)}, record.tables)
        self.assertEqual(["b", "a"], list(record.tables), "the file's order")
        self.assertEqual({"b": self.D1, "a": ABC}, read_sidecar(path), "the content check reads version 2 too")
        with open(path, "w") as f:
            f.write(self.doc())
        self.assertEqual((1, {"a": self.D1}), (read_record(path).version, read_record(path).tables))

    def test_reads_version_2_strictly(self) -> None:
        def tables(value) -> str:
            return self.doc2(tables={"a": value})

        self.assertEqual("unexpected field 'extra' (expected format, version, chunk_bytes, tables)",
                         self.read_error(self.doc2(extra=1)))
        self.assertEqual("not a digest sidecar: no 'chunk_bytes'",
                         self.read_error('{"format":"engram-content-digests","version":2,"tables":{}}'))
        self.assertEqual("'chunk_bytes' is the number 1024, this build reads only 16777216",
                         self.read_error(self.doc2(chunk_bytes=1024)))
        self.assertEqual("'tables' is not an object of table name to digests but a list",
                         self.read_error(self.doc2(tables=[])))
        self.assertEqual(f"table 'a': not an object of engram-digest-v1 and sha256-tree-v1 but the string "
                         f"\"{self.D1[:40]}...\"", self.read_error(tables(self.D1)))
        self.assertEqual("table 'a': unexpected field 'xxh64' (expected engram-digest-v1, sha256-tree-v1)",
                         self.read_error(tables({"engram-digest-v1": self.E1, "sha256-tree-v1": self.D1,
                                                 "xxh64": self.E1})))
        self.assertEqual("table 'a': engram-digest-v1 is null, not 16 lower-case hex digits",
                         self.read_error(tables({"sha256-tree-v1": self.D1})))
        self.assertEqual("table 'a': sha256-tree-v1 is null, not 64 lower-case hex digits",
                         self.read_error(tables({"engram-digest-v1": self.E1})))
        self.assertEqual("'version' is the number 2.0, this build reads only 1 and 2",
                         self.read_error(self.doc2(version=2.0).replace('"version":2.0', '"version":2.0,"algorithm":'
                                                                        '"sha256-tree-v1"')))
        self.assertEqual("table 'a': engram-digest-v1 is the string \"0123456789ABCDEF\", not 16 lower-case hex "
                         "digits", self.read_error(tables({"engram-digest-v1": self.E1.upper(),
                                                           "sha256-tree-v1": self.D1})))
        self.assertEqual("table 'a': engram-digest-v1 is the number 5, not 16 lower-case hex digits",
                         self.read_error(tables({"engram-digest-v1": 5, "sha256-tree-v1": self.D1})))
        self.assertEqual("table 'a': sha256-tree-v1 is the string \"0123456789abcdef\", not 64 lower-case hex "
                         "digits", self.read_error(tables({"engram-digest-v1": self.E1, "sha256-tree-v1": self.E1})))
        self.assertEqual("a table has an empty name",
                         self.read_error(self.doc2(tables={"": {"engram-digest-v1": self.E1,
                                                                "sha256-tree-v1": self.D1}})))


class JavaSidecarTest(TempDirTest):
    """Digests equal to the sidecars ``inspect --write-digests`` writes, for a Java-generated checkpoint with a
    table over 16 MiB and the Python-written every-dtype file."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.reason = java_reason()
        if cls.reason:
            return
        cls.root = tempfile.mkdtemp(prefix="engram-java-digests-")
        cls.gen = os.path.join(cls.root, "gen")
        cls.every = write_safetensors(os.path.join(cls.root, "every.safetensors"), every_dtype_tensors())
        for args in (["generate", "--out", cls.gen, "--rows", "70000", "--layers", "1"],
                     ["inspect", "--json", "--write-digests", "--threads", "2", cls.gen, cls.every]):
            p = subprocess.run([LAUNCHER, *args], capture_output=True, text=True, timeout=120, env=QUICK_JVM)
            if p.returncode:
                raise AssertionError(f"engram-host {args[0]} failed: {p.stderr}")
        cls.inspected = json.loads(p.stdout)

    @classmethod
    def tearDownClass(cls) -> None:
        if not cls.reason:
            import shutil
            shutil.rmtree(cls.root, True)

    def setUp(self) -> None:
        if self.reason:
            self.skipTest(self.reason)
        super().setUp()

    def test_digests_equal_the_javas_sidecars(self) -> None:
        gen_sidecar = read_sidecar(os.path.join(self.gen, "engram-digests.json"))
        every_sidecar = read_sidecar(self.every + ".engram-digests.json")
        # generate's tables (config.json's layer 1): the record holds the selected tensors
        self.assertEqual(["layers.1.engram.embed.scale", "layers.1.engram.embed.weight"], list(gen_sidecar))
        self.assertEqual(sorted(t[0] for t in every_dtype_tensors()), sorted(every_sidecar))
        with no_fd_leak(self):
            self.assertEqual(gen_sidecar, trusted_digests_from_checkpoint(self.gen, list(gen_sidecar), 2))
            self.assertEqual(every_sidecar, trusted_digests_from_checkpoint([self.every], list(every_sidecar), 1))
        java = {t["name"]: t["sha256-tree-v1"] for t in self.inspected["tensors"]}
        self.assertEqual({**gen_sidecar, **every_sidecar}, java)
        with open(os.path.join(self.gen, "model-00001-of-00001.safetensors"), "rb") as f:
            raw = f.read()
        weight = next(t for t in self.inspected["tensors"] if t["name"] == "layers.1.engram.embed.weight")
        self.assertGreater(weight["bytes"], 16 * MiB, "more than one leaf")
        data = memoryview(raw)[weight["offset"]:weight["offset"] + weight["bytes"]]
        self.assertEqual(gen_sidecar[weight["name"]], tree_digest(data, 2))
        # the record is of version 2: beside each tree digest, the engram digest v1 the daemon checks at load
        record = digests.read_record(os.path.join(self.gen, "engram-digests.json"))
        self.assertEqual(2, record.version)
        self.assertEqual((engram_digest_hex(data), gen_sidecar[weight["name"]]), record.tables[weight["name"]])

    def test_leaves_out_names_the_checkpoint_lacks(self) -> None:
        self.assertEqual(["t.u8"], list(trusted_digests_from_checkpoint(self.every, ["t.u8", "absent"])))

    def test_refuses_a_file_that_changed_while_it_was_read(self) -> None:
        real = digests.tree_digest_all

        def touching(sources, threads):
            st = os.stat(self.every)
            os.utime(self.every, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
            return real(sources, threads)

        with no_fd_leak(self), mock.patch.object(digests, "tree_digest_all", touching), \
                self.assertRaises(CheckpointError) as caught:
            trusted_digests_from_checkpoint(self.every, ["t.u8"], 2)
        self.assertRegex(str(caught.exception), rf"^checkpoint {self.every} changed while its digests were computed "
                         r"\(mtime(, ctime)?\): its digests would describe no one version of it; run again once the "
                         r"file is stable$")


if __name__ == "__main__":
    unittest.main()
