"""The requests of one answer on a fresh connection: :func:`status` and :func:`stop`.
"""

from __future__ import annotations

from typing import Optional

from .. import _paths, _wire, errors as E
from .handshake import _handshake, _refusal
from .options import DEFAULT_TIMEOUT
from .transport import _receive


def _ask(path: str, daemon_uid, timeout: float, request: int, answer: int, name: str) -> _wire.Incoming:
    """One request with an empty body on a fresh connection (STATUS, STOP), and its answer of type ``answer``."""
    c = _handshake(path, daemon_uid, timeout, name)
    try:
        c.channel.send(_wire.encode_empty(request, c.channel.version))
        msg = _receive(c.channel, path, c.channel.version)
        if msg.msg_type == _wire.ERROR:
            raise _refusal(_wire.decode_error(_wire.Reader(msg.body, "ERROR")))
        if msg.msg_type != answer:
            raise _wire.ProtocolError(f"expected {_wire.type_name(answer)}, got {_wire.type_name(msg.msg_type)}")
        return msg
    except _wire.ProtocolError as e:
        raise E.ProtocolViolation(f"the daemon on {path} broke the protocol: {e}") from None
    finally:
        c.channel.close()


def status(socket: Optional[str] = None, *, instance: Optional[str] = None, device: Optional[int] = None,
           daemon_uid=None, timeout: float = DEFAULT_TIMEOUT) -> dict:
    """The daemon's STATUS document, parsed."""
    import json
    path = _paths.socket_path(socket, instance, device)
    msg = _ask(path, daemon_uid, timeout, _wire.STATUS, _wire.STATUS_REPLY, "engram_host status")
    try:
        return json.loads(_wire.decode_status_reply(_wire.Reader(msg.body, "STATUS_REPLY")))
    except (_wire.ProtocolError, ValueError) as e:
        raise E.ProtocolViolation(f"the daemon on {path} broke the protocol: STATUS_REPLY: {e}") from None


def stop(socket: Optional[str] = None, *, instance: Optional[str] = None, device: Optional[int] = None,
         daemon_uid=None, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Asks the daemon to stop; returns once it acknowledged. Clients keep their mappings."""
    msg = _ask(_paths.socket_path(socket, instance, device), daemon_uid, timeout, _wire.STOP, _wire.STOP_ACK,
               "engram_host stop")
    if msg.body:
        raise E.ProtocolViolation(f"the daemon broke the protocol: STOP_ACK has a body of {len(msg.body)} bytes")
