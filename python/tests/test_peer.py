"""The client against conformance/protocol_peer.py, a scripted daemon side of docs/protocol.md: the paths the real
daemon cannot be made to take cheaply (hundreds of fds over fillers, parts, every error code, malformed frames,
memfds without seals). Each case is a separate peer process."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import engram_host  # noqa: E402
from engram_host import errors as E  # noqa: E402
from support import Peer, fd_count, memfd_mappings, run_python_cli  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


class PeerTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="engram-py-peer-")
        self.fds = fd_count()

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(self.fds, fd_count(), "an fd was left open")

    def connect(self, case, **kw):
        peer = Peer(case, self.dir)
        try:
            return engram_host.connect(peer.socket, **kw), peer
        except BaseException:
            rc, out = peer.finish()
            raise

    def refused(self, case, exc, pattern, **kw):
        peer = Peer(case, self.dir)
        with self.assertRaises(exc) as cm:
            engram_host.connect(peer.socket, **kw)
        rc, out = peer.finish()
        self.assertRegex(str(cm.exception), pattern)
        self.assertEqual(0, rc, out)
        return cm.exception

    # -- fds, fillers, parts

    def test_520_fds_over_fillers(self):
        before = memfd_mappings()
        imported, peer = self.connect("batch-520")
        with imported:
            self.assertEqual(520, len(imported.tables))
            for i in (0, 252, 253, 505, 506, 519):
                t = imported.tables[f"t{i}"]
                self.assertEqual(PAGE, t.nbytes)
                self.assertEqual(bytes(PAGE), bytes(t.buffer()))
            self.assertEqual(before + 520, memfd_mappings())
        rc, out = peer.finish()
        self.assertEqual(0, rc, out)
        self.assertTrue(imported.memory_freed)
        self.assertEqual(before, memfd_mappings())

    def test_254_fds_one_filler(self):
        imported, peer = self.connect("batch-254")
        with imported:
            self.assertEqual(254, len(imported.tables))
        self.assertEqual(0, peer.finish()[0])

    def test_manifest_in_parts(self):
        imported, peer = self.connect("parts-520")
        with imported:
            self.assertEqual(520, len(imported.tables))
            self.assertIn("table.0519." + "x" * 3000, imported.tables)
            self.assertEqual(PAGE, imported.tables["table.0000." + "x" * 3000].nbytes)
        self.assertEqual(0, peer.finish()[0])

    def test_sealed_with_write_seal_is_accepted(self):
        imported, peer = self.connect("sealed-write")
        with imported:
            self.assertEqual(2, len(imported.tables))
        self.assertEqual(0, peer.finish()[0])

    def test_not_ready_then_manifest_within_the_wait(self):
        imported, peer = self.connect("not-ready", wait=5.0)
        with imported:
            self.assertEqual(2, len(imported.tables))
        self.assertEqual(0, peer.finish()[0])

    def test_stopping_then_a_successor_within_the_wait(self):
        # STOPPING, the socket gone for 300 ms, then a successor on the same path: a restart, served within wait
        imported, peer = self.connect("stopping-restart", wait=5.0)
        with imported:
            self.assertEqual(2, len(imported.tables))
        rc, out = peer.finish()
        self.assertEqual(0, rc, out)
        self.assertIn("first daemon version 2, 1 IMPORT(s); successor version 2, 1 IMPORT(s)", out)

    # -- every error code, each as its subclass with code and details

    def test_every_error_code(self):
        for code, cls in E.BY_CODE.items():
            with self.subTest(code=code):
                # a mismatch is shown as docs/checkpoints.md has it; the daemon's message is kept beside
                e = self.refused(f"error-{code}", cls, f"^{cls.name}: scripted error {code}" if code != 4 else
                                 "^FINGERPRINT_MISMATCH: the daemon on .* serves a fingerprint it did not send, not "
                                 "the expected checkpoint: 1 difference\n  detail of 4$")
                self.assertEqual(code, e.code)
                self.assertEqual((f"detail of {code}",), e.details)
                self.assertEqual(code in (3, 9), e.retryable)

    def test_a_daemons_words_keep_to_their_lines(self):
        e = self.refused("control-chars", E.Internal, "INTERNAL: internal")
        self.assertEqual("INTERNAL: internal\\n2026-01-01T00:00:00.000Z engram-host: forged\\u001b[2J\n"
                         "  detail\\rforged\\u2028line\\u0085end", str(e))

    def test_unknown_code_is_the_base_class(self):
        e = self.refused("unknown-error", E.EngramHostError, "error code 42: a code from a later daemon")
        self.assertIs(type(e), E.EngramHostError)
        self.assertEqual(42, e.code)

    def test_not_ready_past_the_wait(self):
        e = self.refused("not-ready", E.NotReady, "NOT_READY: still loading")
        self.assertTrue(e.retryable)

    def test_mismatch_details(self):
        e = self.refused("mismatch", E.FingerprintMismatch, "FINGERPRINT_MISMATCH")
        self.assertEqual(("table t: bytes 1 != 2", "backend: memfd != cuda-vmm"), e.details)

    def test_mismatch_with_101_details(self):
        e = self.refused("mismatch-101", E.FingerprintMismatch, "FINGERPRINT_MISMATCH")
        self.assertEqual(101, len(e.details))
        self.assertEqual("fingerprint mismatch", e.daemon_message)
        lines = str(e).splitlines()
        self.assertTrue(lines[0].endswith(", not the expected checkpoint: 107 differences"), lines[0])
        self.assertEqual([f"  table t{i}: missing" for i in range(5)] + ["  ... and 102 more differences"], lines[1:])

    def test_error_in_parts(self):
        e = self.refused("parts-error", E.FingerprintMismatch, "FINGERPRINT_MISMATCH")
        self.assertEqual(1500000, len(e.daemon_fingerprint))
        self.assertEqual("fingerprint mismatch", e.daemon_message)

    def test_timed_out(self):
        self.refused("timed-out", E.TimedOut, "TIMED_OUT: request timeout")

    def test_refusals_at_accept(self):
        self.refused("busy-before-hello", E.Busy, "BUSY: connection limit")
        self.refused("not-allowed-before-hello", E.NotAllowed, "NOT_ALLOWED: uid 4242")

    # -- the daemon breaks the protocol: a clear error, nothing left open

    def test_protocol_violations(self):
        cases = {
            "v2-error-before-hello": "ERROR encoded as version 2 before a version was chosen",
            "part-orphan": "a PART without a continued frame before it",
            "part-fds": "PART 1 carried fds|announced 0 fds but 1 arrived",
            "part-interrupted": "expected PART 1 of a continued frame, got ERROR",
            "part-eof": "the daemon closed the connection",
            "wrong-version-after": "MANIFEST is encoded as version 1, not the chosen version 2",
            "bad-filler": "filler 0 is 0x00, not 0xFD",
            "empty-filler": "filler 0 carried no fds",
            "count-mismatch": "MANIFEST lists 3 regions but 2 fds arrived",
            "outside-region": r"table 't' \[100, \+\d+\) does not fit in region 0",
            "wrong-bytes": "table 't' is F16 \\[100\\], which is 200 bytes, but the manifest says 100",
            "huge-shape": r"table 't' \[0, \+281474976710656\) does not fit in region 0",
            "unknown-dtype": "has dtype 'F9_E9M9', not a safetensors dtype",
            "bad-fingerprint-sha": "fingerprint_sha256 is not the SHA-256 of the fingerprint it carries",
            "duplicate-name": "table 't' is listed twice",
            "control-name": r"table 0 't\\n2026 forged\\x1b\[2J': its name holds a control character or a line separator",
            "control-dtype": r"has dtype 'U8\\x1b\[2J', not a safetensors dtype",
            "kind-mismatch": "table 't' says kind 1, node 0, device -1 but its region 0 has 0, 0, -1",
            "span-memfd": r"table 't' \[0, \+\d+\) does not fit in region 0 of \d+ bytes; only a cuda-vmm host table "
                          r"\(kind 2\) runs on into the regions after it",
            "span-past-end": r"table 't' \[0, \+5242880\) at region 0 runs past the last region, 1, with 1048576 "
                             r"bytes left to place",
            "span-node": "table 't' says kind 2, node 0, device -1 but region 1 of its run from region 0 has 2, 1, -1",
            "span-kind": "table 't' says kind 2, node 0, device -1 but region 1 of its run from region 0 has 0, 0, -1",
            "trailing": "1 trailing bytes after the last field",
            "bad-magic": "bad magic 0x12345678",
            "too-many-details": "detail_count 102 is over the limit of 101",
            "long-message": "message is 4097 bytes, over the limit of 4096",
            "bad-version": "encoded as version 3; this client offered 1 to 2",
            "bad-version-body": "WELCOME: chose version 3 but is encoded as version 2",
            "welcome-header-version": "WELCOME: chose version 2 but is encoded as version 1",
        }
        for case, pattern in cases.items():
            with self.subTest(case=case):
                self.refused(case, (E.ProtocolViolation, E.NoAnswer), pattern)

    def test_eof_mid_message(self):
        self.refused("eof", E.NoAnswer, "closed the connection")

    def test_welcome_uid_differs_from_peercred(self):
        if os.geteuid() == 4242:
            self.skipTest("this test's peer claims uid 4242")
        self.refused("welcome-uid", E.DaemonNotTrusted, "WELCOME says uid 4242 but SO_PEERCRED says uid")

    def test_memfds_without_seals_are_refused(self):
        for case, pattern in {"unsealed": "seals are SEAL; need", "some-seals": "seals are SHRINK\\|GROW; need",
                              "no-seal-seal": "seals are SHRINK\\|GROW\\|FUTURE_WRITE; need",
                              "future-write": "seals are SEAL\\|SHRINK\\|GROW\\|FUTURE_WRITE; need SEAL, SHRINK, GROW"
                                              " and WRITE \\(FUTURE_WRITE leaves writable a mapping made before it\\)",
                              "wrong-size": "holds \\d+ bytes but the manifest says",
                              "regular-file": "F_GET_SEALS\\) failed: EINVAL"}.items():
            with self.subTest(case=case):
                before = memfd_mappings()
                self.refused(case, E.DaemonNotTrusted, pattern)
                self.assertEqual(before, memfd_mappings())

    @unittest.skipUnless(os.geteuid() == 0 and shutil.which("setpriv"), "needs root and setpriv to run a peer as another uid")
    def test_a_daemon_of_another_uid(self):
        nobody = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
        os.chmod(self.dir, 0o777)
        peer = Peer("uid-refused", self.dir, prefix=nobody)
        with self.assertRaises(E.DaemonNotTrusted) as cm:
            engram_host.connect(peer.socket)
        self.assertRegex(str(cm.exception), r"its uid \(SO_PEERCRED, pid \d+\) is 65534, and this client trusts only "
                                            r"the uids 0 \(root\); .*daemon_uid=65534")
        self.assertEqual(0, peer.finish()[0])
        peer = Peer("batch-2", self.dir, prefix=nobody)
        with engram_host.connect(peer.socket, daemon_uid=65534) as imported:
            self.assertEqual(2, len(imported.tables))
        self.assertEqual(0, peer.finish()[0])

    def test_future_write_only_when_asked(self):
        peer = Peer("future-write", self.dir)
        with engram_host.connect(peer.socket, accept_future_write_seal=True) as imported:
            self.assertEqual(1, len(imported.tables))
        peer.finish()
        for flag, rc in (((), 1), (("--accept-future-write-seal",), 0)):  # the command line as the Java and C ones
            peer = Peer("future-write", self.dir)
            p = run_python_cli("import", "--socket", peer.socket, *flag)
            self.assertEqual(rc, p.returncode, p.stderr)
            if rc:
                self.assertIn("FUTURE_WRITE", p.stderr)
            peer.finish()

    def test_an_answer_whose_parts_trickle_is_bounded_as_a_whole(self):
        t0 = time.monotonic()
        self.refused("slow-parts", E.NoAnswer, "did not answer within")
        self.assertLess(time.monotonic() - t0, 14)

    def test_fewer_fds_than_announced_are_refused_at_once(self):
        peer = Peer("fewer-fds", self.dir)
        t0 = time.monotonic()
        with self.assertRaises(E.ProtocolViolation) as cm:  # the peer holds the connection open for 5 s
            engram_host.connect(peer.socket)
        self.assertLess(time.monotonic() - t0, 3)
        self.assertRegex(str(cm.exception), "announced 2 fds but 1 arrived")
        peer.finish()

    def test_frame_over_1_gib_is_refused(self):
        self.refused("part-over-1gib", E.ProtocolViolation, "over 1073741824 bytes", timeout=120)



def _unshare_pid():
    """`unshare --pid --fork`, or None where it cannot run (it needs root or user namespaces)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    try:
        ok = subprocess.run([unshare, "--pid", "--fork", "true"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (unshare, "--pid", "--fork") if ok else None


def _child_of(pid: int) -> int:
    for _ in range(200):
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = f.read().split()
        if children:
            return int(children[0])
        import time
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} has no child")


class PidNamespaceTest(unittest.TestCase):
    """``daemon_pid`` is the pid SO_PEERCRED gives (the kernel translates it into the client's pid namespace, 0
    where the daemon is not visible), never WELCOME's, which is the daemon's pid in its own namespace. The watch
    for the daemon's end does not use a pid at all (a takeover replaces the process): the lease alone tells."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="engram-py-pidns-")
        os.chmod(self.dir, 0o755)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_same_namespace_watches_the_peer(self):
        peer = Peer("batch-254", self.dir)
        with engram_host.connect(peer.socket) as imported:
            self.assertEqual(peer.proc.pid, imported.daemon_pid)
            self.assertEqual(peer.proc.pid, imported.daemon.pid)
        self.assertEqual(0, peer.finish()[0])

    def test_daemon_in_another_pid_namespace(self):
        prefix = _unshare_pid()
        if prefix is None:
            self.skipTest("unshare --pid --fork does not run here (needs root)")
        peer = Peer("batch-254", self.dir, prefix=prefix)
        real = _child_of(peer.proc.pid)  # the peer's pid here; in its namespace it is 1
        gone = []
        with engram_host.connect(peer.socket) as imported:
            self.assertEqual(1, imported.daemon.pid, "WELCOME names the peer's pid in its own namespace")
            self.assertEqual(real, imported.daemon_pid)
            imported.on_daemon_gone(gone.append)
            self.assertIsNone(imported.daemon_gone())
        self.assertEqual(0, peer.finish()[0])

    def test_client_in_another_pid_namespace(self):
        prefix = _unshare_pid()
        if prefix is None:
            self.skipTest("unshare --pid --fork does not run here (needs root)")
        peer = Peer("batch-254", self.dir)
        code = ("import json, sys, engram_host\n"
                "with engram_host.connect(sys.argv[1]) as t:\n"
                "    print(json.dumps([t.daemon_pid, t.daemon.pid, t.daemon_gone()]))\n")
        env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(__file__), ".."))
        out = subprocess.run([*prefix, sys.executable, "-c", code, peer.socket], capture_output=True, text=True,
                             timeout=60, env=env)
        self.assertEqual(0, out.returncode, out.stderr)
        import json
        daemon_pid, welcome_pid, gone = json.loads(out.stdout.strip().splitlines()[-1])
        self.assertEqual(peer.proc.pid, welcome_pid)
        self.assertEqual(0, daemon_pid, "the daemon is not visible from the client's namespace")
        self.assertIsNone(gone)
        self.assertEqual(0, peer.finish()[0])


if __name__ == "__main__":
    unittest.main()
