"""``connect(..., background=True)`` against real daemons (the Java daemon as separate processes, one of them held
in its load by the test launcher's gate) and real fds: the handle comes back at once, the tables when the attach
completes; errors, a timeout, a close before completion and a process exiting first."""

import gc
import hashlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import traceback
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import engram_host  # noqa: E402
from engram_host import errors as E  # noqa: E402
from support import (PYTHON_DIR, TEST_LAUNCHER, Daemon, Peer, fd_count, generate, java_work_dir,  # noqa: E402
                     memfd_mappings, require_test_launcher, safetensors_tables, test_launcher_reason)

QUIET = logging.NullHandler()


def setUpModule():
    global WORK, CKPT, OTHER, EXPECTED, DAEMON, GATE, GATED
    WORK = java_work_dir("engram-py-background-")
    logging.getLogger("engram_host").addHandler(QUIET)  # "compared headers only" is test_daemon's to check
    CKPT = generate(os.path.join(WORK, "ckpt"), rows=4096, layers="1,14")
    OTHER = generate(os.path.join(WORK, "other"), rows=1024, layers="2", single_file=True, seed=7)
    EXPECTED = safetensors_tables([CKPT])
    # both daemons start at once; the gated one stays loading (it answers NOT_READY) until GATE exists
    GATE = os.path.join(WORK, "gate")
    GATED = None
    if test_launcher_reason() is None:
        GATED = Daemon(OTHER, env={"ENGRAM_HOST_TEST_LOAD_GATE": "before-read:" + GATE}, wait_ready=False,
                       launcher=TEST_LAUNCHER)
    DAEMON = Daemon(CKPT)
    if GATED is not None:
        GATED.wait_socket()


def tearDownModule():
    logging.getLogger("engram_host").removeHandler(QUIET)
    DAEMON.close()
    if GATED is not None:
        GATED.close()
    shutil.rmtree(WORK, ignore_errors=True)


def attach_threads() -> list:
    return [t for t in threading.enumerate() if t.name == "engram-attach"]


def connections(path: str) -> dict:
    """The daemon's connection counts, less the STATUS connection that asks."""
    c = engram_host.status(path)["connections"]
    return {"open": c["open"] - 1, "leases": c["leases"]}


