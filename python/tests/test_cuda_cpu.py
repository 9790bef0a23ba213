"""_cuda and _tensors without a GPU: the driver's absence, error messages, struct layouts, and zero-copy NumPy
(and, where PyTorch is installed, CPU torch) views over an anonymous mapping, with their owners' lifetimes."""

from __future__ import annotations

import ctypes
import gc
import mmap
import os
import unittest
import weakref

from engram_host import _cuda, _memory, _tensors

try:
    import numpy
except ImportError:  # pragma: no cover - numpy is expected in CI
    numpy = None

try:
    import torch
except ImportError:
    torch = None



class AnonymousMapping:
    """An anonymous private read-write mapping of ``size`` bytes (libc mmap), unmapped by close()."""

    def __init__(self, size: int):
        self.address = _memory.map_anonymous(size)
        self.size = size

    def write(self, data: bytes, offset: int = 0) -> None:
        ctypes.memmove(self.address + offset, data, len(data))

    def close(self) -> None:
        if self.address:
            _memory.unmap(self.address, self.size)
            self.address = 0


class Owner:
    """Stands for whatever owns the memory (a table's import); the tests watch it with a weakref."""


class CudaAvailabilityTest(unittest.TestCase):
    def test_missing_library_gives_a_reason_and_no_exception(self):
        lib, reason, names = _cuda._probe("/nonexistent/engram-test/libcuda.so.1")
        self.assertIsNone(lib)
        self.assertIsNone(names)
        self.assertIn("libcuda.so.1", reason)
        self.assertIn("cannot open shared object file", reason)

    def test_this_machine_matches_its_driver(self):
        # available() never raises; without a driver it is False with a reason, and every driver call says so
        ok = _cuda.available()
        reason = _cuda.unavailable_reason()
        if ok:
            self.assertEqual(reason, "")
            self.assertGreaterEqual(_cuda.device_count(), 1)
            return
        self.assertTrue(reason)
        self.assertIn("libcuda.so.1", reason)
        with self.assertRaises(_cuda.CudaUnavailableError) as cm:
            _cuda.Device(0)
        self.assertEqual(str(cm.exception), reason)
        with self.assertRaises(_cuda.CudaUnavailableError):
            _cuda.device_count()
        with self.assertRaises(_cuda.CudaUnavailableError):
            _cuda.VmmImport(0, [(3, 2 << 20, "host", 0)])
        with self.assertRaises(_cuda.CudaUnavailableError):
            _cuda.HostRegistration(0, mmap.PAGESIZE, mmap.PAGESIZE)


class CudaErrorTest(unittest.TestCase):
    def test_message_names_call_number_and_name(self):
        e = _cuda.CudaError("cuMemMap(va=0x7f0000000000, size=2097152)", 1)
        self.assertEqual(str(e), "cuMemMap(va=0x7f0000000000, size=2097152) failed: 1 CUDA_ERROR_INVALID_VALUE")
        self.assertEqual((e.call, e.result, e.result_name), ("cuMemMap(va=0x7f0000000000, size=2097152)", 1,
                                                             "CUDA_ERROR_INVALID_VALUE"))

    def test_known_and_unknown_codes(self):
        self.assertEqual(_cuda.error_name(2), "CUDA_ERROR_OUT_OF_MEMORY")
        self.assertEqual(_cuda.error_name(801), "CUDA_ERROR_NOT_SUPPORTED")
        self.assertEqual(str(_cuda.CudaError("cuInit(0)", 100)), "cuInit(0) failed: 100 CUDA_ERROR_NO_DEVICE")
        self.assertEqual(str(_cuda.CudaError("cuFoo()", 123456)), "cuFoo() failed: 123456 (unknown CUresult)")

    def test_hint_follows_the_result(self):
        e = _cuda.CudaError("cuMemHostRegister_v2(0x1000, size=4096, READ_ONLY|DEVICEMAP|PORTABLE)", 1, "no support")
        self.assertTrue(str(e).endswith("failed: 1 CUDA_ERROR_INVALID_VALUE; no support"), str(e))

    def test_check_raises_only_on_failure(self):
        _cuda._check(0, "cuCtxSynchronize()")
        with self.assertRaises(_cuda.CudaError) as cm:
            _cuda._check(2, lambda: "cuMemCreate(size=4096)")
        self.assertEqual(str(cm.exception), "cuMemCreate(size=4096) failed: 2 CUDA_ERROR_OUT_OF_MEMORY")

    def test_pickles(self):
        import pickle
        e = pickle.loads(pickle.dumps(_cuda.CudaError("cuMemUnmap(va=0x10, size=16)", 1)))
        self.assertEqual(str(e), "cuMemUnmap(va=0x10, size=16) failed: 1 CUDA_ERROR_INVALID_VALUE")


