"""The CUDA driver API through ctypes on ``libcuda.so.1``: what a client needs to give a GPU (and, for cuda-vmm
host regions, the CPU) access to the tables a daemon hands out (docs/protocol.md, "How to map a region").

Nothing here runs at import: the driver is loaded, initialised and its functions bound on first use, under a
lock. On a machine without a driver or a GPU :func:`available` is false and :func:`unavailable_reason` says why;
every call that needs the driver then raises :class:`CudaUnavailableError` with that reason.

Contexts: every call that needs one runs in the device's *primary* context (the one the CUDA runtime, and so
PyTorch, uses), pushed onto the calling thread's context stack for the call and popped after it. So device
pointers made here work in PyTorch's kernels, and any thread (a finalizer's too) may use or close any object.

Owners: :class:`Device` holds one retain of a primary context; :class:`HostRegistration` one page-locked
registration of a host mapping; :class:`VmmImport` the imported handles, the one reserved VA range and the
mappings of a set of cuda-vmm fds. Each frees what it holds exactly once, on ``close()`` or, failing that, when it
is garbage collected (not at interpreter exit: the process's end frees everything). A constructor that fails
half-way undoes what it did before raising.
"""

from __future__ import annotations

import ctypes
import mmap
import threading
import time
import weakref
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import _regions
from .errors import CudaUnavailable, EngramHostError

LIBRARY = "libcuda.so.1"

# CUresult codes this module names itself when the driver cannot (not loaded, or an unknown code).
CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
_KNOWN_ERRORS: Dict[int, str] = {
    0: "CUDA_SUCCESS",
    1: "CUDA_ERROR_INVALID_VALUE",
    2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    4: "CUDA_ERROR_DEINITIALIZED",
    34: "CUDA_ERROR_STUB_LIBRARY",
    35: "CUDA_ERROR_INSUFFICIENT_DRIVER",
    36: "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
    46: "CUDA_ERROR_DEVICE_UNAVAILABLE",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    201: "CUDA_ERROR_INVALID_CONTEXT",
    304: "CUDA_ERROR_OPERATING_SYSTEM",
    400: "CUDA_ERROR_INVALID_HANDLE",
    500: "CUDA_ERROR_NOT_FOUND",
    700: "CUDA_ERROR_ILLEGAL_ADDRESS",
    712: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
    713: "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
    719: "CUDA_ERROR_LAUNCH_FAILED",
    800: "CUDA_ERROR_NOT_PERMITTED",
    801: "CUDA_ERROR_NOT_SUPPORTED",
    999: "CUDA_ERROR_UNKNOWN",
}

# Enum values of CUDA 13's cuda.h (docs: shared/reference/native-facts.md).
CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_LOCATION_TYPE_HOST = 2
CU_MEM_LOCATION_TYPE_HOST_NUMA = 3
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0
CU_MEM_ACCESS_FLAGS_PROT_READ = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEMHOSTREGISTER_PORTABLE = 0x1
CU_MEMHOSTREGISTER_DEVICEMAP = 0x2
CU_MEMHOSTREGISTER_READ_ONLY = 0x8
CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED = 113
CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID = 134

#: The largest piece one cuMemHostRegister call is given (a single call of 512 GiB or more fails on r580 drivers).
HOST_REGISTER_CHUNK = 64 << 30

_CUdevice = ctypes.c_int
_CUcontext = ctypes.c_void_p
_CUdeviceptr = ctypes.c_uint64
_CUhandle = ctypes.c_uint64  # CUmemGenericAllocationHandle


class CUmemLocation(ctypes.Structure):
    """8 bytes: type @0, id @4 (a device ordinal for DEVICE, a NUMA node for HOST_NUMA)."""
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class CUmemAllocFlags(ctypes.Structure):
    """The allocFlags member of CUmemAllocationProp, 8 bytes, left zero."""
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class CUmemAllocationProp(ctypes.Structure):
    """32 bytes: type @0, requestedHandleTypes @4, location @8, win32HandleMetaData @16, allocFlags @24."""
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", CUmemLocation),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", CUmemAllocFlags)]


