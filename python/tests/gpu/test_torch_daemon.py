"""On a GPU machine with PyTorch: a daemon process (the Java ``engram-host serve``) serves a generated checkpoint
with each backend; this process imports it with ``engram_host`` and checks, per backend:

- every table's GPU tensor, viewed as uint8, is ``torch.equal`` to the same tensor loaded by
  ``safetensors.torch.load_file`` from the checkpoint (generated FP8 bytes include NaNs: bytes are compared);
- an Engram-style lookup of 1M random rows, and docs/python.md's dequantising lookup, give identical bytes;
- the daemon is SIGKILLed while the tensors are live, and they stay equal;
- once every tensor is freed and the import closed: no fd, mapping or device memory is left;
- a write through a tensor, in a child process, is SIGSEGV on the CPU and a CUDA error on the GPU.

Backends: ``ENGRAM_GPU_BACKENDS`` (default memfd,memfd-hugetlb,cuda-vmm). The daemon: ``ENGRAM_HOST_LAUNCHER``
(the bundle's launcher on a machine without Maven) or the repository's bin/engram-host.
"""

import gc
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, ".."))

import engram_host  # noqa: E402
from engram_host import _cuda  # noqa: E402
from gpu.gpu_support import reference_checkpoint, torch_reason  # noqa: E402
from support import Daemon, fd_count, memfd_mappings  # noqa: E402

ROWS = int(os.environ.get("ENGRAM_GPU_ROWS", "1000000"))
LOOKUPS = 1 << 20
BACKENDS = [b for b in os.environ.get("ENGRAM_GPU_BACKENDS", "memfd,memfd-hugetlb,cuda-vmm").split(",") if b]


def _why_not() -> str:
    return torch_reason()


def setUpModule():
    global WORK, CKPT, REF, torch
    why = _why_not()
    if why:
        raise unittest.SkipTest(why)
    import torch
    WORK, CKPT, REF, _ = reference_checkpoint('engram-py-gpu-', ROWS, "1,14")
    torch.cuda.init()


def tearDownModule():
    shutil.rmtree(WORK, ignore_errors=True)


def u8(t):
    """The tensor's bytes as a flat uint8 tensor (a view)."""
    return t.reshape(-1).view(torch.uint8) if t.dtype != torch.uint8 else t.reshape(-1)


def engram_rows(weight, scale, ids):
    """docs/python.md's lookup: gather rows on the uint8 views, view back as FP8, dequantise."""
    w = torch.index_select(weight.view(torch.uint8), 0, ids).view(torch.float8_e4m3fn)
    s = torch.index_select(scale.view(torch.uint8), 0, ids).view(torch.float8_e8m0fnu)
    out = w.float().view(-1, scale.shape[1], 32) * s.float().unsqueeze(-1)
    return out.view(ids.shape[0], weight.shape[1]).to(torch.bfloat16)


def nvidia_mappings() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if "/dev/nvidia" in line)