def settled(path: str, expected: dict, seconds: float = 10) -> dict:
    """The daemon's counts once they equal ``expected``, or as they are after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        now = connections(path)
        if now == expected or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


def loading(path: str) -> None:
    """Waits for the gated daemon to answer (NOT_READY) rather than to be absent."""
    deadline = time.monotonic() + 60
    while True:
        try:
            engram_host.status(path)
            return
        except E.DaemonAbsent:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class SilentListener:
    """A listening socket nobody accepts on: a connect succeeds, HELLO is buffered, WELCOME never comes, so a
    client waits in recv for its timeout."""

    def __init__(self, directory: str):
        self.path = os.path.join(directory, "silent.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(8)

    def close(self) -> None:
        self.sock.close()
        os.unlink(self.path)


class BackgroundTest(unittest.TestCase):
    def test_wait_gives_the_tables_connect_gives(self):
        fds, maps = fd_count(), memfd_mappings()
        t0 = time.perf_counter()
        pending = engram_host.connect(DAEMON.socket, expect=CKPT, background=True)
        returned = time.perf_counter() - t0
        self.assertIsInstance(pending, engram_host.PendingTables)
        self.assertLess(returned, 0.5, "connect(background=True) returns at once")
        imported = pending.wait(30)
        self.assertTrue(pending.ready())
        self.assertIs(imported, pending.wait(), "the same object on every call")
        self.assertIs(imported, pending.wait(0))
        self.assertEqual("daemon", imported.source)
        self.assertEqual(DAEMON.pid, imported.daemon_pid)
        self.assertEqual(set(EXPECTED), set(imported.tables))
        for name, (dtype, shape, data) in EXPECTED.items():
            t = imported.tables[name]
            self.assertEqual((dtype, shape), (t.dtype, t.shape))
            self.assertEqual(hashlib.sha256(data).digest(), hashlib.sha256(t.buffer()).digest(), name)
        self.assertIn("total_ms", imported.timings)
        self.assertTrue(any(lease["pid"] == os.getpid() for lease in engram_host.status(DAEMON.socket)["leases"]))
        with pending:
            pass  # leaving with closes the handle, and the tables it handed out
        self.assertTrue(imported.closed)
        self.assertTrue(pending.closed and pending.ready())
        gc.collect()
        self.assertTrue(imported.memory_freed)
        self.assertEqual((fds, maps), (fd_count(), memfd_mappings()))
        with self.assertRaisesRegex(E.EngramHostError, "was closed"):
            pending.wait()

    def test_tables_taken_by_wait_outlive_the_dropped_handle(self):
        imported = engram_host.connect(DAEMON.socket, background=True).wait(30)
        gc.collect()  # the handle is gone: the tables are the caller's
        self.assertFalse(imported.closed)
        self.assertEqual(EXPECTED["layers.1.engram.embed.scale"][2],
                         bytes(imported.tables["layers.1.engram.embed.scale"].buffer()))
        imported.close()

    def test_errors_surface_at_wait_as_connect_raises_them(self):
        absent = engram_host.connect(os.path.join(WORK, "none.sock"), background=True)
        with self.assertRaises(E.DaemonAbsent) as first:
            absent.wait(30)
        self.assertTrue(absent.ready())
        with self.assertRaises(E.DaemonAbsent) as second:
            absent.wait()
        self.assertIs(first.exception, second.exception, "the same exception on every call")
        self.assertIn("ENOENT", str(first.exception))
        try:  # (assertRaises drops the traceback)
            absent.wait()
        except E.DaemonAbsent as e:
            frames = [f.name for f in traceback.extract_tb(e.__traceback__)]
        self.assertEqual(["wait", "_run", "run", "_connect", "_handshake", "_connect_socket"], frames[1:],
                         "after this test's and wait's frames, the worker's, once")
        with self.assertRaises(E.FingerprintMismatch) as mismatch:
            engram_host.connect(DAEMON.socket, expect=OTHER, background=True).wait(30)
        with self.assertRaises(E.FingerprintMismatch) as blocking:
            engram_host.connect(DAEMON.socket, expect=OTHER)
        self.assertEqual(str(blocking.exception), str(mismatch.exception))
        self.assertEqual(blocking.exception.details, mismatch.exception.details)
        self.assertEqual(4, mismatch.exception.code)
        missing = engram_host.connect(DAEMON.socket, expect=os.path.join(WORK, "no-such-checkpoint"), background=True)
        with self.assertRaises(Exception) as read_on_the_worker:
            missing.wait(30)
        with self.assertRaises(type(read_on_the_worker.exception)):
            engram_host.connect(DAEMON.socket, expect=os.path.join(WORK, "no-such-checkpoint"))

    def test_bad_arguments_raise_on_the_caller(self):
        before = len(attach_threads())
        for kwargs, exc in (({"device": -1}, ValueError), ({"expect": 42}, TypeError),
                            ({"expect": [CKPT, 42]}, TypeError), ({"tables": ["*"]}, ValueError),
                            ({"daemon_uid": -5}, ValueError), ({"wait": "5"}, TypeError),
                            ({"timeout": None}, TypeError), ({"socket": "/tmp/{device_uuid}.sock"}, ValueError),
                            ({"socket": "relative.sock"}, ValueError), ({"instance": "a/b"}, ValueError)):
            with self.subTest(kwargs), self.assertRaises(exc):
                engram_host.connect(**{"socket": DAEMON.socket, **kwargs}, background=True)
        self.assertEqual(before, len(attach_threads()), "no worker was started")

    def test_close_while_waiting_for_an_answer_wakes_the_worker(self):
        silent = SilentListener(WORK)
        try:
            fds = fd_count()
            pending = engram_host.connect(silent.path, timeout=60, background=True)
            time.sleep(0.2)
            self.assertFalse(pending.ready())
            with self.assertRaises(engram_host.StillAttaching) as timed_out:
                pending.wait(0.1)
            self.assertIsInstance(timed_out.exception, TimeoutError)
            self.assertNotIsInstance(timed_out.exception, E.EngramHostError, "nothing failed")
            t0 = time.monotonic()
            pending.close()
            self.assertLess(time.monotonic() - t0, 2, "the socket's shutdown ends the worker's recv at once")
            self.assertEqual([], attach_threads())
            self.assertEqual(fds, fd_count())
        finally:
            silent.close()

    def test_a_dropped_handle_stops_its_attach(self):
        silent = SilentListener(WORK)
        try:
            fds = fd_count()
            engram_host.connect(silent.path, timeout=60, background=True)
            gc.collect()
            deadline = time.monotonic() + 5
            while attach_threads() and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertEqual([], attach_threads())
            self.assertEqual(fds, fd_count())
        finally:
            silent.close()

    def test_a_close_at_any_moment_of_the_attach_leaks_nothing(self):
        """Against a scripted daemon that sends 520 memfds: closed before, during and after the manifest and the
        maps, the handle leaves no fd, no mapping and no thread."""
        fds, maps = fd_count(), memfd_mappings()
        for delay in (0.0, 0.005, 0.02, 0.05, 0.2):
            with self.subTest(delay=delay):
                peer = Peer("batch-520", WORK)
                pending = engram_host.connect(peer.socket, background=True)
                time.sleep(delay)
                pending.close()
                peer.finish()
                self.assertEqual([], attach_threads())
                self.assertEqual((fds, maps), (fd_count(), memfd_mappings()))

    def test_connect_or_load_has_no_background(self):
        with self.assertRaises(TypeError):
            engram_host.connect_or_load(CKPT, DAEMON.socket, background=True)


class LoadingDaemonTest(unittest.TestCase):
    """Against a daemon held in its load: it answers NOT_READY until the gate opens (the last test opens it)."""

    def setUp(self):
        require_test_launcher(self)
        loading(GATED.socket)
        if os.path.exists(GATE):
            self.skipTest("the gate was opened")

    def test_1_a_refusal_surfaces_at_wait(self):
        with self.assertRaises(E.NotReady) as cm:
            engram_host.connect(GATED.socket, background=True).wait(30)
        self.assertEqual(3, cm.exception.code)

    def test_2_close_before_completion_leaks_nothing(self):
        base = settled(GATED.socket, {"open": 0, "leases": 0})
        fds, maps = fd_count(), memfd_mappings()
        pending = engram_host.connect(GATED.socket, wait=60, background=True)
        self.assertEqual({"open": 1, "leases": 0}, settled(GATED.socket, {"open": 1, "leases": 0}),
                         "the worker's connection, retrying while the daemon loads")
        self.assertFalse(pending.ready())
        t0 = time.monotonic()
        pending.close()
        self.assertLess(time.monotonic() - t0, 2)
        self.assertTrue(pending.ready())
        self.assertEqual([], attach_threads())
        self.assertEqual((fds, maps), (fd_count(), memfd_mappings()))
        self.assertEqual(base, settled(GATED.socket, base), "the daemon saw the connection end")

    def test_3_a_process_exiting_first_exits_at_once(self):
        base = settled(GATED.socket, {"open": 0, "leases": 0})
        child = ("import sys, time, engram_host\n"
                 "p = engram_host.connect(sys.argv[1], wait=60, background=True)\n"
                 "time.sleep(0.3)\n"
                 "assert not p.ready()\n"
                 "print('attaching', flush=True)\n")
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-c", child, GATED.socket], capture_output=True, text=True, timeout=30,
                           env={**os.environ, "PYTHONPATH": PYTHON_DIR})
        took = time.monotonic() - t0
        self.assertEqual((0, "attaching\n", ""), (p.returncode, p.stdout, p.stderr))
        self.assertLess(took, 5, "the exit waits for no attach")
        self.assertEqual(base, settled(GATED.socket, base), "the daemon saw the connection end")

    def test_4_a_slow_attach_times_the_wait_out_and_goes_on(self):
        pending = engram_host.connect(GATED.socket, wait=60, background=True)
        with self.assertRaises(engram_host.StillAttaching):
            pending.wait(0.3)
        self.assertFalse(pending.ready())
        open(GATE, "w").close()
        with pending.wait(60) as imported:
            self.assertTrue(pending.ready())
            self.assertEqual(sorted(safetensors_tables([OTHER])), sorted(imported.tables))
        pending.close()


class ExitTest(unittest.TestCase):
    def test_a_process_exiting_with_finished_tables_it_never_took(self):
        base = settled(DAEMON.socket, {"open": 0, "leases": 0})
        child = ("import sys, time, engram_host\n"
                 "p = engram_host.connect(sys.argv[1], background=True)\n"
                 "while not p.ready(): time.sleep(0.01)\n"
                 "print(engram_host.status(sys.argv[1])['connections']['leases'], flush=True)\n")
        p = subprocess.run([sys.executable, "-c", child, DAEMON.socket], capture_output=True, text=True, timeout=30,
                           env={**os.environ, "PYTHONPATH": PYTHON_DIR})
        self.assertEqual((0, f"{base['leases'] + 1}\n", ""), (p.returncode, p.stdout, p.stderr))
        self.assertEqual(base, settled(DAEMON.socket, base), "the lease ended with the process")


if __name__ == "__main__":
    unittest.main()