class CUmemAccessDesc(ctypes.Structure):
    """12 bytes: location @0, flags @8."""
    _fields_ = [("location", CUmemLocation), ("flags", ctypes.c_int)]


class CUuuid(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * 16)]


_P = ctypes.POINTER
_size_t = ctypes.c_size_t
_uint = ctypes.c_uint
_ull = ctypes.c_ulonglong

# name -> (argtypes); every function returns a CUresult (int). Versioned names where the driver has them.
_SIGNATURES: Dict[str, list] = {
    "cuInit": [_uint],
    "cuDriverGetVersion": [_P(ctypes.c_int)],
    "cuGetErrorName": [ctypes.c_int, _P(ctypes.c_char_p)],
    "cuDeviceGet": [_P(_CUdevice), ctypes.c_int],
    "cuDeviceGetCount": [_P(ctypes.c_int)],
    "cuDeviceGetAttribute": [_P(ctypes.c_int), ctypes.c_int, _CUdevice],
    "cuDevicePrimaryCtxRetain": [_P(_CUcontext), _CUdevice],
    "cuDevicePrimaryCtxRelease_v2": [_CUdevice],
    "cuCtxPushCurrent_v2": [_CUcontext],
    "cuCtxPopCurrent_v2": [_P(_CUcontext)],
    "cuCtxSynchronize": [],
    "cuMemGetInfo_v2": [_P(_size_t), _P(_size_t)],
    "cuMemGetAllocationGranularity": [_P(_size_t), _P(CUmemAllocationProp), ctypes.c_int],
    "cuMemCreate": [_P(_CUhandle), _size_t, _P(CUmemAllocationProp), _ull],
    "cuMemRelease": [_CUhandle],
    "cuMemGetAllocationPropertiesFromHandle": [_P(CUmemAllocationProp), _CUhandle],
    "cuMemExportToShareableHandle": [ctypes.c_void_p, _CUhandle, ctypes.c_int, _ull],
    # The second parameter is the fd itself, by value, as a void*: (void*)(uintptr_t)fd.
    "cuMemImportFromShareableHandle": [_P(_CUhandle), ctypes.c_void_p, ctypes.c_int],
    "cuMemAddressReserve": [_P(_CUdeviceptr), _size_t, _size_t, _CUdeviceptr, _ull],
    "cuMemAddressFree": [_CUdeviceptr, _size_t],
    "cuMemMap": [_CUdeviceptr, _size_t, _size_t, _CUhandle, _ull],
    "cuMemUnmap": [_CUdeviceptr, _size_t],
    "cuMemSetAccess": [_CUdeviceptr, _size_t, _P(CUmemAccessDesc), _size_t],
    "cuMemHostRegister_v2": [ctypes.c_void_p, _size_t, _uint],
    "cuMemHostUnregister": [ctypes.c_void_p],
    "cuMemHostGetDevicePointer_v2": [_P(_CUdeviceptr), ctypes.c_void_p, _uint],
    "cuMemcpyHtoD_v2": [_CUdeviceptr, ctypes.c_void_p, _size_t],
    "cuMemcpyDtoH_v2": [ctypes.c_void_p, _CUdeviceptr, _size_t],
}
# Bound when the driver has them; each has a fallback or is only informational.
_OPTIONAL_SIGNATURES: Dict[str, list] = {
    "cuDeviceGetUuid_v2": [_P(CUuuid), _CUdevice],
    "cuDeviceGetUuid": [_P(CUuuid), _CUdevice],
}


class CudaUnavailableError(CudaUnavailable):
    """CUDA cannot be used in this process; the message is :func:`unavailable_reason`."""