class BackendCase:
    backend = None
    extra = ()

    def setUp(self):
        if self.backend not in BACKENDS:
            self.skipTest(f"{self.backend} not in ENGRAM_GPU_BACKENDS")
        self.device = _cuda.Device(0)
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # PyTorch's cached blocks would hide what the import holds
        self.fds, self.maps, self.nv = fd_count(), memfd_mappings(), nvidia_mappings()
        self.free_before = self.device.mem_info()[0]

    def check_equal(self, tensors, what):
        for name, t in tensors.items():
            ref = REF[name]
            self.assertTrue(torch.equal(u8(t), u8(ref).cuda()), f"{what}: {name} differs from safetensors")

    def check_lookup(self, tensors, ids, what):
        for layer in (1, 14):
            w = tensors[w_name(layer)]
            s = tensors[s_name(layer)]
            rw, rs = REF[w_name(layer)].cuda(), REF[s_name(layer)].cuda()
            for ours, ref in ((w, rw), (s, rs)):
                got = torch.index_select(ours.view(torch.uint8), 0, ids)
                want = torch.index_select(ref.view(torch.uint8), 0, ids)
                self.assertTrue(torch.equal(got, want), f"{what}: lookup of layer {layer} differs")
            got = engram_rows(w, s, ids[:65536])
            want = engram_rows(rw, rs, ids[:65536])
            self.assertTrue(torch.equal(got.view(torch.int16), want.view(torch.int16)),
                            f"{what}: dequantised lookup of layer {layer} differs")

    def test_tensors_lookup_sigkill_release(self):
        d = Daemon(CKPT, *self.extra, backend=self.backend)
        report = {"backend": self.backend}
        try:
            t0 = time.perf_counter()
            imported = engram_host.connect(d.socket, device=0, expect=CKPT)
            report["connect_ms"] = (time.perf_counter() - t0) * 1e3
            t0 = time.perf_counter()
            tensors = {n: t.to_torch() for n, t in imported.tables.items()}
            torch.cuda.synchronize()
            report["to_torch_ms"] = (time.perf_counter() - t0) * 1e3
            self.assertEqual(set(REF), set(tensors))
            for name, t in tensors.items():
                table = imported.tables[name]
                self.assertEqual(torch.device("cuda", 0), t.device)
                self.assertEqual(table.gpu_address, t.data_ptr(), name)
                self.assertEqual(REF[name].dtype, t.dtype, name)
                self.assertEqual(REF[name].shape, t.shape, name)
            report["backends"] = sorted({t.backend for t in imported.tables.values()})
            self.check_equal(tensors, "served")
            gen = torch.Generator(device="cuda").manual_seed(20261130)
            ids = torch.randint(0, ROWS, (LOOKUPS,), device="cuda", generator=gen)
            self.check_lookup(tensors, ids, "served")
            gone = threading.Event()
            imported.on_daemon_gone(lambda r: gone.set())
            d.kill()
            self.assertTrue(gone.wait(10), "on_daemon_gone did not fire")
            self.check_equal(tensors, "after SIGKILL")
            self.check_lookup(tensors, ids, "after SIGKILL")
            imported.close()
            self.assertFalse(imported.memory_freed)
            self.check_equal(tensors, "after close")
            del tensors, t
            gc.collect()
            self.assertTrue(imported.memory_freed)
            self.assertEqual([], imported._attachment.release_errors)
        finally:
            d.close()
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        self.assertEqual(self.fds, fd_count(), "an fd was left open")
        self.assertEqual(self.maps, memfd_mappings(), "a memfd mapping was left")
        self.assertEqual(self.nv, nvidia_mappings(), "a mapping of the GPU driver was left")
        free_after = self.device.mem_info()[0]
        report["device_free_delta_mib"] = (free_after - self.free_before) / 2**20
        self.assertGreater(free_after, self.free_before - (64 << 20), "device memory was left")
        print(f"\nGPU-RESULT {json.dumps(report)}", flush=True)

    def test_a_write_through_a_tensor(self):
        with Daemon(CKPT, *self.extra, backend=self.backend) as d:
            name = w_name(1)
            script = textwrap.dedent(f"""
                import sys, torch
                sys.path.insert(0, {os.path.join(HERE, '..', '..')!r})
                import engram_host
                imported = engram_host.connect({d.socket!r}, device=0, cpu_view={self.backend == 'cuda-vmm'})
                where = sys.argv[1]
                t = imported[{name!r}].to_torch(cpu=where == 'cpu').view(torch.uint8)
                how = sys.argv[2]
                print('writing', where, how, flush=True)
                try:
                    if how == 'kernel':
                        t[0].add_(1)  # an elementwise kernel writes through the view
                    else:
                        t[0].copy_(t[1])  # a copy (cudaMemcpy on the GPU)
                    torch.cuda.synchronize()
                except Exception as e:
                    print('ERROR', type(e).__name__, str(e).splitlines()[0], flush=True)
                    try:
                        torch.zeros(1, device='cuda').sum().item()
                        print('context still usable', flush=True)
                    except Exception as e2:
                        print('STICKY', str(e2).splitlines()[0], flush=True)
                    sys.exit(3)
                print('WROTE', flush=True)
            """)
            for where, how in (("cpu", "kernel"), ("gpu", "kernel"), ("gpu", "copy")):
                p = subprocess.run([sys.executable, "-c", script, where, how], capture_output=True, text=True,
                                   timeout=120)
                print(f"\nGPU-WRITE {self.backend} {where} {how}: rc={p.returncode} {p.stdout.strip()!r} "
                      f"{p.stderr.strip()[-300:]!r}", flush=True)
                self.assertNotIn("WROTE", p.stdout, f"{where}: a write went through")
                if where == "cpu":
                    self.assertEqual(-11, p.returncode, f"cpu: expected SIGSEGV: {p.stdout} {p.stderr[-500:]}")
                else:
                    self.assertEqual(3, p.returncode, f"gpu: expected a CUDA error: {p.stdout} {p.stderr[-500:]}")
            with engram_host.connect(d.socket, device=0) as imported:  # the daemon's bytes are unchanged
                t = imported[name].to_torch()
                self.assertTrue(torch.equal(u8(t), u8(REF[name]).cuda()))
                del t


