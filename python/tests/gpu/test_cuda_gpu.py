"""_cuda and _tensors on a real NVIDIA GPU with PyTorch: a sealed memfd registered read-only, cuda-vmm host and
device allocations made here (the daemon's side), exported as fds and imported, zero-copy tensors over both, a
kernel's write into a read-only import failing (in a child process), and lifetimes: the tensor keeps the import,
the import's release frees the GPU memory, nothing leaks fds. Every test is skipped, saying why, without a
usable CUDA driver or without PyTorch."""

from __future__ import annotations

import ctypes
import fcntl
import gc
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import unittest
import weakref

import engram_host
from engram_host import _cuda, _memory, _tensors

try:
    import torch
except ImportError:
    torch = None


def _skip_reason() -> str:
    """Why this module cannot run here; empty when it can."""
    if not _cuda.available():
        return f"no usable CUDA driver: {_cuda.unavailable_reason()}"
    if torch is None:
        return "PyTorch is not installed (the GPU tests build torch tensors)"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA device (a CPU-only build?)"
    return ""


SKIP_REASON = _skip_reason()

ORDINAL = 0
PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(engram_host.__file__)))  # python/ (_cuda is a package)

F_ADD_SEALS = getattr(fcntl, "F_ADD_SEALS", 1033)
SEALS = 0x1 | 0x2 | 0x4 | 0x10  # SEAL, SHRINK, GROW, FUTURE_WRITE: what the daemon sets


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def sealed_memfd_mapping(data: bytes):
    """A memfd holding ``data``, sealed as the daemon seals it, mapped PROT_READ|MAP_SHARED; the fd is closed (the
    mapping keeps the memory). Returns the address; munmap it."""
    fd = os.memfd_create("engram-gpu-test", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, len(data))
        os.pwrite(fd, data, 0)
        fcntl.fcntl(fd, F_ADD_SEALS, SEALS)
        return _memory.map_read_only(fd, len(data))
    finally:
        os.close(fd)


def granularity(device: _cuda.Device, kind: str) -> int:
    lib = _cuda._driver()
    prop = _allocation_prop(device, kind)
    out = ctypes.c_size_t()
    with device.current():
        _cuda._check(lib.cuMemGetAllocationGranularity(ctypes.byref(out), ctypes.byref(prop), 0),
                     "cuMemGetAllocationGranularity")
    return out.value


def _allocation_prop(device: _cuda.Device, kind: str) -> _cuda.CUmemAllocationProp:
    prop = _cuda.CUmemAllocationProp()
    prop.type = _cuda.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = _cuda.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    if kind == "host":
        prop.location = _cuda.CUmemLocation(_cuda.CU_MEM_LOCATION_TYPE_HOST_NUMA, max(device.host_numa_id(), 0))
    else:
        prop.location = _cuda.CUmemLocation(_cuda.CU_MEM_LOCATION_TYPE_DEVICE, device.ordinal)
    return prop