class CudaStructsTest(unittest.TestCase):
    """The layouts of CUDA 13's cuda.h on x86-64 (shared/reference/native-facts.md)."""

    def test_sizes_and_offsets(self):
        self.assertEqual(ctypes.sizeof(_cuda.CUmemLocation), 8)
        self.assertEqual(_cuda.CUmemLocation.id.offset, 4)
        self.assertEqual(ctypes.sizeof(_cuda.CUmemAllocationProp), 32)
        P = _cuda.CUmemAllocationProp
        self.assertEqual([P.type.offset, P.requestedHandleTypes.offset, P.location.offset,
                          P.win32HandleMetaData.offset, P.allocFlags.offset], [0, 4, 8, 16, 24])
        self.assertEqual(ctypes.sizeof(_cuda.CUmemAccessDesc), 12)
        self.assertEqual(_cuda.CUmemAccessDesc.flags.offset, 8)
        self.assertEqual(ctypes.sizeof(_cuda.CUuuid), 16)

    def test_uuid_format(self):
        raw = bytes(range(16))
        self.assertEqual(_cuda.format_uuid(raw), "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f")


@unittest.skipIf(numpy is None, "numpy is not installed")
class NumpyArrayTest(unittest.TestCase):
    def setUp(self):
        self.mapping = AnonymousMapping(1 << 16)
        self.addCleanup(self.mapping.close)

    def test_zero_copy_read_only_f32(self):
        values = numpy.arange(64, dtype="<f4")
        self.mapping.write(values.tobytes())
        a = _tensors.numpy_array(self.mapping.address, 256, "F32", [8, 8], Owner())
        self.assertEqual(a.__array_interface__["data"][0], self.mapping.address)
        self.assertEqual(a.shape, (8, 8))
        self.assertEqual(a.dtype, numpy.dtype("<f4"))
        self.assertTrue(numpy.array_equal(a.ravel(), values))
        self.assertFalse(a.flags.writeable)
        with self.assertRaises(ValueError):
            a[0, 0] = 1.0
        with self.assertRaises(ValueError):
            a.flags.writeable = True
        # the same bytes, seen after a write through the mapping: no copy was made
        self.mapping.write(numpy.float32(-3.5).tobytes(), offset=4)
        self.assertEqual(a[0, 1], -3.5)

    def test_every_dtype(self):
        for dtype, bits in _tensors.DTYPE_BITS.items():
            with self.subTest(dtype=dtype):
                numel = 16
                nbytes = numel * bits // 8
                a = _tensors.numpy_array(self.mapping.address, nbytes, dtype, [numel], None)
                np_dtype, exact = _tensors.numpy_dtype_for(dtype)
                self.assertEqual(a.__array_interface__["data"][0], self.mapping.address)
                self.assertEqual(a.dtype, np_dtype)
                self.assertFalse(a.flags.writeable)
                if exact:
                    self.assertEqual(a.shape, (numel,))
                else:
                    self.assertEqual(np_dtype, numpy.uint8)
                    self.assertEqual(a.shape, (nbytes,))

    def test_dtype_table(self):
        expect_exact = {"BOOL": "|b1", "U8": "|u1", "I8": "|i1", "I16": "<i2", "U16": "<u2", "F16": "<f2",
                        "I32": "<i4", "U32": "<u4", "F32": "<f4", "I64": "<i8", "U64": "<u8", "F64": "<f8",
                        "C64": "<c8"}
        for dtype in _tensors.DTYPE_BITS:
            np_dtype, exact = _tensors.numpy_dtype_for(dtype)
            if dtype in expect_exact:
                self.assertTrue(exact, dtype)
                self.assertEqual(np_dtype, numpy.dtype(expect_exact[dtype]), dtype)
            else:
                self.assertFalse(exact, dtype)
                self.assertEqual(np_dtype, numpy.dtype("u1"), dtype)
        with self.assertRaises(ValueError):
            _tensors.numpy_dtype_for("F128")

    def test_scalar(self):
        self.mapping.write(numpy.int64(-42).tobytes())
        a = _tensors.numpy_array(self.mapping.address, 8, "I64", [], Owner())
        self.assertEqual(a.shape, ())
        self.assertEqual(a.ndim, 0)
        self.assertEqual(int(a), -42)
        self.assertEqual(a.__array_interface__["data"][0], self.mapping.address)

    def test_empty_touches_no_memory(self):
        owner = Owner()
        ref = weakref.ref(owner)
        a = _tensors.numpy_array(0, 0, "BF16", [0, 4], owner)
        self.assertEqual(a.shape, (0,))  # raw bytes: BF16 is no numpy dtype
        b = _tensors.numpy_array(0, 0, "F32", [3, 0], owner)
        self.assertEqual((b.shape, b.dtype, b.flags.writeable), ((3, 0), numpy.dtype("<f4"), False))
        del owner
        gc.collect()
        self.assertIsNone(ref(), "an empty array keeps nothing alive")

    def test_size_must_match(self):
        with self.assertRaises(ValueError):
            _tensors.numpy_array(self.mapping.address, 12, "F32", [4], None)
        with self.assertRaises(ValueError):
            _tensors.numpy_array(self.mapping.address, 3, "F4", [5], None)  # 20 bits: not a whole byte
        with self.assertRaises(ValueError):
            _tensors.numpy_array(self.mapping.address, 4, "F32", [-1], None)
        with self.assertRaises(ValueError):
            _tensors.numpy_array(self.mapping.address, 4, "X99", [1], None)
        with self.assertRaises(ValueError):
            _tensors.numpy_array(0, 4, "F32", [1], None)

    def test_sub_byte_dtypes_are_raw_bytes(self):
        a = _tensors.numpy_array(self.mapping.address, 3, "F6_E2M3", [4], None)
        self.assertEqual((a.shape, a.dtype), ((3,), numpy.dtype("u1")))
        b = _tensors.numpy_array(self.mapping.address, 4, "F4", [2, 4], None)
        self.assertEqual((b.shape, b.dtype), ((4,), numpy.dtype("u1")))

    def test_owner_lives_while_any_view_does(self):
        owner = Owner()
        ref = weakref.ref(owner)
        a = _tensors.numpy_array(self.mapping.address, 64, "I32", [4, 4], owner)
        del owner
        gc.collect()
        self.assertIsNotNone(ref())
        row = a[1]  # a view of a view
        del a
        gc.collect()
        self.assertIsNotNone(ref(), "a view keeps the owner")
        del row
        gc.collect()
        self.assertIsNone(ref(), "the owner is collected once no view is left")


