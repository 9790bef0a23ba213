"""The real daemon against docs/protocol.md, byte for byte: a client written from that document alone
(wireclient.py, standard library only, none of the engram_host package) sends well-formed and malformed frames to
``engram-host serve`` processes and checks every answer as the document states it: codes, fields, frame versions,
parts, fds, seals, digests, and whether the connection stays open."""

import hashlib
import json
import mmap
import os
import shutil
import struct
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))

import wireclient as w  # noqa: E402
from support import Daemon, generate, java_work_dir, table_names  # noqa: E402

T = w.T
MiB = 1 << 20


def many_tables(path: str, n: int) -> str:
    """A single-file checkpoint of n small tables with long names (so that STATUS and MANIFEST pass 1 MiB and go in
    parts), plus an empty table, a scalar, a packed sub-byte table and two names whose UTF-16 and code point orders
    differ."""
    tensors = [(f"t.{i:06d}." + "n" * 90, "U8", [16]) for i in range(n)]
    tensors += [("empty.a", "F32", [0, 4]), ("scalar.f64", "F64", []), ("f4.packed", "F4", [3, 6]),
                ("a\uFFFD", "U8", [3]), ("a\U0001F600", "U8", [5])]
    bits = {"U8": 8, "F32": 32, "F64": 64, "F4": 4}
    header, data = {}, bytearray()
    for i, (name, dtype, shape) in enumerate(tensors):
        numel = 1
        for d in shape:
            numel *= d
        nbytes = numel * bits[dtype] // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + nbytes]}
        data += bytes((i * 7 + k) & 0xFF for k in range(nbytes))
    h = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
    return path


def setUpModule():
    global WORK, DAEMON, QUICK, MANY
    WORK = java_work_dir("engram-py-wire-")
    os.chmod(WORK, 0o755)  # QUICK's socket directory is in it, reachable by the uid it admits
    ckpt = generate(os.path.join(WORK, "ck"), rows=1024, layers="0,1")
    # one daemon with the default limits; one with short deadlines, a per-uid limit of 2 and uid 65534 admitted;
    # one with many tables
    DAEMON = Daemon(ckpt, wait_ready=False)
    QUICK = Daemon(ckpt, "--hello-timeout-ms", "400", "--idle-timeout-ms", "700", "--request-timeout-ms", "400",
                   "--max-connections-per-uid", "2", "--allow-uid", "65534",
                   socket_path=os.path.join(WORK, "run", "d.sock"), wait_ready=False)
    MANY = Daemon(many_tables(os.path.join(WORK, "many"), 6000), wait_ready=False)
    for d in (DAEMON, QUICK, MANY):
        d.wait_ready()


def tearDownModule():
    for d in (DAEMON, QUICK, MANY):
        d.close()
    shutil.rmtree(WORK, ignore_errors=True)


def session(daemon, minv=1, maxv=2) -> w.Conn:
    c = w.Conn(daemon.socket)
    welcome = c.hello(minv, maxv)
    assert "code" not in welcome, welcome
    return c


def request(c: w.Conn, typ: int, body: bytes = b""):
    c.send(c.version, typ, body)
    return c.recv()


def raw(daemon, payload: bytes, header: bytes = None, fds=(), hello=None) -> w.Conn:
    c = w.Conn(daemon.socket)
    if hello:
        c.hello(*hello)
    try:
        w.send_msg(c.s, payload, fds=fds, header=header)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the daemon may refuse on the header alone and close before the payload is sent; its answer is queued
    return c


class WireTest(unittest.TestCase):
    def assertError(self, c: w.Conn, name: str, version: int = None, closes: bool = True, contains: str = None):
        e = c.recv_error()
        try:
            self.assertEqual(name, e["name"], e["message"])
            self.assertEqual(version or c.version, e["frame_version"])
            self.assertEqual(1 if name in ("NOT_READY", "BUSY") else 0, e["retryable"])
            self.assertNotIn("\n", e["message"])
            if contains:
                self.assertIn(contains, e["message"])
            self.assertEqual(closes, c.eof(0.5 if closes else 0.2), "connection closed" if not closes else "open")
        finally:
            c.close()
        return e