class CudaError(EngramHostError):
    """A driver call failed. The message names the call (with its arguments), then the CUresult's number and
    name, e.g. ``cuMemMap(va=0x7f0000000000, size=2097152) failed: 1 CUDA_ERROR_INVALID_VALUE``."""

    def __init__(self, call: str, result: int, hint: Optional[str] = None):
        self.call = call
        self.result = result
        self.result_name = error_name(result)
        self.hint = hint
        message = f"{call} failed: {result} {self.result_name}"
        super().__init__(message if hint is None else f"{message}; {hint}")

    def __reduce__(self):
        return (type(self), (self.call, self.result, self.hint))


def error_name(result: int) -> str:
    """The CUresult's name: the driver's (cuGetErrorName) when it is loaded and knows the code, else this module's
    table, else ``(unknown CUresult)``."""
    lib = _names_lib
    if lib is not None:
        out = ctypes.c_char_p()
        if lib.cuGetErrorName(result, ctypes.byref(out)) == CUDA_SUCCESS and out.value:
            return out.value.decode("ascii", "replace")
    return _KNOWN_ERRORS.get(result, "(unknown CUresult)")


def _check(result: int, call: Union[str, Callable[[], str]], hint: Optional[str] = None) -> None:
    """Raises :class:`CudaError` unless ``result`` is CUDA_SUCCESS; ``call`` may be a function that builds the
    call's description only when needed."""
    if result != CUDA_SUCCESS:
        raise CudaError(call() if callable(call) else call, result, hint)


# --- loading ---------------------------------------------------------------------------------------------------

_load_lock = threading.Lock()
_loaded = False
_lib: Optional[ctypes.CDLL] = None
_names_lib: Optional[ctypes.CDLL] = None  # any libcuda that loaded, for cuGetErrorName, even if cuInit failed
_reason: Optional[str] = None


def _bind(lib: ctypes.CDLL) -> None:
    for name, argtypes in _SIGNATURES.items():
        fn = getattr(lib, name)  # AttributeError when the driver lacks it
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
    for name, argtypes in _OPTIONAL_SIGNATURES.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int


def _probe(library: str = LIBRARY) -> Tuple[Optional[ctypes.CDLL], Optional[str], Optional[ctypes.CDLL]]:
    """Loads ``library``, binds the calls and runs cuInit; changes no module state.

    Returns ``(lib, None, lib)`` when usable, else ``(None, reason, names)`` where ``names`` is the library if it
    loaded at all (it can still name error codes)."""
    try:
        lib = ctypes.CDLL(library, mode=ctypes.RTLD_LOCAL)
    except OSError as e:
        return None, f"{e} (no NVIDIA driver on this machine?)", None
    try:
        _bind(lib)
    except AttributeError as e:
        return None, f"{library} lacks a call engram-host needs (driver older than CUDA 12.1?): {e}", None
    r = lib.cuInit(0)
    if r != CUDA_SUCCESS:
        name = _name_with(lib, r)
        hint = " (the loader found the CUDA toolkit's stub, not the driver)" if r == 34 else ""
        return None, f"{library}: cuInit(0) failed: {r} {name}{hint}", lib
    count = ctypes.c_int()
    r = lib.cuDeviceGetCount(ctypes.byref(count))
    if r != CUDA_SUCCESS:
        return None, f"{library}: cuDeviceGetCount failed: {r} {_name_with(lib, r)}", lib
    if count.value <= 0:
        return None, f"{library}: no CUDA device on this machine (cuDeviceGetCount gave {count.value})", lib
    return lib, None, lib


def _name_with(lib: ctypes.CDLL, result: int) -> str:
    out = ctypes.c_char_p()
    if lib.cuGetErrorName(result, ctypes.byref(out)) == CUDA_SUCCESS and out.value:
        return out.value.decode("ascii", "replace")
    return _KNOWN_ERRORS.get(result, "(unknown CUresult)")


def _ensure_loaded() -> None:
    global _loaded, _lib, _names_lib, _reason
    if _loaded:
        return
    with _load_lock:
        if not _loaded:
            lib, reason, names = _probe(LIBRARY)
            _lib, _reason, _names_lib = lib, reason, names
            _loaded = True


