"""GPUs through the driver: their count, attributes, UUIDs, and :class:`Device`, one retain of a GPU's primary context
(the one the CUDA runtime, and so PyTorch, uses), pushed for each call that needs a context."""

from __future__ import annotations

import ctypes
import threading
import time
import weakref
from typing import Optional, Tuple, Union

from .driver import (CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, CUDA_ERROR_INVALID_VALUE, LIBRARY, CudaUnavailableError, CUuuid,
                     _CUcontext, _CUdevice, _check, _driver, _size_t)

def driver_version() -> int:
    """The driver's CUDA version, e.g. 13000 for 13.0."""
    out = ctypes.c_int()
    _check(_driver().cuDriverGetVersion(ctypes.byref(out)), "cuDriverGetVersion")
    return out.value


def device_count() -> int:
    """How many CUDA devices this process sees (CUDA_VISIBLE_DEVICES applies)."""
    out = ctypes.c_int()
    _check(_driver().cuDeviceGetCount(ctypes.byref(out)), "cuDeviceGetCount")
    return out.value


def _cu_device(ordinal: int) -> int:
    if not isinstance(ordinal, int) or isinstance(ordinal, bool):
        raise TypeError(f"a GPU ordinal is an int, not {type(ordinal).__name__}")
    count = device_count()
    if not 0 <= ordinal < count:
        raise ValueError(f"GPU {ordinal} does not exist: this process sees {count} CUDA device(s), "
                         f"ordinals 0..{count - 1}")
    out = _CUdevice()
    _check(_driver().cuDeviceGet(ctypes.byref(out), ordinal), f"cuDeviceGet({ordinal})")
    return out.value


def _attribute(lib: ctypes.CDLL, cu_device: int, attribute: int, ordinal: int) -> Optional[int]:
    """An attribute's value, or None when this driver does not know the attribute (CUDA_ERROR_INVALID_VALUE)."""
    out = ctypes.c_int()
    r = lib.cuDeviceGetAttribute(ctypes.byref(out), attribute, cu_device)
    if r == CUDA_ERROR_INVALID_VALUE:
        return None
    _check(r, lambda: f"cuDeviceGetAttribute({attribute}, GPU {ordinal})")
    return out.value


def device_attribute(ordinal: int, attribute: int) -> Optional[int]:
    """cuDeviceGetAttribute of GPU ``ordinal``; None when the driver does not know ``attribute``."""
    return _attribute(_driver(), _cu_device(ordinal), attribute, ordinal)


def host_numa_id(ordinal: int) -> int:
    """The host NUMA node nearest GPU ``ordinal`` (CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID); -1 when the driver does not
    support the attribute or the system has no NUMA."""
    value = device_attribute(ordinal, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID)
    return -1 if value is None or value < 0 else value


def format_uuid(raw: bytes) -> str:
    """``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` of 16 bytes, as nvidia-smi prints a GPU's UUID."""
    if len(raw) != 16:
        raise ValueError(f"a CUuuid has 16 bytes, not {len(raw)}")
    h = raw.hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def device_uuid(ordinal: int) -> str:
    """GPU ``ordinal``'s UUID as nvidia-smi prints it (cuDeviceGetUuid_v2, or cuDeviceGetUuid on an old driver)."""
    lib = _driver()
    dev = _cu_device(ordinal)
    fn = getattr(lib, "cuDeviceGetUuid_v2", None)
    name = "cuDeviceGetUuid_v2"
    if fn is None:
        fn, name = getattr(lib, "cuDeviceGetUuid", None), "cuDeviceGetUuid"
    if fn is None:
        raise CudaUnavailableError(f"{LIBRARY} has neither cuDeviceGetUuid_v2 nor cuDeviceGetUuid")
    out = CUuuid()
    _check(fn(ctypes.byref(out), dev), f"{name}(GPU {ordinal})")
    return format_uuid(bytes(out.bytes))


