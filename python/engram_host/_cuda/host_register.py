"""Pinned host memory: :class:`HostRegistration`, a sealed memfd's PROT_READ mapping registered read-only with a GPU
(cuMemHostRegister_v2 in chunks) and its one device pointer."""

from __future__ import annotations

import ctypes
import mmap
import threading
import time
import weakref
from typing import List, Optional, Union

from .device import Device, _as_device, _attribute, _elapsed_ms
from .driver import (CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, CU_MEMHOSTREGISTER_DEVICEMAP,
                     CU_MEMHOSTREGISTER_PORTABLE, CU_MEMHOSTREGISTER_READ_ONLY, CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS,
                     CudaError, _CUdeviceptr, _check)

#: The largest piece one cuMemHostRegister call is given (a single call of 512 GiB or more fails on r580 drivers).
HOST_REGISTER_CHUNK = 64 << 30


class _RegistrationState:
    """What a HostRegistration holds, apart from the object, so that its finalizer can free it."""

    def __init__(self, device: Device, chunks: List[int]):
        self.device = device
        self.chunks = chunks
        self.lock = threading.RLock()
        self.closed = False

    def close(self, synchronize: bool = True) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            errors: List[CudaError] = []
            if synchronize:
                try:
                    self.device.synchronize()
                except CudaError as e:
                    errors.append(e)
            pushed = self.device._push() == CUDA_SUCCESS
            try:
                lib = self.device._lib
                for chunk in reversed(self.chunks):
                    r = lib.cuMemHostUnregister(chunk)
                    if r != CUDA_SUCCESS:
                        errors.append(CudaError(f"cuMemHostUnregister(0x{chunk:x})", r))
            finally:
                if pushed:
                    self.device._pop()
            if errors:
                raise errors[0]


class HostRegistration:
    """One page-locked registration of ``size`` bytes of existing host memory at ``address`` (a sealed memfd's
    PROT_READ mapping) with GPU ``device``: cuMemHostRegister_v2 with READ_ONLY | DEVICEMAP | PORTABLE, in chunks
    of ``chunk_bytes`` (at most :data:`HOST_REGISTER_CHUNK`), and one device pointer for the whole range (checked
    contiguous across the chunks). Kernels read across chunk boundaries; a copy (cudaMemcpy, so a tensor's
    ``.cpu()``) whose range spans two chunks fails with CUDA_ERROR_INVALID_VALUE (seen on an H200, driver 580).

    It does not own the mapping: the caller keeps ``[address, address + size)`` mapped until this is closed.
    :meth:`close` waits for the GPU (cuCtxSynchronize), then unregisters; it is idempotent and also runs when
    the object is garbage collected.
    """

    def __init__(self, device: Union[Device, int], address: int, size: int, *,
                 chunk_bytes: int = HOST_REGISTER_CHUNK):
        self.device = _as_device(device)
        page = mmap.PAGESIZE
        if address <= 0 or address % page or size <= 0:
            raise ValueError(f"cuMemHostRegister: address 0x{address:x} must be page-aligned ({page}) and size "
                             f"{size} positive")
        if chunk_bytes <= 0 or chunk_bytes % page or chunk_bytes > HOST_REGISTER_CHUNK:
            raise ValueError(f"cuMemHostRegister: chunk_bytes {chunk_bytes} must be a positive multiple of the page "
                             f"size {page} of at most {HOST_REGISTER_CHUNK}")
        self.address = address
        self.size = size
        lib = self.device._lib
        flags = CU_MEMHOSTREGISTER_READ_ONLY | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE
        chunks: List[int] = []
        state = _RegistrationState(self.device, chunks)
        start = time.perf_counter_ns()
        try:
            with self.device.current():
                for off in range(0, size, chunk_bytes):
                    n = min(chunk_bytes, size - off)
                    r = lib.cuMemHostRegister_v2(address + off, n, flags)
                    if r != CUDA_SUCCESS:
                        raise CudaError(f"cuMemHostRegister_v2(0x{address + off:x}, size={n}, "
                                        "READ_ONLY|DEVICEMAP|PORTABLE)", r, self._register_hint(r))
                    chunks.append(address + off)
                base = self._device_pointer(lib, address)
                for chunk in chunks[1:]:
                    p = self._device_pointer(lib, chunk)
                    if p != base + (chunk - address):
                        raise CudaError(f"cuMemHostGetDevicePointer_v2(0x{chunk:x}) gave 0x{p:x}, not contiguous "
                                        f"with 0x{base:x}", CUDA_ERROR_INVALID_VALUE)
        except BaseException:
            try:
                state.close(synchronize=False)
            except CudaError:
                pass  # the registration error is the one to report
            raise
        self.register_ms = _elapsed_ms(start)
        self.chunks = len(chunks)
        self.device_pointer = base
        self._state = state
        self._finalizer = weakref.finalize(self, state.close)
        self._finalizer.atexit = False

    def _register_hint(self, result: int) -> Optional[str]:
        if result == CUDA_ERROR_INVALID_VALUE:
            supported = _attribute(self.device._lib, self.device._cu_device,
                                   CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, self.device.ordinal)
            if supported == 0:
                return (f"GPU {self.device.ordinal} lacks READ_ONLY_HOST_REGISTER_SUPPORTED, which a PROT_READ "
                        "mapping needs")
        return None

    @staticmethod
    def _device_pointer(lib: ctypes.CDLL, host: int) -> int:
        out = _CUdeviceptr()
        _check(lib.cuMemHostGetDevicePointer_v2(ctypes.byref(out), host, 0),
               lambda: f"cuMemHostGetDevicePointer_v2(0x{host:x})")
        return out.value

    @property
    def closed(self) -> bool:
        return self._state.closed

    def close(self) -> None:
        """Waits for the device, then unregisters every chunk; once (later calls do nothing)."""
        self._finalizer.detach()
        self._state.close()

    def __enter__(self) -> "HostRegistration":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"device_pointer=0x{self.device_pointer:x}"
        return f"HostRegistration(GPU {self.device.ordinal}, 0x{self.address:x}, {self.size} bytes, {state})"
