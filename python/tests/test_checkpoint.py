"""engram_host.checkpoint: every validation rule of docs/checkpoints.md on hand-built files, sharded
checkpoints and directories, selection, the change check, the fingerprint (encoding, decoding,
differences), the limits, and a cross-check against the Java implementation through bin/engram-host."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import shutil
import struct
import subprocess
import tempfile
import time
import unittest
from typing import Iterator, Optional, Sequence

from engram_host.checkpoint import (DTYPE_BITS, CheckpointError, Fingerprint, FingerprintFile, FingerprintTable,
                                    check_limits, decode_fingerprint, fingerprint, fingerprint_differences,
                                    fingerprint_sha256_hex, open_checkpoint, parse_json)
from tests.support import (hf_snapshot, safetensors_tables, write_published,  # noqa: F401 (test_digests
                           write_raw, write_record, write_safetensors)                # takes some here)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LAUNCHER = os.path.join(REPO, "bin", "engram-host")
JAVA_LIB = os.path.join(REPO, "engram-host", "cli", "target", "app", "lib")


# ---------------------------------------------------------------------------------------------------------------
# helpers shared with test_digests

def entry(name: str, dtype: str, shape: str, begin: int, end: int) -> str:
    """One tensor entry of a header, as JSON text (``shape`` is JSON text too)."""
    return f'"{name}":{{"dtype":"{dtype}","shape":{shape},"data_offsets":[{begin},{end}]}}'


def pattern(n: int, salt: int = 0) -> bytes:
    """n deterministic bytes: (i * 131 + (i >> 16) + salt) & 0xff."""
    base = bytes((j * 131) & 0xFF for j in range(65536))
    blocks = [base.translate(bytes((x + k + salt) & 0xFF for x in range(256))) for k in range((n >> 16) + 1)]
    return b"".join(blocks)[:n]


def every_dtype_tensors() -> list:
    """One tensor of every dtype (sub-byte ones packed), scalars, empty tensors, rank 3, and names whose
    code point order differs from UTF-16 order."""
    out = []
    sub_byte = {"F4": [2, 3], "F6_E2M3": [4], "F6_E3M2": [2, 4]}  # 24, 24 and 48 bits
    for i, (dtype, bits) in enumerate(DTYPE_BITS.items()):
        shape = sub_byte.get(dtype, [3, 5])
        out.append((f"t.{dtype.lower()}", dtype, shape, pattern(math.prod(shape) * bits // 8, i)))
    out += [("scalar.f32", "F32", [], pattern(4, 1)), ("scalar.i64", "I64", [], pattern(8, 2)),
            ("empty.bf16", "BF16", [0, 4], b""), ("empty.u8", "U8", [0], b""),
            ("rank3", "U16", [2, 3, 4], pattern(48, 3)), ("z", "U8", [1], b"z"), ("\u00e9", "U8", [2], b"e!"),
            ("\uffff", "U8", [1], b"f"), ("\U0001F600", "U8", [1], b"s")]
    return out


def fds() -> set:
    return set(os.listdir("/proc/self/fd"))


@contextlib.contextmanager
def no_fd_leak(test: unittest.TestCase) -> Iterator[None]:
    """Asserts that the block leaves /proc/self/fd as it found it."""
    before = fds()
    yield
    leaked = fds() - before
    leaked = {fd for fd in leaked if os.path.exists(f"/proc/self/fd/{fd}")}  # not the fd that listed the directory
    test.assertEqual(set(), leaked, "file descriptors left open")


class TempDirTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="engram-ckpt-test-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def fail_open(self, *paths) -> str:
        """The one-line CheckpointError of opening ``paths``, after checking no fd was left open."""
        with no_fd_leak(self):
            with self.assertRaises(CheckpointError) as caught:
                open_checkpoint(list(paths)).close()
        message = str(caught.exception)
        self.assertNotIn("\n", message)
        return message


# ---------------------------------------------------------------------------------------------------------------

class SafetensorsFileTest(TempDirTest):
    def file(self) -> str:
        return self.path("model-00001.safetensors")

    def fail(self, header, data_len: int = 0, n: Optional[int] = None) -> str:
        return self.fail_open(write_raw(self.file(), header, data_len=data_len, n=n))

    def at(self, tensor: Optional[str] = None) -> str:
        return f"{self.file()}: " + (f"tensor '{tensor}': " if tensor is not None else "")

    def test_reads_a_valid_file(self) -> None:
        header = ('{"__metadata__":{"format":"pt"},' + entry("w", "F8_E4M3", "[10,256]", 0, 2560) + ","
                  + entry("s", "F8_E8M0", "[10,8]", 2560, 2640) + "," + entry("scalar", "F32", "[]", 2640, 2644)
                  + "," + entry("empty", "BF16", "[0,4]", 2644, 2644) + "}   ")
        path = write_raw(self.file(), header, data_len=2644)
        with no_fd_leak(self), open_checkpoint(path) as cp:
            f = cp.files[0]
            self.assertEqual(hashlib.sha256(header.encode()).digest(), f.header_sha256)
            self.assertEqual({"format": "pt"}, f.metadata)
            self.assertEqual("model-00001.safetensors", f.name)
            self.assertEqual(8 + len(header) + 2644, f.size)
            self.assertEqual(["empty", "s", "scalar", "w"], [t.name for t in f.tensors])
            self.assertEqual(["empty", "s", "scalar", "w"], list(cp.tensors))
            w = cp.tensors["w"]
            self.assertEqual(("w", "F8_E4M3", (10, 256), 2560, 8 + len(header)),
                             (w.name, w.dtype, w.shape, w.nbytes, w.offset))
            self.assertIs(f, w.file)
            self.assertEqual((8 + len(header) + 2640, 4, ()), (cp.tensors["scalar"].offset,
                                                               cp.tensors["scalar"].nbytes, cp.tensors["scalar"].shape))
            self.assertEqual(0, cp.tensors["empty"].nbytes)
            flags = fcntl.fcntl(f.fd, fcntl.F_GETFL)
            self.assertEqual(os.O_RDONLY, flags & os.O_ACCMODE)
            self.assertTrue(flags & os.O_NONBLOCK)
            self.assertFalse(os.get_inheritable(f.fd))
        self.assertEqual(-1, f.fd)

    def test_an_empty_header_and_tensors_in_any_header_order(self) -> None:
        with open_checkpoint(write_raw(self.file(), "{}")) as cp:
            self.assertEqual({}, cp.tensors)
        header = "{" + entry("b", "U8", "[4]", 4, 8) + "," + entry("e", "U8", "[0]", 4, 4) + "," + \
            entry("a", "I32", "[1]", 0, 4) + "}"
        with open_checkpoint(write_raw(self.file(), header, data_len=8)) as cp:
            self.assertEqual(["a", "b", "e"], list(cp.tensors))

    def test_refuses_bad_lengths(self) -> None:
        with open(self.file(), "wb") as f:
            f.write(b"abc")
        self.assertEqual(self.at() + "file is 3 bytes, too short for the 8-byte header length",
                         self.fail_open(self.file()))
        self.assertEqual(self.at() + "header length 104857601 exceeds the limit of 104857600 bytes (100 MiB)",
                         self.fail("{}", n=104857601))
        self.assertEqual(self.at() + "header length 18446744073709551615 exceeds the limit of 104857600 bytes "
                         "(100 MiB)", self.fail("{}", n=(1 << 64) - 1))
        self.assertEqual(self.at() + "header length 3 runs past the end of the file (10 bytes)",
                         self.fail("{}", n=3))

    def test_says_a_file_that_is_not_safetensors_is_not(self) -> None:
        # the words of the Java reader (SafetensorsFile.read): an impossible length and no '{' after it
        tail = ", are not a header length followed by a JSON object): give a .safetensors file, an index or a model " \
            "directory"
        with open(self.file(), "w") as f:
            f.write("# Engram notes\nnot a checkpoint at all\n")
        self.assertEqual(self.at() + 'not a safetensors file (its first 8 bytes, "# Engram" = 2320456e6772616d' + tail,
                         self.fail_open(self.file()))
        with open(self.file(), "wb") as f:
            f.write(bytes([0xff, 0, 0, 0, 0, 0, 0, 0x80]))  # nothing after the 8 bytes
        self.assertEqual(self.at() + 'not a safetensors file (its first 8 bytes, "........" = ff00000000000080' + tail,
                         self.fail_open(self.file()))
        # a length that runs past the end, and no JSON after it; a quote shows as '.'
        with open(self.file(), "wb") as f:
            f.write(bytes([100, 0, 0, 0, 0, 0, 0, 0]) + b'xy')
        self.assertEqual(self.at() + 'not a safetensors file (its first 8 bytes, "d......." = 6400000000000000' + tail,
                         self.fail_open(self.file()))
        with open(self.file(), "wb") as f:
            f.write(b'"a"b~\x00\x00\x00 tail')
        self.assertEqual(self.at() + 'not a safetensors file (its first 8 bytes, ".a.b~..." = 226122627e000000' + tail,
                         self.fail_open(self.file()))
        # a possible length: the header's own complaint, not this one
        self.assertEqual(self.at() + "header JSON at byte 0 (file offset 8): unexpected 'x', expected a value",
                         self.fail("xy"))

    def test_refuses_json_that_is_not_strict(self) -> None:
        self.assertEqual(self.at() + "header JSON at byte 5 (file offset 13): unexpected '1', expected ':' after key",
                         self.fail('{"a" 1}'))
        self.assertEqual(self.at() + "header JSON at byte 0 (file offset 8): unexpected end of input, expected a value",
                         self.fail(""))
        self.assertEqual(self.at() + "header is not a JSON object", self.fail("[]"))
        self.assertEqual(self.at() + "header JSON at byte 2 (file offset 10): invalid UTF-8 byte 0xff",
                         self.fail(b'{"\xff"}'))
        header = "{" + entry("t", "U8", "[1]", 0, 1) + "," + entry("t", "U8", "[1]", 1, 2) + "}"
        second = header.rindex('"t"')
        self.assertEqual(self.at() + f'header JSON at byte {second} (file offset {8 + second}): duplicate key "t"',
                         self.fail(header, 2))
        self.assertEqual(self.at() + "header JSON at byte 5 (file offset 13): unexpected 'N', expected a value",
                         self.fail('{"a":NaN}'))
        self.assertEqual(self.at() + "header JSON at byte 5 (file offset 13): unexpected 'I', expected a value",
                         self.fail('{"a":Infinity}'))
        self.assertEqual(self.at() + "header JSON at byte 64 (file offset 72): nesting deeper than 64 levels",
                         self.fail('{"a":' + "[" * 64 + "]" * 64 + "}"))
        self.assertEqual(self.at() + "header JSON at byte 5 (file offset 13): integer 9223372036854775808 does not "
                         "fit in 64 bits", self.fail('{"a":9223372036854775808}'))
        self.assertEqual(self.at() + "header JSON at byte 5 (file offset 13): number 1e999 is out of range",
                         self.fail('{"a":1e999}'))
        self.assertEqual(self.at() + "header JSON at byte 1 (file offset 9): unpaired surrogate \\ud800",
                         self.fail('{"\\ud800":1}'))
        self.assertEqual(self.at() + "header JSON at byte 3 (file offset 11): unexpected 'x' after the value",
                         self.fail("{} x"))
        self.assertEqual(self.at() + "header JSON at byte 6 (file offset 14): control character 0x1 in string "
                         "(must be escaped)", self.fail('{"a":"\x01"}'))
        self.assertEqual(self.at() + "header JSON at byte 0 (file offset 8): unexpected byte 0xef, expected a value",
                         self.fail(b"\xef\xbb\xbf{}"))
        # 64 levels, 64-bit integers, escapes and a trailing run of spaces are fine
        self.assertEqual([], parse_json(b"[" * 64 + b"]" * 64)[0][0][0][:0])
        self.assertEqual({"\U0001F600": -(1 << 63)}, parse_json(b'{"\\ud83d\\ude00":-9223372036854775808}    '))

    def test_refuses_bad_metadata_and_entries(self) -> None:
        self.assertEqual(self.at() + "__metadata__ is not an object but a list", self.fail('{"__metadata__":[]}'))
        self.assertEqual(self.at() + "__metadata__ 'n' is not a string but the number 1",
                         self.fail('{"__metadata__":{"a":"b","n":1}}'))
        self.assertEqual(self.at("t") + 'entry is not an object but the string "x"', self.fail('{"t":"x"}'))
        self.assertEqual(self.at("t") + 'entry is not an object but the string "'
                         + "y" * 40 + '..."', self.fail('{"t":"' + "y" * 50 + '"}'))
        self.assertEqual(self.at() + "a tensor has an empty name",
                         self.fail("{" + entry("", "U8", "[1]", 0, 1) + "}", 1))
        for raw, shown in (("t\\n2026 engram-host: forged\\u001b[2J", "t\\n2026 engram-host: forged\\u001b[2J"),
                           ("t\\u2028u", "t\\u2028u")):
            self.assertEqual(self.at(shown) + "its name holds a control character or a line separator, which no tensor "
                             "name may; export the file again with printable names",
                             self.fail("{" + entry(raw, "U8", "[1]", 0, 1) + "}", 1))
        self.assertEqual(self.at("t") + "unexpected field 'extra' (expected dtype, shape, data_offsets)",
                         self.fail('{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":0}}', 1))
        self.assertEqual(self.at("t") + "missing 'dtype'", self.fail('{"t":{"shape":[1],"data_offsets":[0,1]}}', 1))
        self.assertEqual(self.at("t") + "missing 'shape'", self.fail('{"t":{"dtype":"U8","data_offsets":[0,1]}}', 1))
        self.assertEqual(self.at("t") + "missing 'data_offsets'", self.fail('{"t":{"dtype":"U8","shape":[1]}}', 1))

    def test_refuses_bad_dtypes_and_shapes(self) -> None:
        self.assertEqual(self.at("t") + "dtype is not a string but the number 8",
                         self.fail('{"t":{"dtype":8,"shape":[1],"data_offsets":[0,1]}}', 1))
        self.assertEqual(self.at("t") + "unknown dtype 'F8_E4M3FN' (known: BOOL, F4, F6_E2M3, F6_E3M2, U8, I8, F8_E5M2,"
                         " F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64)",
                         self.fail("{" + entry("t", "F8_E4M3FN", "[1]", 0, 1) + "}", 1))
        self.assertEqual(self.at("t") + "shape is not a list of non-negative integers but the number 1",
                         self.fail("{" + entry("t", "U8", "1", 0, 1) + "}", 1))
        self.assertEqual(self.at("t") + "shape is not a list of non-negative integers: element 1 is -1",
                         self.fail("{" + entry("t", "U8", "[1,-1]", 0, 1) + "}", 1))
        self.assertEqual(self.at("t") + "shape is not a list of non-negative integers: element 0 is the number 1.5",
                         self.fail("{" + entry("t", "U8", "[1.5]", 0, 1) + "}", 1))
        self.assertEqual(self.at("t") + "shape is not a list of non-negative integers: element 0 is the number 1.0E20",
                         self.fail("{" + entry("t", "U8", "[1e20]", 0, 1) + "}", 1))
        self.assertEqual(self.at("t") + "shape is not a list of non-negative integers: element 0 is true",
                         self.fail("{" + entry("t", "U8", "[true]", 0, 1) + "}", 1))
        self.assertEqual(self.at("t") + 'shape is not a list of non-negative integers: element 0 is the string "1"',
                         self.fail("{" + entry("t", "U8", '["1"]', 0, 1) + "}", 1))
        self.assertEqual(self.at("t") + "shape [4294967296, 4294967296] has more than 2^63 elements",
                         self.fail("{" + entry("t", "U8", "[4294967296,4294967296]", 0, 1) + "}", 1))
        self.assertEqual(self.at("t") + "U64 [2305843009213693952] is larger than 2^63 bits",
                         self.fail("{" + entry("t", "U64", "[2305843009213693952]", 0, 1) + "}", 1))

    def test_refuses_bad_offsets_and_byte_counts(self) -> None:
        self.assertEqual(self.at("t") + "data_offsets has 3 elements, expected 2",
                         self.fail('{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}', 1))
        self.assertEqual(self.at("t") + "data_offsets is not a list of 2 non-negative integers: element 0 is -1",
                         self.fail('{"t":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}', 1))
        self.assertEqual(self.at("t") + "data_offsets is not a list of 2 non-negative integers but null",
                         self.fail('{"t":{"dtype":"U8","shape":[1],"data_offsets":null}}', 1))
        self.assertEqual(self.at("t") + "data_offsets [2, 1] end before they begin",
                         self.fail("{" + entry("t", "U8", "[1]", 2, 1) + "}", 2))
        self.assertEqual(self.at("t") + "data_offsets [0, 5] end past the data section (4 bytes)",
                         self.fail("{" + entry("t", "U8", "[5]", 0, 5) + "}", 4))
        self.assertEqual(self.at("engram.layers.1.embedding.weight") + "F8_E4M3 [10, 256] needs 2560 bytes but "
                         "data_offsets give 2559",
                         self.fail("{" + entry("engram.layers.1.embedding.weight", "F8_E4M3", "[10,256]", 0, 2559)
                                   + "}", 2559))
        self.assertEqual(self.at("s") + "F32 [] needs 4 bytes but data_offsets give 0",
                         self.fail("{" + entry("s", "F32", "[]", 0, 0) + "}"))
        self.assertEqual(self.at("p") + "F4 [3] has 3 elements of 4 bits = 12 bits, not a whole number of bytes",
                         self.fail("{" + entry("p", "F4", "[3]", 0, 2) + "}", 2))
        self.assertEqual(self.at("p") + "F6_E3M2 [4] needs 3 bytes but data_offsets give 4",
                         self.fail("{" + entry("p", "F6_E3M2", "[4]", 0, 4) + "}", 4))

    def test_refuses_overlaps_holes_and_bytes_of_no_tensor(self) -> None:
        def two(b: tuple, data_len: int) -> str:
            return self.fail("{" + entry("a", "U8", "[4]", 0, 4) + "," + entry(*b) + "}", data_len)

        self.assertEqual(self.at("b") + "data_offsets [2, 6] overlap tensor 'a' [0, 4]",
                         two(("b", "U8", "[4]", 2, 6), 6))
        self.assertEqual(self.at("b") + "data_offsets [0, 4] overlap tensor 'a' [0, 4]",
                         two(("b", "U8", "[4]", 0, 4), 4))
        self.assertEqual(self.at("e") + "data_offsets [2, 2] overlap tensor 'a' [0, 4]",
                         two(("e", "U8", "[0]", 2, 2), 4))
        self.assertEqual(self.at("b") + "data_offsets [5, 9] leave a hole of 1 bytes after tensor 'a'",
                         two(("b", "U8", "[4]", 5, 9), 9))
        self.assertEqual(self.at("a") + "data_offsets [3, 7] leave a hole of 3 bytes after the start of the data "
                         "section",
                         self.fail("{" + entry("a", "U8", "[4]", 3, 7) + "}", 7))
        self.assertEqual(self.at() + "the data section has 6 bytes but the tensors cover 4: 2 bytes at the end belong "
                         "to no tensor", self.fail("{" + entry("a", "U8", "[4]", 0, 4) + "}", 6))
        self.assertEqual(self.at() + "the data section has 1 bytes but the tensors cover 0: 1 bytes at the end belong "
                         "to no tensor", self.fail("{}", 1))

    def test_refuses_what_is_not_a_readable_regular_file(self) -> None:
        missing = self.path("absent.safetensors")
        self.assertEqual(f"{missing}: no such file or directory", self.fail_open(missing))
        fifo = self.path("fifo.safetensors")
        os.mkfifo(fifo)
        self.assertEqual(f"{fifo}: not a regular file", self.fail_open(fifo))  # and the open did not hang


class CheckpointTest(TempDirTest):
    def shards(self) -> tuple:
        """Two shards and their index: layers 1 (two tensors) and 14 (one)."""
        s1 = write_safetensors(self.path("model-00001-of-00002.safetensors"), [
            ("engram.layers.1.embedding.weight", "F8_E4M3", [4, 64], pattern(256)),
            ("engram.layers.1.embedding.scale", "F8_E8M0", [4, 2], pattern(8, 1))])
        s2 = write_safetensors(self.path("model-00002-of-00002.safetensors"), [
            ("engram.layers.14.embedding.scale", "F8_E8M0", [8, 2], pattern(16, 2))])
        index = self.write_index({"engram.layers.1.embedding.weight": os.path.basename(s1),
                                  "engram.layers.1.embedding.scale": os.path.basename(s1),
                                  "engram.layers.14.embedding.scale": os.path.basename(s2)})
        return s1, s2, index

    def write_index(self, weight_map, name: str = "model.safetensors.index.json") -> str:
        path = self.path(name)
        with open(path, "w") as f:
            json.dump({"metadata": {"total_size": 280}, "weight_map": weight_map}, f)
        return path

    def test_opens_an_index_a_directory_and_files(self) -> None:
        s1, s2, index = self.shards()
        names = ["engram.layers.1.embedding.scale", "engram.layers.1.embedding.weight",
                 "engram.layers.14.embedding.scale"]
        with no_fd_leak(self):
            with open_checkpoint(index) as via_index, open_checkpoint(self.dir) as via_dir, \
                    open_checkpoint([s2, s1]) as via_files:
                self.assertEqual(names, list(via_index.tensors))
                self.assertEqual(names, list(via_dir.tensors))
                self.assertEqual(names, list(via_files.tensors))
                self.assertEqual([s1, s2], [f.path for f in via_index.files], "shards by name, absolute")
                self.assertEqual([s2, s1], [f.path for f in via_files.files], "files keep the order given")
                self.assertEqual("model-00002-of-00002.safetensors",
                                 via_index.tensors["engram.layers.14.embedding.scale"].file.name)
                self.assertEqual(6, len({f.fd for c in (via_index, via_dir, via_files) for f in c.files}))
            os.unlink(index)
            with open_checkpoint(self.dir + "//") as listed:
                self.assertEqual([s1, s2], [f.path for f in listed.files], "a directory without an index: its files")

    def test_selects_with_globs(self) -> None:
        _, _, index = self.shards()
        with open_checkpoint(index) as cp:
            def names(patterns) -> list:
                return [t.name for t in cp.select(patterns)]

            everything = list(cp.tensors)
            self.assertEqual(everything, names([]))
            self.assertEqual(everything, names(["*"]))
            self.assertEqual(everything, names(["*.scale", "*"]))
            self.assertEqual(["engram.layers.1.embedding.weight"], names(["*.weight"]))
            self.assertEqual(["engram.layers.1.embedding.scale", "engram.layers.1.embedding.weight"],
                             names(["engram.layers.1.*"]))
            self.assertEqual(["engram.layers.14.embedding.scale"], names(["engram.layers.1?.*.scale"]))
            self.assertEqual(["engram.layers.1.embedding.scale", "engram.layers.14.embedding.scale"],
                             names(["*14*", "*.1.*.scale"]), "sorted by name, each once")
            for pattern_, what in (("engram.layers.2.*", ""), ("engram.layers.1", "no implicit prefix match"),
                                   ("engram.layers.1.embedding.weigh[t]", "no character classes")):
                with self.assertRaises(CheckpointError, msg=what) as caught:
                    cp.select(["*.weight", pattern_])
                self.assertEqual(f"tensor selection: pattern '{pattern_}' matches none of the 3 tensors of 2 files in "
                                 f"{self.dir}", str(caught.exception))
            with self.assertRaises(CheckpointError) as caught:
                cp.select([""])
            self.assertEqual("tensor selection: empty tensor name pattern", str(caught.exception))
        single = write_safetensors(self.path("one.safetensors"), [("a.b", "U8", [1], b"x")])
        with open_checkpoint(single) as cp:
            self.assertEqual(["a.b"], [t.name for t in cp.select(["a?b"])])
            with self.assertRaises(CheckpointError) as caught:
                cp.select(["a"])
            self.assertEqual(f"tensor selection: pattern 'a' matches none of the 1 tensors of {single}",
                             str(caught.exception))

    def test_refuses_repeats(self) -> None:
        a = write_safetensors(self.path("a.safetensors"), [("x", "U8", [1], b"a")])
        b = write_safetensors(self.path("b.safetensors"), [("x", "U8", [1], b"b")])
        self.assertEqual(f"tensor 'x' is in both {a} and {b}", self.fail_open(a, b))
        self.assertEqual(f"{a}: given more than once (via {a})", self.fail_open(a, a))
        os.unlink(b)
        relative = os.path.relpath(a)
        self.assertEqual(f"{a}: given more than once (via {self.dir})", self.fail_open(relative, self.dir))

    def test_checks_the_index_against_its_shards(self) -> None:
        s1, s2, index = self.shards()
        n1, n2 = os.path.basename(s1), os.path.basename(s2)
        w1, c1, c14 = "engram.layers.1.embedding.weight", "engram.layers.1.embedding.scale", \
            "engram.layers.14.embedding.scale"
        self.write_index({w1: n1, c1: n1, c14: "missing.safetensors"})
        self.assertEqual(f"{index}: weight_map names shard 'missing.safetensors' (for tensor '{c14}'), but "
                         f"{self.path('missing.safetensors')} does not exist", self.fail_open(index))
        self.write_index({w1: n1, c1: n1, c14: n2, "extra": n2})
        self.assertEqual(f"{index}: weight_map puts tensor 'extra' in '{n2}', but that shard has no such tensor",
                         self.fail_open(index))
        self.write_index({w1: n1, c1: n1, "x": n2})
        self.assertEqual(f"{index}: weight_map puts tensor 'x' in '{n2}', but that shard has no such tensor",
                         self.fail_open(index))
        self.write_index({w1: n1, c1: n2, c14: n2})
        self.assertEqual(f"{index}: weight_map puts tensor '{c1}' in '{n2}', but that shard has no such tensor",
                         self.fail_open(index))
        self.write_index({w1: n1, c14: n2})
        self.assertEqual(f"{index}: shard '{n1}' holds tensor '{c1}', which weight_map does not list",
                         self.fail_open(index))
        self.write_index({"t": "../elsewhere.safetensors"})
        self.assertEqual(f"{index}: weight_map entry for tensor 't' is '../elsewhere.safetensors', not a file name in "
                         "the index's directory", self.fail_open(index))
        self.write_index({"t": 3})
        self.assertEqual(f"{index}: weight_map entry for tensor 't' is not a file name but the number 3",
                         self.fail_open(index))
        with open(index, "w") as f:
            f.write('{"metadata":{}}')
        self.assertEqual(f"{index}: index has no weight_map object", self.fail_open(index))
        with open(index, "w") as f:
            f.write('{"weight_map":{}')
        self.assertEqual(f"{index}: index JSON at byte 16: unexpected end of input, expected ',' or '}}' in object",
                         self.fail_open(index))
        with open(index, "w") as f:
            f.write("[]")
        self.assertEqual(f"{index}: index is not a JSON object", self.fail_open(index))

    def test_refuses_directories_and_paths_it_cannot_use(self) -> None:
        s1, s2, index = self.shards()
        shutil.copy(index, self.path("other.safetensors.index.json"))
        self.assertEqual(f"{self.dir}: holds 2 index files [model.safetensors.index.json, "
                         "other.safetensors.index.json]: name the one to use", self.fail_open(self.dir))
        empty = self.path("empty")
        os.mkdir(empty)
        self.assertEqual(f"{empty}: holds no *.safetensors file and no *.safetensors.index.json", self.fail_open(empty))
        text = self.path("notes.txt")
        open(text, "w").close()
        self.assertEqual(f"{text}: not a .safetensors file, a *.safetensors.index.json or a directory",
                         self.fail_open(text))
        self.assertEqual(f"{self.path('absent')}: no such file or directory", self.fail_open(self.path("absent")))
        self.assertEqual("no checkpoint path given", self.fail_open())
        bad = write_raw(self.path("zz-bad.safetensors"), "{}", data_len=1)
        self.assertEqual(f"{bad}: the data section has 1 bytes but the tensors cover 0: 1 bytes at the end belong to"
                         " no tensor", self.fail_open(s1, s2, bad), "the good files' fds are closed too")


class ChangeTest(TempDirTest):
    def changed(self, cp) -> str:
        """check_unchanged's error, with its default wording checked."""
        with self.assertRaises(CheckpointError) as caught:
            cp.check_unchanged()
        text = str(caught.exception)
        self.assertTrue(text.startswith("checkpoint "), text)
        self.assertTrue(text.endswith(": what was read may not be what was validated; run again once the file is "
                                      "stable"), text)
        return text

    def test_sees_every_kind_of_change(self) -> None:
        a = write_safetensors(self.path("a.safetensors"), [("a", "U8", [4], b"abcd")])
        b = write_safetensors(self.path("b.safetensors"), [("b", "U8", [4], b"abcd")])
        with open_checkpoint([a, b]) as cp:
            cp.check_unchanged()
            st = os.stat(a)
            os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
            text = self.changed(cp)
            self.assertTrue(text.startswith(f"checkpoint {a} changed since it was opened (mtime"), text)
            self.assertNotIn(b, text)
        with open_checkpoint([a, b]) as cp:
            with open(a, "r+b") as f:
                f.seek(10)
                f.write(b"z")  # the same size, another header byte: the tensor is now named 'z'
            with open(b, "ab") as f:
                f.write(b"more")
            text = self.changed(cp)
            self.assertIn("header bytes", text.split("; also changed: ")[0])
            self.assertIn(f"; also changed: {b} (size 68 -> 72 bytes, mtime", text)
        for replace in (True, False):
            c = write_safetensors(self.path("c.safetensors"), [("c", "U8", [4], b"abcd")])
            with open_checkpoint(c) as cp:
                if replace:
                    os.rename(write_safetensors(self.path("new.safetensors"), [("c", "U8", [4], b"abcd")]), c)
                    self.assertIn("the path now names another file)", self.changed(cp))
                else:
                    os.unlink(c)
                    self.assertIn("the path no longer exists)", self.changed(cp))
        d = write_safetensors(self.path("d.safetensors"), [("d", "U8", [4], b"abcd")])
        with open_checkpoint(d) as cp:
            os.truncate(d, 8)
            with self.assertRaises(CheckpointError) as caught:
                cp.check_unchanged("during the load",
                                   "refusing to serve it; restart the daemon once the file is stable")
            self.assertRegex(str(caught.exception), rf"^checkpoint {d} changed during the load \(size 68 -> 8 bytes, "
                             r"mtime(, ctime)?, header bytes \(the file is now shorter than its header\)\): refusing to"
                             r" serve it; restart the daemon once the file is stable$")

    def test_close_closes_every_fd_once(self) -> None:
        a = write_safetensors(self.path("a.safetensors"), [("a", "U8", [4], b"abcd")])
        with no_fd_leak(self):
            cp = open_checkpoint(a)
            fd = cp.files[0].fd
            os.fstat(fd)
            cp.close()
            cp.close()
            with self.assertRaises(OSError):
                os.fstat(fd)


