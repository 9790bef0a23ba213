"""Zero-copy tensors and arrays over memory at an address: a PyTorch tensor (on a GPU or the CPU) or a read-only
NumPy array of a table's bytes, with no copy, keeping the memory's owner alive as long as any view of it lives.

torch and numpy are optional: each is imported only inside the function that needs it, and a missing one raises
ImportError naming the package to install.

dtypes are safetensors dtype strings (docs/checkpoints.md). A dtype the running library lacks (F4, F6_E2M3,
F6_E3M2 everywhere; the F8 types, BF16 and some unsigned types where the library has none) comes back as the raw
bytes: a uint8 tensor or array of shape ``[nbytes]``. :func:`torch_dtype_for` and :func:`numpy_dtype_for` say which
dtype a caller gets and whether it is exact.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any, Optional, Sequence, Tuple

from ._wire import DTYPE_BITS  # noqa: E402  (width in bits of each safetensors dtype)

# safetensors dtype -> name of the torch dtype attribute; None where torch has no dtype of that layout. (torch's
# float4_e2m1fn_x2 packs two F4 values per element, a different shape, so F4 stays raw bytes.)
_TORCH_NAMES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8",
    "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu",
    "I16": "int16", "U16": "uint16", "F16": "float16", "BF16": "bfloat16",
    "I32": "int32", "U32": "uint32", "F32": "float32",
    "I64": "int64", "U64": "uint64", "F64": "float64", "C64": "complex64",
    "F4": None, "F6_E2M3": None, "F6_E3M2": None,
}

# safetensors dtype -> numpy dtype string (little-endian, as safetensors stores); None where numpy has none.
_NUMPY_NAMES = {
    "BOOL": "|b1", "U8": "|u1", "I8": "|i1",
    "I16": "<i2", "U16": "<u2", "F16": "<f2",
    "I32": "<i4", "U32": "<u4", "F32": "<f4",
    "I64": "<i8", "U64": "<u8", "F64": "<f8", "C64": "<c8",
    "F8_E5M2": None, "F8_E4M3": None, "F8_E8M0": None, "BF16": None,
    "F4": None, "F6_E2M3": None, "F6_E3M2": None,
}


def _import_torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError("engram_host needs PyTorch for tensors: pip install torch "
                          f"(import failed: {e})") from e
    return torch


def _import_numpy():
    try:
        import numpy
    except ImportError as e:
        raise ImportError(f"engram_host needs NumPy for arrays: pip install numpy (import failed: {e})") from e
    return numpy


def _numel(dtype: str, nbytes: int, shape: Sequence[int]) -> Tuple[int, Tuple[int, ...]]:
    """Checks that ``shape`` of ``dtype`` holds exactly ``nbytes``; returns (numel, shape as a tuple)."""
    if dtype not in DTYPE_BITS:
        raise ValueError(f"unknown safetensors dtype {dtype!r}; known: {', '.join(DTYPE_BITS)}")
    dims = tuple(shape)
    for d in dims:
        if not isinstance(d, int) or isinstance(d, bool) or d < 0:
            raise ValueError(f"shape {list(dims)}: every dimension must be an int >= 0")
    if not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(f"nbytes {nbytes!r} must be an int >= 0")
    numel = math.prod(dims)
    bits = numel * DTYPE_BITS[dtype]
    if bits % 8 or bits // 8 != nbytes:
        raise ValueError(f"{dtype} {list(dims)} is {bits} bits, not the {nbytes} bytes given")
    return numel, dims


def torch_dtype_for(dtype: str) -> Tuple[Any, bool]:
    """The torch dtype a table of safetensors ``dtype`` gets from :func:`torch_tensor`, and whether it is exact.
    Not exact: ``(torch.uint8, False)``, the raw bytes, for dtypes this torch lacks."""
    torch = _import_torch()
    if dtype not in _TORCH_NAMES:
        raise ValueError(f"unknown safetensors dtype {dtype!r}; known: {', '.join(DTYPE_BITS)}")
    name = _TORCH_NAMES[dtype]
    found = getattr(torch, name, None) if name else None
    if isinstance(found, torch.dtype):
        return found, True
    return torch.uint8, False


def numpy_dtype_for(dtype: str) -> Tuple[Any, bool]:
    """The numpy dtype a table of safetensors ``dtype`` gets from :func:`numpy_array`, and whether it is exact.
    Not exact: ``(numpy.uint8, False)``, the raw bytes (numpy has no F8, BF16, F4 or F6 types)."""
    np = _import_numpy()
    if dtype not in _NUMPY_NAMES:
        raise ValueError(f"unknown safetensors dtype {dtype!r}; known: {', '.join(DTYPE_BITS)}")
    name = _NUMPY_NAMES[dtype]
    if name is None:
        return np.dtype(np.uint8), False
    return np.dtype(name), True


def _byte_array(address: int, nbytes: int, owner: Any) -> ctypes.Array:
    """A ctypes array of ``nbytes`` bytes at ``address`` (no copy) that holds a reference to ``owner``: whatever
    keeps the array alive keeps the owner alive."""
    if not isinstance(address, int) or address <= 0:
        raise ValueError(f"address {address!r} must be a positive int")
    array = (ctypes.c_ubyte * nbytes).from_address(address)
    array._engram_owner = owner
    return array


class _CudaBytes:
    """``nbytes`` bytes of GPU-visible memory at ``address``, as a ``__cuda_array_interface__`` (version 3) of uint8,
    holding a reference to ``owner``. torch.as_tensor keeps this object alive (it increments its reference count
    and decrements it in the storage's deleter), and so the owner, until the storage is freed.

    ``readonly`` is the interface's flag; torch refuses ``True`` ("the read only flag is not supported"), so
    :func:`torch_tensor` passes False for torch: read-only memory stays read-only through the GPU mapping's
    access flags, not through torch."""

    __slots__ = ("__cuda_array_interface__", "owner", "__weakref__")

    def __init__(self, address: int, nbytes: int, owner: Any, readonly: bool):
        self.owner = owner
        self.__cuda_array_interface__ = {
            "version": 3,
            "typestr": "|u1",
            "shape": (nbytes,),
            "strides": None,
            "data": (address, readonly),
        }


def torch_tensor(address: int, nbytes: int, dtype: str, shape: Sequence[int], device: Optional[int],
                 owner: Any) -> Any:
    """A torch tensor of safetensors ``dtype`` and ``shape`` over ``nbytes`` at ``address``, with no copy.

    ``device``: a CUDA ordinal (``address`` is a device pointer, or a VMM/registered address the GPU can read), or
    None for a CPU tensor (``address`` is CPU-readable). ``owner`` is kept alive for as long as the tensor or any
    view sharing its storage lives; it should own the memory (closing it when it is collected).

    The tensor's ``data_ptr()`` is ``address``. A dtype torch lacks (:func:`torch_dtype_for` says False) gives the
    uint8 tensor of the raw bytes, shape ``[nbytes]``. A scalar (shape ``()``) gives a 0-dim tensor. An empty table
    (``nbytes`` 0; ``address`` may be 0) gives an empty tensor of the right dtype and shape that touches no memory
    and keeps nothing alive.

    torch has no read-only tensors: writing into read-only memory is an error of the memory, not of torch (a
    read-only GPU mapping fails the kernel with a sticky CUDA error; a CPU tensor over a PROT_READ mapping gets
    SIGSEGV). Do not write.
    """
    torch = _import_torch()
    _numel(dtype, nbytes, shape)
    torch_dtype, exact = torch_dtype_for(dtype)
    dims = tuple(shape) if exact else (nbytes,)
    if device is not None and (not isinstance(device, int) or isinstance(device, bool) or device < 0):
        raise ValueError(f"device {device!r} must be a CUDA ordinal (int >= 0) or None for the CPU")
    where = "cpu" if device is None else f"cuda:{device}"
    if nbytes == 0:
        return torch.empty(dims, dtype=torch_dtype, device=where)

    if device is None:
        raw = torch.frombuffer(_byte_array(address, nbytes, owner), dtype=torch.uint8)
    else:
        if not isinstance(address, int) or address <= 0:
            raise ValueError(f"address {address!r} must be a positive int")
        raw = torch.as_tensor(_CudaBytes(address, nbytes, owner, readonly=False))
        if raw.device != torch.device(where):
            raise RuntimeError(f"torch placed memory at 0x{address:x} on {raw.device}, not {where}: is the address "
                               f"mapped for GPU {device}?")
    if raw.data_ptr() != address:
        raise RuntimeError(f"torch copied the memory at 0x{address:x} (data_ptr 0x{raw.data_ptr():x}); "
                           "a zero-copy view was expected")
    tensor = raw if torch_dtype == torch.uint8 else raw.view(torch_dtype)
    return tensor.view(dims)


def numpy_array(address: int, nbytes: int, dtype: str, shape: Sequence[int], owner: Any) -> Any:
    """A read-only numpy array (``flags.writeable`` False, and it cannot be made writeable) of safetensors
    ``dtype`` and ``shape`` over ``nbytes`` of CPU-readable memory at ``address``, with no copy.

    ``owner`` is kept alive for as long as the array or any view of it lives. A dtype numpy lacks (F8_*, BF16, F4,
    F6_*; :func:`numpy_dtype_for` says False) gives the uint8 array of the raw bytes, shape ``[nbytes]``. A scalar
    gives a 0-dim array; an empty table (``nbytes`` 0; ``address`` may be 0) an empty read-only array that touches
    no memory and keeps nothing alive.
    """
    np = _import_numpy()
    _numel(dtype, nbytes, shape)
    np_dtype, exact = numpy_dtype_for(dtype)
    dims = tuple(shape) if exact else (nbytes,)
    if nbytes == 0:
        empty = np.empty(dims, dtype=np_dtype)
        empty.flags.writeable = False
        return empty
    view = memoryview(_byte_array(address, nbytes, owner)).cast("B").toreadonly()
    raw = np.frombuffer(view, dtype=np.uint8, count=nbytes)
    array = raw if np_dtype == np.uint8 else raw.view(np_dtype)
    return array.reshape(dims)
