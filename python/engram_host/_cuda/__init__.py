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

The parts, one concern each, lowest first: ``driver`` (the library's loading, the calls' signatures, the structs and
enum values, CUresult names), ``device`` (GPUs, :class:`Device`), ``host_register`` (:class:`HostRegistration`),
``vmm`` (:class:`VmmImport`). Import from :mod:`engram_host._cuda`, which re-exports every name it had before
its parts moved (the private ``_check``, ``_driver`` and ``_probe`` too, for the tests and bench/experiments).
"""

from __future__ import annotations

from .driver import (CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED,
                     CU_MEM_ACCESS_FLAGS_PROT_READ, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                     CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                     CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_HOST, CU_MEM_LOCATION_TYPE_HOST_NUMA,
                     CU_MEMHOSTREGISTER_DEVICEMAP, CU_MEMHOSTREGISTER_PORTABLE, CU_MEMHOSTREGISTER_READ_ONLY,
                     CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS, LIBRARY, CudaError, CudaUnavailableError, CUmemAccessDesc,
                     CUmemAllocationProp, CUmemAllocFlags, CUmemLocation, CUuuid, available, error_name,
                     unavailable_reason)
from .driver import _check, _driver, _probe  # noqa: F401  (for the tests and bench/experiments)
from .device import (Device, device_attribute, device_count, device_uuid, driver_version, format_uuid,
                     host_numa_id)
from .host_register import HOST_REGISTER_CHUNK, HostRegistration
from .vmm import Region, VmmImport

__all__ = [
    "CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID", "CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED",
    "CU_MEM_ACCESS_FLAGS_PROT_READ", "CU_MEM_ACCESS_FLAGS_PROT_READWRITE", "CU_MEM_ALLOC_GRANULARITY_MINIMUM",
    "CU_MEM_ALLOCATION_TYPE_PINNED", "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR", "CU_MEM_LOCATION_TYPE_DEVICE",
    "CU_MEM_LOCATION_TYPE_HOST", "CU_MEM_LOCATION_TYPE_HOST_NUMA", "CU_MEMHOSTREGISTER_DEVICEMAP",
    "CU_MEMHOSTREGISTER_PORTABLE", "CU_MEMHOSTREGISTER_READ_ONLY", "CUDA_ERROR_INVALID_VALUE", "CUDA_SUCCESS",
    "HOST_REGISTER_CHUNK", "LIBRARY", "CUmemAccessDesc", "CUmemAllocFlags", "CUmemAllocationProp", "CUmemLocation",
    "CUuuid", "CudaError", "CudaUnavailableError", "Device", "HostRegistration", "Region", "VmmImport", "available",
    "device_attribute", "device_count", "device_uuid", "driver_version", "error_name", "format_uuid", "host_numa_id",
    "unavailable_reason",
]
