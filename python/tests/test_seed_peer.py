"""A real exporter (`serve --seed-listen`) against conformance/seed_peer.py, a seeding requester written from
docs/seeding.md alone: the honest exchange (every table fetched and checked against the digest record), and each
limit of the document's table met by a hostile peer, each case a separate process. The daemon must refuse each as
the document says, keep serving, and hold no more fds afterwards than before."""

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))

from support import REPO, Daemon, generate, java_work_dir, run_cli, safetensors_tables  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "conformance"))
import seed_peer  # noqa: E402

SEED_PEER = os.path.join(REPO, "conformance", "seed_peer.py")
ROWS = 280_000   # each weight 68.4 MiB: more than one 64 MiB range


def setUpModule():
    global WORK, CKPT, RECORD, KEY, KEY_BYTES, PORT, DAEMON
    WORK = java_work_dir("engram-py-seed-")
    CKPT = generate(os.path.join(WORK, "ckpt"), rows=ROWS, layers="1,14")
    run_cli("inspect", "--write-digests", CKPT)
    RECORD = os.path.join(CKPT, "engram-digests.json")
    KEY = os.path.join(WORK, "seed.key")
    KEY_BYTES = os.urandom(32)
    with open(os.open(KEY, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(KEY_BYTES)
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


class MinuteLimitsTest(unittest.TestCase):
    """The exporter's two 60 s limits (docs/seeding.md, "Limits"), both at once (a minute in all): an authenticated
    peer that asks for nothing gets ERROR TIMED_OUT; one that asks for a range and never reads is closed at 60 s,
    having got only what the sockets held (before, the exporter queued its ERROR behind the range and held the
    connection until the peer read it all: 64 such peers would have held every place for ever)."""

    def test_an_idle_peer_and_one_that_does_not_read_are_ended_after_60_s(self):
        peer("fetch", RECORD)   # the exporter's CPU-side state made before the baseline
        before = daemon_fds()
        runs = {case: subprocess.Popen([sys.executable, SEED_PEER, f"127.0.0.1:{PORT}", KEY, case],
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for case in ("idle", "no-read")}
        outs = {case: p.communicate(timeout=120)[0].strip() for case, p in runs.items()}
        self.assertEqual(0, runs["idle"].returncode, outs["idle"])
        self.assertRegex(outs["idle"], r"^PASS idle: ERROR TIMED_OUT: sent no request for 60000 ms after (5[5-9]|6\d)\.\d s")
        self.assertEqual(0, runs["no-read"].returncode, outs["no-read"])
        self.assertRegex(outs["no-read"], r"^PASS no-read: (closed|reset .*) \d+ s after a range of 67108864 bytes")
        rc, out = peer("fetch", RECORD)
        self.assertEqual(0, rc, out)   # still serving, the same bytes
        for _ in range(50):
            if daemon_fds() <= before:
                break
            time.sleep(0.1)
        self.assertLessEqual(daemon_fds(), before,
                             f"the daemon holds more fds than before: {os.listdir(f'/proc/{DAEMON.pid}/fd')}")
        log = DAEMON.log()
        self.assertIn("refused: sent no request for 60000 ms", log)
        self.assertIn("refused: did not take a range of 67108864 bytes within 60000 ms", log)


class HostileExporter:
    """Exporters that do one thing wrong, on every connection, for a real daemon seeding from them
    (`serve --seed-from`), on ``listeners`` ports. They hold the key, and their MANIFEST lists the tables of
    ``checkpoint`` as its digest record gives them, unless the case is about the MANIFEST."""

    def __init__(self, case, checkpoint, listeners=1):
        self.case = case
        with open(os.path.join(checkpoint, "engram-digests.json")) as f:
            record = json.load(f)["tables"]
        sizes = {n: len(t[2]) for n, t in safetensors_tables([checkpoint]).items()}
        self.tables = [(n, sizes[n], int(record[n]["engram-digest-v1"], 16)) for n in sorted(record)]
        self.servers = []
        for _ in range(listeners):
            srv = socket.socket()
            srv.bind(("127.0.0.1", 0))
            srv.listen(64)
            self.servers.append(srv)
            threading.Thread(target=self.serve, args=(srv,), daemon=True).start()
        self.peers = ",".join(f"127.0.0.1:{srv.getsockname()[1]}" for srv in self.servers)

    def serve(self, srv):
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=self.one, args=(c,), daemon=True).start()

    def one(self, c):
        try:
            with c:
                c.settimeout(120)
                n = seed_peer.frame(c, seed_peer.HELLO, 56)
                hello = seed_peer.exact(c, n)
                nonce_c, id_c = hello[8:40], hello[40:56]
                if self.case == "error-injection":   # a line of its own and a terminal escape, in its ERROR
                    text = b"busy\n2026-01-01T00:00:00.000Z engram-host: ready: forged\x1b[2J"
                    seed_peer.send(c, seed_peer.ERROR, struct.pack("<HI", 3, len(text)) + text)
                    return
                nonce_s, id_s = os.urandom(32), os.urandom(16)
                proof_s, _ = seed_peer.proofs(KEY_BYTES, nonce_c, nonce_s, id_c, id_s)
                seed_peer.send(c, seed_peer.CHALLENGE, struct.pack("<HH", 1, 0) + nonce_s + id_s + proof_s)
                seed_peer.exact(c, seed_peer.frame(c, seed_peer.PROOF, 32))
                while True:   # a stream's connection asks for RANGEs without a MANIFEST_REQUEST first
                    t, _, _, n = struct.unpack("<BBHI", seed_peer.exact(c, 8))
                    if t == seed_peer.MANIFEST_REQUEST:
                        if not self.manifest(c):
                            return
                    elif t == seed_peer.RANGE and n == 16:
                        if not self.range(c, *struct.unpack("<IQI", seed_peer.exact(c, 16))):
                            return
                    else:
                        return
        except (seed_peer.Refused, OSError):
            pass

    def manifest(self, c):
        """Answers MANIFEST_REQUEST as the case says; False when the connection is to end."""
        if self.case == "big-manifest":   # announces one byte over the requester's bound, sends nothing
            c.sendall(seed_peer.header(seed_peer.MANIFEST, (16 << 20) + 1))
            time.sleep(2)
            return False
        if self.case == "full-manifests":   # 16 MiB each, on every port at once: the requester's heap is 160 MiB
            c.sendall(seed_peer.header(seed_peer.MANIFEST, 16 << 20) + bytes(32) + b"\xff" * ((16 << 20) - 33))
            time.sleep(1)   # every buffer the requester made for them is held meanwhile, all but one byte read
            c.sendall(b"\xff")
            time.sleep(2)
            return False
        if self.case == "trickled-manifest":   # a byte a second: the MANIFEST would never end
            c.sendall(seed_peer.header(seed_peer.MANIFEST, 4096))
            for _ in range(60):
                c.sendall(b"\0")
                time.sleep(1)
            return False
        body = bytes(32) + struct.pack("<I", len(self.tables))
        for name, size, digest in self.tables:
            b = name.encode()
            body += struct.pack("<I", len(b)) + b + struct.pack("<QQ", size, digest)
        seed_peer.send(c, seed_peer.MANIFEST, body)
        return True

    def range(self, c, table, offset, length):
        """Answers a RANGE as the case says; False when the connection is to end."""
        if self.case == "wrong-head":   # the DATA names the next offset, not the one asked for
            c.sendall(seed_peer.header(seed_peer.DATA, 12 + length) + struct.pack("<IQ", table, offset + 1))
            c.sendall(bytes(length))
            return True
        # trickled-data: the DATA's head, then a byte a second
        c.sendall(seed_peer.header(seed_peer.DATA, 12 + length) + struct.pack("<IQ", table, offset))
        for _ in range(120):
            c.sendall(b"\0")
            time.sleep(1)
        return False

    def close(self):
        for srv in self.servers:
            srv.close()


class HostileExporterTest(unittest.TestCase):
    """The requester's bounds (docs/seeding.md, "Limits": what a requester reads) against exporters that break them:
    the daemon loads every table from its disk instead, says why in one line, and serves the checkpoint's bytes."""

    @classmethod
    def setUpClass(cls):   # tables of 1 MiB and less: a range's deadline is 10 s and a second per MiB
        cls.small = generate(os.path.join(WORK, "small"), rows=4096, layers="1,14")
        run_cli("inspect", "--write-digests", cls.small)

    def seed_from(self, case, expect, listeners=1, within=60):
        ex = HostileExporter(case, self.small, listeners)
        try:
            t0 = time.monotonic()
            with Daemon(self.small, "--seed-from", ex.peers, "--seed-key", KEY, timeout=within) as d:
                ready = time.monotonic() - t0
                status = json.loads(run_cli("status", "--json", "--socket", d.socket).stdout)
                self.assertEqual("load", status["origin"]["how"], status["origin"])
                self.assertEqual(sum(t[1] for t in ex.tables), status["origin"]["checkpoint_bytes_read"])
                run_cli("verify", "--checkpoint", self.small, "--socket", d.socket)   # byte for byte, or it exits 1
                log = d.log()
        finally:
            ex.close()
        self.assertRegex(log, expect)
        return log, ready

    def test_an_error_cannot_write_a_line_of_its_own(self):
        log, _ = self.seed_from("error-injection", r"refused: BUSY busy\\n2026-01-01T00:00:00\.000Z engram-host: "
                                                   r"ready: forged\\u001b\[2J")
        self.assertNotIn("\x1b", log)
        self.assertFalse([line for line in log.splitlines() if "forged" in line and "refused" not in line], log)

    def test_a_manifest_over_its_bound_is_not_read(self):
        self.seed_from("big-manifest", r"sent a MANIFEST of 16777217 bytes, not 36 to 16777216")

    def test_twelve_full_manifests_at_once_do_not_fill_the_heap(self):
        # 12 x 16 MiB would be 192 MiB beside a 160 MiB heap (the daemon died of it before the budget); one at a time
        log, _ = self.seed_from("full-manifests", r"peer 127\.0\.0\.1:\d+: MANIFEST: ", listeners=12)
        self.assertNotIn("OutOfMemoryError", log)

    def test_a_trickled_manifest_ends_at_its_deadline(self):
        log, ready = self.seed_from("trickled-manifest", r"did not send 4096 bytes within 10000 ms \(\d+ arrived\)")
        self.assertLess(ready, 30, log)

    def test_a_trickled_range_ends_at_its_deadline(self):
        log, ready = self.seed_from("trickled-data", r"did not send \d+ bytes within 1[01]\d\d\d ms \(\d+ arrived\)")
        self.assertLess(ready, 40, log)

    def test_at_most_64_peers_are_asked(self):
        log, _ = self.seed_from("error-injection", r"seed: 70 peers listed; asking 64 of them, chosen at random",
                                listeners=70)
        self.assertEqual(64, log.count("refused: BUSY busy"), log)

    def test_data_for_another_range_is_not_taken(self):
        self.seed_from("wrong-head", r"sent table \d+ at \d+, not the range asked for")


if __name__ == "__main__":
    unittest.main()
