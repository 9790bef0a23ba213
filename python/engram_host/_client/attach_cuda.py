"""The GPU side of an import: the CUDA context prepared on a thread while the handshake runs, PyTorch's own
CUDA start-up beside it, and the cuda-vmm regions imported into one VA range with read-only GPU access.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, Optional

from .. import _wire, errors as E
from .attachment import _Attachment
from .options import _ms


class _GpuPrep:
    """cuInit and the primary context, on a thread while the handshake runs (ctypes drops the GIL in calls)."""

    def __init__(self, ordinal: int):
        self.ordinal = ordinal
        self.device = None
        self.error: Optional[BaseException] = None
        self.nanos = 0
        self._thread = threading.Thread(target=self._run, name="engram-gpu-prepare", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        t0 = time.perf_counter_ns()
        try:
            from .._cuda.device import Device
            from .._cuda.driver import available, gpu_view_refusal
            if not available():
                raise E.CudaUnavailable(gpu_view_refusal())
            self.device = Device(self.ordinal)
        except BaseException as e:
            self.error = e
        self.nanos = time.perf_counter_ns() - t0

    def wait(self):
        self._thread.join()
        if self.error is not None:
            raise self.error
        return self.device

    def discard(self) -> None:
        self._thread.join()
        self.device = None  # releases the primary context's retain unless another owner holds it


def _warm_torch_cuda() -> None:
    """PyTorch's own CUDA start-up (torch.cuda.init), run on a thread during the handshake and the context's
    creation, so that the first to_torch() does not pay it. Only where the process has imported torch already; a
    failure is left for to_torch() to report."""
    try:
        sys.modules["torch"].cuda.init()
    except Exception:
        pass


def import_vmm(manifest: _wire.Manifest, fds: list, which: list, label: str, with_cpu: bool,
               attachment: _Attachment, device: Optional[int], cpu: list, gpu: list, per_region: list,
               timings: dict, check: Callable[[], None]) -> None:
    """Imports the cuda-vmm regions ``which`` (all host or all device ones) into one VA range with read-only GPU
    access (and a HOST_NUMA CPU view with ``with_cpu``), in region order: their addresses into ``gpu`` (and
    ``cpu``), the import's release to ``attachment``, its times to ``timings`` (prefixed ``label``) and
    ``per_region``."""
    first = manifest.regions[which[0]]
    if device is None:
        raise E.EngramHostError(f"{_wire.KIND_BACKENDS[first.kind]} memory needs a GPU to attach: import "
                                "with a device (device=N, --gpu --device N)")
    check()
    from .._cuda.vmm import VmmImport
    imp = VmmImport(attachment.device,
                    [(fds[i], manifest.regions[i].size,
                      "host" if manifest.regions[i].kind == _wire.KIND_VMM_HOST else "device",
                      manifest.regions[i].numa_node) for i in which],
                    cpu_view=with_cpu, read_only=True)
    attachment.add(f"release of the {label} import", imp.close)
    for j, i in enumerate(which):
        gpu[i] = imp.address_of(j)
        if with_cpu:
            cpu[i] = imp.address_of(j)
    for k, v in imp.timings.items():
        timings[f"{label}_{k}"] = _ms(v) if isinstance(v, int) else v
    for i in which:
        per_region[i] = {k: (_ms(v) if isinstance(v, int) else v) for k, v in imp.timings.items()}