def _release_primary(lib: ctypes.CDLL, cu_device: int) -> None:
    # A finalizer: nothing to raise to; a failure here means the context is already gone.
    lib.cuDevicePrimaryCtxRelease_v2(cu_device)


class Device:
    """One GPU and one retain of its primary context, the context the CUDA runtime (and so PyTorch) uses.

    ``Device(n)`` returns the live object for GPU n when there is one, so a process holds one retain per GPU
    however many owners use it; the retain is released when the last reference to that object is gone (the
    resources of this module hold theirs). Driver calls run between :meth:`current`'s push and pop, so any thread
    may use a Device.
    """

    _live: "weakref.WeakValueDictionary[int, Device]" = weakref.WeakValueDictionary()
    _live_lock = threading.Lock()

    ordinal: int

    def __new__(cls, ordinal: int) -> "Device":
        with cls._live_lock:
            dev = cls._live.get(ordinal)
            if dev is not None:
                return dev
            lib = _driver()
            cu_device = _cu_device(ordinal)
            ctx = _CUcontext()
            _check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), cu_device),
                   f"cuDevicePrimaryCtxRetain(GPU {ordinal})")
            dev = super().__new__(cls)
            dev.ordinal = ordinal
            dev._lib = lib
            dev._cu_device = cu_device
            dev._context = ctx.value
            fin = weakref.finalize(dev, _release_primary, lib, cu_device)
            fin.atexit = False
            cls._live[ordinal] = dev
            return dev

    def __repr__(self) -> str:
        return f"Device({self.ordinal})"

    @property
    def context(self) -> int:
        """The primary context's handle (a CUcontext), for callers that make their own driver calls."""
        return self._context

    def current(self) -> "_Pushed":
        """A context manager that makes the primary context current in this thread for its block
        (cuCtxPushCurrent_v2 on entry, cuCtxPopCurrent_v2 on exit)."""
        return _Pushed(self)

    def synchronize(self) -> None:
        """cuCtxSynchronize in the primary context: waits for every stream of it, PyTorch's included."""
        with self.current():
            _check(self._lib.cuCtxSynchronize(), f"cuCtxSynchronize(GPU {self.ordinal})")

    def mem_info(self) -> Tuple[int, int]:
        """(free, total) bytes of device memory (cuMemGetInfo_v2)."""
        free, total = _size_t(), _size_t()
        with self.current():
            _check(self._lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)),
                   f"cuMemGetInfo_v2(GPU {self.ordinal})")
        return free.value, total.value

    def uuid(self) -> str:
        """The GPU's UUID as nvidia-smi prints it."""
        return device_uuid(self.ordinal)

    def host_numa_id(self) -> int:
        """The host NUMA node nearest this GPU, -1 when unknown."""
        return host_numa_id(self.ordinal)

    def _push(self) -> int:
        return self._lib.cuCtxPushCurrent_v2(self._context)

    def _pop(self) -> int:
        popped = _CUcontext()
        return self._lib.cuCtxPopCurrent_v2(ctypes.byref(popped))


class _Pushed:
    """Pushes a Device's primary context for a ``with`` block and pops it after, even when the block raises."""

    __slots__ = ("_device",)

    def __init__(self, device: Device):
        self._device = device

    def __enter__(self) -> Device:
        _check(self._device._push(), f"cuCtxPushCurrent_v2(GPU {self._device.ordinal} primary context)")
        return self._device

    def __exit__(self, exc_type, exc, tb) -> None:
        r = self._device._pop()
        if exc_type is None:
            _check(r, f"cuCtxPopCurrent_v2(GPU {self._device.ordinal} primary context)")


def _as_device(device: Union[Device, int]) -> Device:
    return device if isinstance(device, Device) else Device(device)


def _elapsed_ms(start_ns: int) -> float:
    return (time.perf_counter_ns() - start_ns) / 1e6