class SelectionTest(TempDirTest):
    """docs/checkpoints.md, "Which tensors are served: the selection": every rule."""

    NAMES = ["layers.1.engram.embed.scale", "layers.1.engram.embed.weight", "layers.14.engram.embed.scale",
             "layers.14.engram.embed.weight"]
    FIX = ": fix the model's config.json, or choose the tables with --tables"

    def select(self, paths, tables=()):
        from engram_host.checkpoint import select_served
        with open_checkpoint(paths) as cp:
            return select_served(cp, tables)

    def error(self, paths, tables=()) -> str:
        with no_fd_leak(self), self.assertRaises(CheckpointError) as caught:
            self.select(paths, tables)
        self.assertNotIn("\n", str(caught.exception))
        return str(caught.exception)

    def config(self, d: str, config) -> str:
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write(config if isinstance(config, str) else json.dumps(config))
        return os.path.join(d, "config.json")

    def test_the_models_config_chooses_the_engram_tables(self) -> None:
        from engram_host.checkpoint import format_bytes
        d = write_published(self.path("m"), rows=100)
        nbytes = 2 * (100 * 256 + 100 * 8)
        for given in (d, os.path.join(d, "model.safetensors.index.json"), d + "/"):
            with self.subTest(given):
                s = self.select(given)
                self.assertEqual("config", s.rule)
                self.assertEqual(self.NAMES, [t.name for t in s.tensors])
                self.assertEqual(tuple(self.NAMES), s.patterns)
                self.assertEqual(f"config.json engram_layer_ids [1, 14]: 4 tensors, {format_bytes(nbytes)} "
                                 "(layers.1.engram.embed.scale, ...)", s.description)
                self.assertIsNone(s.warning)
        self.assertEqual("config.json engram_layer_ids [14, 1]: 4 tensors, 51.6 KiB (layers.1.engram.embed.scale, ...)",
                         self.select(write_published(self.path("r"), layers=(14, 1), rows=100)).description,
                         "the ids as config.json lists them, the tensors by name")
        one = write_published(self.path("one"), rows=10, config={"engram_layer_ids": [14]})
        write_safetensors(os.path.join(one, "model-00014.safetensors"), [
            ("layers.14.engram.embed.weight", "F8_E4M3", [1, 256], bytes(256))])
        os.unlink(os.path.join(one, "model.safetensors.index.json"))
        self.assertEqual(f"{one}/config.json: engram_layer_ids names layer 14 but the checkpoint has no tensor "
                         "layers.14.engram.embed.scale (under any prefix ending in '.'): serve the files this "
                         "config.json belongs to, or choose the tables with --tables", self.error(one))
        plain = write_published(self.path("plain"), index=False, where="")
        self.assertEqual(self.NAMES, [t.name for t in self.select(plain).tensors], "a directory without index")

    def test_under_any_prefix_ending_in_a_dot(self) -> None:
        for prefix in ("model.", "language_model.model."):
            with self.subTest(prefix):
                s = self.select(write_published(self.path(prefix), prefix=prefix))
                self.assertEqual([prefix + n for n in self.NAMES], [t.name for t in s.tensors])
        # "xlayers." has no prefix ending in '.', so it is no Engram tensor
        d = write_published(self.path("x"), prefix="x")
        self.assertEqual(f"{d}/config.json: engram_layer_ids names layer 1 but the checkpoint has no tensor "
                         "layers.1.engram.embed.weight (under any prefix ending in '.'): serve the files this "
                         "config.json belongs to, or choose the tables with --tables", self.error(d))
        two = write_published(self.path("two"), layers=(1,))
        write_safetensors(os.path.join(two, "extra.safetensors"), [
            ("model.layers.1.engram.embed.weight", "F8_E4M3", [64, 256], bytes(64 * 256))])
        os.unlink(os.path.join(two, "model.safetensors.index.json"))
        self.assertEqual(f"{two}/config.json: layer 1: two tensors are named layers.1.engram.embed.weight under "
                         "different prefixes, 'layers.1.engram.embed.weight' and 'model.layers.1.engram.embed.weight':"
                         " choose the tables with --tables", self.error(two))

    def test_the_top_level_wins_over_text_config(self) -> None:
        d = write_published(self.path("m"), config={
            "engram_layer_ids": [14], "text_config": {"engram_layer_ids": [1], "engram_head_dim": "wrong"}})
        self.assertEqual(self.NAMES[2:], [t.name for t in self.select(d).tensors])
        d = write_published(self.path("t"), config={"text_config": {"engram_layer_ids": [1]}, "engram_head_dim": "x"})
        self.assertEqual(self.NAMES[:2], [t.name for t in self.select(d).tensors],
                         "the other fields are read where engram_layer_ids is")

    def test_globs_override_the_config(self) -> None:
        d = write_published(self.path("m"))
        s = self.select(d, ["layers.*.engram.embed.*"])
        self.assertEqual(("tables", self.NAMES, ("layers.*.engram.embed.*",)),
                         (s.rule, [t.name for t in s.tensors], s.patterns))
        self.assertEqual("--tables layers.*.engram.embed.*: 4 tensors, 33.0 KiB", s.description)
        self.assertEqual("--tables embed.weight,*.scale: 3 tensors, 1.0 KiB",
                         self.select(d, ["embed.weight", "*.scale"]).description)
        self.config(d, "{not json")
        self.assertEqual(self.NAMES, [t.name for t in self.select(d, ["layers.*.engram.*"]).tensors],
                         "config.json is not read when globs are given")
        self.assertIn("pattern 'nothing' matches none", self.error(d, ["nothing"]))

    def test_otherwise_every_tensor_with_one_warning(self) -> None:
        d = write_published(self.path("m"), config={"model_type": "llama", "text_config": None})
        every = "every tensor (no --tables, and no config.json naming engram_layer_ids): 7 tensors, 33.1 KiB"
        cases = {
            "no engram_layer_ids": [d],
            "one file": [os.path.join(d, "model-00001.safetensors")],
            "two paths": [os.path.join(d, "model-00001.safetensors"), os.path.join(d, "model-00014.safetensors")],
        }
        for case, paths in cases.items():
            with self.subTest(case):
                s = self.select(paths)
                self.assertEqual(("all", ("*",)), (s.rule, s.patterns))
                with open_checkpoint(paths) as cp:
                    self.assertEqual(list(cp.tensors), [t.name for t in s.tensors])
        s = self.select(d)
        self.assertEqual(every, s.description)
        self.assertEqual("selecting every tensor of the checkpoint (no --tables, and no config.json naming "
                         "engram_layer_ids): give --tables GLOB,... or the model's directory (its config.json names "
                         "the Engram layers) to serve only the Engram tables", s.warning)
        one_file = write_published(self.path("o"))
        self.assertEqual("all", self.select(os.path.join(one_file, "model-00001.safetensors")).rule,
                         "a file given alone does not read its directory's config.json")
        os.unlink(os.path.join(d, "config.json"))
        self.assertEqual(every, self.select(d).description)

    def test_checks_the_config_against_the_shapes(self) -> None:
        def published(name: str, **engram) -> str:
            fields = {"engram_layer_ids": [1, 14], "engram_num_embeddings": [64, 64], "engram_head_dim": 256}
            fields.update(engram)
            return write_published(self.path(name), config={"text_config": fields})

        d = published("rows", engram_num_embeddings=[64, 65])
        self.assertEqual(f"{d}/config.json: engram_num_embeddings[1] is 65 but layers.14.engram.embed.weight has 64 "
                         "rows", self.error(d))
        d = published("dim", engram_head_dim=128)
        self.assertEqual(f"{d}/config.json: engram_head_dim is 128 but layers.1.engram.embed.weight is F8_E4M3 "
                         "[64, 256], not [rows, 128]", self.error(d))
        d = write_published(self.path("scale"), dim=256, config={"engram_layer_ids": [1], "engram_head_dim": 256})
        write_safetensors(os.path.join(d, "model-00001.safetensors"), [
            ("layers.1.engram.embed.weight", "F8_E4M3", [4, 256], bytes(1024)),
            ("layers.1.engram.embed.scale", "F8_E8M0", [4, 16], bytes(64))])
        self.assertEqual(f"{d}/config.json: engram_head_dim is 256 but layers.1.engram.embed.scale is F8_E8M0 [4, 16], "
                         "not [rows, 8] (one scale per 32 values)", self.error(d))
        write_safetensors(os.path.join(d, "model-00001.safetensors"), [
            ("layers.1.engram.embed.weight", "F8_E4M3", [], bytes(1)),
            ("layers.1.engram.embed.scale", "F8_E8M0", [4, 8], bytes(32))])
        self.config(d, {"engram_layer_ids": [1], "engram_num_embeddings": [4]})
        self.assertEqual(f"{d}/config.json: engram_num_embeddings[0] is 4 but layers.1.engram.embed.weight has no rows "
                         "(a scalar)", self.error(d))
        self.config(d, {"engram_layer_ids": [1]})
        self.assertEqual(["layers.1.engram.embed.scale", "layers.1.engram.embed.weight"],
                         [t.name for t in self.select(d).tensors], "without the other fields nothing is checked")

    def test_refuses_a_config_it_cannot_read(self) -> None:
        d = write_published(self.path("m"))
        config = os.path.join(d, "config.json")
        distinct = "not a list of distinct non-negative integers"
        cases = {
            '{"engram_layer_ids": [1,': "not JSON: at byte 24: unexpected end of input, expected a value",
            '{"a": 1, "a": 2}': 'not JSON: at byte 9: duplicate key "a"',
            "[]": "not a JSON object but a list",
            '{"text_config": []}': "text_config is a list, not an object",
            '{"engram_layer_ids": null}': f"engram_layer_ids is null, {distinct}",
            '{"engram_layer_ids": "1,14"}': f'engram_layer_ids is the string "1,14", {distinct}',
            '{"engram_layer_ids": [1, -14]}': f"engram_layer_ids[1] is -14, {distinct}",
            '{"engram_layer_ids": [1, true]}': f"engram_layer_ids[1] is true, {distinct}",
            '{"engram_layer_ids": [1, 1.0]}': f"engram_layer_ids[1] is the number 1.0, {distinct}",
            '{"engram_layer_ids": [14, 1, 14]}': f"engram_layer_ids[2] repeats layer 14, {distinct}",
            '{"engram_layer_ids": [1, 1, -1]}': f"engram_layer_ids[2] is -1, {distinct}",
            '{"engram_layer_ids": []}': "engram_layer_ids is an empty list: it names no Engram layer",
            '{"text_config": {"engram_layer_ids": [1], "engram_num_embeddings": 64}}':
                "engram_num_embeddings is 64, not a list of non-negative integers",
            '{"engram_layer_ids": [1, 14], "engram_num_embeddings": [64]}':
                "engram_num_embeddings has 1 entries but engram_layer_ids has 2: one per layer",
            '{"engram_layer_ids": [1], "engram_num_embeddings": ["64"]}':
                'engram_num_embeddings[0] is the string "64", not a list of non-negative integers',
            '{"engram_layer_ids": [1], "engram_head_dim": 100}': "engram_head_dim is 100, not a positive multiple of "
                                                                 "32 (one E8M0 scale per 32 values)",
            '{"engram_layer_ids": [1], "engram_head_dim": 0}': "engram_head_dim is 0, not a positive multiple of 32 "
                                                               "(one E8M0 scale per 32 values)",
            '{"engram_layer_ids": [1], "engram_head_dim": null}': "engram_head_dim is null, not a positive multiple of "
                                                                  "32 (one E8M0 scale per 32 values)",
        }
        index = os.path.join(d, "model.safetensors.index.json")
        for text, problem in cases.items():
            with self.subTest(text):
                self.config(d, text)
                self.assertEqual(f"{config}: {problem}{self.FIX}", self.error(d))
                self.assertEqual(f"{config}: {problem}{self.FIX}", self.error(index), "through the index too")
        self.config(d, '{"engram_layer_ids": [1, 2]}')
        self.assertEqual(f"{config}: engram_layer_ids names layer 2 but the checkpoint has no tensor "
                         "layers.2.engram.embed.weight (under any prefix ending in '.'): serve the files this "
                         "config.json belongs to, or choose the tables with --tables", self.error(d))
        self.config(d, '{"engram_layer_ids": [1], "engram_num_embeddings": [64], "text_config": "ignored"}')
        self.assertEqual(self.NAMES[:2], [t.name for t in self.select(d).tensors])
        for absent in ('{"text_config": null}', '{"text_config": {"num_layers": 2}}', '{}'):
            self.config(d, absent)
            self.assertEqual("all", self.select(d).rule, absent)

    def test_formats_byte_counts_as_the_java_does(self) -> None:
        from engram_host.checkpoint import format_bytes
        cases = {0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1280: "1.3 KiB", 1536: "1.5 KiB", 1288490188: "1.2 GiB",
                 2899102924: "2.7 GiB", 189 << 30: "189.0 GiB", 1 << 62: "4.0 EiB", -1536: "-1.5 KiB"}
        for n, text in cases.items():
            self.assertEqual(text, format_bytes(n), n)


