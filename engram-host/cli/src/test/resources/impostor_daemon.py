#!/usr/bin/env python3
"""An impostor engram-host daemon, written from docs/protocol.md (version 2): what a local user could run on a
daemon's socket path to hand a client forged tables. The client tests (DaemonTrustTest, DeadDaemonFallbackTest)
run it as a separate process, as root or as another uid (setpriv), and check that the client refuses it.

Usage: impostor_daemon.py SOCKET CASE [SCRATCH_DIR]

Serves connections one after another until killed; each is answered per CASE. SCRATCH_DIR is where the
'regular-file' case makes its file (it must not be tmpfs, whose files have seals). Prints 'listening' once the
socket exists, then one line per connection: 'CASE: <what the client did>'.

Cases: good (two sealed memfds, forged tables), unsealed (sealing allowed, no seal set), unsealable (memfd
without MFD_ALLOW_SEALING: F_GET_SEALS gives SEAL only), no-seal, no-shrink, no-grow, no-write (all seals but
that one), sealed-write (WRITE, as good: acceptable), future-write (FUTURE_WRITE instead of WRITE: refused
unless the client accepts it), second-unsealed (region 0 sealed, region 1
not), regular-file (an fd of a file on disk), small (a memfd one page shorter than the manifest's region), large
(one page longer: acceptable), welcome-v3 (WELCOME chooses version 3), welcome-header-v1 (WELCOME encodes
version 2 in a version-1 frame), manifest-v1 (version 2 chosen, MANIFEST encoded as version 1), welcome-uid
(WELCOME names a uid other than SO_PEERCRED's), unknown-error (ERROR code 42 answers IMPORT), busy (ERROR BUSY at
accept, before HELLO, as a daemon at its connection limit does), timed-out (ERROR TIMED_OUT answers IMPORT),
error-v2-at-accept (an ERROR at accept encoded as version 2), silent (reads HELLO, never answers).
"""
import fcntl
import hashlib
import os
import socket
import struct
import sys

MAGIC = 0x4D524745
HELLO, WELCOME, IMPORT, MANIFEST, ERROR, BYE = 1, 2, 3, 4, 9, 10
F_ADD_SEALS = 1033
SEAL, SHRINK, GROW, WRITE, FUTURE_WRITE = 0x1, 0x2, 0x4, 0x8, 0x10
ALL = SEAL | SHRINK | GROW | WRITE
PAGE = os.sysconf('SC_PAGE_SIZE')
FORGED = b'forged by an impostor '  # the tables' bytes repeat this


def frame(mtype, body, version):
    return struct.pack('<IHH', MAGIC, version, mtype) + body


def str16(s):
    b = s.encode()
    return struct.pack('<H', len(b)) + b


def str32(s):
    b = s.encode()
    return struct.pack('<I', len(b)) + b


def send(conn, payload, fds=()):
    data = struct.pack('<II', len(payload), len(fds)) + payload
    if fds:
        sent = socket.send_fds(conn, [data], list(fds))
        if sent < len(data):
            conn.sendall(data[sent:])
    else:
        conn.sendall(data)


def recv_exact(conn, n):
    data = b''
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def recv(conn):
    """One client message: (version, type, body), or None at EOF."""
    header = recv_exact(conn, 8)
    if header is None:
        return None
    length, count = struct.unpack('<II', header)
    payload = recv_exact(conn, length)
    if payload is None:
        return None
    magic, version, mtype = struct.unpack('<IHH', payload[:8])
    assert magic == MAGIC, hex(magic)
    return version, mtype, payload[8:]


def error(code, retryable, message, version):
    body = struct.pack('<HB', code, retryable) + str32(message) + struct.pack('<I', 0) + struct.pack('<I', 0)
    return frame(ERROR, body, version)


def welcome(version, uid, header_version=None):
    body = struct.pack('<Hi', version, os.getpid()) + str16('0.1.0') + str16('memfd') + str16('default') + b'\1'
    if version >= 2:
        body += struct.pack('<I', uid)
    return frame(WELCOME, body, version if header_version is None else header_version)