class HandshakeTest(WireTest):
    def test_version_negotiation(self):
        for (lo, hi), chosen in (((1, 1), 1), ((1, 2), 2), ((2, 2), 2), ((2, 9), 2), ((1, 65535), 2)):
            c = w.Conn(DAEMON.socket)
            welcome = c.hello(lo, hi)
            self.assertEqual(chosen, welcome["version"])
            self.assertEqual("uid" in welcome, chosen == 2)  # the uid is version 2 only, and matches SO_PEERCRED
            self.assertEqual((DAEMON.pid, "memfd", 1), (welcome["pid"], welcome["backend"], welcome["state"]))
            self.assertFalse(c.eof(0.1))
            c.close()
        self.assertError(raw(DAEMON, w.frame(1, T["HELLO"], w.hello_body(3, 9))), "UNSUPPORTED_VERSION", 1)
        self.assertError(raw(DAEMON, w.frame(1, T["HELLO"], w.hello_body(0, 2))), "BAD_REQUEST", 1)
        self.assertError(raw(DAEMON, w.frame(1, T["HELLO"], w.hello_body(2, 1))), "BAD_REQUEST", 1)

    def test_hello_must_be_first_exact_and_version_1(self):
        hello = w.hello_body()
        for payload in (w.frame(2, T["HELLO"], hello), w.frame(1, T["HELLO"], hello + b"x"),
                        w.frame(1, T["HELLO"], hello[:-1]), w.frame(1, T["HELLO"], w.hello_body(name=b"\xff")),
                        w.frame(1, T["STATUS"]), w.frame(1, T["BYE"]), w.frame(1, 99),
                        struct.pack("<IHH", 0x12345678, 1, 1) + hello, b"EGRM", b""):
            self.assertError(raw(DAEMON, payload), "BAD_REQUEST", 1)

    def test_hello_size_limit(self):
        c = w.Conn(DAEMON.socket)
        ok = w.frame(1, T["HELLO"], w.hello_body(name="a" * 4096))
        self.assertEqual(4114, len(ok))
        c.send(1, T["HELLO"], w.hello_body(name="a" * 4096))
        self.assertEqual(T["WELCOME"], c.recv()[1])
        c.close()
        self.assertError(raw(DAEMON, w.frame(1, T["HELLO"], w.hello_body(name="a" * 4097))), "BAD_REQUEST", 1,
                         contains="4114")
        self.assertError(raw(DAEMON, b"", header=struct.pack("<II", 0xFFFFFFFF, 0)), "BAD_REQUEST", 1)

    def test_a_client_sends_no_fds(self):
        hello = w.frame(1, T["HELLO"], w.hello_body())
        r, wr = os.pipe()
        try:
            self.assertError(raw(DAEMON, hello, fds=[r]), "BAD_REQUEST", 1)
            self.assertError(raw(DAEMON, hello, header=struct.pack("<II", len(hello), 1)), "BAD_REQUEST", 1)
            self.assertError(raw(DAEMON, hello, header=struct.pack("<II", len(hello), 0), fds=[r]), "BAD_REQUEST", 1)
        finally:
            os.close(r)
            os.close(wr)


