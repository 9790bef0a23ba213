"""One imported table (:class:`Table`) and its zero-copy views: a memoryview, a NumPy array, a PyTorch tensor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from .. import _memory, _wire, errors as E
from .attachment import _Export

if TYPE_CHECKING:
    from .owner import TablesOwner


class Table:
    """One imported table: ``name``, ``dtype`` (the safetensors dtype string), ``shape``, ``nbytes``,
    ``digest`` (the daemon's engram digest v1), ``backend``, ``numa_node``, ``device`` (the GPU the table's
    memory lives on, or None for host memory), ``region`` (its first region, -1 for none) and ``regions`` (every
    region it lies in: more than one for a cuda-vmm host table over a run of regions, docs/protocol.md, mapped
    back to back so that its bytes are contiguous), and its views: ``cpu_address``/``gpu_address`` (0 when it has
    none), :meth:`to_torch`, :meth:`to_numpy`, :meth:`buffer`."""

    def __init__(self, imported: "TablesOwner", entry: _wire.TableEntry, cpu_address: int, gpu_address: int,
                 digest: Optional[int], backend: str, regions: Optional[range] = None):
        self._imported = imported
        self.name = entry.name
        self.dtype = entry.dtype
        self.shape = tuple(entry.shape)
        self.nbytes = entry.nbytes
        self.region = entry.region
        self.regions = tuple(regions if regions is not None else
                             (range(entry.region, entry.region + 1) if entry.region >= 0 else ()))
        self.offset = entry.offset
        self.backend = backend
        self.numa_node = entry.numa_node
        self.device = entry.device if entry.device >= 0 else None
        self.cpu_address = cpu_address
        self.gpu_address = gpu_address
        self._digest = digest

    def __repr__(self) -> str:
        return (f"Table({self.name!r}, {self.dtype}, {list(self.shape)}, {self.nbytes} bytes, {self.backend}, "
                f"numa_node={self.numa_node}, device={self.device})")

    @property
    def digest(self) -> int:
        """The engram digest v1 of the bytes: the daemon's, or for a load from disk computed here on first use
        (in pure Python; slow for large tables)."""
        if self._digest is None:
            from .. import digests
            self._digest = digests.engram_digest(self.buffer())
        return self._digest

    @property
    def digest_hex(self) -> str:
        return f"{self.digest:016x}"

    @property
    def has_cpu_view(self) -> bool:
        return self.cpu_address != 0 or (self.nbytes == 0 and self.device is None)

    @property
    def has_gpu_view(self) -> bool:
        return self.gpu_address != 0 or (self.nbytes == 0 and self._imported.gpu_device is not None)

    def _token(self) -> _Export:
        self._imported._check_open()
        return self._imported._attachment.export()

    def buffer(self) -> memoryview:
        """A read-only memoryview of the CPU view (format ``B``, ``nbytes`` long). Keeps the memory alive."""
        if self.nbytes == 0:
            return memoryview(b"")
        if not self.cpu_address:
            raise E.EngramHostError(f"table {self.name}: no CPU view ({self.backend}; import with cpu_view=True)")
        arr = _memory.view(self.cpu_address, self.nbytes)
        arr._engram_owner = self._token()  # the array holds the token; the memoryview holds the array
        return memoryview(arr).cast("B").toreadonly()

    def to_numpy(self):
        """A read-only NumPy array over the CPU view with the checkpoint's dtype and shape; dtypes NumPy lacks
        (F8_*, BF16, F4, F6_*) come back as uint8 of shape [nbytes]. Zero-copy; keeps the memory alive."""
        from .. import _tensors
        if self.nbytes and not self.cpu_address:
            raise E.EngramHostError(f"table {self.name}: no CPU view ({self.backend}; import with cpu_view=True)")
        return _tensors.numpy_array(self.cpu_address, self.nbytes, self.dtype, self.shape, self._token())

    def to_torch(self, cpu: Optional[bool] = None):
        """A zero-copy PyTorch tensor with the checkpoint's dtype and shape: on the GPU view when the import
        named a device, on the CPU view when it did not or when ``connect(cpu_view=True)``; ``cpu`` overrides.
        Dtypes the running PyTorch lacks come back as uint8 of shape [nbytes] (docs/python.md). The tensor keeps
        the mapping, registration or import alive until it is freed. Writing through it is an error: SIGSEGV on
        the CPU, a sticky CUDA error on the GPU."""
        from .. import _tensors
        if cpu is None:
            cpu = self._imported.cpu_view or self._imported.gpu_device is None
        token = self._token()
        if cpu:
            if self.nbytes and not self.cpu_address:
                raise E.EngramHostError(f"table {self.name}: no CPU view ({self.backend}; import with cpu_view=True)")
            return _tensors.torch_tensor(self.cpu_address, self.nbytes, self.dtype, self.shape, None, token)
        if self.nbytes and not self.gpu_address:
            raise E.EngramHostError(f"table {self.name}: no GPU view (import with device=N)")
        return _tensors.torch_tensor(self.gpu_address, self.nbytes, self.dtype, self.shape,
                                     self._imported.gpu_device, token)
