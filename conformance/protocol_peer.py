#!/usr/bin/env python3
"""A scripted daemon side of docs/protocol.md (versions 2 and 1), for the paths of engram-attach that the real
daemon cannot be made to take cheaply: a MANIFEST of more than 253 fds (the daemon would need >= 254 regions of
>= 64 MiB), a MANIFEST sent in PARTs, refusals before HELLO, memfds without seals, and malformed answers.
Written from the document, like the client.

Usage: protocol_peer.py SOCKET CASE   (serves one connection, then exits; 0 when the client behaved)

CASE is one of the peer scenarios conformance/cases.json names (each case's "peer", else its "name"); the peer
refuses any other. The same file says what each case expects of a client, and the three clients' runners
(HostileDaemonTest, python/tests/test_peer.py, native/c/peer_cases.py) iterate it. After a MANIFEST of a scenario
that some case there accepts, the peer reads on (a BYE may follow); after any other answer it ends the connection.

The peer chooses version 2 unless the case starts with 'v1-'. It answers with uid = its own euid (run it as
another user, e.g. under setpriv, to be a daemon the client must refuse).
"""
import errno
import json
import fcntl
import hashlib
import mmap
import os
import socket
import struct
import sys
import time

MAGIC, BATCH = 0x4D524745, 253
HELLO, WELCOME, IMPORT, MANIFEST, ERROR, BYE, PART = 1, 2, 3, 4, 9, 10, 11
CONTINUED = 0x8000
PIECE = 1 << 20  # version 2: the most body bytes in one message
PAGE = os.sysconf('SC_PAGE_SIZE')
VMM_GRANULE = 2 << 20  # the CUDA allocation granularity the daemon's cuda-vmm regions are multiples of
F_ADD_SEALS, F_GET_SEALS = 1033, 1034
SEAL, SHRINK, GROW, WRITE, FUTURE_WRITE = 0x1, 0x2, 0x4, 0x8, 0x10
DAEMON_SEALS = SEAL | SHRINK | GROW | WRITE  # what the daemon sets
OLD_SEALS = SEAL | SHRINK | GROW | FUTURE_WRITE  # what builds before WRITE set

VERSION = 2  # the version this connection uses once WELCOME has chosen it (main sets it)

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'cases.json')


def scenarios():
    """The scenarios conformance/cases.json names, and those of them that some case accepts."""
    with open(CASES) as f:
        cases = json.load(f)['cases']
    named = {c.get('peer', c['name']) for c in cases}
    accepted = {c.get('peer', c['name']) for c in cases if c['outcome'] == 'accepted'}
    return named, accepted


SCENARIOS, ACCEPTED = scenarios()


def frame(mtype, body, version=None, magic=MAGIC):
    return struct.pack('<IHH', magic, VERSION if version is None else version, mtype) + body


def str16(s):
    b = s.encode()
    return struct.pack('<H', len(b)) + b


def str32(s):
    b = s.encode()
    return struct.pack('<I', len(b)) + b