class ContentIdentityTest(TempDirTest):
    """docs/checkpoints.md, "Content identity": digest records version 2 and Hugging Face snapshots, into the
    fingerprint, without hashing anything."""

    NAMES = SelectionTest.NAMES

    def served(self, paths, tables=(), backend=""):
        from engram_host.checkpoint import served_fingerprint
        with open_checkpoint(paths) as cp:
            return served_fingerprint(cp, tables, backend)

    def digests_of(self, d: str) -> dict:
        """The true digests of every tensor of the checkpoint ``d``, computed here."""
        from engram_host.digests import engram_digest_hex, tree_digest
        out = {}
        for name, (_dtype, _shape, data) in safetensors_tables([d]).items():
            out[name] = (engram_digest_hex(data), tree_digest(data, 1))
        return out

    def test_a_record_gives_its_tables_identities(self) -> None:
        d = write_published(self.path("m"))
        true = self.digests_of(d)
        write_record(os.path.join(d, "engram-digests.json"), {n: true[n] for n in self.NAMES[1:] + ["embed.weight"]})
        s = self.served(d)
        self.assertEqual("record", s.identity.level)
        self.assertEqual((os.path.join(d, "engram-digests.json"),), s.identity.records)
        self.assertEqual((self.NAMES[0],), s.identity.uncovered, "the record does not hold the first table")
        self.assertEqual({}, s.identity.files)
        by_name = {t.name: t for t in s.fingerprint.tables}
        self.assertEqual(self.NAMES, list(by_name), "embed.weight is in the record, not in the selection")
        self.assertEqual((None, None), (by_name[self.NAMES[0]].engram_digest, by_name[self.NAMES[0]].tree_digest))
        for n in self.NAMES[1:]:
            self.assertEqual((int(true[n][0], 16), bytes.fromhex(true[n][1])),
                             (by_name[n].engram_digest, by_name[n].tree_digest))
        self.assertEqual(2, struct.unpack_from("<H", s.encoded, 4)[0])
        self.assertEqual(s.fingerprint, decode_fingerprint(s.encoded))
        self.assertEqual(fingerprint_sha256_hex(s.encoded), s.sha256_hex)
        self.assertEqual((f"{d}/engram-digests.json: the digest record does not cover 1 of the 4 selected tables "
                          f"('{self.NAMES[0]}'), which have no content identity: write it again with engram-host "
                          f"inspect --write-digests {d}",), s.identity.notes)
        # the same checkpoint without its record: the headers only, in version 1, as fingerprint() gives it
        os.unlink(os.path.join(d, "engram-digests.json"))
        bare = self.served(d)
        self.assertEqual(("headers", (), ()), (bare.identity.level, bare.identity.records, bare.identity.uncovered))
        with open_checkpoint(d) as cp:
            self.assertEqual(fingerprint(cp, self.NAMES), bare.encoded)

    def test_records_beside_files_and_indexes(self) -> None:
        d = write_published(self.path("m"))
        true = self.digests_of(d)
        one = os.path.join(d, "model-00001.safetensors")
        write_record(one + ".engram-digests.json", {n: true[n] for n in self.NAMES[:2]})
        s = self.served([one, os.path.join(d, "model-00014.safetensors")], ["layers.*.engram.embed.*"])
        self.assertEqual(("record", (one + ".engram-digests.json",), ()),
                         (s.identity.level, s.identity.records, s.identity.uncovered),
                         "a record gives identities to the tables found through its path only")
        self.assertEqual(set(self.NAMES[:2]), set(s.identity.tables))
        write_record(os.path.join(d, "engram-digests.json"), true)
        s = self.served(os.path.join(d, "model.safetensors.index.json"))
        self.assertEqual(set(self.NAMES), set(s.identity.tables))
        self.assertEqual((), s.identity.uncovered)

    def test_checks_the_limits_as_serve_does(self) -> None:
        r = write_safetensors(self.path("r.safetensors"), [("r16", "U8", [1] * 16, b"a"), ("r17", "I8", [1] * 17, b"b")])
        with self.assertRaises(CheckpointError) as caught:
            self.served(r)
        self.assertEqual(f"{r}: tensor 'r17': rank 17 (I8 {[1] * 17}) is over the limit of 16 (docs/checkpoints.md, "
                         "Limits)", str(caught.exception))
        self.assertEqual(["r16"], [t.name for t in self.served(r, ["r16"]).fingerprint.tables])

    def test_a_version_1_record_gives_no_identity_and_says_so(self) -> None:
        d = write_published(self.path("m"))
        record = os.path.join(d, "engram-digests.json")
        with open(record, "w") as f:
            json.dump({"format": "engram-content-digests", "version": 1, "algorithm": "sha256-tree-v1",
                       "chunk_bytes": 16777216, "tables": {n: d2 for n, (_e, d2) in self.digests_of(d).items()}}, f)
        s = self.served(d)
        self.assertEqual(("headers", {}), (s.identity.level, s.identity.tables))
        self.assertEqual((f"{record}: a digest record of version 1 holds no engram digest v1 and gives no content "
                          f"identity: write version 2 with engram-host inspect --write-digests {d}",), s.identity.notes)
        self.assertEqual(1, struct.unpack_from("<H", s.encoded, 4)[0])
        with open(record, "w") as f:
            f.write("{")
        with self.assertRaises(CheckpointError) as caught:
            self.served(d)
        self.assertEqual(f"{record}: not a digest sidecar: JSON at byte 1: unexpected end of input, expected a string "
                         "key", str(caught.exception))

    def test_a_record_covers_the_tables_of_its_own_path(self) -> None:
        a = write_safetensors(self.path("a.safetensors"), [("x", "U8", [1], b"x")])
        b = write_safetensors(self.path("b.safetensors"), [("y", "U8", [1], b"y")])
        write_record(a + ".engram-digests.json", {"x": ("00" * 8, "11" * 32), "y": ("00" * 8, "22" * 32)})
        write_record(b + ".engram-digests.json", {"y": ("01" * 8, "33" * 32)})
        s = self.served([a, b])
        self.assertEqual({"x": (0, b"\x11" * 32), "y": (0x0101010101010101, b"\x33" * 32)}, s.identity.tables)
        os.unlink(b + ".engram-digests.json")
        self.assertEqual({"x": (0, b"\x11" * 32)}, self.served([a, b]).identity.tables, "not y, from a's record")

    def test_a_hugging_face_snapshot(self) -> None:
        import hashlib
        source = write_published(self.path("src"))
        for absolute in (False, True):
            with self.subTest(absolute=absolute):
                snapshot = hf_snapshot(source, self.path(f"cache-{absolute}"), absolute=absolute)
                self.assertTrue(os.path.islink(os.path.join(snapshot, "model-00001.safetensors")))
                s = self.served(snapshot)
                self.assertEqual("config", s.selection.rule, "config.json, a link too, is read")
                self.assertEqual("hf-snapshot", s.identity.level)
                expected = {}
                for name in ("model-00001.safetensors", "model-00014.safetensors"):
                    with open(os.path.join(source, name), "rb") as f:
                        expected[name] = hashlib.sha256(f.read()).digest()
                self.assertEqual(expected, s.identity.files, "only the files that hold a selected table")
                self.assertEqual(expected, {f.name: f.content_sha256 for f in s.fingerprint.files})
                self.assertEqual(2, struct.unpack_from("<H", s.encoded, 4)[0])
                self.assertEqual(s.fingerprint, decode_fingerprint(s.encoded))
        write_record(os.path.join(snapshot, "engram-digests.json"), self.digests_of(source))
        self.assertEqual("record+hf-snapshot", self.served(snapshot).identity.level)

    def test_knows_snapshot_files_by_their_links(self) -> None:
        from engram_host.checkpoint import snapshot_blob_sha256
        blob = "0f" * 32
        os.makedirs(self.path("blobs"))
        os.makedirs(self.path("other"))
        os.makedirs(self.path("snap/rev"))
        for where in ("blobs", "other"):
            for name in (blob, blob.upper(), blob[:-1]):
                with open(self.path(f"{where}/{name}"), "wb"):
                    pass
        cases = {"../../blobs/" + blob: bytes.fromhex(blob), self.path("blobs/" + blob): bytes.fromhex(blob),
                 "../../blobs/./" + blob: None, "../../other/" + blob: None, blob: None,
                 "../../blobs/" + blob.upper(): None, "../../blobs/" + blob[:-1]: None}
        for i, (target, expected) in enumerate(cases.items()):
            link = self.path(f"snap/rev/m{i}.safetensors")
            os.symlink(target, link)
            self.assertEqual(expected, snapshot_blob_sha256(link), target)
        self.assertIsNone(snapshot_blob_sha256(self.path("blobs/" + blob)), "a regular file")
        self.assertIsNone(snapshot_blob_sha256(self.path("none")), "no file")
        os.symlink(self.path("snap/rev/m0.safetensors"), self.path("chain.safetensors"))
        self.assertIsNone(snapshot_blob_sha256(self.path("chain.safetensors")), "a link to a link: its target only")


