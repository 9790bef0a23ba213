"""The CUDA driver through ctypes on ``libcuda.so.1``: the enum values and structs this package passes, every call's
signature, the driver's loading (on first use, under a lock; nothing at import), :func:`available` and
:func:`unavailable_reason`, and the naming of CUresult codes (:class:`CudaError`, :func:`error_name`)."""

from __future__ import annotations

import ctypes
import threading
from typing import Callable, Dict, Optional, Tuple, Union

from ..errors import CudaUnavailable, EngramHostError

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


def gpu_view_refusal() -> str:
    """The one line a connect or a disk load that asked for a GPU view (``device=N``) raises where CUDA cannot be
    used: the reason, then the way out (CPU views need no driver)."""
    return f"a GPU view needs CUDA: {unavailable_reason()}; for CPU views only, connect with device=None"


def _driver() -> ctypes.CDLL:
    """The loaded driver with every call bound (argtypes set, CUresult returned), for this package's code and its
    tests. Raises :class:`CudaUnavailableError` with the reason when there is none."""
    _ensure_loaded()
    if _lib is None:
        raise CudaUnavailableError(_reason or "CUDA is not available")
    return _lib
