"""The memfd backends' attach: every memfd's seals and size checked before any region is mapped, then each mapped
``PROT_READ`` (and registered with CUDA, read-only, for a GPU view)."""

from __future__ import annotations

import time
from typing import Callable, Optional

from .. import _memory, _wire, errors as E
from .attachment import _Attachment
from .options import _ms

_MEMFD_KINDS = (_wire.KIND_MEMFD, _wire.KIND_MEMFD_HUGETLB)


def _region_what(manifest: _wire.Manifest, i: int) -> str:
    r = manifest.regions[i]
    names = [t.name for t in manifest.tables if t.region == i]  # a memfd region's: no run reaches into one
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    label = "no tables" if not names else ("table " if len(names) == 1 else "tables ") + shown
    return f"region {i} ({_wire.KIND_BACKENDS[r.kind]}, {r.size} bytes; {label})"


def check_seals(manifest: _wire.Manifest, fds: list, path: str, accept_future_write_seal: bool) -> None:
    """Every memfd region's seals and size (:func:`_memory.check_memfd`); a daemon whose memfd fails is not
    trusted."""
    for i, r in enumerate(manifest.regions):
        if r.kind in _MEMFD_KINDS:
            try:
                _memory.check_memfd(fds[i], r.size, _region_what(manifest, i), accept_future_write_seal)
            except ValueError as e:
                raise E.DaemonNotTrusted(f"the daemon on {path}: {e}; refused") from None


def map_memfds(manifest: _wire.Manifest, fds: list, attachment: _Attachment, device: Optional[int], populate: bool,
               cpu: list, gpu: list, per_region: list, timings: dict, check: Callable[[], None]) -> None:
    """Maps each memfd region read-only into ``cpu[i]``, and with a ``device`` registers it with CUDA into
    ``gpu[i]``; their undoing goes to ``attachment``, their times to ``per_region[i]`` and ``timings``."""
    map_ns = reg_ns = 0
    for i, r in enumerate(manifest.regions):
        if r.kind not in _MEMFD_KINDS:
            continue
        check()
        t0 = time.perf_counter_ns()
        addr = _memory.map_read_only(fds[i], r.size, populate)
        attachment.add(f"munmap of region {i}", lambda a=addr, s=r.size: _memory.unmap(a, s))
        cpu[i] = addr
        t1 = time.perf_counter_ns()
        per_region[i]["mmap_ms"] = _ms(t1 - t0)
        map_ns += t1 - t0
        if device is not None:
            from .._cuda.host_register import HostRegistration
            reg = HostRegistration(attachment.device, addr, r.size)
            attachment.add(f"cuMemHostUnregister of region {i}", reg.close)
            gpu[i] = reg.device_pointer
            t2 = time.perf_counter_ns()
            per_region[i]["register_ms"] = _ms(t2 - t1)
            reg_ns += t2 - t1
    timings["map_ms"] = _ms(map_ns)
    if device is not None:
        timings["register_ms"] = _ms(reg_ns)