class FingerprintTest(TempDirTest):
    SHA_A = "aa" * 32
    SHA_B = "bb" * 32

    def test_encodes_the_canonical_form(self) -> None:
        t = write_safetensors(self.path("m.safetensors"), [("t", "F4", [2, 2], b"xy")])
        with open(t, "rb") as f:
            raw = f.read()
        header = raw[8:8 + struct.unpack_from("<Q", raw)[0]]
        with open_checkpoint(t) as cp:
            encoded = fingerprint(cp, ["t", "?", "t", "*"], "memfd", 7)
            size = os.path.getsize(t)
        s = lambda text: struct.pack("<I", len(text.encode())) + text.encode()  # noqa: E731
        expected = (b"EGFP" + struct.pack("<HHi", 1, 0, 7) + s("memfd") + struct.pack("<I", 3) + s("*") + s("?")
                    + s("t") + struct.pack("<I", 1) + s("m.safetensors") + struct.pack("<Q", size)
                    + hashlib.sha256(header).digest() + struct.pack("<I", 1) + s("t") + s("F4")
                    + struct.pack("<IQQQ", 2, 2, 2, 2))
        self.assertEqual(expected, encoded)
        self.assertEqual(hashlib.sha256(expected).hexdigest(), fingerprint_sha256_hex(encoded))

    # SHA-256s of fingerprints without content identity, computed by the code of before version 2 (cf09d39):
    # such a fingerprint must keep its version 1 bytes, so that --expect SHA256, ready files and the fd store
    # keep meaning the same checkpoint.
    PINNED_HANDMADE = "77d16614bfebbed24a53629fe7d0cb1f4456716140b74777c268911554485d12"
    PINNED_EVERY_DTYPE = "cd6805ea5c9bf4c88c83a09ac1034451c7f530f15261339690bc968bfb53dae5"
    PINNED_EVERY_DTYPE_SELECTED = "3eea58edb03d502f1afebce3b7b45636ac534dc12fa65a8292385940c18f0941"

    def test_a_fingerprint_without_identity_keeps_its_version_1_bytes(self) -> None:
        from engram_host._checkpoint.fingerprint import _encode
        fp = Fingerprint(1, "memfd", ("*.scale", "layers.1.*"), (
            FingerprintFile("a.safetensors", 1234, bytes(range(32))),
            FingerprintFile("b.safetensors", 99, bytes(32))), (
            FingerprintTable("layers.1.engram.embed.scale", "F8_E8M0", (10, 8), 80),
            FingerprintTable("layers.1.engram.embed.weight", "F8_E4M3", (10, 256), 2560),
            FingerprintTable("s", "F32", (), 4)))
        encoded = _encode(fp)
        self.assertEqual(337, len(encoded))
        self.assertEqual(self.PINNED_HANDMADE, fingerprint_sha256_hex(encoded))
        self.assertEqual(fp, decode_fingerprint(encoded))
        every = write_safetensors(self.path("every.safetensors"), every_dtype_tensors(), {"format": "pt"})
        with open_checkpoint(every) as cp:
            self.assertEqual(self.PINNED_EVERY_DTYPE, fingerprint_sha256_hex(fingerprint(cp)))
            self.assertEqual(self.PINNED_EVERY_DTYPE_SELECTED,
                             fingerprint_sha256_hex(fingerprint(cp, ["t.*", "scalar.f32"], "memfd")))

    # The same fingerprints as the Java's FingerprintTest (small() and engram()), pinned there from the code of
    # before version 2 too: the two implementations encode them byte for byte alike.
    JAVA_SMALL_SHA256 = "4e020b11617e03bac53b83d18499dc6d4da60fd77a614d2c32b83182fd954219"
    JAVA_ENGRAM_SHA256 = "f661020b90c41b4d950d122498bd5a1290b3509b012d690a69f8140829e65464"
    JAVA_ENGRAM_V1 = (
        "4547465001000000010000000000000001000000170000006c61796572732e2a2e656e6772616d2e"
        "656d6265642e2a02000000200000006d6f64656c2d30303030312d6f662d30303030322e7361666574656e736f727340e2010000"
        "0000000123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef200000006d6f64656c2d30303030322d6f"
        "662d30303030322e7361666574656e736f7273f1fb090000000000fedcba9876543210fedcba9876543210fedcba9876543210fe"
        "dcba9876543210020000001b0000006c61796572732e312e656e6772616d2e656d6265642e7363616c650700000046385f45384d"
        "3002000000e8030000000000000800000000000000401f0000000000001c0000006c61796572732e312e656e6772616d2e656d62"
        "65642e7765696768740700000046385f45344d3302000000e803000000000000000100000000000000e8030000000000")

    def test_the_javas_pinned_fingerprints(self) -> None:
        from engram_host._checkpoint.fingerprint import _encode
        small = Fingerprint(1, "memfd", ("t*",), (FingerprintFile("m.safetensors", 100, bytes.fromhex(self.SHA_A)),),
                            (FingerprintTable("t", "F4", (2, 2), 2),))
        self.assertEqual(self.JAVA_SMALL_SHA256, fingerprint_sha256_hex(_encode(small)))
        engram = Fingerprint(1, "", ("layers.*.engram.embed.*",), (
            FingerprintFile("model-00001-of-00002.safetensors", 123456, bytes.fromhex("0123456789abcdef" * 4)),
            FingerprintFile("model-00002-of-00002.safetensors", 654321, bytes.fromhex("fedcba9876543210" * 4))), (
            FingerprintTable("layers.1.engram.embed.scale", "F8_E8M0", (1000, 8), 8000),
            FingerprintTable("layers.1.engram.embed.weight", "F8_E4M3", (1000, 256), 256000)))
        self.assertEqual(self.JAVA_ENGRAM_V1, _encode(engram).hex())
        self.assertEqual(self.JAVA_ENGRAM_SHA256, fingerprint_sha256_hex(_encode(engram)))
        self.assertEqual(engram, decode_fingerprint(bytes.fromhex(self.JAVA_ENGRAM_V1)))

    def test_lists_only_files_of_selected_tables_in_code_point_order(self) -> None:
        a = write_safetensors(self.path("a.safetensors"), [("\uffff", "U8", [1], b"f"), ("z", "U8", [1], b"z")])
        b = write_safetensors(self.path("b.safetensors"), [("\U0001F600", "U8", [1], b"s"),
                                                           ("\u00e9", "U8", [1], b"e")])
        with open_checkpoint([b, a]) as cp:
            fp = decode_fingerprint(fingerprint(cp))
            self.assertEqual(("*",), fp.patterns)
            self.assertEqual(["a.safetensors", "b.safetensors"], [f.name for f in fp.files])
            self.assertEqual(["z", "\u00e9", "\uffff", "\U0001F600"], [t.name for t in fp.tables])
            self.assertEqual(fingerprint(cp), fingerprint(cp, ["*"]))
            only_a = decode_fingerprint(fingerprint(cp, ["z"]))
            self.assertEqual(["a.safetensors"], [f.name for f in only_a.files])
            self.assertEqual(FingerprintFile("a.safetensors", os.path.getsize(a), cp.files[1].header_sha256),
                             only_a.files[0])
            self.assertEqual((FingerprintTable("z", "U8", (1,), 1),), only_a.tables)
            self.assertEqual(("z",), only_a.patterns)
            with self.assertRaises(CheckpointError) as caught:
                fingerprint(cp, ["nothing*"])
            self.assertIn("pattern 'nothing*' matches none", str(caught.exception))

    def test_refuses_two_files_of_one_base_name(self) -> None:
        os.mkdir(self.path("x"))
        os.mkdir(self.path("y"))
        a = write_safetensors(self.path("x/m.safetensors"), [("a", "U8", [1], b"a")])
        b = write_safetensors(self.path("y/m.safetensors"), [("b", "U8", [2], b"bb")])
        with open_checkpoint([a, b]) as cp:
            with self.assertRaises(CheckpointError) as caught:
                fingerprint(cp)
            self.assertEqual(f"{b}: another checkpoint file has the same base name; a fingerprint names files by base"
                             " name", str(caught.exception))

    def good(self) -> bytes:
        """A small canonical fingerprint with one pattern, one file and one table 't' F4 [2, 2]."""
        with open_checkpoint(write_safetensors(self.path("m.safetensors"), [("t", "F4", [2, 2], b"xy")])) as cp:
            return fingerprint(cp, ["*"], "memfd")

    def decode_error(self, data: bytes) -> str:
        with self.assertRaises(CheckpointError) as caught:
            decode_fingerprint(data)
        return str(caught.exception)

    def test_decodes_strictly(self) -> None:
        good = self.good()
        fp = decode_fingerprint(good)
        self.assertEqual((1, "memfd", ("*",)), (fp.layout_version, fp.backend, fp.patterns))

        def patch(at: int, value: int) -> bytes:
            return good[:at] + bytes([value]) + good[at + 1:]

        self.assertEqual('fingerprint at byte 0: bad magic 58474650, expected "EGFP"', self.decode_error(patch(0, 88)))
        self.assertEqual("fingerprint at byte 4: encoding version 3, this build reads only 1 and 2",
                         self.decode_error(patch(4, 3)))
        self.assertEqual("fingerprint at byte 4: encoding version 0, this build reads only 1 and 2",
                         self.decode_error(patch(4, 0)))
        self.assertEqual("fingerprint at byte 6: flags 0x1, expected 0", self.decode_error(patch(6, 1)))
        self.assertEqual(f"fingerprint at byte {len(good)}: 3 bytes left over after the last table",
                         self.decode_error(good + b"abc"))
        self.assertEqual("fingerprint at byte 0: magic needs 4 bytes but only 2 are left", self.decode_error(b"EG"))
        self.assertEqual(f"fingerprint at byte 12: backend of 2147483647 bytes runs past the end "
                         f"({len(good) - 16} left)",
                         self.decode_error(good[:12] + struct.pack("<I", 0x7FFFFFFF) + good[16:]))
        self.assertEqual(f"fingerprint at byte 21: 4294967295 patterns cannot fit in the {len(good) - 25} bytes left",
                         self.decode_error(good[:21] + b"\xff\xff\xff\xff" + good[25:]))
        self.assertEqual("fingerprint at byte 21: no selection pattern (the canonical form has at least '*')",
                         self.decode_error(patch(21, 0)))
        self.assertEqual("fingerprint at byte 25: pattern is not valid UTF-8", self.decode_error(patch(29, 0xC3)))
        size_at = 34 + 4 + len("m.safetensors")
        self.assertEqual(f"fingerprint at byte {size_at}: file size {(1 << 63) + 66} exceeds 2^63 - 1",
                         self.decode_error(patch(size_at + 7, 0x80)))
        table_at = size_at + 8 + 32 + 4
        self.assertEqual(f"fingerprint at byte {table_at + 5}: table 't': unknown dtype 'F9'",
                         self.decode_error(patch(table_at + 10, ord("9"))))
        self.assertEqual(f"fingerprint at byte {table_at + 11}: table 't': rank 17 exceeds 16",
                         self.decode_error(patch(table_at + 11, 17)))
        self.assertEqual(f"fingerprint at byte {len(good) - 8}: table 't': F4 [2, 2] is 2 bytes, not 3",
                         self.decode_error(patch(len(good) - 8, 3)))
        self.assertEqual(f"fingerprint at byte {len(good) - 8}: F4 [3, 1] has 3 elements of 4 bits = 12 bits, not a "
                         "whole number of bytes",
                         self.decode_error(good[:table_at + 15] + struct.pack("<QQQ", 3, 1, 2)))

    def test_decodes_only_canonical_order(self) -> None:
        two = Fingerprint(1, "", ("*",), (),
                          (FingerprintTable("b", "U8", (1,), 1), FingerprintTable("a", "U8", (1,), 1)))
        from engram_host._checkpoint.fingerprint import _encode
        data = _encode(two)
        second = data.rindex(b"\x01\x00\x00\x00a")
        self.assertEqual(f"fingerprint at byte {second}: table 'a' is out of order (after 'b')",
                         self.decode_error(data))
        same = data[:second + 4] + b"b" + data[second + 5:]
        self.assertEqual(f"fingerprint at byte {second}: table 'b' is repeated", self.decode_error(same))

    def test_lists_differences_in_order(self) -> None:
        t = FingerprintTable
        a, b = bytes.fromhex(self.SHA_A), bytes.fromhex(self.SHA_B)
        expected = Fingerprint(1, "cuda-vmm", ("*",), (
            FingerprintFile("a", 10, a), FingerprintFile("b", 5, a), FingerprintFile("c", 5, a)), (
            t("t1", "F8_E4M3", (4,), 4), t("t2", "U8", (4, 8), 32), t("t3", "U16", (2,), 4), t("t4", "U8", (1,), 1)))
        actual = Fingerprint(2, "memfd", ("*",), (
            FingerprintFile("a", 11, b), FingerprintFile("c", 5, a), FingerprintFile("d", 5, a)), (
            t("t1", "I8", (4,), 4), t("t2", "U8", (8, 4), 32), t("t3", "U16", (3,), 6), t("t5", "U8", (1,), 1)))
        lines = ["layout version: expected 1, actual 2",
                 "backend: expected 'cuda-vmm', actual 'memfd'",
                 "file 'a': size expected 10, actual 11",
                 f"file 'a': header SHA-256 expected {self.SHA_A}, actual {self.SHA_B}",
                 "file 'b': missing",
                 "file 'd': not expected",
                 "table 't1': dtype expected F8_E4M3, actual I8",
                 "table 't2': shape expected [4, 8], actual [8, 4]",
                 "table 't3': shape expected [2], actual [3]",
                 "table 't3': bytes expected 4, actual 6",
                 "table 't4': missing",
                 "table 't5': not expected"]
        self.assertEqual(lines, fingerprint_differences(expected, actual))
        from engram_host._checkpoint.fingerprint import _encode
        self.assertEqual(lines, fingerprint_differences(_encode(expected), _encode(actual)), "encoded forms")
        self.assertEqual(lines[:3] + ["... and 9 more differences"], fingerprint_differences(expected, actual, 3))
        self.assertEqual([], fingerprint_differences(expected, expected))
        any_backend = Fingerprint(1, "", ("*",), (), ())
        memfd = Fingerprint(1, "memfd", ("*",), (), ())
        self.assertEqual([], fingerprint_differences(any_backend, memfd))
        self.assertEqual(["backend: expected 'memfd', actual ''"], fingerprint_differences(memfd, any_backend))


