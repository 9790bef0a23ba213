"""The handshake on a fresh connection: the daemon's uid (``SO_PEERCRED``) against the trusted ones, HELLO, and
WELCOME (its version, its uid against ``SO_PEERCRED``); an ERROR at accept raised as its subclass.
"""

from __future__ import annotations

import os
import socket as _socket
import struct
from typing import Optional

from .. import _wire, errors as E
from .cancel import _Cancel, _NOT_CANCELLABLE
from .options import _trusted_uids
from .transport import _connect_socket, _receive


class _Connected(_wire.Record):
    __slots__ = ("path", "channel", "peer_pid", "peer_uid", "welcome")


def _handshake(path: str, daemon_uid, timeout: float, name: str, token: Optional["_Cancel"] = None) -> _Connected:
    token = token or _NOT_CANCELLABLE
    sock = _connect_socket(path, timeout)
    channel = _wire.Channel(sock, timeout)
    token.watch(sock)
    try:
        pid, uid, _gid = struct.unpack("3i", sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED,
                                                             struct.calcsize("3i")))
        uid &= 0xFFFFFFFF
        me = os.geteuid()
        extra = _trusted_uids(daemon_uid)
        if uid not in (0, me) and uid not in extra:
            trusted = ["0 (root)"] + ([f"{me} (this client's euid)"] if me != 0 else []) + \
                [f"{u} (daemon_uid)" for u in extra]
            raise E.DaemonNotTrusted(
                f"refusing the daemon on {path}: its uid (SO_PEERCRED, pid {pid}) is {uid}, and this client trusts "
                f"only the uids {', '.join(trusted)}; if that user's daemon is meant to serve you, pass "
                f"daemon_uid={uid} (--daemon-uid {uid})")
        try:
            channel.send(_wire.encode_hello(os.getpid(), name))
        except (BrokenPipeError, ConnectionResetError):
            pass  # a daemon that refuses at accept writes its ERROR and closes: it is still there to read
        msg = _receive(channel, path, 0)
        if msg.msg_type == _wire.ERROR:
            raise _refusal(_wire.decode_error(_wire.Reader(msg.body, "ERROR")))
        if msg.msg_type != _wire.WELCOME:
            raise _wire.ProtocolError(f"expected WELCOME, got {_wire.type_name(msg.msg_type)}")
        welcome = _wire.decode_welcome(_wire.Reader(msg.body, "WELCOME"), msg.version)
        if welcome.uid is not None and welcome.uid != uid:
            raise E.DaemonNotTrusted(f"refusing the daemon on {path}: its WELCOME says uid {welcome.uid} but "
                                     f"SO_PEERCRED says uid {uid} (pid {pid})")
        channel.version = welcome.version
        return _Connected(path, channel, pid, uid, welcome)
    except _wire.ProtocolError as e:
        token.close(sock)
        raise E.ProtocolViolation(f"the daemon on {path} broke the protocol: {e}") from None
    except BaseException:
        token.close(sock)
        raise


def _refusal(reply: _wire.ErrorReply) -> E.EngramHostError:
    return E.from_reply(reply.code, reply.message, reply.details, reply.retryable, reply.daemon_fingerprint)
