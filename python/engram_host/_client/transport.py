"""The connection to the daemon's socket: ``connect`` and what its errno means (ENOENT or ECONNREFUSED: no daemon
listens; EACCES or EPERM: the one-line hint that names the fix), and one answer received within the wait.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import socket as _socket
import stat
from typing import Optional

from .. import _wire, errors as E


def _connect_socket(path: str, timeout: float) -> _socket.socket:
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    s.settimeout(timeout)
    try:
        s.connect(path)
    except FileNotFoundError:
        s.close()
        raise E.DaemonAbsent(path, "no socket file: ENOENT") from None
    except ConnectionRefusedError:
        s.close()
        raise E.DaemonAbsent(path, "connection refused: ECONNREFUSED") from None
    except OSError as e:
        s.close()
        hint = f": {access_hint(path)}" if e.errno in (errno.EACCES, errno.EPERM) else ""
        raise E.EngramHostError(f"cannot connect to {path}: {errno.errorcode.get(e.errno, e.errno)} "
                                f"({e.strerror}){hint}") from None
    return s


def _attributes(path: str) -> Optional[str]:
    """``mode 0700, owner uid 0 (root), group 0 (root)``, not following a link; None when unreadable."""
    try:
        st = os.lstat(path)
    except OSError:
        return None

    def named(number: int, lookup) -> str:
        try:
            return f" ({lookup(number)[0]})"
        except (KeyError, OSError):
            return ""
    return (f"mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}{named(st.st_uid, pwd.getpwuid)}, "
            f"group {st.st_gid}{named(st.st_gid, grp.getgrgid)}")


def _describe(path: str) -> str:
    a = _attributes(path)
    return path if a is None else f"{path} ({a})"


def access_hint(path: str, uid: Optional[int] = None) -> str:
    """What to do when ``connect`` to the socket ``path`` fails with EACCES or EPERM, in one line, as the Java and C
    clients say it: the first directory down to the socket this uid may not search (its mode, owner and group),
    else the socket's own mode; and the fix, the daemon's ``--allow-uid`` naming this uid and a directory that lets
    it search (docs/security.md, "Other uids")."""
    uid = os.geteuid() if uid is None else uid
    effective = os.access in os.supports_effective_ids
    abspath = os.path.abspath(path)
    directory = os.path.dirname(abspath)
    admit = f"the daemon must admit uid {uid} (serve --allow-uid {uid})"
    parts = [p for p in directory.split("/") if p]
    current = "/"
    for i in range(len(parts) + 1):
        if i > 0:
            current = "/" + "/".join(parts[:i])
        if not os.access(current, os.X_OK, effective_ids=effective):
            return (f"uid {uid} may not search {_describe(current)}: {admit}, and {current} must let it search "
                    f"(chmod o+x {current}, or g+x with uid {uid} in its group; a socket directory the daemon creates "
                    f"with --allow-uid is mode 0711)")
    if not os.access(abspath, os.W_OK, effective_ids=effective):
        a = _attributes(abspath)
        return (f"the socket{'' if a is None else f' ({a})'} lets only its owner connect: {admit}; the socket is "
                f"then mode 0666 and each peer's uid is checked")
    return (f"neither the socket's mode nor its directory {_describe(directory)} shuts uid {uid} out (an ACL or a "
            f"security module may): {admit}, and the socket and its directory must let it in")


def _receive(channel: _wire.Channel, path: str, version: int) -> _wire.Incoming:
    try:
        return channel.receive(version)
    except _wire.AnswerTimeout:
        raise E.NoAnswer(f"the daemon on {path} did not answer within {channel.timeout:g} s") from None
    except _wire.PeerClosed as e:
        raise E.NoAnswer(f"the daemon on {path} closed the connection: {e}") from None