def send(conn, payload, fds=(), fillers=None, fd_count=None):
    """Header + payload with the first 253 fds, then one 0xFD filler per further batch of 253."""
    fds = list(fds)
    count = len(fds) if fd_count is None else fd_count
    data = struct.pack('<II', len(payload), count) + payload
    if fds[:BATCH]:
        sent = socket.send_fds(conn, [data], fds[:BATCH])  # one sendmsg: the fds ride on its first byte
        if sent < len(data):
            conn.sendall(data[sent:])
    else:
        conn.sendall(data)
    rest = fds[BATCH:]
    for i in range(0, len(rest), BATCH):
        filler = fillers[i // BATCH] if fillers else b'\xfd'
        socket.send_fds(conn, [filler], rest[i:i + BATCH])


def send_parts(conn, whole, fds=()):
    """Version 2, "Parts": a frame whose body is over 1 MiB as the first 1 MiB (type | 0x8000, all the fds), then
    PARTs of at most 1 MiB, continued but the last."""
    header, body = whole[:8], whole[8:]
    assert len(body) > PIECE, 'no parts needed'
    magic, version, mtype = struct.unpack('<IHH', header)
    send(conn, struct.pack('<IHH', magic, version, mtype | CONTINUED) + body[:PIECE], fds)
    pos = PIECE
    while pos < len(body):
        piece = body[pos:pos + PIECE]
        pos += len(piece)
        send(conn, frame(PART | (CONTINUED if pos < len(body) else 0), piece))


def recv_exact(conn, n):
    data = b''
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def recv(conn, version):
    """One client message: (type, body), or None at EOF. Clients send no fds; every frame carries `version`."""
    header = recv_exact(conn, 8)
    if header is None:
        return None
    length, count = struct.unpack('<II', header)
    assert count == 0, f'client sent fd_count {count}'
    payload = recv_exact(conn, length)
    magic, v, mtype = struct.unpack('<IHH', payload[:8])
    assert magic == MAGIC and v == version, f'frame type {mtype}: magic {magic:#x}, version {v}, expected {version}'
    return mtype, payload[8:]


def manifest(regions, tables, extra=b'', fingerprint=b'EGFP', version=None, sha=None):
    body = [sha if sha is not None else hashlib.sha256(fingerprint).digest(), struct.pack('<I', len(fingerprint)), fingerprint,
            struct.pack('<I', len(regions))]
    for kind, size, numa, device in regions:
        body.append(struct.pack('<BQii', kind, size, numa, device))
    body.append(struct.pack('<I', len(tables)))
    for name, dtype, shape, nbytes, region, offset, kind in tables:
        body += [str16(name), str16(dtype), struct.pack('<B', len(shape))]
        body += [struct.pack('<q', d) for d in shape]
        body.append(struct.pack('<QiQQBii', nbytes, region, offset, 0, kind, 0, -1))
    return frame(MANIFEST, b''.join(body) + extra, version)


def error(code, retryable, message, details=(), fingerprint=b'', version=None):
    body = struct.pack('<HB', code, retryable) + str32(message) + struct.pack('<I', len(details))
    body += b''.join(str32(d) for d in details) + struct.pack('<I', len(fingerprint)) + fingerprint
    return frame(ERROR, body, version)


def memfds(n, size=PAGE, seals=DAEMON_SEALS):
    """n memfds of size bytes, each sealed with `seals` (None: created without MFD_ALLOW_SEALING)."""
    fds = []
    for i in range(n):
        fd = os.memfd_create(f'peer.{i}', os.MFD_CLOEXEC | (0 if seals is None else os.MFD_ALLOW_SEALING))
        os.ftruncate(fd, size)
        if seals:
            fcntl.fcntl(fd, F_ADD_SEALS, seals)
        fds.append(fd)
    return fds


def regular_file(near):
    """An fd of a file that is no memfd: F_GET_SEALS fails with EINVAL (not on tmpfs, whose files have seals)."""
    for d in (os.path.dirname(os.path.abspath(near)), os.path.dirname(os.path.abspath(__file__)), '/var/tmp', '/tmp'):
        path = os.path.join(d, f'.protocol_peer.{os.getpid()}')
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError:
            continue
        os.unlink(path)
        os.ftruncate(fd, PAGE)
        try:
            fcntl.fcntl(fd, F_GET_SEALS)
        except OSError as e:
            if e.errno == errno.EINVAL:
                return fd
        os.close(fd)
    raise SystemExit('protocol_peer: found no directory whose files F_GET_SEALS refuses (all tmpfs?)')


def regions_and_tables(n, size=PAGE):
    regions = [(0, size, 0, -1)] * n
    tables = [(f't{i}', 'U8', [size], size, i, 0, 0) for i in range(n)]
    return regions, tables


def hold_open(conn, seconds):
    """Keeps the connection open until the client closes it, or for `seconds` at most."""
    conn.settimeout(seconds)
    try:
        while conn.recv(4096):
            pass
    except (socket.timeout, ConnectionResetError):
        pass


def answer(conn, case, path):
    """Answers one IMPORT; returns False when the connection must end (an error answer)."""
    one = regions_and_tables(1)
    if case.startswith('batch-') or case.startswith('v1-batch-'):
        n = int(case.split('-')[-1])
        send(conn, manifest(*regions_and_tables(n)), memfds(n))
    elif case == 'parts-520':  # a MANIFEST of ~2.6 MiB: three messages, the fds on the first, pieces cut inside tables
        regions = [(0, PAGE, 0, -1)] * 520
        tables = [(f'table.{i:04d}.' + 'x' * 3000, 'U8', [PAGE], PAGE, i, 0, 0) for i in range(520)]
        send_parts(conn, manifest(regions, tables, fingerprint=b'F' * 1000000), memfds(520))
    elif case == 'parts-error':  # a mismatch with a fingerprint over 1 MiB comes in parts too
        send_parts(conn, error(4, 0, 'fingerprint mismatch', ['table t: bytes 1 != 2'], fingerprint=b'P' * 1500000))
    elif case == 'part-orphan':
        send(conn, frame(PART, b'stray piece'))
    elif case == 'part-fds':  # a PART that carries an fd
        whole = manifest(*regions_and_tables(1), fingerprint=b'F' * (PIECE + 100))
        send(conn, whole[:4] + struct.pack('<HH', VERSION, MANIFEST | CONTINUED) + whole[8:8 + PIECE], memfds(1))
        send(conn, frame(PART, whole[8 + PIECE:]), memfds(1), fd_count=0)  # the fd rides on the header, uncounted
    elif case == 'part-interrupted':  # a continued MANIFEST, then an ERROR where its PART was due
        whole = manifest(*regions_and_tables(1), fingerprint=b'F' * (PIECE + 100))
        send(conn, whole[:4] + struct.pack('<HH', VERSION, MANIFEST | CONTINUED) + whole[8:8 + PIECE], memfds(1))
        send(conn, error(7, 0, 'oops'))
    elif case == 'part-over-1gib':  # continued PARTs past 1 GiB; the client gives up and closes
        whole = manifest(*regions_and_tables(1), fingerprint=b'F' * (PIECE + 100))
        send(conn, whole[:4] + struct.pack('<HH', VERSION, MANIFEST | CONTINUED) + whole[8:8 + PIECE], memfds(1))
        piece = frame(PART | CONTINUED, b'G' * PIECE)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 << 20)  # fewer round trips: 1 GiB takes seconds
        try:
            for _ in range(1100):
                send(conn, piece)
        except (BrokenPipeError, ConnectionResetError):
            pass
    elif case == 'part-eof':  # the connection ends before the last PART
        whole = manifest(*regions_and_tables(1), fingerprint=b'F' * (PIECE + 100))
        send(conn, whole[:4] + struct.pack('<HH', VERSION, MANIFEST | CONTINUED) + whole[8:8 + PIECE], memfds(1))
        conn.sendall(struct.pack('<II', 108, 0) + frame(PART, b'short'))
    elif case == 'wrong-version-after':  # version 2 chosen, the MANIFEST encoded as version 1
        send(conn, manifest(*one, version=1), memfds(1))
    elif case == 'bad-filler':
        send(conn, manifest(*regions_and_tables(300)), memfds(300), fillers=[b'\x00'])
    elif case == 'empty-filler':  # fd_count 300, 253 fds, then a filler with none
        send(conn, manifest(*regions_and_tables(300)), memfds(253), fd_count=300)
        conn.sendall(b'\xfd')
    elif case == 'count-mismatch':
        regions, tables = regions_and_tables(3)
        send(conn, manifest(regions, tables), memfds(2))
    elif case == 'outside-region':
        send(conn, manifest([(0, PAGE, 0, -1)], [('t', 'U8', [PAGE - 96], PAGE - 96, 0, 100, 0)]), memfds(1))
    elif case == 'span-memfd':  # a memfd table running on into the next region: only kind 2 tables span regions
        send(conn, manifest([(0, PAGE, 0, -1)] * 2, [('t', 'U8', [2 * PAGE], 2 * PAGE, 0, 0, 0)]), memfds(2))
    elif case == 'span-past-end':  # a kind 2 table of 5 MiB over a run of two 2 MiB regions, the last ones
        send(conn, manifest([(2, VMM_GRANULE, 0, -1)] * 2, [('t', 'U8', [5 << 20], 5 << 20, 0, 0, 2)]),
             memfds(2, size=VMM_GRANULE))
    elif case == 'span-node':  # a kind 2 table over two regions, the second on another node
        send(conn, manifest([(2, VMM_GRANULE, 0, -1), (2, VMM_GRANULE, 1, -1)],
                            [('t', 'U8', [4 << 20], 4 << 20, 0, 0, 2)]), memfds(2, size=VMM_GRANULE))
    elif case == 'span-kind':  # a kind 2 table running on into a memfd region
        send(conn, manifest([(2, VMM_GRANULE, 0, -1), (0, VMM_GRANULE, 0, -1)],
                            [('t', 'U8', [4 << 20], 4 << 20, 0, 0, 2)]), memfds(2, size=VMM_GRANULE))
    elif case == 'wrong-bytes':
        send(conn, manifest([(0, PAGE, 0, -1)], [('t', 'F16', [100], 100, 0, 0, 0)]), memfds(1))
    elif case == 'huge-shape':  # F8 [2^40, 256], its bytes right for the shape, in a region of one page
        send(conn, manifest([(0, PAGE, 0, -1)], [('t', 'F8_E4M3', [1 << 40, 256], 1 << 48, 0, 0, 0)]), memfds(1))
    elif case == 'bad-fingerprint-sha':  # fingerprint_sha256 is not the SHA-256 of the fingerprint beside it
        send(conn, manifest(*one, sha=b'\x00' * 32), memfds(1))
    elif case == 'unknown-dtype':
        send(conn, manifest([(0, PAGE, 0, -1)], [('t', 'F9_E9M9', [PAGE], PAGE, 0, 0, 0)]), memfds(1))
    elif case == 'duplicate-name':
        send(conn, manifest([(0, PAGE, 0, -1)], [('t', 'U8', [16], 16, 0, 0, 0), ('t', 'U8', [16], 16, 0, 16, 0)]),
             memfds(1))
    elif case == 'control-name':  # a table name that would start a line of its own and reach the terminal
        send(conn, manifest([(0, PAGE, 0, -1)], [('t\n2026 forged\x1b[2J', 'U8', [16], 16, 0, 0, 0)]), memfds(1))
    elif case == 'control-dtype':  # a dtype that would reach the terminal, in the message that refuses it
        send(conn, manifest([(0, PAGE, 0, -1)], [('t', 'U8\x1b[2J', [16], 16, 0, 0, 0)]), memfds(1))
    elif case == 'kind-mismatch':  # a table that says memfd-hugetlb in a memfd region
        send(conn, manifest([(0, PAGE, 0, -1)], [('t', 'U8', [PAGE], PAGE, 0, 0, 1)]), memfds(1))
    elif case == 'fewer-fds':  # the header announces 2 fds, 1 rides on it, and no filler follows
        send(conn, manifest(*regions_and_tables(2)), memfds(1), fd_count=2)
        hold_open(conn, 5)  # the client must tell from the count alone, not from the connection's end
    elif case == 'slow-parts':  # a continued MANIFEST, then a one-byte PART every 2 s: each in time, the whole not
        whole = manifest(*regions_and_tables(1), fingerprint=b'F' * (PIECE + 100))
        send(conn, whole[:4] + struct.pack('<HH', VERSION, MANIFEST | CONTINUED) + whole[8:8 + PIECE], memfds(1))
        rest = whole[8 + PIECE:]
        try:
            for i in range(len(rest) - 1):
                time.sleep(2)
                send(conn, frame(PART | CONTINUED, rest[i:i + 1]))
            send(conn, frame(PART, rest[-1:]))
        except (BrokenPipeError, ConnectionResetError):
            pass
    elif case == 'future-write':  # sealed as builds before WRITE sealed: FUTURE_WRITE, after a writable mapping
        fd = os.memfd_create('peer.0', os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, PAGE)
        writable = mmap.mmap(fd, PAGE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        fcntl.fcntl(fd, F_ADD_SEALS, OLD_SEALS)
        send(conn, manifest(*one), [fd])
        writable[0] = 0x5A  # the bytes change under a client that took FUTURE_WRITE for immutable
    elif case == 'wrong-size':  # the manifest says two pages, the memfd holds one
        send(conn, manifest([(0, 2 * PAGE, 0, -1)], []), memfds(1))
    elif case == 'unsealed':  # memfd_create without MFD_ALLOW_SEALING: F_GET_SEALS says SEAL only
        send(conn, manifest(*one), memfds(1, seals=None))
    elif case == 'some-seals':  # SHRINK and GROW, neither SEAL nor a write seal
        send(conn, manifest(*one), memfds(1, seals=SHRINK | GROW))
    elif case == 'no-seal-seal':  # everything but SEAL: more seals (even removing none) could still be added
        send(conn, manifest(*one), memfds(1, seals=SHRINK | GROW | FUTURE_WRITE))
    elif case == 'select-unsealed':  # t0's region sealed, t1's not: a client attaching t0 alone must refuse it too
        send(conn, manifest(*regions_and_tables(2)), memfds(1) + memfds(1, seals=None))
    elif case == 'select-outside':  # t0 sound, t1 outside its region: refused by a client attaching t0 alone too
        send(conn, manifest([(0, PAGE, 0, -1)] * 2, [('t0', 'U8', [PAGE], PAGE, 0, 0, 0),
                                                      ('t1', 'U8', [PAGE - 96], PAGE - 96, 1, 100, 0)]), memfds(2))
    elif case == 'sealed-write':  # F_SEAL_WRITE instead of FUTURE_WRITE is as good
        send(conn, manifest(*regions_and_tables(2)), memfds(2, seals=SEAL | SHRINK | GROW | WRITE))
    elif case == 'regular-file':
        send(conn, manifest(*one), [regular_file(path)])
    elif case == 'trailing':
        send(conn, manifest(*one, extra=b'\0'), memfds(1))
    elif case == 'bad-magic':
        send(conn, frame(MANIFEST, b'', magic=0x12345678))
    elif case == 'mismatch':
        send(conn, error(4, 0, 'fingerprint mismatch', ['table t: bytes 1 != 2', 'backend: memfd != cuda-vmm']))
    elif case == 'mismatch-101':  # the most details a mismatch has
        send(conn, error(4, 0, 'fingerprint mismatch', [f'table t{i}: missing' for i in range(100)]
                         + ['... and 7 more differences']))
    elif case == 'too-many-details':
        send(conn, error(4, 0, 'fingerprint mismatch', [f'table t{i}: missing' for i in range(102)]))
    elif case == 'control-chars':  # a daemon's words that would start lines of their own and reach the terminal
        send(conn, error(7, 0, 'internal\n2026-01-01T00:00:00.000Z engram-host: forged\x1b[2J',
                         ['detail\rforged\u2028line\x85end']))
    elif case == 'long-message':
        send(conn, error(7, 0, 'x' * 4097))
    elif case == 'unknown-error':
        send(conn, error(42, 0, 'a code from a later daemon'))
    elif case == 'timed-out':
        send(conn, error(10, 0, 'request timeout: 10 s from the first byte of a request to its last'))
    elif case == 'not-ready' or case == 'v1-not-ready':
        send(conn, error(3, 1, 'still loading 40%'))
        return True
    elif case == 'stopping':  # the first daemon of stopping-restart, as a daemon that stops answers
        send(conn, error(6, 0, 'daemon is stopping'))
    elif case == 'restarted':  # its successor
        send(conn, manifest(*regions_and_tables(2)), memfds(2))
        return True
    elif case.startswith('error-'):  # error-CODE: an ERROR of that code, e.g. error-6 (STOPPING)
        code = int(case.split('-')[1])
        send(conn, error(code, 1 if code in (3, 9) else 0, f'scripted error {code}', [f'detail of {code}']))
    elif case == 'eof':
        send(conn, manifest(*regions_and_tables(300)), memfds(253), fd_count=300)
    elif case == 'region-kind':  # a region of kind 4, which no daemon sends
        send(conn, manifest([(4, PAGE, 0, -1)], []), memfds(1))
    elif case == 'region-device':  # a memfd region that names a GPU: host regions carry device -1
        send(conn, manifest([(0, PAGE, 0, 3)], []), memfds(1))
    else:
        raise SystemExit(f'protocol_peer: unknown case {case}')
    return case in ACCEPTED


# Cases the connection ends in before an IMPORT: the peer's side of them.
BEFORE_HELLO = {  # an ERROR at accept, encoded as version 1, then close without reading
    'busy-before-hello': (9, 1, 'connection limit: --max-connections-per-uid 1024 reached'),
    'not-allowed-before-hello': (5, 0, 'uid 4242 is not admitted (--allow-uid)'),
    'v2-error-before-hello': (9, 1, 'encoded as version 2 though no version is chosen yet'),
}


def welcome(case, version):
    chosen = {'bad-version': 3, 'bad-version-body': 3}.get(case, version)
    body = struct.pack('<Hi', chosen, os.getpid()) + str16('peer') + str16('memfd') + str16('peer') + b'\1'
    if chosen >= 2:
        body += struct.pack('<I', 4242 if case == 'welcome-uid' and os.geteuid() != 4242 else os.geteuid())
    header_version = {'welcome-header-version': 1, 'bad-version-body': 2}.get(case, chosen)
    return frame(WELCOME, body, header_version)


def bench_peer(conn):
    """Plays the JMH side of `engram-attach --bench-peer` (jmh/.../CPeer.java), which connects to this socket: PING,
    ATTACH of a memfd (kind 0, no flags: no GPU needed), RELEASE, then EOF, on which the C peer exits 0."""
    def request(op, kind=0, flags=0, node=0, size=0, fds=()):
        send(conn, struct.pack('<IIIiQ', op, kind, flags, node, size), fds)
        length, count = struct.unpack('<II', recv_exact(conn, 8))
        reply = recv_exact(conn, length).decode()
        assert count == 0 and reply.startswith('{"op":'), (count, reply)
        return reply
    assert request(4) == '{"op":"ping"}'
    assert '"mmap_ms":' in request(2, 0, 0, -1, 2 * PAGE, memfds(1, 2 * PAGE))
    assert '"release_ms":' in request(3)
    conn.shutdown(socket.SHUT_WR)
    assert recv_exact(conn, 1) is None, 'the C peer sent more'


def main():
    global VERSION
    path, case = sys.argv[1], sys.argv[2]
    if case not in SCENARIOS:
        raise SystemExit(f'protocol_peer: {case} is no scenario of {CASES}: add a case there that names it')
    listener = listen(path)
    conn, _ = listener.accept()
    conn.settimeout(20)
    if case == 'stopping-restart':
        # a restart without systemd's fd store: the first daemon answers the IMPORT with STOPPING and goes, its
        # socket file with it; 300 ms later its successor binds the path again and serves
        first = session(conn, 'stopping', path)
        conn.close()
        listener.close()
        os.unlink(path)
        time.sleep(0.3)
        listener = listen(path)
        conn, _ = listener.accept()
        conn.settimeout(20)
        print(f'protocol_peer: {case}: first daemon {first}; successor {session(conn, "restarted", path)}')
        return
    if case == 'bench-peer':
        bench_peer(conn)
        print(f'protocol_peer: {case}: PING, ATTACH, RELEASE answered')
        return
    if case == 'long-before-hello':  # an ERROR at accept of ~82 KB, over the 65,536 bytes allowed before a version
        try:
            send(conn, error(9, 1, 'busy', ['x' * 4096] * 20, version=1))
        except (BrokenPipeError, ConnectionResetError):
            pass
        conn.close()
        print(f'protocol_peer: {case}: refused at accept')
        return
    if case in BEFORE_HELLO:
        code, retryable, message = BEFORE_HELLO[case]
        send(conn, error(code, retryable, message, version=2 if case.startswith('v2-') else 1))
        conn.close()
        print(f'protocol_peer: {case}: refused at accept')
        return
    print(f'protocol_peer: {case}: {session(conn, case, path)}')


def listen(path):
    """A listener at path; the socket file appears only once it listens."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + '.tmp')
    listener.listen(1)
    os.rename(path + '.tmp', path)
    listener.settimeout(20)
    return listener


def session(conn, case, path):
    """HELLO, WELCOME, then IMPORTs answered as the case says until BYE or an error; returns what happened."""
    global VERSION
    msg = recv(conn, 1)
    if case == 'uid-refused':  # the client must hang up before HELLO, having seen this peer's uid
        assert msg is None, f'the client sent {msg} to a daemon it should have refused'
        return 'the client hung up before HELLO'
    mtype, body = msg
    assert mtype == HELLO, mtype
    lo, hi, _pid, n = struct.unpack('<HHiH', body[:10])
    assert (lo, hi) == (1, 2) and len(body) == 10 + n, (lo, hi, n, len(body))
    VERSION = 1 if case.startswith('v1-') else 2
    send(conn, welcome(case, VERSION))
    imports = 0
    while True:
        msg = recv(conn, VERSION)
        if msg is None:
            break
        if msg[0] == BYE:
            assert msg[1] == b'', 'BYE has a body'
            assert answer_ok(case), f'BYE after a failed {case}'
            break
        # IMPORT body: flags 0, the client's device (i32), expectation 0 (any)
        assert msg[0] == IMPORT and len(msg[1]) == 9 and msg[1][:4] == b'\0\0\0\0' and msg[1][8:] == b'\0', msg
        imports += 1
        if case.endswith('not-ready') and imports == 3:
            send(conn, manifest(*regions_and_tables(2)), memfds(2))
            continue
        if not answer(conn, case, path):
            break
    return f'version {VERSION}, {imports} IMPORT(s)'


def answer_ok(case):
    return case in ACCEPTED or case == 'restarted'


if __name__ == '__main__':
    main()