class FingerprintV2Test(TempDirTest):
    """Version 2: the content identities of docs/checkpoints.md, "Fingerprint", "Encoding"."""

    T = FingerprintTable
    F = FingerprintFile
    H1, H2, C1, C2 = (bytes([i]) * 32 for i in (0x11, 0x22, 0xC1, 0xC2))

    def v2(self) -> Fingerprint:
        """Two files, one a snapshot file; three tables: both digests, a tree digest only, none."""
        return Fingerprint(1, "", ("layers.1.engram.embed.scale", "layers.1.engram.embed.weight"), (
            self.F("a.safetensors", 100, self.H1, self.C1), self.F("b.safetensors", 50, self.H2)), (
            self.T("layers.1.engram.embed.scale", "F8_E8M0", (4, 8), 32, 0x0123456789ABCDEF, self.C2),
            self.T("layers.1.engram.embed.weight", "F8_E4M3", (4, 256), 1024, None, self.H1),
            self.T("x", "U8", (2,), 2)))

    def test_encodes_version_2_when_an_identity_is_present(self) -> None:
        from engram_host._checkpoint.fingerprint import _encode
        fp = self.v2()
        s = lambda text: struct.pack("<I", len(text.encode())) + text.encode()  # noqa: E731
        expected = (b"EGFP" + struct.pack("<HHi", 2, 0, 1) + s("") + struct.pack("<I", 2)
                    + s("layers.1.engram.embed.scale") + s("layers.1.engram.embed.weight") + struct.pack("<I", 2)
                    + s("a.safetensors") + struct.pack("<Q", 100) + self.H1 + b"\x01" + self.C1
                    + s("b.safetensors") + struct.pack("<Q", 50) + self.H2 + b"\x00"
                    + struct.pack("<I", 3)
                    + s("layers.1.engram.embed.scale") + s("F8_E8M0") + struct.pack("<IQQQ", 2, 4, 8, 32)
                    + b"\x03" + struct.pack("<Q", 0x0123456789ABCDEF) + self.C2
                    + s("layers.1.engram.embed.weight") + s("F8_E4M3") + struct.pack("<IQQQ", 2, 4, 256, 1024)
                    + b"\x02" + self.H1
                    + s("x") + s("U8") + struct.pack("<IQQ", 1, 2, 2) + b"\x00")
        self.assertEqual(expected, _encode(fp))
        self.assertEqual(fp, decode_fingerprint(expected))
        self.assertTrue(fp.has_identity)
        only_file = Fingerprint(1, "", ("*",), (self.F("a", 1, self.H1, self.C1),), ())
        self.assertEqual(2, struct.unpack_from("<H", _encode(only_file), 4)[0])
        self.assertEqual(only_file, decode_fingerprint(_encode(only_file)))
        only_engram = Fingerprint(1, "", ("*",), (), (self.T("t", "U8", (1,), 1, 0),))
        self.assertEqual(2, struct.unpack_from("<H", _encode(only_engram), 4)[0], "a digest of 0 is a digest")
        self.assertEqual(only_engram, decode_fingerprint(_encode(only_engram)))
        none = Fingerprint(1, "", ("*",), (self.F("a", 1, self.H1),), (self.T("t", "U8", (1,), 1),))
        self.assertEqual(1, struct.unpack_from("<H", _encode(none), 4)[0])
        self.assertFalse(none.has_identity)

    def decode_error(self, data: bytes) -> str:
        with self.assertRaises(CheckpointError) as caught:
            decode_fingerprint(data)
        return str(caught.exception)

    def test_decodes_version_2_strictly(self) -> None:
        from engram_host._checkpoint.fingerprint import _encode
        good = _encode(self.v2())
        content_at = good.index(b"a.safetensors") + len("a.safetensors") + 8 + 32
        self.assertEqual(1, good[content_at])

        def patch(at: int, value: int) -> bytes:
            return good[:at] + bytes([value]) + good[at + 1:]

        self.assertEqual(f"fingerprint at byte {content_at}: file 'a.safetensors': content flag 2, expected 0 or 1",
                         self.decode_error(patch(content_at, 2)))
        identity_at = good.index(struct.pack("<Q", 0x0123456789ABCDEF)) - 1
        self.assertEqual(3, good[identity_at])
        self.assertEqual(f"fingerprint at byte {identity_at}: table 'layers.1.engram.embed.scale': identity flags 0x4,"
                         " expected bits 0 and 1 only", self.decode_error(patch(identity_at, 4)))
        self.assertEqual(f"fingerprint at byte {len(good) - 1}: identity flags needs 1 bytes but only 0 are left",
                         self.decode_error(good[:-1]))
        self.assertEqual(f"fingerprint at byte {len(good)}: 1 bytes left over after the last table",
                         self.decode_error(good + b"\x00"))
        # a version 1 encoding read as version 2 lacks the content bytes; version 2 without identity is refused
        none = _encode(Fingerprint(1, "", ("*",), (), (self.T("t", "U8", (1,), 1),)))
        as_v2 = none[:4] + struct.pack("<H", 2) + none[6:] + b"\x00"
        self.assertEqual("fingerprint at byte 4: encoding version 2 but no file or table carries content identity: its "
                         "canonical encoding is version 1", self.decode_error(as_v2))
        second_file = good.index(b"b.safetensors") - 4
        self.assertTrue(self.decode_error(good[:4] + struct.pack("<H", 1) + good[6:]).startswith(
            f"fingerprint at byte {second_file - 33}: file name of "), "a version 2 body read as version 1")

    def test_lists_content_differences_where_both_sides_have_the_digest(self) -> None:
        e = self.v2()
        a = Fingerprint(1, "memfd", e.patterns, (
            self.F("a.safetensors", 100, self.H1, self.C2), self.F("b.safetensors", 50, self.H2, self.C1)), (
            self.T("layers.1.engram.embed.scale", "F8_E8M0", (4, 8), 32, 0xFEDCBA9876543210, self.H2),
            self.T("layers.1.engram.embed.weight", "F8_E4M3", (4, 256), 1024, 7, self.H1),
            self.T("x", "U8", (2,), 2, 1, self.C1)))
        self.assertEqual([
            f"file 'a.safetensors': content differs: SHA-256 expected {self.C1.hex()}, actual {self.C2.hex()}",
            "table 'layers.1.engram.embed.scale': content differs: engram-digest-v1 expected 0123456789abcdef, "
            "actual fedcba9876543210",
            f"table 'layers.1.engram.embed.scale': content differs: sha256-tree-v1 expected {self.C2.hex()}, actual "
            f"{self.H2.hex()}",
        ], fingerprint_differences(e, a))
        from engram_host._checkpoint.fingerprint import _encode
        self.assertEqual(fingerprint_differences(e, a), fingerprint_differences(_encode(e), _encode(a)))
        small = Fingerprint(1, "", ("*",), (), (self.T("t", "U8", (1,), 1, 5),))
        twelve = Fingerprint(1, "", ("*",), (), (self.T("t", "U8", (1,), 1, 12),))
        self.assertEqual(["table 't': content differs: engram-digest-v1 expected 0000000000000005, actual "
                          "000000000000000c"], fingerprint_differences(small, twelve))

    def test_lists_a_different_selection_in_one_line(self) -> None:
        names = [f"layers.{i}.engram.embed.{k}" for i in (1, 14) for k in ("scale", "weight")]
        config = Fingerprint(1, "", tuple(names), (), tuple(
            self.T(n, "U8", (1,), 1, None, self.C1 if n.endswith("weight") else None) for n in names))
        every = Fingerprint(1, "", ("*",), (), tuple(
            self.T(n, "U8", (1,), 1, None, self.C2 if n == names[1] else None) for n in names + ["other", "z"]))
        self.assertEqual([
            "selection: the daemon serves 4 tables by [layers.1.engram.embed.scale, ... (4 patterns)]; this "
            "expectation selects 6 tables by [*]",
            f"table 'layers.1.engram.embed.weight': content differs: sha256-tree-v1 expected {self.C2.hex()}, actual "
            f"{self.C1.hex()}",
        ], fingerprint_differences(every, config))
        # the same tables by other patterns: no line; other tables by the same patterns: a line per table
        by_glob = Fingerprint(1, "", ("layers.*",), (), config.tables)
        self.assertEqual([], fingerprint_differences(by_glob, config))
        fewer = Fingerprint(1, "", config.patterns, (), config.tables[:3])
        self.assertEqual(["table 'layers.14.engram.embed.weight': not expected"],
                         fingerprint_differences(fewer, config))
        one = Fingerprint(1, "", ("a", "b"), (), (self.T("a", "U8", (1,), 1),))
        two = Fingerprint(1, "", ("b", "c"), (), (self.T("b", "U8", (1,), 1), self.T("c", "U8", (1,), 1)))
        self.assertEqual(["selection: the daemon serves 2 tables by [b, ... (2 patterns)]; this expectation selects "
                          "1 table by [a, ... (2 patterns)]"], fingerprint_differences(one, two))
        long = "p" * 70
        self.assertEqual([f"selection: the daemon serves 1 table by [{long[:64]}...]; this expectation selects 1 table "
                          "by [a, ... (2 patterns)]"],
                         fingerprint_differences(one, Fingerprint(1, "", (long,), (), (self.T("b", "U8", (1,), 1),))))

    def test_tells_whether_any_identity_was_compared(self) -> None:
        from engram_host.checkpoint import fingerprint_shares_identity as shares
        headers = Fingerprint(1, "", ("*",), (self.F("a.safetensors", 100, self.H1),), (
            self.T("layers.1.engram.embed.scale", "F8_E8M0", (4, 8), 32),))
        self.assertFalse(shares(headers, headers))
        self.assertFalse(shares(self.v2(), headers))
        self.assertFalse(shares(headers, self.v2()))
        self.assertTrue(shares(self.v2(), self.v2()))
        snapshot = Fingerprint(1, "", ("*",), (self.F("a.safetensors", 1, self.H2, self.C2),), ())
        self.assertTrue(shares(snapshot, self.v2()), "the file's SHA-256 on both sides")
        engram_only = Fingerprint(1, "", ("*",), (), (self.T("layers.1.engram.embed.weight", "F8_E4M3", (4, 256), 1024,
                                                             3),))
        self.assertFalse(shares(engram_only, self.v2()), "the daemon has only a tree digest for that table")
        tree_only = Fingerprint(1, "", ("*",), (), (self.T("layers.1.engram.embed.scale", "U8", (1,), 1, None,
                                                           self.H1),))
        self.assertTrue(shares(tree_only, self.v2()), "compared even where the headers differ")
        from engram_host._checkpoint.fingerprint import _encode
        self.assertTrue(shares(_encode(self.v2()), _encode(self.v2())))


