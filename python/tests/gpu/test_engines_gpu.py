"""On a GPU machine with PyTorch and safetensors: the tensors engram_host.engines hands each engine's patched seam
(deploy/engines/; docs/engines.md), from a real daemon process serving a generated model, per backend:

- vLLM (``engines.vllm.rank_tables``) for TP ranks 0..3 of 24 hash heads of uneven sizes, and ranks 0..4 of TP5
  (the last rank one head short): ``weight`` float8_e4m3fn ``[rows, 256]`` strides ``(256, 1)`` and
  ``weight_scale_inv`` uint8 ``[rows, 8]`` strides ``(8, 1)``, on the rank's GPU, ``is_pinned()`` False (CUDA
  tensors), their data pointers the table's GPU view plus the rank's first row (a view, no copy), and each rank's
  rows byte-equal (``torch.equal`` on uint8 views) to the same rows of ``safetensors.torch.load_file``;
- SGLang (``engines.sglang.rank_tables``) for TP ranks 0..3 of an odd row count: ``weight`` float8_e4m3fn and
  ``scale`` float8_e8m0fnu, the same checks;
- the tensors stay equal after the package's imports are closed and after the daemon is SIGKILLed, and the
  memory is released once they are freed;
- with the daemon gone, ``require`` raises and ``fallback`` returns None (the engine loads itself);
- safetensors' ``get_tensor`` (what the engines' weight iterators call) maps a table without reading its pages,
  which is why a weight loader that never touches the tensor reads none of its bytes.

Ranks run in this one process, rank r on GPU ``r % device_count`` (all on GPU 0 with one GPU). Backends:
``ENGRAM_GPU_BACKENDS`` (default memfd,memfd-hugetlb,cuda-vmm). Prints ``GPU-RESULT`` lines with what
``engines.describe`` reports, for docs/engines.md.
"""

import gc
import json
import os
import shutil
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, ".."))

import engram_host  # noqa: E402
from engram_host import engines  # noqa: E402
from engram_host.engines import sglang as eh_sglang  # noqa: E402
from engram_host.engines import vllm as eh_vllm  # noqa: E402
from gpu.gpu_support import reference_checkpoint, torch_reason  # noqa: E402
from support import Daemon  # noqa: E402

ROWS = int(os.environ.get("ENGRAM_ENGINES_ROWS", "100003"))  # odd: SGLang's TP4 split is uneven
DIM = 256
BLOCK = 32
LAYERS = (1, 14)
TP = 4
BACKENDS = [b for b in os.environ.get("ENGRAM_GPU_BACKENDS", "memfd,memfd-hugetlb,cuda-vmm").split(",") if b]
ENV = ("ENGRAM_HOST_TABLES", "ENGRAM_HOST_SOCKET", "ENGRAM_HOST_EXPECT")


def _why_not() -> str:
    return torch_reason(("float8_e8m0fnu",))


def setUpModule():
    global WORK, CKPT, REF, FILES, torch
    why = _why_not()
    if why:
        raise unittest.SkipTest(why)
    import torch
    WORK, CKPT, REF, FILES = reference_checkpoint('engram-engines-gpu-', ROWS, ",".join(map(str, LAYERS)))
    torch.cuda.init()


def tearDownModule():
    shutil.rmtree(WORK, ignore_errors=True)


def w_name(layer):
    return f"layers.{layer}.engram.embed.weight"


def s_name(layer):
    return f"layers.{layer}.engram.embed.scale"


def u8(t):
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


def head_sizes():
    """24 hash heads (n-grams 2..4 x 8 heads, as DeepSeek-V4.1), each of its own size, summing to less than ROWS
    (vLLM asserts sum(head_sizes) <= num_embeddings)."""
    base = ROWS // 24 - 5
    sizes = [base + (7 * h) % 5 for h in range(24)]
    assert sum(sizes) <= ROWS
    return sizes


def device_of(rank):
    return rank % torch.cuda.device_count()