class Exported:
    """The daemon's side, done here with the driver directly: a cuMemCreate allocation (HOST_NUMA on the GPU's
    node, or on the GPU), exportable as a POSIX fd, mapped read-write for the GPU (and the CPU for host memory) so
    the test can fill it. release() unmaps and releases the test's handle; imports keep the memory alive."""

    def __init__(self, device: _cuda.Device, kind: str, size: int):
        self.device, self.kind, self.size = device, kind, size
        self.numa = max(device.host_numa_id(), 0) if kind == "host" else -1
        self.lib = _cuda._driver()
        self.handle = None
        self.va = None
        self.mapped = False
        prop = _allocation_prop(device, kind)
        try:
            with device.current():
                h = ctypes.c_uint64()
                _cuda._check(self.lib.cuMemCreate(ctypes.byref(h), size, ctypes.byref(prop), 0),
                             f"cuMemCreate({kind}, {size})")
                self.handle = h.value
                va = ctypes.c_uint64()
                _cuda._check(self.lib.cuMemAddressReserve(ctypes.byref(va), size, 0, 0, 0), "cuMemAddressReserve")
                self.va = va.value
                _cuda._check(self.lib.cuMemMap(self.va, size, 0, self.handle, 0), "cuMemMap")
                self.mapped = True
                descs = [_cuda.CUmemAccessDesc(_cuda.CUmemLocation(_cuda.CU_MEM_LOCATION_TYPE_DEVICE, device.ordinal),
                                               _cuda.CU_MEM_ACCESS_FLAGS_PROT_READWRITE)]
                if kind == "host":
                    descs.append(_cuda.CUmemAccessDesc(
                        _cuda.CUmemLocation(_cuda.CU_MEM_LOCATION_TYPE_HOST_NUMA, self.numa),
                        _cuda.CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
                array = (_cuda.CUmemAccessDesc * len(descs))(*descs)
                _cuda._check(self.lib.cuMemSetAccess(self.va, size, array, len(descs)), "cuMemSetAccess")
        except BaseException:
            self.release()
            raise

    def write(self, data: bytes) -> None:
        assert len(data) <= self.size
        buf = ctypes.create_string_buffer(data, len(data))
        with self.device.current():
            _cuda._check(self.lib.cuMemcpyHtoD_v2(self.va, buf, len(data)), "cuMemcpyHtoD_v2")

    def export(self) -> int:
        fd = ctypes.c_int(-1)
        with self.device.current():
            _cuda._check(self.lib.cuMemExportToShareableHandle(ctypes.byref(fd), self.handle,
                                                               _cuda.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                         "cuMemExportToShareableHandle")
        return fd.value

    def release(self) -> None:
        with self.device.current():
            if self.mapped:
                self.lib.cuMemUnmap(self.va, self.size)
                self.mapped = False
            if self.va is not None:
                self.lib.cuMemAddressFree(self.va, self.size)
                self.va = None
            if self.handle is not None:
                self.lib.cuMemRelease(self.handle)
                self.handle = None


class Holder:
    """Stands for the client's table: what owns the import and is kept alive by tensors."""


def expected_u8(data: bytes):
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


@unittest.skipIf(SKIP_REASON, SKIP_REASON)
class GpuTestCase(unittest.TestCase):
    """Every GPU test class derives from this one, and so is skipped with SKIP_REASON where it cannot run."""
    device: _cuda.Device

    @classmethod
    def setUpClass(cls):
        cls.device = _cuda.Device(ORDINAL)
        torch.zeros(1, device=f"cuda:{ORDINAL}").add_(1)  # torch's own lazy CUDA state, before fds are counted
        cls.g_host = granularity(cls.device, "host")
        cls.g_device = granularity(cls.device, "device")
        # one whole cycle, so that the driver's lazily opened files are open before any test counts fds
        e = Exported(cls.device, "device", cls.g_device)
        fd = e.export()
        with _cuda.VmmImport(cls.device, [(fd, cls.g_device, "device", -1)]):
            pass
        os.close(fd)
        e.release()

    def setUp(self):
        gc.collect()
        fds = open_fds()

        def no_fd_leak():
            gc.collect()
            self.assertEqual(open_fds(), fds, "fds leaked")
        self.addCleanup(no_fd_leak)


class DeviceTest(GpuTestCase):
    def test_one_device_object_per_gpu(self):
        self.assertIs(_cuda.Device(ORDINAL), self.device)
        self.assertNotEqual(self.device.context, 0)
        self.assertGreaterEqual(_cuda.device_count(), 1)
        self.assertGreaterEqual(_cuda.driver_version(), 12000)
        free, total = self.device.mem_info()
        self.assertTrue(0 < free <= total, (free, total))
        self.assertGreaterEqual(_cuda.host_numa_id(ORDINAL), -1)
        with self.assertRaises(ValueError):
            _cuda.Device(_cuda.device_count())

    def test_uuid_is_what_nvidia_smi_prints(self):
        uuid = _cuda.device_uuid(ORDINAL)
        self.assertRegex(uuid, r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
        props = torch.cuda.get_device_properties(ORDINAL)
        if hasattr(props, "uuid"):
            self.assertEqual(uuid, "GPU-" + str(props.uuid))
        smi = shutil.which("nvidia-smi")
        if smi:
            out = subprocess.run([smi, "--query-gpu=uuid", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=60)
            if out.returncode == 0:
                self.assertIn(uuid, out.stdout.split())

    def test_primary_context_is_torchs(self):
        # the context torch's runtime made current is the primary context this module pushes
        lib = _cuda._driver()
        lib.cuCtxGetCurrent.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        lib.cuCtxGetCurrent.restype = ctypes.c_int
        torch.cuda.set_device(ORDINAL)
        torch.cuda.synchronize()
        current = ctypes.c_void_p()
        _cuda._check(lib.cuCtxGetCurrent(ctypes.byref(current)), "cuCtxGetCurrent")
        self.assertEqual(current.value, self.device.context)

    def test_synchronize_from_another_thread(self):
        errors = []

        def run():
            try:
                self.device.synchronize()
                self.device.mem_info()
            except BaseException as e:  # reported below
                errors.append(e)
        t = threading.Thread(target=run)
        t.start()
        t.join()
        self.assertEqual(errors, [])


class HostRegistrationTest(GpuTestCase):
    def test_sealed_memfd_registered_read_only(self):
        size = 4 << 20
        data = os.urandom(size)
        addr = sealed_memfd_mapping(data)
        try:
            reg = _cuda.HostRegistration(self.device, addr, size)
            holder = Holder()
            holder.reg = reg
            t = _tensors.torch_tensor(reg.device_pointer, size, "U8", [size], ORDINAL, holder)
            self.assertEqual(t.device, torch.device(f"cuda:{ORDINAL}"))
            self.assertEqual(t.data_ptr(), reg.device_pointer)
            self.assertTrue(torch.equal(t.cpu(), expected_u8(data)))
            i32 = _tensors.torch_tensor(reg.device_pointer, size, "I32", [size // 4 // 64, 64], ORDINAL, holder)
            self.assertEqual(i32.dtype, torch.int32)
            self.assertTrue(torch.equal(i32.cpu().reshape(-1), expected_u8(data).view(torch.int32)))
            bf16 = _tensors.torch_tensor(reg.device_pointer, size, "BF16", [size // 2], ORDINAL, holder)
            self.assertTrue(torch.equal(bf16.view(torch.int16).cpu(), expected_u8(data).view(torch.int16)))
            # a kernel reads through the registration
            self.assertEqual(int(t.sum(dtype=torch.int64)), sum(data))
            del t, i32, bf16, holder
            reg.close()
            self.assertTrue(reg.closed)
            reg.close()  # idempotent
        finally:
            _memory.unmap(addr, size)

    def test_registered_in_chunks_with_one_device_pointer(self):
        size = 4 << 20
        data = os.urandom(size)
        addr = sealed_memfd_mapping(data)
        try:
            with _cuda.HostRegistration(self.device, addr, size, chunk_bytes=1 << 20) as reg:
                self.assertEqual(reg.chunks, 4)
                t = _tensors.torch_tensor(reg.device_pointer, size, "U8", [size], ORDINAL, reg)
                # kernels read across the chunks' boundaries (a copy engine transfer spanning two registrations
                # fails with CUDA_ERROR_INVALID_VALUE on driver 580, so each copy stays inside one chunk)
                expected = expected_u8(data)
                self.assertTrue(torch.equal(t, expected.to(t.device)))
                self.assertEqual(int(t.sum(dtype=torch.int64)), sum(data))
                for i in range(4):
                    part = slice(i << 20, (i + 1) << 20)
                    self.assertTrue(torch.equal(t[part].cpu(), expected[part]))
                del t
            self.assertTrue(reg.closed)
            # unregistered: the same range registers again
            _cuda.HostRegistration(self.device, addr, size).close()
        finally:
            _memory.unmap(addr, size)

    def test_closed_from_another_thread(self):
        size = 2 << 20
        addr = sealed_memfd_mapping(b"\x05" * size)
        try:
            reg = _cuda.HostRegistration(self.device, addr, size)
            errors = []

            def close():
                try:
                    reg.close()
                except BaseException as e:  # reported below
                    errors.append(e)
            t = threading.Thread(target=close)
            t.start()
            t.join()
            self.assertEqual(errors, [])
            self.assertTrue(reg.closed)
        finally:
            _memory.unmap(addr, size)

    def test_unaligned_address_refused(self):
        with self.assertRaises(ValueError):
            _cuda.HostRegistration(self.device, 4096 + 1, 4096)


class VmmImportTest(GpuTestCase):
    def test_host_and_device_regions_in_one_range(self):
        hsize, dsize = 2 * self.g_host, 2 * self.g_device
        host = Exported(self.device, "host", hsize)
        self.addCleanup(host.release)
        dev = Exported(self.device, "device", dsize)
        self.addCleanup(dev.release)
        hdata, ddata = os.urandom(hsize), os.urandom(dsize)
        host.write(hdata)
        dev.write(ddata)
        fh, fd = host.export(), dev.export()
        try:
            imp = _cuda.VmmImport(self.device, [(fh, hsize, "host", host.numa), (fd, dsize, "device", -1)])
        finally:
            os.close(fh)
            os.close(fd)
        self.assertEqual(len(imp), 2)
        self.assertEqual(imp.address_of(0), imp.range_base)
        self.assertEqual(imp.address_of(1), imp.range_base + hsize)
        self.assertGreaterEqual(imp.range_size, hsize + dsize)
        self.assertEqual(imp.numa_nodes, (host.numa, -1))
        self.assertEqual(sorted(imp.timings), ["access_ms", "import_ms", "map_ms", "reserve_ms"])
        self.assertTrue(all(v >= 0 for v in imp.timings.values()), imp.timings)

        th = _tensors.torch_tensor(imp.address_of(0), hsize, "U8", [hsize], ORDINAL, imp)
        td = _tensors.torch_tensor(imp.address_of(1), dsize, "U8", [dsize], ORDINAL, imp)
        self.assertEqual((th.data_ptr(), td.data_ptr()), (imp.address_of(0), imp.address_of(1)))
        self.assertEqual(th.device, torch.device(f"cuda:{ORDINAL}"))
        self.assertEqual(td.device, torch.device(f"cuda:{ORDINAL}"))
        self.assertTrue(torch.equal(th.cpu(), expected_u8(hdata)))
        self.assertTrue(torch.equal(td.cpu(), expected_u8(ddata)))
        f16 = _tensors.torch_tensor(imp.address_of(1), dsize, "F16", [dsize // 2], ORDINAL, imp)
        self.assertTrue(torch.equal(f16.view(torch.int16).cpu(), expected_u8(ddata).view(torch.int16)))
        scalar = _tensors.torch_tensor(imp.address_of(1), 4, "I32", [], ORDINAL, imp)
        self.assertEqual(scalar.dim(), 0)
        self.assertEqual(int(scalar), int.from_bytes(ddata[:4], "little", signed=True))
        empty = _tensors.torch_tensor(0, 0, "F8_E4M3", [0, 7], ORDINAL, None)
        self.assertEqual((tuple(empty.shape), empty.device), ((0, 7), torch.device(f"cuda:{ORDINAL}")))

        # the exporter's writes show through the import: the same memory, no copy
        host.write(b"\xAB" * 16)
        self.assertEqual(th[:16].tolist(), [0xAB] * 16)

        del th, td, f16, scalar
        imp.close()
        self.assertTrue(imp.closed)
        imp.close()
        with self.assertRaises(ValueError):
            imp.address_of(0)

    def test_cpu_view_of_host_region(self):
        import numpy
        size = self.g_host
        host = Exported(self.device, "host", size)
        self.addCleanup(host.release)
        data = os.urandom(size)
        host.write(data)
        fh = host.export()
        try:
            imp = _cuda.VmmImport(self.device, [(fh, size, "host", host.numa)], cpu_view=True)
        finally:
            os.close(fh)
        with imp:
            a = _tensors.numpy_array(imp.address_of(0), size, "U8", [size], imp)
            self.assertFalse(a.flags.writeable)
            self.assertEqual(a.tobytes(), data)
            c = _tensors.torch_tensor(imp.address_of(0), size, "I16", [size // 2], None, imp)
            self.assertEqual((c.device.type, c.data_ptr()), ("cpu", imp.address_of(0)))
            self.assertTrue(torch.equal(c, expected_u8(data).view(torch.int16)))
            g = _tensors.torch_tensor(imp.address_of(0), size, "U8", [size], ORDINAL, imp)
            self.assertTrue(torch.equal(g.cpu(), expected_u8(data)))
            del a, c, g
            self.assertIsInstance(numpy.zeros(1), numpy.ndarray)

    def test_cpu_view_of_device_region_refused(self):
        with self.assertRaises(ValueError):
            _cuda.VmmImport(self.device, [(0, self.g_device, "device", -1)], cpu_view=True)

    def test_failure_midway_undoes_everything(self):
        # region 1 claims twice its allocation's size: its import and the reserve succeed, its map fails, and
        # region 0's mapping, the range and both handles are undone
        big = 16 * self.g_device
        a = Exported(self.device, "device", big)
        b = Exported(self.device, "device", self.g_device)
        fa, fb = a.export(), b.export()
        a.release()
        b.release()
        torch.cuda.synchronize()
        free_before, _ = self.device.mem_info()  # the fds alone hold the memory now
        try:
            with self.assertRaises(_cuda.CudaError) as cm:
                _cuda.VmmImport(self.device, [(fa, big, "device", -1), (fb, 2 * self.g_device, "device", -1)])
            self.assertIn("cuMemMap(region 1", str(cm.exception))
            # a kind that does not match the allocation is refused after the import, which is undone
            with self.assertRaises(ValueError):
                _cuda.VmmImport(self.device, [(fa, big, "host", 0)])
            # an fd that is no CUDA handle
            r, w = os.pipe()
            try:
                with self.assertRaises(_cuda.CudaError) as cm:
                    _cuda.VmmImport(self.device, [(fa, big, "device", -1), (r, self.g_device, "device", -1)])
                self.assertIn("cuMemImportFromShareableHandle(region 1", str(cm.exception))
            finally:
                os.close(r)
                os.close(w)
            self.assertAlmostEqual(self.device.mem_info()[0], free_before, delta=self.g_device,
                                   msg="an undone import holds no memory")
        finally:
            os.close(fa)
            os.close(fb)
        free_after, _ = self.device.mem_info()
        self.assertGreaterEqual(free_after - free_before, big, "closing the last fd frees the allocation")

    def test_closed_from_another_thread(self):
        e = Exported(self.device, "device", self.g_device)
        self.addCleanup(e.release)
        fd = e.export()
        try:
            imp = _cuda.VmmImport(self.device, [(fd, self.g_device, "device", -1)])
        finally:
            os.close(fd)
        errors = []

        def close():
            try:
                imp.close()
            except BaseException as x:  # reported below
                errors.append(x)
        t = threading.Thread(target=close)
        t.start()
        t.join()
        self.assertEqual(errors, [])
        self.assertTrue(imp.closed)

    def test_read_write_import_is_writable(self):
        size = self.g_device
        e = Exported(self.device, "device", size)
        self.addCleanup(e.release)
        fd = e.export()
        try:
            imp = _cuda.VmmImport(self.device, [(fd, size, "device", -1)], read_only=False)
        finally:
            os.close(fd)
        with imp:
            t = _tensors.torch_tensor(imp.address_of(0), size, "U8", [size], ORDINAL, imp)
            t.fill_(9)
            torch.cuda.synchronize()
            self.assertEqual(int(t.sum(dtype=torch.int64)), 9 * size)
            del t


class TorchInterfaceTest(GpuTestCase):
    def test_torch_refuses_the_readonly_flag(self):
        # why torch_tensor passes readonly=False: torch rejects a read-only __cuda_array_interface__
        e = Exported(self.device, "device", self.g_device)
        self.addCleanup(e.release)
        with self.assertRaisesRegex(TypeError, "read only"):
            torch.as_tensor(_tensors._CudaBytes(e.va, 16, None, readonly=True))

    def test_as_tensor_keeps_the_interface_object(self):
        e = Exported(self.device, "device", self.g_device)
        self.addCleanup(e.release)
        holder = Holder()
        ref = weakref.ref(holder)
        t = _tensors.torch_tensor(e.va, self.g_device, "F32", [self.g_device // 4], ORDINAL, holder)
        view = t[8:16]
        del holder, t
        gc.collect()
        self.assertIsNotNone(ref(), "a view keeps the storage, the interface object and the owner")
        del view
        gc.collect()
        self.assertIsNone(ref())


class LifetimeTest(GpuTestCase):
    def test_tensor_keeps_the_import_and_its_release_frees_memory(self):
        size = 32 * self.g_device
        e = Exported(self.device, "device", size)
        data = bytes(range(256)) * (size // 256)
        e.write(data)
        fd = e.export()
        try:
            imp = _cuda.VmmImport(self.device, [(fd, size, "device", -1)])
        finally:
            os.close(fd)
        e.release()  # from now on only the import holds the memory
        holder = Holder()
        holder.imp = imp
        holder_ref, imp_ref = weakref.ref(holder), weakref.ref(imp)
        t = _tensors.torch_tensor(imp.address_of(0), size, "U8", [size], ORDINAL, holder)
        del holder, imp
        gc.collect()
        self.assertIsNotNone(holder_ref())
        self.assertIsNotNone(imp_ref())
        self.assertEqual(int(t.sum(dtype=torch.int64)), sum(range(256)) * (size // 256))  # a kernel reads it
        torch.cuda.synchronize()
        free_held, _ = self.device.mem_info()
        del t
        gc.collect()
        self.assertIsNone(holder_ref(), "the tensor was the last reference")
        self.assertIsNone(imp_ref(), "the import is collected with its owner")
        free_after, _ = self.device.mem_info()
        self.assertGreaterEqual(free_after - free_held, size, "the import's finalizer released the allocation")


CHILD = textwrap.dedent("""
    import importlib.util, os, sys
    sys.path.insert(0, {python_dir!r})
    spec = importlib.util.spec_from_file_location("gpu_test_helpers", {test_file!r})
    helpers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers)
    import torch
    from engram_host import _cuda, _tensors
    dev = _cuda.Device({ordinal})
    g = helpers.granularity(dev, "device")
    e = helpers.Exported(dev, "device", g)
    e.write(bytes([1]) * g)
    fd = e.export()
    imp = _cuda.VmmImport(dev, [(fd, g, "device", -1)], read_only=True)
    os.close(fd)
    t = _tensors.torch_tensor(imp.address_of(0), g, "U8", [g], {ordinal}, imp)
    print("READ", int(t[:16].sum()), flush=True)
    try:
        t.fill_(7)
        torch.cuda.synchronize()
    except Exception as x:
        print("WRITE_FAILED", type(x).__name__, str(x).splitlines()[0], flush=True)
        os._exit(3)
    print("WRITE_SUCCEEDED", int(t[:16].sum()), flush=True)
    os._exit(0)
""")


class ReadOnlyTest(GpuTestCase):
    def test_kernel_write_into_read_only_import_fails_in_the_child_only(self):
        script = CHILD.format(python_dir=PYTHON_DIR, test_file=os.path.abspath(__file__), ordinal=ORDINAL)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
        report = f"rc={out.returncode}\nstdout:\n{out.stdout}\nstderr:\n{out.stderr[-4000:]}"
        self.assertIn("READ 16", out.stdout, report)
        self.assertNotIn("WRITE_SUCCEEDED", out.stdout, report)
        self.assertEqual(out.returncode, 3, report)
        self.assertRegex(out.stdout, re.compile(r"WRITE_FAILED .*(CUDA|cuda|illegal|memory)", re.S), report)
        # this process's context is untouched by the child's fault
        self.device.synchronize()
        self.assertEqual(int(torch.ones(4, device=f"cuda:{ORDINAL}").sum()), 4)


if __name__ == "__main__":
    unittest.main()
