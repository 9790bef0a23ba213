"""cuda-vmm imports: :class:`VmmImport`, a set of cuda-vmm fds imported (cuMemImportFromShareableHandle), mapped
back to back into one reserved VA range (cuMemAddressReserve, cuMemMap) and made readable by a GPU and, for host
regions, the CPU (cuMemSetAccess)."""

from __future__ import annotations

import ctypes
import threading
import time
import weakref
from typing import Dict, List, Optional, Sequence, Tuple, Union

from .. import _regions
from .device import Device, _as_device, _elapsed_ms
from .driver import (CU_MEM_ACCESS_FLAGS_PROT_READ, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                     CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                     CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_HOST, CU_MEM_LOCATION_TYPE_HOST_NUMA,
                     CUDA_SUCCESS, CudaError, CUmemAccessDesc, CUmemAllocationProp, CUmemLocation, _CUdeviceptr,
                     _CUhandle, _check, _size_t)

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