class LimitsTest(TempDirTest):
    def test_checks_names_ranks_counts_and_sizes(self) -> None:
        long_name = "\u00e9" * 2049
        path = write_safetensors(self.path("m.safetensors"), [
            ("ok", "U8", [1] * 16, b"o"), ("r17", "U8", [1] * 17, b"r"), (long_name, "U8", [1], b"l"),
            ("n" * 1000, "U8", [1], b"n")])
        with open_checkpoint(path) as cp:
            tables = cp.select([])

            def error(selection: list, fp: bytes = b"") -> str:
                with self.assertRaises(CheckpointError) as caught:
                    check_limits(selection, fp)
                return str(caught.exception)

            check_limits([cp.tensors["ok"]], fingerprint(cp, ["ok"]))
            self.assertEqual(f"{path}: tensor 'r17': rank 17 (U8 {[1] * 17}) is over the limit of 16 "
                             "(docs/checkpoints.md, Limits)", error(tables, fingerprint(cp)))
            self.assertEqual(f"{path}: tensor '{long_name[:64]}...' (2049 characters): the name is 4098 bytes of UTF-8,"
                             " over the limit of 4096 (docs/checkpoints.md, Limits)",
                             error([cp.tensors[long_name]]))
            self.assertEqual("the fingerprint of the 1 selected tables is 16777217 bytes, over the limit of 16777216 "
                             "(16 MiB) that a manifest and an expectation carry; serve fewer tables or shorter names "
                             "(docs/checkpoints.md, Limits)", error([cp.tensors["ok"]], bytes(16777217)))
            self.assertEqual("1048577 tables selected, over the limit of 1048576 (docs/checkpoints.md, Limits)",
                             error([cp.tensors["ok"]] * 1048577))
            many = [cp.tensors["n" * 1000]] * 1048576
            bound = 52 + 16777216 + 1048576 * (17 + 42 + 1000 + 2 + 8)
            self.assertEqual(f"the manifest of the 1048576 selected tables could take {bound} bytes, over the limit of"
                             " 1073741824 (1 GiB, one frame) (docs/checkpoints.md, Limits)",
                             error(many, bytes(16777216)))