@unittest.skipIf(torch is None, "PyTorch is not installed here (pip install torch to run the CPU tensor tests)")
class TorchCpuTensorTest(unittest.TestCase):
    def setUp(self):
        self.mapping = AnonymousMapping(1 << 16)
        self.addCleanup(self.mapping.close)

    def test_zero_copy_f32(self):
        self.mapping.write(bytes(range(64)))
        t = _tensors.torch_tensor(self.mapping.address, 64, "F32", (4, 4), None, Owner())
        self.assertEqual(t.data_ptr(), self.mapping.address)
        self.assertEqual((tuple(t.shape), t.dtype, t.device.type), ((4, 4), torch.float32, "cpu"))
        self.assertEqual(bytes(t.view(torch.uint8).reshape(-1).tolist()), bytes(range(64)))

    def test_dtype_table(self):
        names = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "F8_E5M2": "float8_e5m2",
                 "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu", "I16": "int16", "U16": "uint16",
                 "F16": "float16", "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float32",
                 "I64": "int64", "U64": "uint64", "F64": "float64", "C64": "complex64"}
        for dtype in _tensors.DTYPE_BITS:
            got, exact = _tensors.torch_dtype_for(dtype)
            expected = getattr(torch, names.get(dtype, ""), None) if dtype in names else None
            if isinstance(expected, torch.dtype):
                self.assertEqual((got, exact), (expected, True), dtype)
            else:
                self.assertEqual((got, exact), (torch.uint8, False), dtype)

    def test_every_dtype(self):
        for dtype, bits in _tensors.DTYPE_BITS.items():
            with self.subTest(dtype=dtype):
                nbytes = 16 * bits // 8
                t = _tensors.torch_tensor(self.mapping.address, nbytes, dtype, [16], None, None)
                got, exact = _tensors.torch_dtype_for(dtype)
                self.assertEqual(t.data_ptr(), self.mapping.address)
                self.assertEqual(t.dtype, got)
                self.assertEqual(tuple(t.shape), (16,) if exact else (nbytes,))

    def test_scalar_and_empty(self):
        self.mapping.write(numpy.float64(2.5).tobytes() if numpy is not None else b"\0" * 6 + b"\x04\x40")
        s = _tensors.torch_tensor(self.mapping.address, 8, "F64", [], None, Owner())
        self.assertEqual((s.dim(), float(s)), (0, 2.5))
        owner = Owner()
        ref = weakref.ref(owner)
        e = _tensors.torch_tensor(0, 0, "BF16", [2, 0], None, owner)
        self.assertEqual((tuple(e.shape), e.dtype), ((2, 0), torch.bfloat16))
        del owner
        gc.collect()
        self.assertIsNone(ref())

    def test_owner_lives_while_any_view_does(self):
        owner = Owner()
        ref = weakref.ref(owner)
        t = _tensors.torch_tensor(self.mapping.address, 64, "I16", [32], None, owner)
        del owner
        gc.collect()
        self.assertIsNotNone(ref())
        part = t[4:8]
        del t
        gc.collect()
        self.assertIsNotNone(ref(), "a view keeps the owner")
        del part
        gc.collect()
        self.assertIsNone(ref())


if __name__ == "__main__":
    unittest.main()
