"""What a connect's arguments are held to: the answer wait and the retry interval (docs/protocol-spec.json's
``answer_wait`` and ``retry_interval``), the uids trusted besides root's and this process's own, and the unit of the
timings.
"""

from __future__ import annotations

import os
from typing import Optional, Union

from .. import _wire

#: Seconds to wait for each answer of the daemon (``timeout=``).
DEFAULT_TIMEOUT = 10.0
#: Seconds between two tries while the daemon starts, loads (NOT_READY) or restarts (STOPPING).
NOT_READY_RETRY = 0.1

PathLike = Union[str, "os.PathLike[str]"]


def _trusted_uids(daemon_uid) -> list[int]:
    if daemon_uid is None:
        return []
    uids = [daemon_uid] if isinstance(daemon_uid, int) else list(daemon_uid)
    for u in uids:
        if not isinstance(u, int) or not 0 <= u < 0xFFFFFFFF:
            raise ValueError(f"daemon_uid: {u!r} is not a uid")
    return uids


def _ms(ns: int) -> float:
    """Nanoseconds as the timings' milliseconds, to the microsecond."""
    return round(ns / 1e6, 3)


def check_arguments(device: Optional[int], wait, timeout) -> None:
    """``device``, ``wait`` and ``timeout`` as connect() takes them, checked once on the caller's thread."""
    if device is not None and not 0 <= device <= _wire.MAX_DEVICE:
        raise ValueError(f"device {device} is not a GPU ordinal 0..{_wire.MAX_DEVICE}")
    for what, value in (("wait", wait), ("timeout", timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{what}: {value!r} is not a number of seconds")