# ---------------------------------------------------------------------------------------------------------------
# the Java implementation, through real processes

def java_reason() -> Optional[str]:
    if not os.path.isdir(JAVA_LIB):
        return f"the Java CLI is not built ({JAVA_LIB} does not exist; mvn -DskipTests package builds it)"
    return None


# Short-lived JVMs start faster with the client compiler only and the serial collector.
QUICK_JVM = {**os.environ, "ENGRAM_HOST_JVM_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


def run_java(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([LAUNCHER, *args], capture_output=True, text=True, timeout=120, env=QUICK_JVM)


class JavaCrossCheckTest(unittest.TestCase):
    """Fingerprints and descriptions equal to those of bin/engram-host for Java-generated and Python-written
    checkpoints; all Java processes run at once in setUpClass."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.reason = java_reason()
        if cls.reason:
            return
        cls.dir = tempfile.mkdtemp(prefix="engram-java-ckpt-")
        gen = os.path.join(cls.dir, "gen")
        p = run_java("generate", "--out", gen, "--rows", "64", "--layers", "1,14")
        if p.returncode:
            raise AssertionError(f"generate failed: {p.stderr}")
        plain = os.path.join(cls.dir, "plain")
        os.mkdir(plain)
        for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
            os.link(os.path.join(gen, name), os.path.join(plain, name))
        cls.every = write_safetensors(os.path.join(cls.dir, "every.safetensors"), every_dtype_tensors(),
                                      {"format": "pt", "note": "every dtype"})
        cls.rank17 = write_safetensors(os.path.join(cls.dir, "r.safetensors"), [
            ("r16", "U8", [1] * 16, b"a"), ("r17", "I8", [1] * 17, b"b")])
        cls.cases = {
            "single file": [os.path.join(gen, "model-00001-of-00002.safetensors")],
            "index": [os.path.join(gen, "model.safetensors.index.json")],
            "directory without index": [plain],
            "every dtype": [cls.every],
            "rank 17": [cls.rank17],
        }
        procs = {k: subprocess.Popen([LAUNCHER, "inspect", "--json", *v], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=QUICK_JVM) for k, v in cls.cases.items()}
        cls.served_patterns = ["layers.1.*", "*.scale"]
        sock = os.path.join(cls.dir, "s.sock")
        serve = subprocess.Popen([LAUNCHER, "serve", "--checkpoint", cls.cases["index"][0], "--tables",
                                  ",".join(cls.served_patterns), "--backend", "memfd", "--socket", sock],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 env={**os.environ, "ENGRAM_HOST_JVM_OPTS": "-XX:TieredStopAtLevel=1"})
        try:
            cls.inspected = {}
            for k, proc in procs.items():
                out, err = proc.communicate(timeout=120)
                cls.inspected[k] = json.loads(out) if out.strip() else {"stderr": err}
            cls.ready = cls.wait_ready(sock + ".ready", serve)
        finally:
            serve.terminate()
            serve.wait(timeout=60)
            serve.stderr.close()

    @staticmethod
    def wait_ready(path: str, serve: subprocess.Popen) -> dict:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if serve.poll() is not None:
                raise AssertionError(f"serve exited {serve.returncode}: {serve.stderr.read()}")
            try:
                with open(path) as f:
                    fields = dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line)
                if fields.get("pid") == str(serve.pid):
                    return fields
            except FileNotFoundError:
                pass
            time.sleep(0.05)
        raise AssertionError("serve did not become ready in 90 s")

    @classmethod
    def tearDownClass(cls) -> None:
        if not cls.reason:
            shutil.rmtree(cls.dir, True)

    def setUp(self) -> None:
        if self.reason:
            self.skipTest(self.reason)

    def test_fingerprints_equal_the_javas(self) -> None:
        for case, paths in self.cases.items():
            if case == "rank 17":
                continue
            with self.subTest(case), open_checkpoint(paths) as cp:
                java = self.inspected[case]
                self.assertTrue(java.get("valid"), java)
                self.assertEqual(java["fingerprint"], fingerprint_sha256_hex(fingerprint(cp)))

    def test_a_selection_and_a_backend_fingerprint_as_serve_does(self) -> None:
        with open_checkpoint(self.cases["index"]) as cp:
            encoded = fingerprint(cp, self.served_patterns, "memfd")
            self.assertEqual(self.ready["fingerprint"], fingerprint_sha256_hex(encoded))
            self.assertEqual("memfd", self.ready["backend"])
            self.assertNotEqual(self.ready["fingerprint"],
                                fingerprint_sha256_hex(fingerprint(cp, self.served_patterns)), "the backend counts")
            fp = decode_fingerprint(encoded)
            self.assertEqual(["*.scale", "layers.1.*"], list(fp.patterns))
            self.assertEqual(["layers.1.engram.embed.scale", "layers.1.engram.embed.weight",
                              "layers.14.engram.embed.scale"], [t.name for t in fp.tables])

    def test_descriptions_equal_the_javas(self) -> None:
        for case, paths in self.cases.items():
            if case == "rank 17":
                continue
            with self.subTest(case), open_checkpoint(paths) as cp:
                java = self.inspected[case]
                self.assertEqual(java["files"], [{"name": f.name, "size": f.size,
                                                  "header_sha256": f.header_sha256.hex(), "tensors": len(f.tensors)}
                                                 for f in cp.files])
                # inspect lists tensors in Java's String order (UTF-16 units), the fingerprint in code point order
                java_tensors = sorted(java["tensors"], key=lambda t: t["name"])
                self.assertEqual(java_tensors, [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape),
                                                    "bytes": t.nbytes, "file": t.file.name, "offset": t.offset}
                                                   for t in cp.tensors.values()])
                self.assertEqual(java["bytes"], sum(t.nbytes for t in cp.tensors.values()))

    def test_every_dtype_is_covered(self) -> None:
        with open_checkpoint(self.every) as cp:
            self.assertEqual(set(DTYPE_BITS), {t.dtype for t in cp.tensors.values()})
            self.assertEqual(["empty.bf16", "empty.u8"], [t.name for t in cp.tensors.values() if t.nbytes == 0])
            self.assertEqual({"format": "pt", "note": "every dtype"}, cp.files[0].metadata)

    def test_a_limit_violation_reads_as_the_javas(self) -> None:
        java = self.inspected["rank 17"]
        self.assertFalse(java.get("valid"), java)
        with open_checkpoint(self.rank17) as cp:
            with self.assertRaises(CheckpointError) as caught:
                check_limits(cp.select([]), fingerprint(cp, [], "memfd"))
        self.assertEqual(java["error"], str(caught.exception))


if __name__ == "__main__":
    unittest.main()
