#!/usr/bin/env python3
"""A scripted daemon side of docs/protocol.md, for the paths of engram-attach that the real daemon
cannot be made to take cheaply: a MANIFEST of more than 253 fds (the daemon would need >= 254 regions
of >= 64 MiB) and malformed or refused answers. Written from the document, like the client.

Usage: protocol_peer.py SOCKET CASE   (serves one connection, then exits; 0 when the client behaved)
"""
import os
import socket
import struct
import sys

MAGIC, BATCH = 0x4D524745, 253
HELLO, WELCOME, IMPORT, MANIFEST, ERROR, BYE = 1, 2, 3, 4, 9, 10


def frame(mtype, body, version=1, magic=MAGIC):
    return struct.pack('<IHH', magic, version, mtype) + body


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
        assert socket.send_fds(conn, [data], fds[:BATCH]) == len(data)
    else:
        conn.sendall(data)
    rest = fds[BATCH:]
    for i in range(0, len(rest), BATCH):
        filler = fillers[i // BATCH] if fillers else b'\xfd'
        socket.send_fds(conn, [filler], rest[i:i + BATCH])


def recv_exact(conn, n):
    data = b''
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def recv(conn):
    """One client message: (type, body), or None at EOF. Clients send no fds."""
    header = recv_exact(conn, 8)
    if header is None:
        return None
    length, count = struct.unpack('<II', header)
    assert count == 0, f'client sent fd_count {count}'
    payload = recv_exact(conn, length)
    magic, version, mtype = struct.unpack('<IHH', payload[:8])
    assert magic == MAGIC and version == 1, (hex(magic), version)
    return mtype, payload[8:]


def manifest(regions, tables, extra=b''):
    body = bytes(range(32)) + struct.pack('<I', 4) + b'EGFP' + struct.pack('<I', len(regions))
    for kind, size, numa, device in regions:
        body += struct.pack('<BQii', kind, size, numa, device)
    body += struct.pack('<I', len(tables))
    for name, dtype, shape, nbytes, region, offset, kind in tables:
        body += str16(name) + str16(dtype) + struct.pack('<B', len(shape))
        body += b''.join(struct.pack('<q', d) for d in shape)
        body += struct.pack('<QiQQBii', nbytes, region, offset, 0, kind, 0, -1)
    return frame(MANIFEST, body + extra)


def error(code, retryable, message, details=()):
    body = struct.pack('<HB', code, retryable) + str32(message) + struct.pack('<I', len(details))
    body += b''.join(str32(d) for d in details) + struct.pack('<I', 0)
    return frame(ERROR, body)


def memfds(n, size=4096):
    fds = []
    for i in range(n):
        fd = os.memfd_create(f'peer.{i}', os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        fds.append(fd)
    return fds


def regions_and_tables(n, size=4096):
    regions = [(0, size, 0, -1)] * n
    tables = [(f't{i}', 'U8', [size], size, i, 0, 0) for i in range(n)]
    return regions, tables


def answer(conn, case):
    """Answers one IMPORT; returns False when the connection must end (an error answer)."""
    if case.startswith('batch-'):
        n = int(case.split('-')[1])
        send(conn, manifest(*regions_and_tables(n)), memfds(n))
    elif case == 'bad-filler':
        send(conn, manifest(*regions_and_tables(300)), memfds(300), fillers=[b'\x00'])
    elif case == 'empty-filler':  # fd_count 300, 253 fds, then a filler with none
        send(conn, manifest(*regions_and_tables(300)), memfds(253), fd_count=300)
        conn.sendall(b'\xfd')
    elif case == 'count-mismatch':
        regions, tables = regions_and_tables(3)
        send(conn, manifest(regions, tables), memfds(2))
    elif case == 'outside-region':
        send(conn, manifest([(0, 4096, 0, -1)], [('t', 'U8', [4000], 4000, 0, 100, 0)]), memfds(1))
    elif case == 'wrong-bytes':
        send(conn, manifest([(0, 4096, 0, -1)], [('t', 'F16', [100], 100, 0, 0, 0)]), memfds(1))
    elif case == 'wrong-size':  # the manifest says 8192, the memfd holds 4096
        send(conn, manifest([(0, 8192, 0, -1)], []), memfds(1))
    elif case == 'trailing':
        send(conn, manifest(*regions_and_tables(1), extra=b'\0'), memfds(1))
    elif case == 'bad-magic':
        send(conn, frame(MANIFEST, b'', magic=0x12345678))
    elif case == 'mismatch':
        send(conn, error(4, 0, 'fingerprint mismatch', ['table t: bytes 1 != 2', 'backend: memfd != cuda-vmm']))
    elif case == 'not-ready':
        send(conn, error(3, 1, 'still loading 40%'))
        return True
    elif case == 'eof':
        send(conn, manifest(*regions_and_tables(300)), memfds(253), fd_count=300)
    else:
        raise SystemExit(f'protocol_peer: unknown case {case}')
    return case.startswith('batch-')


def main():
    path, case = sys.argv[1], sys.argv[2]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + '.tmp')
    listener.listen(1)
    os.rename(path + '.tmp', path)  # the socket appears only once it listens
    listener.settimeout(20)
    conn, _ = listener.accept()
    conn.settimeout(20)
    mtype, body = recv(conn)
    assert mtype == HELLO, mtype
    lo, hi, _pid, n = struct.unpack('<HHiH', body[:10])
    assert (lo, hi) == (1, 1) and len(body) == 10 + n, (lo, hi, n, len(body))
    version = 2 if case == 'bad-version' else 1
    send(conn, frame(WELCOME, struct.pack('<Hi', version, os.getpid()) + str16('peer') + str16('memfd')
                     + str16('peer') + b'\1'))
    imports = 0
    while True:
        msg = recv(conn)
        if msg is None:
            break
        if msg[0] == BYE:
            assert msg[1] == b'', 'BYE has a body'
            assert case.startswith('batch-') or case == 'not-ready', f'BYE after a failed {case}'
            break
        # IMPORT body: flags 0, the client's device (i32), expectation 0 (any)
        assert msg[0] == IMPORT and len(msg[1]) == 9 and msg[1][:4] == b'\0\0\0\0' and msg[1][8:] == b'\0', msg
        imports += 1
        if case == 'not-ready' and imports == 3:
            send(conn, manifest(*regions_and_tables(2)), memfds(2))
            continue
        if not answer(conn, case):
            break
    print(f'protocol_peer: {case}: {imports} IMPORT(s)')


if __name__ == '__main__':
    main()
