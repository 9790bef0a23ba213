"""The client against conformance/protocol_peer.py, a scripted daemon side of docs/protocol.md: the paths the real
daemon cannot be made to take cheaply (hundreds of fds over fillers, parts, every error code, malformed frames,
memfds without seals). Each case of conformance/cases.json is a separate peer process; the Java and C clients run
the same cases."""

import os
import re
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
from support import (NOBODY, Peer, conformance_cases, fd_count, fill, memfd_mappings, protocol_spec,  # noqa: E402
                     run_python_cli)

PAGE = os.sysconf("SC_PAGE_SIZE")
AS_NOBODY = ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups")


def requirement_unmet(requires):
    """Why a case's "requires" cannot be met here, or None."""
    if requires is None:
        return None
    if requires == "another-uid":
        return None if os.geteuid() == 0 and shutil.which("setpriv") else "needs root and setpriv to run a peer as another uid"
    if requires == "not-uid-4242":
        return "the peer claims uid 4242, this process's own" if os.geteuid() == 4242 else None
    return f"unknown requirement {requires!r}"


class ConformanceCasesTest(unittest.TestCase):
    """Every case of conformance/cases.json: the peer does what the case says, and this client accepts it or
    refuses it as the case's "python" entry says, leaving no fd and no mapping behind."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="engram-py-peer-")
        os.chmod(self.dir, 0o777)  # a peer of another uid binds its socket here
        self.retryable = {e["code"]: e["retryable"] for e in protocol_spec()["error_codes"]}

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_case(self, case):
        mine = case.get("python")
        if case["outcome"] == "refused" and not (mine and ("says" in mine or "is" in mine)):
            self.fail(f"{case['name']}: cases.json gives the Python client no expectation and no 'skip' reason")
        unmet = requirement_unmet(case.get("requires"))
        if unmet:
            self.skipTest(unmet)
        options = dict(case.get("options", {}))
        kw = {}
        if "wait_ms" in options:
            kw["wait"] = options["wait_ms"] / 1000
        if options.get("accept_future_write_seal"):
            kw["accept_future_write_seal"] = True
        if "daemon_uids" in options:
            kw["daemon_uid"] = [int(fill(str(u))) for u in options["daemon_uids"]]
        kw.update((mine or {}).get("options", {}))  # "tables": this client attaches every table, refused all the same
        fds, mappings = fd_count(), memfd_mappings()
        peer = Peer(case.get("peer", case["name"]), self.dir,
                    prefix=AS_NOBODY if case.get("requires") == "another-uid" else ())
        t0 = time.monotonic()
        try:
            if case["outcome"] == "accepted":
                self.accepted(case, peer, kw, mappings)
            else:
                self.refused(case, mine, peer, kw)
            took = time.monotonic() - t0
        finally:
            rc, out = peer.finish()
        if "within_s" in case:
            self.assertLess(took, case["within_s"], f"{case['name']}: the client took {took:.1f} s")
        self.assertEqual(0, rc, f"{case['name']}: the peer failed: {out}")
        if "peer_says" in case:
            self.assertRegex(out, case["peer_says"])
        self.assertEqual(mappings, memfd_mappings(), f"{case['name']}: a mapping was left")
        self.assertEqual(fds, fd_count(), f"{case['name']}: an fd was left open")

    def accepted(self, case, peer, kw, mappings):
        want = case["accepted"]
        imported = engram_host.connect(peer.socket, **kw)
        with imported:
            self.assertEqual(want["tables"], len(imported.tables))
            self.assertEqual(want["regions"], memfd_mappings() - mappings, "one mapping a region")
            self.assertEqual(want["regions"] * PAGE, sum(t.nbytes for t in imported.tables.values()))
            self.assertEqual(want["protocol"], imported.daemon.version)
            for t in imported.tables.values():  # every byte readable through its mapping
                self.assertEqual(t.nbytes, len(bytes(t.buffer())))
        self.assertTrue(imported.memory_freed)

    def refused(self, case, mine, peer, kw):
        error = case.get("error")
        if "raises" in mine:
            cls = getattr(E, mine["raises"])
        elif error:
            cls = E.BY_CODE.get(error["code"], E.EngramHostError)
        else:
            cls = E.EngramHostError
        with self.assertRaises(E.EngramHostError) as cm:
            engram_host.connect(peer.socket, **kw).close()
        e, text = cm.exception, str(cm.exception)
        self.assertIs(cls, type(e), f"{case['name']}: {type(e).__name__}: {text}")
        if "is" in mine:
            self.assertEqual(mine["is"], text)
        for pattern in mine.get("says", ()):
            self.assertTrue(re.search(fill(pattern, peer.socket), text, re.M), f"/{pattern}/ not in: {text}")
        if error:
            self.assertEqual(error["code"], e.code)
            self.assertEqual(self.retryable.get(error["code"], False), e.retryable)
            if "details" in error:
                self.assertEqual(tuple(error["details"]), e.details)
            if "detail_count" in error:
                self.assertEqual(error["detail_count"], len(e.details))
        for name, value in mine.get("attrs", {}).items():
            self.assertEqual(value, getattr(e, name))
        for name, n in mine.get("lengths", {}).items():
            self.assertEqual(n, len(getattr(e, name)))


def _add_cases():
    """One test a case (test_case_<name>), so that each passes, fails or skips on its own line; a case whose "python"
    says "skip" is not one for this client (its reason is in cases.json): no test, not a skip."""
    for case in conformance_cases():
        if "skip" in (case.get("python") or {}):
            continue
        name = "test_case_" + re.sub(r"\W", "_", case["name"])
        assert not hasattr(ConformanceCasesTest, name), f"cases.json: {case['name']} twice"
        setattr(ConformanceCasesTest, name, lambda self, case=case: self.run_case(case))


_add_cases()


class PythonCliTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="engram-py-peer-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_future_write_only_when_asked(self):
        for flag, rc in (((), 1), (("--accept-future-write-seal",), 0)):  # the command line as the Java and C ones
            peer = Peer("future-write", self.dir)
            p = run_python_cli("import", "--socket", peer.socket, *flag)
            self.assertEqual(rc, p.returncode, p.stderr)
            if rc:
                self.assertIn("FUTURE_WRITE", p.stderr)
            peer.finish()


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
