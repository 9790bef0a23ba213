"""A real exporter (`serve --seed-listen`) against conformance/seed_peer.py, a seeding requester written from
docs/seeding.md alone: the honest exchange (every table fetched and checked against the digest record), and each
limit of the document's table met by a hostile peer, each case a separate process. The daemon must refuse each as
the document says, keep serving, and hold no more fds afterwards than before."""

import os
import shutil
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))

from support import REPO, Daemon, generate, java_work_dir, run_cli  # noqa: E402

SEED_PEER = os.path.join(REPO, "conformance", "seed_peer.py")
ROWS = 280_000   # each weight 68.4 MiB: more than one 64 MiB range


def setUpModule():
    global WORK, CKPT, RECORD, KEY, PORT, DAEMON
    WORK = java_work_dir("engram-py-seed-")
    CKPT = generate(os.path.join(WORK, "ckpt"), rows=ROWS, layers="1,14")
    run_cli("inspect", "--write-digests", CKPT)
    RECORD = os.path.join(CKPT, "engram-digests.json")
    KEY = os.path.join(WORK, "seed.key")
    with open(os.open(KEY, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(os.urandom(32))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        PORT = s.getsockname()[1]
    DAEMON = Daemon(CKPT, "--seed-listen", f"127.0.0.1:{PORT}", "--seed-key", KEY)


def tearDownModule():
    DAEMON.close()
    shutil.rmtree(WORK, ignore_errors=True)


def peer(case, *extra, timeout=60):
    p = subprocess.run([sys.executable, SEED_PEER, f"127.0.0.1:{PORT}", KEY, case, *extra], capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, (p.stdout + p.stderr).strip()


def daemon_fds():
    return len(os.listdir(f"/proc/{DAEMON.pid}/fd"))


class SeedPeerTest(unittest.TestCase):
    def passes(self, case, *extra, pattern=None):
        rc, out = peer(case, *extra)
        self.assertEqual(0, rc, out)
        self.assertTrue(out.startswith(f"PASS {case}: "), out)
        if pattern:
            self.assertRegex(out, pattern)
        return out

    def test_every_table_fetched_matches_the_record(self):
        self.passes("fetch", RECORD, pattern=r"4 tables, \d+ bytes, every sha256-tree-v1 the record's")

    def test_each_limit_refused_as_documented_and_nothing_left_behind(self):
        self.passes("fetch", RECORD)   # the exporter's CPU-side state made before the baseline
        before = daemon_fds()
        for case, pattern in (("wrong-proof", "NOT_AUTHENTICATED"), ("other-key", "does not verify"),
                              ("oversized", "BAD_REQUEST: HELLO of 1073741824 bytes"),
                              ("reserved", "BAD_REQUEST"), ("bad-magic", "BAD_REQUEST"),
                              ("bad-version", "BAD_REQUEST"), ("early-range", "BAD_REQUEST: expected PROOF"),
                              ("bad-ranges", r"BAD_REQUEST: RANGE of table 4: .*RANGE of table 'layers\."),
                              ("ahead", "five at once answered in order; six at once: "
                                        "ERROR BAD_REQUEST: sent more than 128 bytes"),
                              ("silent", r"TIMED_OUT.* after [4-9]\.\d s"),
                              ("busy", "BUSY.*an honest peer served after the 17 closed")):
            with self.subTest(case=case):
                self.passes(case, pattern=pattern)
        self.passes("fetch", RECORD)   # still serving, the same bytes
        for _ in range(50):   # each refused connection's fd closed
            if daemon_fds() <= before:
                break
            time.sleep(0.1)
        self.assertLessEqual(daemon_fds(), before,
                             f"the daemon holds more fds than before: {os.listdir(f'/proc/{DAEMON.pid}/fd')}")
        self.assertIsNone(DAEMON.proc.poll(), DAEMON.log()[-2000:])


if __name__ == "__main__":
    unittest.main()