def memfd(name, size, seals, allow_sealing=True):
    fd = os.memfd_create(name, os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if allow_sealing else 0))
    os.ftruncate(fd, size)
    data = (FORGED * (size // len(FORGED) + 1))[:size]
    os.pwrite(fd, data, 0)
    if seals:
        fcntl.fcntl(fd, F_ADD_SEALS, seals)
    return fd


def regular_file(scratch, size):
    path = os.path.join(scratch, f'impostor.{os.getpid()}.bin')
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    os.unlink(path)
    os.pwrite(fd, (FORGED * (size // len(FORGED) + 1))[:size], 0)
    return fd


def expected_fingerprint(import_body):
    """The (sha256, structured) fingerprint an IMPORT expects, which an impostor simply copies back."""
    kind = import_body[8]
    if kind == 1:  # the SHA-256 copied back with no fingerprint under it: a client that checks the pair refuses it
        return import_body[9:41], b''
    if kind == 2:
        (n,) = struct.unpack('<I', import_body[9:13])
        blob = import_body[13:13 + n]
        return hashlib.sha256(blob).digest(), blob
    return hashlib.sha256(b'').digest(), b''


def manifest(sizes, version, sha=hashlib.sha256(b'').digest(), fingerprint=b''):
    """Regions of kind 0 (memfd), one table 'forged.N' of U8[size] filling each, under the given fingerprint."""
    body = [sha, struct.pack('<I', len(fingerprint)), fingerprint, struct.pack('<I', len(sizes))]
    for size in sizes:
        body.append(struct.pack('<BQii', 0, size, -1, -1))
    body.append(struct.pack('<I', len(sizes)))
    for i, size in enumerate(sizes):
        body += [str16(f'forged.{i}'), str16('U8'), struct.pack('<B', 1), struct.pack('<q', size)]
        body.append(struct.pack('<QiQQBii', size, i, 0, 0, 0, -1, -1))
    return frame(MANIFEST, b''.join(body), version)


def regions(case, scratch):
    """(manifest sizes, fds) for an IMPORT answered with a MANIFEST."""
    two = [PAGE, 2 * PAGE]
    if case in ('good', 'manifest-v1', 'wrong-fingerprint'):
        return two, [memfd('impostor.0', PAGE, ALL), memfd('impostor.1', 2 * PAGE, ALL)]
    if case == 'sealed-write':  # both write seals
        return two, [memfd('impostor.0', PAGE, ALL | FUTURE_WRITE), memfd('impostor.1', 2 * PAGE, ALL | FUTURE_WRITE)]
    if case == 'future-write':  # what builds before WRITE sealing sent
        fw = ALL & ~WRITE | FUTURE_WRITE
        return two, [memfd('impostor.0', PAGE, fw), memfd('impostor.1', 2 * PAGE, fw)]
    if case == 'second-unsealed':
        return two, [memfd('impostor.0', PAGE, ALL), memfd('impostor.1', 2 * PAGE, 0)]
    if case == 'large':
        return [PAGE], [memfd('impostor.0', 2 * PAGE, ALL)]
    seals = {'unsealed': 0, 'no-seal': ALL & ~SEAL, 'no-shrink': ALL & ~SHRINK, 'no-grow': ALL & ~GROW,
             'no-write': SEAL | SHRINK | GROW}
    if case in seals:
        return [PAGE], [memfd('impostor.0', PAGE, seals[case])]
    if case == 'unsealable':
        return [PAGE], [memfd('impostor.0', PAGE, 0, allow_sealing=False)]
    if case == 'regular-file':
        return [PAGE], [regular_file(scratch, PAGE)]
    if case == 'small':
        return [2 * PAGE], [memfd('impostor.0', PAGE, ALL)]
    raise SystemExit(f'impostor: unknown case {case}')


def serve(conn, case, scratch):
    """One connection; returns what the client did, for the log."""
    uid = os.geteuid()
    if case == 'busy':
        send(conn, error(9, 1, 'connection limit: --max-connections 1 reached (impostor)', 1))
        return 'refused at accept with BUSY'
    if case == 'error-v2-at-accept':
        send(conn, error(5, 0, 'not allowed (encoded as version 2 before any version was chosen)', 2))
        return 'refused at accept with a version-2 ERROR'
    msg = recv(conn)
    if msg is None:
        return 'hung up before HELLO'
    version, mtype, body = msg
    assert (version, mtype) == (1, HELLO), (version, mtype)
    lo, hi = struct.unpack('<HH', body[:4])
    chosen = min(hi, 2)
    if case == 'silent':
        recv(conn)
        return 'waited; the client hung up'
    if case == 'welcome-v3':
        send(conn, welcome(3, uid))
    elif case == 'welcome-header-v1':
        send(conn, welcome(2, uid, header_version=1))
    elif case == 'welcome-uid':
        send(conn, welcome(chosen, uid + 4242))
    else:
        send(conn, welcome(chosen, uid))
    msg = recv(conn)
    if msg is None:
        return f'hung up after WELCOME (version {chosen})'
    version, mtype, body = msg
    if mtype != IMPORT:
        return f'sent type {mtype} after WELCOME'
    if case == 'unknown-error':
        send(conn, error(42, 0, 'a code from a later daemon', chosen))
        return 'answered IMPORT with ERROR 42'
    if case == 'timed-out':
        send(conn, error(10, 0, 'request timeout: 10 s from the first byte of a request to its last', chosen))
        return 'answered IMPORT with TIMED_OUT'
    sizes, fds = regions(case, scratch)
    # wrong-fingerprint: a consistent fingerprint of something else
    fingerprint = (hashlib.sha256(b'EGFP-other').digest(), b'EGFP-other') if case == 'wrong-fingerprint' \
        else expected_fingerprint(body)
    send(conn, manifest(sizes, 1 if case == 'manifest-v1' else chosen, *fingerprint), fds)
    for fd in fds:
        os.close(fd)
    msg = recv(conn)
    if msg is None:
        return f'sent MANIFEST with {len(fds)} fds; the client hung up'
    return f'sent MANIFEST with {len(fds)} fds; the client sent type {msg[1]}'


def main():
    path, case = sys.argv[1], sys.argv[2]
    scratch = sys.argv[3] if len(sys.argv) > 3 else os.path.dirname(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + '.tmp')
    listener.listen(16)
    os.rename(path + '.tmp', path)  # the socket appears only once it listens
    print('listening', flush=True)
    while True:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(30)
            try:
                print(f'{case}: {serve(conn, case, scratch)}', flush=True)
            except (BrokenPipeError, ConnectionResetError, socket.timeout) as e:
                print(f'{case}: {type(e).__name__}', flush=True)


if __name__ == '__main__':
    main()
