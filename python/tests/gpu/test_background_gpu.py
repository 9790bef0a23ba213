"""``connect(device=0, background=True)`` on a GPU machine with PyTorch, per backend (``ENGRAM_GPU_BACKENDS``, default
memfd,memfd-hugetlb,cuda-vmm), against a daemon process (the Java ``engram-host serve``):

- the primary context, the registrations or VMM imports are made on the worker thread (``engram-attach``) while
  this thread starts PyTorch's CUDA and runs kernels of its own; the tensors this thread then makes from the views
  read the checkpoint's bytes (``torch.equal`` with ``safetensors.torch.load_file``, and a gather);
- a close at any moment of the attach (before, during, after) leaves no fd, memfd mapping, driver mapping or device
  memory, and the daemon sees the connection end;
- a process that exits while its attach runs (torch imported, a GPU view asked for) exits with status 0, within
  ``engram_host.client.EXIT_WAIT`` and a few seconds, saying nothing on stderr.

Prints ``GPU-RESULT {...}`` lines with the worker's timings. The daemon: ``ENGRAM_HOST_LAUNCHER`` or bin/engram-host.
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
from engram_host import _cuda, client  # noqa: E402
from gpu.gpu_support import reference_checkpoint, torch_reason  # noqa: E402
from support import Daemon, fd_count, memfd_mappings  # noqa: E402

ROWS = int(os.environ.get("ENGRAM_GPU_ROWS", "1000000"))
BACKENDS = [b for b in os.environ.get("ENGRAM_GPU_BACKENDS", "memfd,memfd-hugetlb,cuda-vmm").split(",") if b]
PYTHON_DIR = os.path.join(HERE, "..", "..")


def _why_not() -> str:
    return torch_reason()


def setUpModule():
    global WORK, CKPT, REF, torch
    why = _why_not()
    if why:
        raise unittest.SkipTest(why)
    import torch
    WORK, CKPT, REF, _ = reference_checkpoint('engram-py-gpu-background-', ROWS, "1,14")
    # no torch.cuda.init() here: the first test starts PyTorch's CUDA beside its background connect, as an engine


def tearDownModule():
    shutil.rmtree(WORK, ignore_errors=True)


def u8(t):
    return t.reshape(-1).view(torch.uint8) if t.dtype != torch.uint8 else t.reshape(-1)


def nvidia_mappings() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if "/dev/nvidia" in line)


def attach_threads() -> list:
    return [t for t in threading.enumerate() if t.name == "engram-attach"]


def connections(path: str) -> dict:
    c = engram_host.status(path)["connections"]
    return {"open": c["open"] - 1, "leases": c["leases"]}


def settled(path: str, expected: dict, seconds: float = 10) -> dict:
    deadline = time.monotonic() + seconds
    while True:
        now = connections(path)
        if now == expected or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


def engine_work():
    """What an engine does at its start while the attach runs: PyTorch's CUDA start-up, weights made on the GPU,
    a matmul or two (cuBLAS's start-up)."""
    torch.cuda.init()
    layers = [torch.nn.Linear(4096, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(8)]
    x = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16)
    for layer in layers:
        x = layer(x)
    torch.cuda.synchronize()
    return layers


class BackgroundGpuCase:
    backend = None

    @classmethod
    def setUpClass(cls):
        if cls.backend not in BACKENDS:
            raise unittest.SkipTest(f"{cls.backend} not in ENGRAM_GPU_BACKENDS")
        if cls.backend == "memfd-hugetlb":
            with open("/proc/meminfo") as f:
                info = {k: v.split() for k, v in (line.split(":", 1) for line in f)}
            free = int(info.get("HugePages_Free", ["0"])[0]) * int(info.get("Hugepagesize", ["2048"])[0]) * 1024
            need = sum(t.numel() * t.element_size() for t in REF.values()) + (64 << 20)
            if free < need:
                raise unittest.SkipTest(f"memfd-hugetlb needs {need >> 20} MiB of free huge pages, {free >> 20} MiB "
                                        "are (echo 1024 > /proc/sys/vm/nr_hugepages)")
        cls.daemon = Daemon(CKPT, backend=cls.backend)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def snapshot(self):
        gc.collect()
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()  # PyTorch's cached blocks would hide what the import holds
        return fd_count(), memfd_mappings(), nvidia_mappings(), _cuda.Device(0).mem_info()[0]

    def assert_released(self, before, what):
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        fds, maps, nv, free = self.snapshot()
        self.assertEqual(before[0], fds, f"{what}: an fd was left open")
        self.assertEqual(before[1], maps, f"{what}: a memfd mapping was left")
        self.assertEqual(before[2], nv, f"{what}: a mapping of the GPU driver was left")
        self.assertGreater(free, before[3] - (64 << 20), f"{what}: device memory was left")
        self.assertEqual([], attach_threads(), f"{what}: the worker still runs")

    def test_1_tensors_made_here_from_the_workers_attach(self):
        base = settled(self.daemon.socket, {"open": 0, "leases": 0})
        t0 = time.perf_counter()
        pending = engram_host.connect(self.daemon.socket, device=0, expect=CKPT, background=True)
        call_ms = (time.perf_counter() - t0) * 1e3
        layers = engine_work()
        work_ms = (time.perf_counter() - t0) * 1e3 - call_ms
        t1 = time.perf_counter()
        imported = pending.wait(300)
        wait_ms = (time.perf_counter() - t1) * 1e3
        del layers
        tensors = {n: t.to_torch() for n, t in imported.tables.items()}
        self.assertEqual(set(REF), set(tensors))
        for name, t in tensors.items():
            self.assertEqual(torch.device("cuda", 0), t.device)
            self.assertEqual(imported.tables[name].gpu_address, t.data_ptr())
            self.assertTrue(torch.equal(u8(t), u8(REF[name]).cuda()), f"{name} differs from safetensors")
        gen = torch.Generator(device="cuda").manual_seed(20261202)
        ids = torch.randint(0, ROWS, (1 << 20,), device="cuda", generator=gen)
        for name, t in tensors.items():
            got = torch.index_select(t.view(torch.uint8), 0, ids)
            want = torch.index_select(REF[name].view(torch.uint8).cuda(), 0, ids)
            self.assertTrue(torch.equal(got, want), f"{name}: a gather differs")
        report = {"backend": self.backend, "call_ms": round(call_ms, 3), "engine_work_ms": round(work_ms, 1),
                  "wait_ms": round(wait_ms, 3), "timings": imported.timings}
        self.assertEqual(1, settled(self.daemon.socket, {"open": 1, "leases": 1})["leases"])
        pending.close()
        self.assertTrue(imported.closed)
        self.assertFalse(imported.memory_freed, "the tensors hold the memory")
        del tensors, t, got, want, ids
        gc.collect()
        self.assertTrue(imported.memory_freed)
        self.assertEqual([], imported._attachment.release_errors)
        self.assertEqual(base, settled(self.daemon.socket, base))
        print(f"\nGPU-RESULT background {json.dumps(report)}", flush=True)

    def test_2_a_close_at_any_moment_of_the_attach_leaves_nothing(self):
        torch.cuda.init()
        base = settled(self.daemon.socket, {"open": 0, "leases": 0})
        with engram_host.connect(self.daemon.socket, device=0) as imported:  # how long the whole attach takes here
            total = imported.timings["total_ms"] / 1e3
        before = self.snapshot()
        landed = []
        for fraction in (0.0, 0.1, 0.3, 0.6, 1.5):
            pending = engram_host.connect(self.daemon.socket, device=0, background=True)
            time.sleep(total * fraction)
            landed.append("finished" if pending.ready() else "attaching")
            pending.close()
            self.assert_released(before, f"closed at {fraction:g} of the attach")
            self.assertEqual(base, settled(self.daemon.socket, base))
        print(f"\nGPU-RESULT close-mid-attach {json.dumps({'backend': self.backend, 'attach_s': total, 'landed': landed})}",
              flush=True)
        self.assertIn("attaching", landed)

    def test_3_a_process_exiting_during_its_attach(self):
        base = settled(self.daemon.socket, {"open": 0, "leases": 0})
        script = textwrap.dedent(f"""
            import sys, time, torch
            sys.path.insert(0, {PYTHON_DIR!r})
            import engram_host
            p = engram_host.connect({self.daemon.socket!r}, device=0, background=True)
            torch.cuda.init()
            time.sleep(float(sys.argv[1]))
            print("ready" if p.ready() else "attaching", time.time(), flush=True)
        """)
        results = []
        for delay in ("0", "0.05", "0.3"):
            p = subprocess.run([sys.executable, "-c", script, delay], capture_output=True, text=True, timeout=120)
            ended = time.time()
            state, _, printed = p.stdout.strip().partition(" ")
            exit_s = ended - float(printed) if printed else None
            results.append({"delay": delay, "rc": p.returncode, "state": state, "exit_s": exit_s})
            self.assertEqual(0, p.returncode, p.stderr[-2000:])
            said = [line for line in p.stderr.splitlines()
                    if line.startswith("engram_host") or "Traceback" in line or "Fatal Python error" in line]
            self.assertEqual([], said, "the exit says nothing of the import: " + p.stderr[-2000:])
            self.assertLess(exit_s, client.EXIT_WAIT + 5, "the exit waits for no attach")
            self.assertEqual(base, settled(self.daemon.socket, base), "the daemon saw the connection end")
        print(f"\nGPU-RESULT exit-mid-attach {json.dumps({'backend': self.backend, 'runs': results})}", flush=True)


class MemfdBackgroundTest(BackgroundGpuCase, unittest.TestCase):
    backend = "memfd"


class MemfdHugetlbBackgroundTest(BackgroundGpuCase, unittest.TestCase):
    backend = "memfd-hugetlb"


class CudaVmmBackgroundTest(BackgroundGpuCase, unittest.TestCase):
    backend = "cuda-vmm"


if __name__ == "__main__":
    unittest.main()