def w_name(layer):
    return f"layers.{layer}.engram.embed.weight"


def s_name(layer):
    return f"layers.{layer}.engram.embed.scale"


class MemfdTest(BackendCase, unittest.TestCase):
    backend = "memfd"


class MemfdHugetlbTest(BackendCase, unittest.TestCase):
    backend = "memfd-hugetlb"


class CudaVmmTest(BackendCase, unittest.TestCase):
    backend = "cuda-vmm"


class CudaVmmRunTest(BackendCase, unittest.TestCase):
    """cuda-vmm host tables over 64 MiB, each split by the daemon into a run of 64 MiB regions (--region-max), which
    the client maps back to back: the inherited tests check them byte-exact on the GPU (docs/protocol.md, "A table
    over several regions")."""
    backend = "cuda-vmm"
    REGION_MAX = 64 << 20
    extra = ("--region-max", "64M")

    def test_large_tables_lie_in_runs(self):
        with Daemon(CKPT, *self.extra, backend=self.backend) as d:
            with engram_host.connect(d.socket, device=0, cpu_view=True) as imported:
                large = [t for t in imported.tables.values() if t.nbytes > self.REGION_MAX]
                if not large:
                    self.skipTest(f"no table over 64 MiB with ENGRAM_GPU_ROWS={ROWS}")
                for t in imported.tables.values():
                    want = -(-t.nbytes // self.REGION_MAX) if t.nbytes > self.REGION_MAX else 1
                    self.assertEqual(want, len(t.regions), f"{t.name}: {t.nbytes} bytes in regions {t.regions}")
                for t in large:
                    self.assertEqual(0, t.offset, t.name)
                    self.assertEqual(list(range(t.region, t.region + len(t.regions))), list(t.regions), t.name)
                    g = t.to_torch(cpu=False)
                    self.assertTrue(torch.equal(u8(g), u8(REF[t.name]).cuda()), f"{t.name}: GPU view differs")
                    c = t.to_torch(cpu=True)
                    self.assertTrue(torch.equal(u8(c), u8(REF[t.name])), f"{t.name}: CPU view differs")
                    del g, c
                print(f"\nGPU-RESULT {json.dumps({'runs': {t.name: len(t.regions) for t in large}})}", flush=True)


class DeviceTensorsTest(BackendCase, unittest.TestCase):
    """cuda-vmm host tables, and layer 14's tensors held in GPU memory by the daemon (--device-tensors)."""
    backend = "cuda-vmm"
    extra = ("--device-tensors", "layers.14.engram.*", "--gpus", "0")

    def test_device_tensors_are_on_the_gpu(self):
        with Daemon(CKPT, *self.extra, backend=self.backend) as d:
            with engram_host.connect(d.socket, device=0) as imported:
                kinds = {n: t.backend for n, t in imported.tables.items()}
                self.assertEqual("cuda-device", kinds[w_name(14)], kinds)
                self.assertEqual(0, imported[w_name(14)].device)
                self.assertEqual("cuda-vmm", kinds[w_name(1)], kinds)
                t = imported[w_name(14)].to_torch()
                self.assertTrue(torch.equal(u8(t), u8(REF[w_name(14)]).cuda()))
                del t


if __name__ == "__main__":
    unittest.main()