def available() -> bool:
    """True when libcuda.so.1 loaded, has every call this module binds, cuInit succeeded and there is a GPU.
    The first call loads the driver; none raises."""
    _ensure_loaded()
    return _lib is not None


def unavailable_reason() -> str:
    """Why CUDA cannot be used here (e.g. ``libcuda.so.1: cannot open shared object file: No such file or
    directory (no NVIDIA driver on this machine?)`` or ``libcuda.so.1: cuInit(0) failed: 100
    CUDA_ERROR_NO_DEVICE``); the empty string when it can."""
    _ensure_loaded()
    return _reason or ""


def _driver() -> ctypes.CDLL:
    """The loaded driver with every call bound (argtypes set, CUresult returned), for this package's code and its
    tests. Raises :class:`CudaUnavailableError` with the reason when there is none."""
    _ensure_loaded()
    if _lib is None:
        raise CudaUnavailableError(_reason or "CUDA is not available")
    return _lib


# --- devices ---------------------------------------------------------------------------------------------------

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


# --- pinned host memory ----------------------------------------------------------------------------------------

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


# --- cuda-vmm imports ------------------------------------------------------------------------------------------

#: A region to import: (fd, size in bytes, kind "host" or "device", NUMA node or -1).
Region = Tuple[int, int, str, int]
_KIND_LOCATION = {"host": CU_MEM_LOCATION_TYPE_HOST_NUMA, "device": CU_MEM_LOCATION_TYPE_DEVICE}


class _VmmState:
    """What a VmmImport holds, apart from the object, so that its finalizer can free it: imported handles, the
    reserved range, and the mappings, each freed once in the reverse order of their making."""

    def __init__(self, device: Device):
        self.device = device
        self.handles: List[int] = []
        self.range: Optional[Tuple[int, int]] = None
        self.mappings: List[Tuple[int, int]] = []
        self.lock = threading.RLock()
        self.closed = False

    def close(self, synchronize: bool = True) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            errors: List[CudaError] = []
            if synchronize and self.mappings:
                try:
                    self.device.synchronize()
                except CudaError as e:
                    errors.append(e)
            lib = self.device._lib
            pushed = self.device._push() == CUDA_SUCCESS
            try:
                for va, size in reversed(self.mappings):
                    r = lib.cuMemUnmap(va, size)
                    if r != CUDA_SUCCESS:
                        errors.append(CudaError(f"cuMemUnmap(va=0x{va:x}, size={size})", r))
                if self.range is not None:
                    va, size = self.range
                    r = lib.cuMemAddressFree(va, size)
                    if r != CUDA_SUCCESS:
                        errors.append(CudaError(f"cuMemAddressFree(va=0x{va:x}, size={size})", r))
                for h in reversed(self.handles):
                    r = lib.cuMemRelease(h)
                    if r != CUDA_SUCCESS:
                        errors.append(CudaError(f"cuMemRelease(handle=0x{h:x})", r))
            finally:
                if pushed:
                    self.device._pop()
            if errors:
                raise errors[0]