class RequestTest(WireTest):
    def test_frames_after_welcome_are_in_the_chosen_version(self):
        self.assertError(raw(DAEMON, w.frame(1, T["STATUS"]), hello=(1, 2)), "BAD_REQUEST", 2)
        self.assertError(raw(DAEMON, w.frame(2, T["STATUS"]), hello=(1, 1)), "BAD_REQUEST", 1)
        c = session(DAEMON, 1, 1)
        ver, typ, body, fds = request(c, T["STATUS"])
        self.assertEqual((1, T["STATUS_REPLY"]), (ver, typ))
        self.assertEqual([1, 2], w.dec_status(body)["protocol"])
        c.close()

    def test_what_a_client_may_not_send(self):
        for typ in (T["HELLO"], T["WELCOME"], T["MANIFEST"], T["PART"], 12, 15, 17, 21, 22, 31, 32, 0xFFFF,
                    T["STATUS"] | 0x8000):
            self.assertError(raw(DAEMON, w.frame(2, typ), hello=(1, 2)), "BAD_REQUEST", 2)
        for typ in (T["STATUS"], T["STOP"], T["BYE"]):
            self.assertError(raw(DAEMON, w.frame(2, typ, b"x"), hello=(1, 2)), "BAD_REQUEST", 2)
        self.assertError(raw(DAEMON, b"", header=struct.pack("<II", 16842753, 0), hello=(1, 2)), "BAD_REQUEST", 2)

    def test_bye_before_import_closes_without_an_answer(self):
        c = session(DAEMON)
        c.send(2, T["BYE"])
        self.assertTrue(c.eof(1))
        c.close()

    def test_pipelined_requests_are_answered_in_order(self):
        def msg(v, t, b=b""):
            f = w.frame(v, t, b)
            return struct.pack("<II", len(f), 0) + f
        c = w.Conn(DAEMON.socket)
        c.s.sendall(msg(1, T["HELLO"], w.hello_body()) + msg(2, T["STATUS"]) + msg(2, T["STATUS"]))
        self.assertEqual(T["WELCOME"], c.recv()[1])
        c.version = 2
        self.assertEqual([T["STATUS_REPLY"]] * 2, [c.recv()[1], c.recv()[1]])
        c.close()

    def test_uids_not_admitted_and_stop_by_another_uid(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to act as another uid")

        def as_uid(uid, check):
            pid = os.fork()
            if pid == 0:
                code = 3
                try:
                    os.setgroups([])
                    os.setgid(uid)
                    os.setuid(uid)
                    code = 0 if check() else 1
                finally:
                    os._exit(code)
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

        def stranger():  # not admitted: NOT_ALLOWED before any HELLO, in version 1, then close
            c = w.Conn(QUICK.socket)
            e = c.recv_error()
            ok = (e["name"], e["frame_version"], e["retryable"], c.eof(0.5)) == ("NOT_ALLOWED", 1, 0, True)
            c.close()
            return ok

        def admitted():  # admitted, but STOP is refused with NOT_ALLOWED and the connection stays usable
            c = session(QUICK)
            c.send(2, T["STOP"])
            e = c.recv_error()
            ver, typ, body, fds = request(c, T["STATUS"])
            c.close()
            return e["name"] == "NOT_ALLOWED" and w.dec_status(body)["state"] == "ready"

        self.assertEqual(0, as_uid(65533, stranger))
        self.assertEqual(0, as_uid(65534, admitted))


class ImportTest(WireTest):
    def import_(self, c, **kw):
        ver, typ, body, fds = request(c, T["IMPORT"], w.import_body(**kw))
        if typ == T["MANIFEST"]:
            return w.dec_manifest(body, len(fds)), fds
        self.assertEqual(T["ERROR"], typ)
        return w.dec_error(body), fds

    def test_the_manifest_its_fds_and_the_bytes(self):
        for version in (1, 2):
            c = session(DAEMON, 1, version)
            m, fds = self.import_(c)
            try:
                self.assertEqual(hashlib.sha256(m["fingerprint"]).digest(), m["fp_sha"])
                fp = w.dec_fingerprint(m["fingerprint"])
                self.assertEqual(m["fingerprint"], w.enc_fingerprint(fp))  # canonical
                # generate's config.json names layers 0 and 1: the patterns are the selected tables' exact names
                self.assertEqual((1, 0, 1, "memfd", table_names((0, 1))),
                                 (fp["version"], fp["flags"], fp["layout"], fp["backend"], fp["patterns"]))
                maps = []
                for fd, region in zip(fds, m["regions"]):
                    self.assertEqual((0, -1), (region["kind"], region["device"]))
                    self.assertEqual(0, region["size"] % os.sysconf("SC_PAGE_SIZE"))
                    mm, seals = w.check_seals_and_map(fd, region["size"])
                    # the daemon seals WRITE (granted only once no writable mapping is left), not FUTURE_WRITE
                    self.assertEqual(w.F_SEAL_SEAL | w.F_SEAL_SHRINK | w.F_SEAL_GROW | w.F_SEAL_WRITE,
                                     seals & 0x1F)
                    with self.assertRaises(PermissionError):
                        mmap.mmap(fd, region["size"], mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                    with self.assertRaises(PermissionError):
                        os.ftruncate(fd, region["size"] * 2)
                    maps.append(mm)
                self.assertEqual([(t[0], t[1], t[2], t[3]) for t in fp["tables"]],
                                 [(t["name"], t["dtype"], t["shape"], t["bytes"]) for t in m["tables"]])
                for t in m["tables"]:
                    self.assertEqual(0, t["offset"] % os.sysconf("SC_PAGE_SIZE"))
                    self.assertLessEqual(t["offset"] + t["bytes"], m["regions"][t["region"]]["size"])
                    view = memoryview(maps[t["region"]])[t["offset"]:t["offset"] + t["bytes"]]
                    self.assertEqual(t["digest"], w.engram_digest(view), t["name"])
                    view.release()
                for mm in maps:
                    mm.close()
                # the connection is now a lease, listed by STATUS
                s = session(DAEMON)
                leases = w.dec_status(request(s, T["STATUS"])[2])["leases"]
                self.assertIn(os.getpid(), [lease["pid"] for lease in leases])
                s.close()
                c.send(version, T["BYE"])
                self.assertTrue(c.eof(1))
            finally:
                for fd in fds:
                    os.close(fd)
                c.close()

    def test_bad_imports(self):
        for kw in (dict(flags=1), dict(device=1024), dict(device=-2), dict(expectation=3)):
            self.assertError(raw(DAEMON, w.frame(2, T["IMPORT"], w.import_body(**kw)), hello=(1, 2)), "BAD_REQUEST")
        for body in (w.import_body()[:-1], w.import_body() + b"\0", struct.pack("<iiB", 0, -1, 1) + b"\0" * 31,
                     w.import_body(expectation=2, payload=b"EGFP" + b"\0" * 20),
                     w.import_body(expectation=2, payload=b"\1" * MiB)):
            self.assertError(raw(DAEMON, w.frame(2, T["IMPORT"], body), hello=(1, 2)), "BAD_REQUEST")

    def test_mismatches_leave_the_connection_usable(self):
        c = session(DAEMON)
        m, fds = self.import_(c)
        for fd in fds:
            os.close(fd)
        c.close()
        fp = w.dec_fingerprint(m["fingerprint"])
        c = session(DAEMON)
        e, _ = self.import_(c, expectation=1, payload=b"\x11" * 32)
        self.assertEqual(("FINGERPRINT_MISMATCH", 1, m["fingerprint"]),
                         (e["name"], len(e["details"]), e["daemon_fingerprint"]))
        many = dict(fp, tables=sorted(fp["tables"] + [(f"zz{i:04d}", "U8", [1], 1) for i in range(150)]))
        e, _ = self.import_(c, expectation=2, payload=w.enc_fingerprint(many))
        self.assertEqual(101, len(e["details"]))
        self.assertEqual("... and 50 more differences", e["details"][-1])
        large = dict(fp, tables=sorted(fp["tables"] + [(f"zz{i:06d}" + "x" * 100, "U8", [1], 1)
                                                       for i in range(9000)]))
        large_bytes = w.enc_fingerprint(large)
        self.assertGreater(len(large_bytes), MiB)
        e, _ = self.import_(c, expectation=2, payload=large_bytes)  # over 1 MiB: one line, not the list
        self.assertEqual(("FINGERPRINT_MISMATCH", 1), (e["name"], len(e["details"])))
        self.assertIn("files or tables differ", e["details"][0])
        large_other = w.enc_fingerprint(dict(large, backend="cuda-vmm"))
        e, _ = self.import_(c, expectation=2, payload=large_other)
        self.assertEqual(2, len(e["details"]), e["details"])
        self.assertIn("backend: expected 'cuda-vmm'", e["details"][0])
        for expectation in (dict(expectation=1, payload=m["fp_sha"]),
                            dict(expectation=2, payload=w.enc_fingerprint(dict(fp, backend="")))):
            c2 = session(DAEMON)
            m2, fds = self.import_(c2, **expectation)
            self.assertEqual(m["fp_sha"], m2["fp_sha"])
            for fd in fds:
                os.close(fd)
            c2.close()
        m2, fds = self.import_(c)  # still usable after four mismatches
        self.assertIn("tables", m2)
        for fd in fds:
            os.close(fd)
        c.close()

    def test_anything_but_bye_on_a_lease_ends_it_without_an_answer(self):
        for payload in (w.frame(2, T["STATUS"]), w.frame(2, T["BYE"], b"x"), w.frame(1, T["BYE"]),
                        w.frame(2, T["IMPORT"], w.import_body())):
            c = session(DAEMON)
            _, fds = self.import_(c)
            for fd in fds:
                os.close(fd)
            try:  # the daemon may close at the header already (payload_length not 8), before the payload is in
                w.send_msg(c.s, payload)
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.assertTrue(c.eof(2))
            c.close()


class PartsTest(WireTest):
    def test_long_frames_come_in_parts_in_version_2_and_whole_in_version_1(self):
        for version in (2, 1):
            c = session(MANY, 1, version)
            status = w.dec_status(request(c, T["STATUS"])[2])
            sizes = c.last_sizes
            if version == 2:
                self.assertGreater(len(sizes), 1)
                self.assertTrue(all(s == 1048584 for s in sizes[:-1]), sizes)
            else:
                self.assertEqual(1, len(sizes))
            ver, typ, body, fds = request(c, T["IMPORT"], w.import_body())
            self.assertEqual(T["MANIFEST"], typ)
            self.assertEqual(version == 2, len(c.last_sizes) > 1)
            m = w.dec_manifest(body, len(fds))
            for fd in fds:
                os.close(fd)
            names = [t["name"] for t in m["tables"]]
            self.assertEqual(names, [t["name"] for t in status["tables"]])
            # a structured expectation over 1 MiB (this daemon's record, any backend, other patterns, which a
            # comparison ignores and which take it past 1 MiB) matches as a short one does: its files and tables
            # are compared whole
            fp = w.dec_fingerprint(m["fingerprint"])
            big = w.enc_fingerprint(dict(fp, backend="", patterns=["*"] + [f"t.{i:06d}.*" for i in range(30000)]))
            self.assertGreater(len(big), MiB)
            c2 = session(MANY, 1, version)
            ver, typ, body, fds2 = request(c2, T["IMPORT"], w.import_body(expectation=2, payload=big))
            self.assertEqual(T["MANIFEST"], typ)
            for fd in fds2:
                os.close(fd)
            c2.close()
            # docs/protocol.md: the manifest lists host tables in code point order (UTF-8 byte order), the
            # fingerprint's order, where UTF-16 code unit order would differ for these two names
            host = [t["name"] for t in m["tables"] if t["device"] < 0]
            self.assertEqual(host, sorted(host, key=lambda n: n.encode()))
            fp_names = [t[0] for t in w.dec_fingerprint(m["fingerprint"])["tables"]]
            self.assertEqual(fp_names, sorted(fp_names, key=lambda n: n.encode()))
            self.assertLess(names.index("a\uFFFD"), names.index("a\U0001F600"))
            self.assertNotEqual(sorted(names, key=lambda n: n.encode()), sorted(names, key=lambda n: n.encode("utf-16-be")))
            empty = next(t for t in m["tables"] if t["name"] == "empty.a")
            self.assertEqual((-1, 0, -1, 0, 0xEF46DB3751D8E999),
                             (empty["region"], empty["offset"], empty["numa_node"], empty["bytes"], empty["digest"]))
            scalar = next(t for t in m["tables"] if t["name"] == "scalar.f64")
            self.assertEqual(([], 8), (scalar["shape"], scalar["bytes"]))
            self.assertEqual(9, next(t for t in m["tables"] if t["name"] == "f4.packed")["bytes"])
            c.close()


class LimitsTest(WireTest):
    def test_deadlines(self):
        c = w.Conn(QUICK.socket)
        self.assertError(c, "TIMED_OUT", 1, contains="--hello-timeout-ms")
        for version in (1, 2):
            self.assertError(session(QUICK, 1, version), "TIMED_OUT", version, contains="--idle-timeout-ms")
        c = session(QUICK)
        c.s.sendall(struct.pack("<II", 8, 0) + b"EG")
        self.assertError(c, "TIMED_OUT", 2, contains="--request-timeout-ms")

    def test_a_message_begun_on_a_lease_must_end_within_the_request_deadline(self):
        for partial in (b"\x08", struct.pack("<II", 8, 0) + b"\x0a"):  # part of a header; a BYE's header, half its frame
            c = session(QUICK)
            ver, typ, body, fds = request(c, T["IMPORT"], w.import_body())
            self.assertEqual(T["MANIFEST"], typ)
            for fd in fds:
                os.close(fd)
            t0 = time.monotonic()
            c.s.sendall(partial)
            self.assertTrue(c.eof(3), "the lease ends once the 400 ms request deadline runs out")
            self.assertGreaterEqual(time.monotonic() - t0, 0.3)
            c.close()
        s = w.dec_status(request(session(QUICK), T["STATUS"])[2])
        self.assertEqual([], s["leases"])

    def test_eviction_then_busy(self):
        a = w.Conn(QUICK.socket)  # no HELLO: evicted first
        time.sleep(0.05)
        b = session(QUICK)
        c = session(QUICK)
        self.assertError(a, "BUSY", 1, contains="evicted")
        d = session(QUICK)
        self.assertError(b, "BUSY", 2, contains="evicted")  # the oldest at rest, in its own version
        for lease in (c, d):
            ver, typ, body, fds = request(lease, T["IMPORT"], w.import_body())
            self.assertEqual(T["MANIFEST"], typ)
            for fd in fds:
                os.close(fd)
        e = self.assertError(w.Conn(QUICK.socket), "BUSY", 1, contains="--max-connections-per-uid 2")
        self.assertIn("none can be evicted", e["message"])  # leases never are
        c.close()
        d.close()

if __name__ == "__main__":
    unittest.main()
