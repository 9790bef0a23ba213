"""The attach: every region of a checked MANIFEST mapped, in order: every memfd's seals and size first
(:mod:`.attach_memfd`), then the memfds mapped read-only (and registered with CUDA for a GPU view), then the
cuda-vmm regions imported into one VA range each for the host and the device regions (:mod:`.attach_cuda`).
Every resource goes to the import's one owner (:class:`~.attachment._Attachment`); every fd is closed here, on
success or failure."""

from __future__ import annotations

import os
from typing import Callable, Optional

from .. import _regions, _wire, errors as E
from .attach_cuda import import_vmm
from .attach_memfd import check_seals, map_memfds
from .attachment import _Attachment


def _check_runs_contiguous(manifest: _wire.Manifest, addresses: list) -> None:
    """Every run of regions a table lies in is mapped back to back, so that the table's bytes are one range from its
    first region's address plus its offset (docs/protocol.md, "How to map a region"). VmmImport maps the regions in
    order at offsets rounded to their granularity, of which every region size is a multiple: this holds unless the
    import changed."""
    why = _regions.runs_apart(manifest.regions, manifest.tables, addresses)
    if why is not None:
        raise E.EngramHostError(f"{why}; refused")


def _attach(manifest: _wire.Manifest, fds: list, attachment: _Attachment, device: Optional[int], cpu_view: bool,
            populate: bool, path: str, timings: dict, accept_future_write_seal: bool = False,
            check: Callable[[], None] = lambda: None) -> tuple[list, list, list]:
    """Maps every region; every resource goes to ``attachment``. Closes every fd, on success or failure.
    ``check`` is called before each region's attach (a background connect's cancellation raises there)."""
    n = len(fds)
    cpu = [0] * n
    gpu = [0] * n
    per_region: list[dict] = [{} for _ in range(n)]
    try:
        check_seals(manifest, fds, path, accept_future_write_seal)  # every memfd, before any is mapped
        map_memfds(manifest, fds, attachment, device, populate, cpu, gpu, per_region, timings, check)
        vmm = [i for i, r in enumerate(manifest.regions) if r.kind == _wire.KIND_VMM_HOST]
        dev = [i for i, r in enumerate(manifest.regions) if r.kind == _wire.KIND_VMM_DEVICE]
        for label, which, with_cpu in (("vmm", vmm, cpu_view), ("device", dev, False)):
            if not which:
                continue
            import_vmm(manifest, fds, which, label, with_cpu, attachment, device, cpu, gpu, per_region, timings,
                       check)
            if label == "vmm":
                _check_runs_contiguous(manifest, gpu)
        return cpu, gpu, per_region
    finally:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
