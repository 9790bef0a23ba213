"""The package against the real Java daemon: ``engram-host serve`` as a separate process serving generated
checkpoints; the client in this process or as ``python -m engram_host`` processes."""

import gc
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import engram_host  # noqa: E402
from engram_host import errors as E  # noqa: E402
from engram_host import _cuda  # noqa: E402
from support import (TEST_LAUNCHER, Daemon, fd_count, generate, hf_snapshot, java_work_dir,  # noqa: E402
                     memfd_mappings, require_test_launcher, run_cli, run_python_cli, safetensors_tables, table_names,
                     unlistened_socket, write_published)

ROWS = 8192
QUIET = logging.NullHandler()


def setUpModule():
    global WORK, CKPT, SINGLE, SMALLER, DAEMON, EXPECTED
    WORK = java_work_dir("engram-py-test-")
    # the package's lines (the selection, headers only) are checked where they matter, not printed everywhere
    logging.getLogger("engram_host").addHandler(QUIET)
    CKPT = generate(os.path.join(WORK, "sharded"), rows=ROWS, layers="1,14")
    SINGLE = generate(os.path.join(WORK, "single"), rows=ROWS, layers="2", single_file=True, seed=7)
    # CKPT's layers in one file, of half the rows: the same selection, every table's shape and size differ
    SMALLER = generate(os.path.join(WORK, "smaller"), rows=ROWS // 2, layers="1,14", single_file=True, seed=7)
    EXPECTED = safetensors_tables([CKPT])
    DAEMON = Daemon(CKPT)


def record_of(checkpoint: str, name: str) -> str:
    """The digest record ``inspect --write-digests`` writes for ``checkpoint``, moved to WORK/NAME: the
    checkpoint itself stays without one (a record beside it would give it content identity)."""
    run_cli("inspect", "--write-digests", checkpoint)
    path = os.path.join(WORK, name)
    os.replace(os.path.join(checkpoint, "engram-digests.json"), path)
    return path


def tearDownModule():
    logging.getLogger("engram_host").removeHandler(QUIET)
    DAEMON.close()
    shutil.rmtree(WORK, ignore_errors=True)


class ImportTest(unittest.TestCase):
    def test_every_table_is_the_checkpoints_bytes(self):
        with engram_host.connect(DAEMON.socket, expect=CKPT) as imported:
            self.assertEqual("daemon", imported.source)
            self.assertEqual(DAEMON.pid, imported.daemon_pid)
            self.assertEqual(table_names(), sorted(imported.tables), "config.json's Engram layers")
            self.assertEqual(set(EXPECTED), set(imported.tables))
            for name, (dtype, shape, data) in EXPECTED.items():
                t = imported.tables[name]
                self.assertEqual((dtype, shape, len(data)), (t.dtype, t.shape, t.nbytes))
                self.assertEqual(hashlib.sha256(data).hexdigest(), hashlib.sha256(t.buffer()).hexdigest(), name)
                self.assertEqual("memfd", t.backend)
                self.assertIsNone(t.device)
                self.assertEqual(0, t.cpu_address % 4096)

    def test_fingerprint_is_the_java_clis(self):
        java = json.loads(run_cli("import", "--socket", DAEMON.socket, "--json").stdout)
        with engram_host.connect(DAEMON.socket) as imported:
            self.assertEqual(java["fingerprint"], imported.fingerprint)
        with engram_host.connect(DAEMON.socket, expect=java["fingerprint"]) as imported:
            self.assertEqual(len(EXPECTED), len(imported.tables))

    def test_numpy_view_is_read_only_and_zero_copy(self):
        import numpy as np
        with engram_host.connect(DAEMON.socket) as imported:
            t = imported.tables["layers.1.engram.embed.scale"]
            a = t.to_numpy()
            self.assertFalse(a.flags.writeable)
            self.assertEqual(t.cpu_address, a.__array_interface__["data"][0])
            self.assertEqual(EXPECTED[t.name][2], a.tobytes())
            with self.assertRaises(ValueError):
                a[0] = 1
            del a
            gc.collect()

    def test_a_mismatch_lists_the_differences(self):
        with self.assertRaises(E.FingerprintMismatch) as cm:
            engram_host.connect(DAEMON.socket, expect=SINGLE)
        e = cm.exception
        self.assertEqual(4, e.code)
        self.assertIs(E.ErrorCode.FINGERPRINT_MISMATCH, e.code)
        self.assertTrue(any("layers.2.engram.embed" in d for d in e.details), e.details)
        self.assertGreater(len(e.daemon_fingerprint), 0)
        with self.assertRaises(E.FingerprintMismatch) as cm:
            engram_host.connect(DAEMON.socket, expect="0" * 64)
        self.assertIn("0" * 64, "\n".join(cm.exception.details) + str(cm.exception))

    def test_a_mismatch_reads_as_the_docs_say(self):
        with engram_host.connect(DAEMON.socket) as imported:
            served = imported.fingerprint
        with self.assertRaises(E.FingerprintMismatch) as cm:
            engram_host.connect(DAEMON.socket, expect=SMALLER)
        e = cm.exception
        # the same 4 tables (config.json's layers 1 and 14) in 2 files against 1 file, each table of half the rows:
        # 2 files not expected, 1 missing, and each table's shape and size: 11 differences
        self.assertEqual(11, len(e.details), e.details)
        self.assertIn("table 'layers.14.engram.embed.weight': shape expected [4096, 256], actual [8192, 256]",
                      e.details)
        self.assertEqual([f"FINGERPRINT_MISMATCH: the daemon on {DAEMON.socket} serves fingerprint {served}, not the "
                          "expected checkpoint: 11 differences"] + ["  " + d for d in e.details[:5]]
                         + ["  ... and 6 more differences"], str(e).splitlines())
        with self.assertRaises(E.FingerprintMismatch) as cm:
            engram_host.connect(DAEMON.socket, expect="0" * 64)
        self.assertEqual([f"FINGERPRINT_MISMATCH: the daemon on {DAEMON.socket} serves fingerprint {served}, not the "
                          "expected checkpoint: 1 difference",
                          f"  expected fingerprint {'0' * 64} but the daemon serves {served}",
                          "  the daemon serves 4 tables from 2 files: layers.1.engram.embed.scale, ..."],
                         str(cm.exception).splitlines())

    def test_tables_choose_the_expected_tables(self):
        with self.assertRaises(E.FingerprintMismatch) as cm:
            engram_host.connect(DAEMON.socket, expect=CKPT, tables=["layers.1.*"])
        # the two select other tables by other patterns: one line says so, not a line per table
        self.assertEqual(("selection: the daemon serves 4 tables by [layers.1.engram.embed.scale, ... (4 patterns)]; "
                          "this expectation selects 2 tables by [layers.1.*]",
                          "file 'model-00002-of-00002.safetensors': not expected"), cm.exception.details)
        with engram_host.connect(DAEMON.socket, expect=CKPT, tables=["layers.*"]) as imported:
            self.assertEqual(len(EXPECTED), len(imported.tables), "patterns alone are not compared")
        with self.assertRaises(ValueError):
            engram_host.connect(DAEMON.socket, tables=["layers.*"])

    def test_says_once_that_only_headers_were_compared(self):
        with self.assertLogs("engram_host", "WARNING") as logs:
            with engram_host.connect(DAEMON.socket, expect=CKPT):
                pass
        # the config rule chose the tables, which says nothing; neither side has a record or a snapshot
        self.assertEqual([engram_host.client.HEADERS_ONLY], [r.getMessage() for r in logs.records])
        p = run_python_cli("import", "--socket", DAEMON.socket, "--json", "--expect-checkpoint", CKPT)
        self.assertEqual(0, p.returncode, p.stderr)
        self.assertEqual(1, p.stderr.splitlines().count("python -m engram_host: " + engram_host.client.HEADERS_ONLY),
                         p.stderr)

    def test_status(self):
        s = engram_host.status(DAEMON.socket)
        self.assertEqual("ready", s["state"])
        self.assertEqual(DAEMON.pid, s["pid"])
        with engram_host.connect(DAEMON.socket):
            s = engram_host.status(DAEMON.socket)
            self.assertTrue(any(lease["pid"] == os.getpid() for lease in s["leases"]), s["leases"])

    def test_bye_ends_the_lease(self):
        imported = engram_host.connect(DAEMON.socket)
        imported.close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if not any(lease["pid"] == os.getpid() for lease in engram_host.status(DAEMON.socket)["leases"]):
                break
            time.sleep(0.05)
        else:
            self.fail("the lease outlived BYE")


class PublishedLayoutTest(unittest.TestCase):
    """A checkpoint in the layout DeepSeek-V4.1 is published in (layers.L.engram.embed.*, config.json naming
    text_config.engram_layer_ids), served by a daemon told the Engram tables by --tables: the client finds the
    same tables through config.json."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="engram-py-published-")
        cls.model = write_published(os.path.join(cls.dir, "model"), rows=128)
        cls.snapshot = hf_snapshot(cls.model, os.path.join(cls.dir, "cache"))
        cls.daemon = Daemon(cls.model, "--tables", "layers.*.engram.embed.*")

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_the_models_config_expects_the_served_tables(self):
        with self.assertLogs("engram_host", "WARNING") as logs:
            with engram_host.connect(self.daemon.socket, expect=self.model) as imported:
                self.assertEqual(["layers.1.engram.embed.scale", "layers.1.engram.embed.weight",
                                  "layers.14.engram.embed.scale", "layers.14.engram.embed.weight"],
                                 sorted(imported.tables))
        self.assertEqual([engram_host.client.HEADERS_ONLY], [r.getMessage() for r in logs.records])

    def test_identities_against_a_daemon_serving_headers_only(self):
        """An expectation from a Hugging Face snapshot carries each file's SHA-256; a daemon serving the same files
        from a plain directory has none to compare: it connects, and the client says only headers were compared."""
        expectation = engram_host.expect_checkpoint([self.snapshot])
        self.assertEqual(2, int.from_bytes(expectation.data[4:6], "little"), "a version 2 expectation")
        with self.assertLogs("engram_host", "WARNING") as logs:
            try:
                imported = engram_host.connect(self.daemon.socket, expect=expectation)
            except E.BadRequest as e:
                if "encoding version 2" in str(e):
                    self.skipTest(f"this daemon decodes version 1 expectations only: {e}")
                raise
            with imported:
                self.assertEqual(4, len(imported.tables))
        self.assertEqual([engram_host.client.HEADERS_ONLY], [r.getMessage() for r in logs.records])

    def test_the_command_line_shows_a_mismatch_in_at_most_seven_lines(self):
        p = run_python_cli("import", "--socket", DAEMON.socket, "--expect-checkpoint", self.model)
        self.assertEqual(1, p.returncode, p.stdout)
        lines = [line for line in p.stderr.splitlines()
                 if not line.startswith("python -m engram_host: selecting every tensor")]
        self.assertRegex(lines[0], rf"^python -m engram_host: FINGERPRINT_MISMATCH: the daemon on {DAEMON.socket} "
                                   r"serves fingerprint [0-9a-f]{64}, not the expected checkpoint: [0-9]+ differences$")
        self.assertEqual(7, len(lines), p.stderr)
        self.assertRegex(lines[-1], r"^  \.\.\. and [0-9]+ more differences$")


class ContentCheckTest(unittest.TestCase):
    def test_against_the_checkpoint_and_a_wrong_sidecar(self):
        with engram_host.connect(DAEMON.socket) as imported:
            report = imported.verify_content([CKPT], threads=2)
            self.assertEqual(len(EXPECTED), report.summary["verified"])
            self.assertEqual({"verified"}, {status for status, _ in report.tables.values()})
        sidecar = os.path.join(WORK, "one-wrong.engram-digests.json")
        with open(record_of(CKPT, "content-check.engram-digests.json")) as f:
            doc = json.load(f)
        self.assertEqual(2, doc["version"])
        doc["tables"]["layers.14.engram.embed.scale"]["sha256-tree-v1"] = "0" * 64
        with open(sidecar, "w") as f:
            json.dump(doc, f)
        imported = engram_host.connect(DAEMON.socket)
        with self.assertRaises(E.ContentMismatch) as cm:
            imported.verify_content([sidecar])
        self.assertIn("table 'layers.14.engram.embed.scale': the mapped bytes have digest", str(cm.exception))
        self.assertTrue(imported.closed)
        gc.collect()
        self.assertTrue(imported.memory_freed)


class LifetimeTest(unittest.TestCase):
    def test_no_fd_and_no_mapping_left_after_close_and_views_freed(self):
        fds, maps = fd_count(), memfd_mappings()
        imported = engram_host.connect(DAEMON.socket)
        buffers = {n: t.buffer() for n, t in imported.tables.items()}
        arrays = {n: t.to_numpy() for n, t in imported.tables.items()}
        self.assertGreater(memfd_mappings(), maps)
        imported.close()
        self.assertFalse(imported.memory_freed, "views are alive: the memory must stay")
        for name, (_, _, data) in EXPECTED.items():
            self.assertEqual(data, bytes(buffers[name]))
            self.assertEqual(data, arrays[name].tobytes())
        del buffers
        gc.collect()
        self.assertFalse(imported.memory_freed, "the arrays are alive: the memory must stay")
        del arrays
        gc.collect()
        self.assertTrue(imported.memory_freed)
        self.assertEqual(maps, memfd_mappings())
        self.assertEqual(fds, fd_count())

    def test_views_after_close_are_refused(self):
        imported = engram_host.connect(DAEMON.socket)
        t = next(iter(imported.tables.values()))
        imported.close()
        with self.assertRaises(E.EngramHostError):
            t.buffer()

    def test_a_daemon_killed_under_live_views(self):
        d = Daemon(CKPT)
        try:
            fds, maps = fd_count(), memfd_mappings()
            imported = engram_host.connect(d.socket)
            gone = threading.Event()
            reasons = []
            imported.on_daemon_gone(lambda r: (reasons.append(r), gone.set()))
            arrays = {n: t.to_numpy() for n, t in imported.tables.items()}
            d.kill()
            self.assertTrue(gone.wait(10), "on_daemon_gone did not fire")
            self.assertIn(reasons[0], ("the daemon process exited", "the daemon closed the lease connection"))
            for name, a in arrays.items():
                self.assertEqual(hashlib.sha256(EXPECTED[name][2]).digest(), hashlib.sha256(a.tobytes()).digest())
            imported.close()
            for name, a in arrays.items():  # still readable after close: the arrays hold the mappings
                self.assertEqual(EXPECTED[name][2][-64:], a.tobytes()[-64:])
            del arrays, a
            gc.collect()
            self.assertTrue(imported.memory_freed)
            self.assertEqual(maps, memfd_mappings())
            self.assertEqual(fds, fd_count())
        finally:
            d.close()


class AbsentTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="engram-py-absent-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_no_socket_file(self):
        with self.assertRaises(E.DaemonAbsent) as cm:
            engram_host.connect(os.path.join(self.dir, "none.sock"))
        self.assertEqual(f"no daemon listens on {self.dir}/none.sock (no socket file: ENOENT): start one (engram-host"
                         " serve), or name the running one's socket with socket= or ENGRAM_HOST_SOCKET",
                         str(cm.exception), "what to do, in one line")

    def test_a_socket_nobody_listens_on_then_the_fallback(self):
        path = os.path.join(self.dir, "dead.sock")
        s = unlistened_socket(path)
        try:
            with self.assertRaises(E.DaemonAbsent) as cm:
                engram_host.connect(path)
            self.assertIn("ECONNREFUSED", str(cm.exception))
            self.assertTrue(str(cm.exception).endswith(": the socket file is left from a daemon that is gone; the next"
                                                       " daemon on this path removes it"), str(cm.exception))
            notices = []
            with engram_host.connect_or_load(CKPT, path, notice=notices.append, threads=2) as imported:
                self.assertEqual("disk", imported.source)
                self.assertIn("from disk", notices[0])
                for name, (dtype, shape, data) in EXPECTED.items():
                    self.assertEqual(data, bytes(imported.tables[name].buffer()))
                java = json.loads(run_cli("import", "--socket", path, "--json", "--fallback-checkpoint", CKPT).stdout)
                self.assertEqual("disk", java["source"])
                self.assertEqual(java["fingerprint"], imported.fingerprint)
        finally:
            s.close()

    def test_the_wait_covers_a_daemon_still_starting(self):
        # the quick start's case: serve started in the background just before; its socket is not bound yet
        path = os.path.join(self.dir, "later", "d.sock")
        started = time.monotonic()
        with Daemon(SINGLE, socket_path=path, wait_ready=False) as d:
            self.assertFalse(os.path.exists(path), "the connect below is made before the daemon listens")
            with engram_host.connect(path, wait=60) as imported:
                self.assertEqual("daemon", imported.source)
                self.assertEqual(2, len(imported.tables))
            self.assertEqual(d.pid, imported.daemon_pid)
        self.assertLess(time.monotonic() - started, 60)

    def test_a_wait_ends_with_daemon_absent_and_connect_or_load_does_not_wait(self):
        path = os.path.join(self.dir, "never.sock")
        t0 = time.monotonic()
        with self.assertRaises(E.DaemonAbsent):
            engram_host.connect(path, wait=0.5)
        self.assertGreaterEqual(time.monotonic() - t0, 0.5, "asked again until the wait ended")
        t0 = time.monotonic()
        notices = []
        with engram_host.connect_or_load(CKPT, path, wait=60, notice=notices.append, threads=2) as imported:
            self.assertEqual("disk", imported.source)
        self.assertLess(time.monotonic() - t0, 30, "no daemon: the disk at once, not a 60 s wait")
        self.assertIn("from disk", notices[0])
        with self.assertRaises(TypeError):
            engram_host.connect_or_load(CKPT, path, no_such_option=1)

    @unittest.skipIf(_cuda.available(), "this machine has CUDA: a GPU view works here")
    def test_a_gpu_view_without_cuda_names_the_cpu_views(self):
        # a daemon's tables and the disk's alike: the reason, then the way out, in one line
        for attach in (lambda: engram_host.connect(DAEMON.socket, device=0),
                       lambda: engram_host.connect_or_load(CKPT, os.path.join(self.dir, "none.sock"), device=0,
                                                           threads=2)):
            with self.assertRaises(E.CudaUnavailable) as cm:
                attach()
            message = str(cm.exception)
            self.assertTrue(message.startswith("a GPU view needs CUDA: "), message)
            self.assertTrue(message.endswith("; for CPU views only, connect with device=None"), message)
            self.assertNotIn("\n", message)

    def test_a_live_daemon_never_falls_back(self):
        with self.assertRaises(E.FingerprintMismatch):
            engram_host.connect_or_load(SINGLE, DAEMON.socket, expect=SINGLE, notice=self.fail)


class LimitsTest(unittest.TestCase):
    def test_busy_when_the_uids_connections_are_taken(self):
        with Daemon(SINGLE, "--max-connections-per-uid", "1") as d:
            with engram_host.connect(d.socket):
                with self.assertRaises(E.Busy) as cm:
                    engram_host.connect(d.socket)
                self.assertEqual(9, cm.exception.code)
                self.assertTrue(cm.exception.retryable)
                self.assertIn("1", str(cm.exception))

    def test_an_expected_checkpoint_whose_fingerprint_is_over_1_mib(self):
        # 12,000 one-byte tables with 100-byte names: the structured expectation is about 1.5 MiB
        path = os.path.join(WORK, "many.safetensors")
        names = [f"t.{i:05d}." + "n" * 100 for i in range(12000)]
        header = {n: {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i, n in enumerate(names)}
        h = json.dumps(header, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)
        with open(path, "wb") as f:
            f.write(len(h).to_bytes(8, "little") + h + bytes(i % 256 for i in range(len(names))))
        with Daemon(path) as d:
            with engram_host.connect(d.socket, expect=path) as imported:
                self.assertEqual(12000, len(imported.tables))
                self.assertEqual(bytes([77]), bytes(imported.tables[names[77]].buffer()))

    def test_not_ready_then_the_wait(self):
        require_test_launcher(self)
        gate = os.path.join(WORK, "gate")
        with Daemon(SINGLE, env={"ENGRAM_HOST_TEST_LOAD_GATE": "before-read:" + gate}, wait_ready=False,
                    launcher=TEST_LAUNCHER) as d:
            d.wait_socket()
            deadline = time.monotonic() + 30
            while True:  # the socket appears before the listener is ready to answer; NOT_READY is what we want
                try:
                    engram_host.connect(d.socket)
                    self.fail("the daemon served before the gate opened")
                except E.NotReady as e:
                    self.assertEqual(3, e.code)
                    break
                except E.DaemonAbsent:
                    self.assertLess(time.monotonic(), deadline)
                    time.sleep(0.05)
            threading.Timer(0.5, lambda: open(gate, "w").close()).start()
            with engram_host.connect(d.socket, wait=30) as imported:
                self.assertEqual(2, len(imported.tables))


class CliTest(unittest.TestCase):
    """``python -m engram_host import`` prints the Java ``import``'s JSON document."""

    def both(self, *args):
        java = run_cli("import", "--socket", DAEMON.socket, "--json", *args)
        py = run_python_cli("import", "--socket", DAEMON.socket, "--json", *args)
        self.assertEqual(0, py.returncode, py.stderr)
        return json.loads(java.stdout), json.loads(py.stdout)

    def test_same_document(self):
        java, py = self.both("--digest", "sha256", "--expect-checkpoint", CKPT)
        self.assertEqual(set(java), set(py))
        for k in ("source", "fingerprint", "daemon_pid"):
            self.assertEqual(java[k], py[k], k)
        self.assertEqual(len(java["tables"]), len(py["tables"]))
        for j, p in zip(java["tables"], py["tables"]):
            for k in ("name", "dtype", "shape", "bytes", "backend", "numa_node", "region", "digest", "sha256"):
                self.assertEqual(j[k], p[k], f"{j['name']}: {k}")
            self.assertEqual(set(j) - {"attach"}, set(p) - {"attach"}, j["name"])
        for k in ("handshake_ms", "manifest_ms", "map_ms", "attach_ms", "total_ms", "import_ms"):
            self.assertIn(k, py["timings"])

    def test_engram_digest_and_content_check(self):
        sidecar = record_of(CKPT, "cli.engram-digests.json")
        java, py = self.both("--digest", "engram", "--verify-content", sidecar)
        self.assertEqual([t["digest_verified"] for t in java["tables"]], [t["digest_verified"] for t in py["tables"]])
        self.assertEqual([t["sha256-tree-v1"] for t in java["tables"]], [t["sha256-tree-v1"] for t in py["tables"]])
        self.assertEqual(java["content_check"]["verified"], py["content_check"]["verified"])
        self.assertEqual(set(java["content_check"]), set(py["content_check"]))

    def test_content_mismatch_exits_1(self):
        sidecar = os.path.join(WORK, "wrong.engram-digests.json")
        names = sorted(EXPECTED)
        with open(sidecar, "w") as f:
            json.dump({"format": "engram-content-digests", "version": 1, "algorithm": "sha256-tree-v1",
                       "chunk_bytes": 16777216, "tables": {n: "ab" * 32 for n in names}}, f)
        p = run_python_cli("import", "--socket", DAEMON.socket, "--verify-content", sidecar)
        self.assertEqual(1, p.returncode, p.stdout)
        self.assertIn("content check (sha256-tree-v1) failed", p.stderr)

    def test_hold_sees_the_daemon_go(self):
        with Daemon(SINGLE) as d:
            child = subprocess.Popen([sys.executable, "-m", "engram_host", "import", "--socket", d.socket, "--json",
                                      "--hold-ms", "20000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": os.path.join(os.path.dirname(__file__), "..")})
            deadline = time.monotonic() + 20
            while not engram_host.status(d.socket)["leases"]:
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.05)
            d.kill()
            out, err = child.communicate(timeout=30)
            self.assertEqual(0, child.returncode, err)
            doc = json.loads(out)
            self.assertIsNotNone(doc["daemon_gone"])
            self.assertEqual(len(doc["tables"]), len(doc["tables_after_hold"]))

    def test_usage_errors_exit_2(self):
        for args in (["import", "--verify"], ["import", "--expect", "x", "--expect-checkpoint", "y"], ["nonsense"],
                     ["import", "--daemon-uid", "-1"]):
            with self.subTest(args=args):
                p = run_python_cli(*args)
                self.assertEqual(2, p.returncode, p.stderr)
                self.assertEqual(2, len(p.stderr.strip().splitlines()), p.stderr)

    def test_help(self):
        for args in (["--help"], ["import", "--help"], ["status", "--help"], ["stop", "--help"]):
            p = run_python_cli(*args)
            self.assertEqual(0, p.returncode, p.stderr)
            self.assertIn("usage:", p.stdout)
        p = run_python_cli("import", "--help")
        for flag in ("--socket", "--gpu", "--device", "--digest", "--json", "--expect-checkpoint", "--verify-content",
                     "--fallback-checkpoint", "--daemon-uid", "--wait-ms", "--hold-ms", "--cpu-view", "--verify"):
            self.assertIn(flag, p.stdout)

    def test_no_daemon_exits_1_with_one_line(self):
        p = run_python_cli("import", "--socket", os.path.join(WORK, "nobody.sock"))
        self.assertEqual(1, p.returncode)
        self.assertRegex(p.stderr, r"^python -m engram_host: no daemon listens on .*nobody.sock \(no socket file")


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("setpriv"), "needs root and setpriv to act as another uid")
class OtherUidTest(unittest.TestCase):
    """A root daemon that admits uid 65534: that user imports (root's daemon is always trusted), and may not stop
    it."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="engram-py-uid-")
        os.chmod(cls.dir, 0o755)
        cls.daemon = Daemon(SINGLE, "--allow-uid", "65534", socket_path=os.path.join(cls.dir, "run", "d.sock"))

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def as_nobody(self, *args):
        return run_python_cli(*args, prefix=("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"),
                              env={"HOME": "/"})

    def test_another_uid_imports_from_roots_daemon(self):
        p = self.as_nobody("import", "--socket", self.daemon.socket, "--json", "--digest", "sha256")
        self.assertEqual(0, p.returncode, p.stderr)
        tables = json.loads(p.stdout)["tables"]
        expected = safetensors_tables([SINGLE])
        self.assertEqual({n: hashlib.sha256(d).hexdigest() for n, (_, _, d) in expected.items()},
                         {t["name"]: t["sha256"] for t in tables})

    def test_another_uid_may_not_stop_it(self):
        p = self.as_nobody("stop", "--socket", self.daemon.socket)
        self.assertEqual(1, p.returncode)
        self.assertIn("NOT_ALLOWED", p.stderr)
        self.assertEqual("ready", engram_host.status(self.daemon.socket)["state"])


if __name__ == "__main__":
    unittest.main()