class EngineCase:
    backend = None

    def setUp(self):
        if self.backend not in BACKENDS:
            self.skipTest(f"{self.backend} not in ENGRAM_GPU_BACKENDS")
        self.saved = {k: os.environ.get(k) for k in ENV}
        engines.forget_sessions()
        self.daemon = Daemon(CKPT, backend=self.backend)
        os.environ["ENGRAM_HOST_TABLES"] = "require"
        os.environ["ENGRAM_HOST_SOCKET"] = self.daemon.socket
        os.environ.pop("ENGRAM_HOST_EXPECT", None)

    def tearDown(self):
        engines.forget_sessions()
        self.daemon.close()
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        gc.collect()

    def sessions(self):
        return [s for s in engines._SESSIONS.values() if s is not None and s is not engines._ABSENT]

    def check_rank(self, what, weight, scale, layer, start, rows, rank, weight_dtype, scale_dtype):
        dev = torch.device("cuda", device_of(rank))
        self.assertEqual(weight_dtype, weight.dtype, what)
        self.assertEqual(scale_dtype, scale.dtype, what)
        self.assertEqual((rows, DIM), tuple(weight.shape), what)
        self.assertEqual((rows, DIM // BLOCK), tuple(scale.shape), what)
        self.assertEqual((DIM, 1), weight.stride(), what)
        self.assertEqual((DIM // BLOCK, 1), scale.stride(), what)
        self.assertTrue(weight.is_contiguous() and scale.is_contiguous(), what)
        self.assertEqual(dev, weight.device, what)
        self.assertEqual(dev, scale.device, what)
        self.assertFalse(weight.is_pinned(), what)  # what PyTorch reports for a CUDA tensor
        self.assertFalse(scale.is_pinned(), what)
        imported = engines._SESSIONS[(self.daemon.socket, CKPT, device_of(rank))]
        w, s = imported[w_name(layer)], imported[s_name(layer)]
        self.assertEqual(w.gpu_address + start * DIM, weight.data_ptr(), f"{what}: not a view of the daemon's memory")
        self.assertEqual(s.gpu_address + start * (DIM // BLOCK), scale.data_ptr(), what)
        want_w = u8(REF[w_name(layer)])[start:start + rows].to(dev)
        want_s = u8(REF[s_name(layer)])[start:start + rows].to(dev)
        self.assertTrue(torch.equal(u8(weight), want_w), f"{what}: weight rows differ from safetensors")
        self.assertTrue(torch.equal(u8(scale), want_s), f"{what}: scale rows differ from safetensors")

    def still_equal(self, taken, what):
        for (layer, start, rows, rank), (weight, scale) in taken.items():
            dev = torch.device("cuda", device_of(rank))
            self.assertTrue(torch.equal(u8(weight), u8(REF[w_name(layer)])[start:start + rows].to(dev)), what)
            self.assertTrue(torch.equal(u8(scale), u8(REF[s_name(layer)])[start:start + rows].to(dev)), what)

    def release_and_check(self, taken):
        imports = self.sessions()
        self.assertTrue(imports)
        self.still_equal(taken, "served")
        engines.forget_sessions()  # the imports closed: the tensors keep the memory
        self.still_equal(taken, "after the imports were closed")
        self.daemon.kill()
        self.still_equal(taken, "after the daemon was SIGKILLed")
        self.assertFalse(any(i.memory_freed for i in imports))
        taken.clear()
        gc.collect()
        torch.cuda.synchronize()
        self.assertTrue(all(i.memory_freed for i in imports), "the memory was not released once the views went")

    def test_vllm_ranks(self):
        sizes = head_sizes()
        taken, report = {}, {}
        for tp in (TP, 5):  # TP5: 5, 5, 5, 5 and 4 heads
            for rank in range(tp):
                start, end = eh_vllm.row_range(sizes, tp, rank)
                for layer in LAYERS:
                    got = eh_vllm.rank_tables(layer, start, end - start, DIM, BLOCK,
                                              num_embeddings=REF[w_name(layer)].shape[0], model=CKPT,
                                              device=device_of(rank))
                    self.assertIsNotNone(got)
                    weight, scale = got
                    self.check_rank(f"vllm tp{tp} rank {rank} layer {layer}", weight, scale, layer, start,
                                    end - start, rank, torch.float8_e4m3fn, torch.uint8)
                    taken[(layer, start, end - start, rank)] = got
                    if tp == TP and layer == LAYERS[0]:
                        report[rank] = {"rows": [start, end], "weight": engines.describe(weight),
                                        "weight_scale_inv": engines.describe(scale)}
        self.assertEqual({w_name(L) for L in LAYERS} | {s_name(L) for L in LAYERS}, eh_vllm.skipped_names())
        print(f"\nGPU-RESULT {json.dumps({'engine': 'vllm', 'backend': self.backend, 'ranks': report})}", flush=True)
        del got, weight, scale
        self.release_and_check(taken)

    def test_sglang_ranks(self):
        taken, report = {}, {}
        for layer in LAYERS:
            rows = REF[w_name(layer)].shape[0]  # each layer's own (the generator varies them)
            for rank in range(TP):
                start, end = eh_sglang.row_range(rows, TP, rank)
                got = eh_sglang.rank_tables(layer, start, end - start, rows, DIM, BLOCK, model=CKPT,
                                            device=device_of(rank))
                self.assertIsNotNone(got)
                weight, scale = got
                self.check_rank(f"sglang rank {rank} layer {layer}", weight, scale, layer, start, end - start,
                                rank, torch.float8_e4m3fn, torch.float8_e8m0fnu)
                taken[(layer, start, end - start, rank)] = got
                if layer == LAYERS[0]:
                    report[rank] = {"rows": [start, end], "weight": engines.describe(weight),
                                    "scale": engines.describe(scale)}
        print(f"\nGPU-RESULT {json.dumps({'engine': 'sglang', 'backend': self.backend, 'ranks': report})}",
              flush=True)
        with self.assertRaisesRegex(engram_host.EngramHostError, "the engine's config says"):
            eh_sglang.rank_tables(LAYERS[0], 0, 10, REF[w_name(LAYERS[0])].shape[0] + 1, DIM, BLOCK, model=CKPT,
                                   device=0)
        with self.assertRaisesRegex(engram_host.EngramHostError, "the engine's config says"):
            eh_vllm.rank_tables(LAYERS[0], 0, 10, DIM, BLOCK, num_embeddings=REF[w_name(LAYERS[0])].shape[0] + 1,
                                model=CKPT, device=0)
        del got, weight, scale
        self.release_and_check(taken)

    def test_daemon_gone_before_the_engine_starts(self):
        self.daemon.kill()
        with self.assertRaises(engram_host.DaemonAbsent):
            eh_vllm.rank_tables(LAYERS[0], 0, 10, DIM, BLOCK, num_embeddings=REF[w_name(LAYERS[0])].shape[0],
                                model=CKPT, device=0)
        os.environ["ENGRAM_HOST_TABLES"] = "fallback"
        engines.forget_sessions()
        with self.assertLogs("engram_host", "WARNING"):
            self.assertIsNone(eh_sglang.rank_tables(LAYERS[0], 0, 10, REF[w_name(LAYERS[0])].shape[0], DIM, BLOCK, model=CKPT, device=0))


class MemfdEngines(EngineCase, unittest.TestCase):
    backend = "memfd"


class MemfdHugetlbEngines(EngineCase, unittest.TestCase):
    backend = "memfd-hugetlb"


class CudaVmmEngines(EngineCase, unittest.TestCase):
    backend = "cuda-vmm"


def _file_rss_kib(path):
    """The resident KiB of this process's mappings of ``path`` (/proc/self/smaps): pages of the file that this
    process has mapped in, whoever read them into the page cache."""
    real, total, inside = os.path.realpath(path), 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 5 and "-" in fields[0] and ":" in fields[3]:  # a mapping's header line
                inside = len(fields) >= 6 and fields[5] == real
            elif inside and fields and fields[0] == "Rss:":
                total += int(fields[1])
    return total


class SafetensorsGetTensor(unittest.TestCase):
    def test_get_tensor_reads_no_pages_until_touched(self):
        from safetensors import safe_open
        name = w_name(LAYERS[0])
        nbytes = REF[name].numel()
        path = FILES[name]
        with safe_open(path, framework="pt") as f:
            opened = _file_rss_kib(path)
            t = f.get_tensor(name)
            mapped = _file_rss_kib(path)
            int(t.view(torch.uint8).sum())  # reads every byte: faults every page of the tensor in
            touched = _file_rss_kib(path)
        print(f"\nGPU-RESULT {json.dumps({'safetensors_get_tensor': {'table_kib': nbytes // 1024, 'file_rss_after_open_kib': opened, 'file_rss_after_get_kib': mapped, 'file_rss_after_touch_kib': touched}})}",
              flush=True)
        self.assertLess(mapped - opened, nbytes // 1024 // 4, "get_tensor read the table's pages")
        if touched - opened < nbytes // 1024 // 2:
            # safetensors did not map the file (it copied on touch): then get_tensor's reading is what the copy
            # did, and the first check says it read nothing until touched
            self.skipTest(f"safetensors {__import__('safetensors').__version__} shows no mapping of the file "
                          f"({touched - opened} KiB resident after reading the tensor): the mapped check cannot "
                          "be made; get_tensor itself read nothing")
        del t


if __name__ == "__main__":
    unittest.main()