class VmmImport:
    """cuda-vmm fds imported and mapped into ONE reserved VA range, with access for GPU ``device``.

    ``regions``: ``(fd, size, kind, numa_node)`` per fd, kind ``"host"`` (a HOST_NUMA allocation) or ``"device"``
    (an allocation on GPU ``device``), size the allocation's size (a multiple of its granularity). Each fd is
    imported (cuMemImportFromShareableHandle, POSIX fd) and mapped whole at its own slot, a multiple of its kind's
    allocation granularity. The GPU gets READ access, or READWRITE when ``read_only`` is False; with ``cpu_view``
    every host region also gets CPU access (a HOST_NUMA location descriptor for the allocation's node, with the
    same flags), so :meth:`address_of` is then usable from the CPU too. A CPU view of a device region is refused.

    The fds stay the caller's: nothing here closes them, and the imports do not need them afterwards.
    :meth:`close` waits for the device (cuCtxSynchronize), unmaps each region, frees the range and releases each
    handle; it is idempotent and also runs when the object is garbage collected. If any step of the import fails,
    what was done is undone and the :class:`CudaError` raised (ValueError for regions that do not fit).

    ``timings``: milliseconds of each phase, ``import_ms``, ``reserve_ms``, ``map_ms``, ``access_ms``.
    """

    def __init__(self, device: Union[Device, int], regions: Sequence[Region], cpu_view: bool = False,
                 read_only: bool = True):
        self.device = _as_device(device)
        self.cpu_view = bool(cpu_view)
        self.read_only = bool(read_only)
        regions = [tuple(r) for r in regions]
        self._validate(regions)
        self.sizes: Tuple[int, ...] = tuple(int(r[1]) for r in regions)
        self.kinds: Tuple[str, ...] = tuple(r[2] for r in regions)
        self.timings: Dict[str, float] = {}
        state = _VmmState(self.device)
        try:
            with self.device.current():
                self._attach(state, regions)
        except BaseException:
            try:
                state.close(synchronize=False)
            except CudaError:
                pass  # the failure of the import is the one to report
            raise
        self._state = state
        self._finalizer = weakref.finalize(self, state.close)
        self._finalizer.atexit = False

    def _validate(self, regions: List[tuple]) -> None:
        if not regions:
            raise ValueError("VmmImport: no regions given")
        for i, r in enumerate(regions):
            if len(r) != 4:
                raise ValueError(f"VmmImport: region {i} is {r!r}, not (fd, size, kind, numa_node)")
            fd, size, kind, _numa = r
            if not isinstance(fd, int) or fd < 0:
                raise ValueError(f"VmmImport: region {i}: fd {fd!r} is not a file descriptor")
            if not isinstance(size, int) or size <= 0:
                raise ValueError(f"VmmImport: region {i}: size {size!r} must be a positive int")
            if kind not in _KIND_LOCATION:
                raise ValueError(f"VmmImport: region {i}: kind {kind!r} is neither 'host' nor 'device'")
            if self.cpu_view and kind == "device":
                raise ValueError(f"VmmImport: region {i} is device memory, which has no CPU view; import it "
                                 "without cpu_view")

    def _attach(self, state: _VmmState, regions: List[tuple]) -> None:
        lib = self.device._lib
        ordinal = self.device.ordinal

        start = time.perf_counter_ns()
        locations: List[CUmemLocation] = []
        for i, (fd, size, kind, _numa) in enumerate(regions):
            h = _CUhandle()
            _check(lib.cuMemImportFromShareableHandle(ctypes.byref(h), ctypes.c_void_p(fd),
                                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                   lambda: f"cuMemImportFromShareableHandle(region {i}, fd={fd}, POSIX_FILE_DESCRIPTOR)")
            state.handles.append(h.value)
            prop = CUmemAllocationProp()
            _check(lib.cuMemGetAllocationPropertiesFromHandle(ctypes.byref(prop), h.value),
                   lambda: f"cuMemGetAllocationPropertiesFromHandle(region {i}, fd={fd})")
            loc = CUmemLocation(prop.location.type, prop.location.id)
            if loc.type != _KIND_LOCATION[kind] or (kind == "device" and loc.id != ordinal):
                raise ValueError(f"VmmImport: region {i} (fd {fd}) is said to be {kind} memory but the allocation "
                                 f"is at {_describe_location(loc)}" +
                                 (f"; this import is for GPU {ordinal}" if kind == "device" else ""))
            locations.append(loc)
        self.timings["import_ms"] = _elapsed_ms(start)

        granularity: Dict[Tuple[int, int], int] = {}
        granules: List[int] = []
        for i, (loc, size) in enumerate(zip(locations, self.sizes)):
            key = (loc.type, loc.id)
            if key not in granularity:
                prop = CUmemAllocationProp()
                prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
                prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                prop.location = CUmemLocation(loc.type, loc.id)
                g = _size_t()
                _check(lib.cuMemGetAllocationGranularity(ctypes.byref(g), ctypes.byref(prop),
                                                         CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                       lambda: f"cuMemGetAllocationGranularity({_describe_location(loc)}, MINIMUM)")
                granularity[key] = g.value
            g = granularity[key]
            if size % g:
                raise ValueError(f"VmmImport: region {i}: size {size} is not a multiple of the {g}-byte allocation "
                                 f"granularity of {_describe_location(loc)} (is it the allocation's size?)")
            granules.append(g)
        offsets, total, alignment = _regions.back_to_back(self.sizes, granules)

        start = time.perf_counter_ns()
        va = _CUdeviceptr()
        _check(lib.cuMemAddressReserve(ctypes.byref(va), total, alignment, 0, 0),
               lambda: f"cuMemAddressReserve(size={total}, alignment={alignment})")
        state.range = (va.value, total)
        self.timings["reserve_ms"] = _elapsed_ms(start)
        base = va.value

        start = time.perf_counter_ns()
        for i, (h, off, size) in enumerate(zip(state.handles, offsets, self.sizes)):
            _check(lib.cuMemMap(base + off, size, 0, h, 0),
                   lambda: f"cuMemMap(region {i}, va=0x{base + off:x}, size={size})")
            state.mappings.append((base + off, size))
        self.timings["map_ms"] = _elapsed_ms(start)

        flags = CU_MEM_ACCESS_FLAGS_PROT_READ if self.read_only else CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        start = time.perf_counter_ns()
        for i, ((va_i, size), loc) in enumerate(zip(state.mappings, locations)):
            descs = [CUmemAccessDesc(CUmemLocation(CU_MEM_LOCATION_TYPE_DEVICE, ordinal), flags)]
            if self.cpu_view and loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA:
                descs.append(CUmemAccessDesc(CUmemLocation(CU_MEM_LOCATION_TYPE_HOST_NUMA, loc.id), flags))
            array = (CUmemAccessDesc * len(descs))(*descs)
            _check(lib.cuMemSetAccess(va_i, size, array, len(descs)),
                   lambda: f"cuMemSetAccess(region {i}, va=0x{va_i:x}, size={size}, "
                           + ", ".join(f"{_describe_location(d.location)}: "
                                       f"{'READ' if d.flags == CU_MEM_ACCESS_FLAGS_PROT_READ else 'READWRITE'}"
                                       for d in descs) + ")")
        self.timings["access_ms"] = _elapsed_ms(start)

        self.range_base = base
        self.range_size = total
        self._offsets = tuple(offsets)
        self.numa_nodes: Tuple[int, ...] = tuple(
            loc.id if loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA else -1 for loc in locations)

    def __len__(self) -> int:
        return len(self.sizes)

    def address_of(self, i: int) -> int:
        """The address of region ``i``'s first byte: valid on the GPU and, with ``cpu_view`` for a host region, on
        the CPU. Raises ValueError once closed."""
        if self._state.closed:
            raise ValueError("VmmImport is closed: its addresses are no longer mapped")
        return self.range_base + self._offsets[i]

    def size_of(self, i: int) -> int:
        return self.sizes[i]

    @property
    def closed(self) -> bool:
        return self._state.closed

    def close(self) -> None:
        """Waits for the device, unmaps every region, frees the range, releases every handle; once."""
        self._finalizer.detach()
        self._state.close()

    def __enter__(self) -> "VmmImport":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"range 0x{self.range_base:x}+{self.range_size}"
        return (f"VmmImport(GPU {self.device.ordinal}, {len(self)} regions, "
                f"{'read-only' if self.read_only else 'read-write'}{', cpu view' if self.cpu_view else ''}, {state})")


def _describe_location(loc: CUmemLocation) -> str:
    if loc.type == CU_MEM_LOCATION_TYPE_DEVICE:
        return f"GPU {loc.id}"
    if loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA:
        return f"HOST_NUMA node {loc.id}"
    if loc.type == CU_MEM_LOCATION_TYPE_HOST:
        return "HOST"
    return f"location type {loc.type} id {loc.id}"
