"""The reference engine's CPU part (issue #26, section 3; docs/reference.md): the workload's definition pinned by
known values, its standard-library and NumPy implementations bit for bit alike, and lookups from a real daemon's
views (``engram-host serve`` processes, memfd) bitwise equal to the same lookups on the checkpoint's files, for a
``generate --model`` checkpoint (random bytes) and a finite-valued one (the projection compared as numbers). No
PyTorch: its part runs on the GPU machine (scripts/gpu/gpu-engine-restart.sh); here only its absence is checked to
fail in one clear line."""

import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from array import array

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import engram_host  # noqa: E402
from engram_host.reference import cpu, spec  # noqa: E402
from engram_host.reference.layout import Layout, disk_buffers, served_buffers  # noqa: E402
from engram_host.reference.synthetic import write_finite_model  # noqa: E402
from support import PYTHON_DIR, Daemon, generate, java_app_reason  # noqa: E402

np = spec.numpy_or_none()
QUIET = logging.NullHandler()  # the package's "compared headers only" line, said on every import here
NO_NUMPY = "NumPy is not importable here: the NumPy implementation is not checked (the standard library's is)"


def run_reference(*args, timeout=120):
    env = {**os.environ, "PYTHONPATH": PYTHON_DIR + (os.pathsep + os.environ["PYTHONPATH"]
                                                      if os.environ.get("PYTHONPATH") else "")}
    return subprocess.run([sys.executable, "-m", "engram_host.reference", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def bf16(v: float) -> int:
    return spec.bf16_bits_of_f32_bits(spec.f32_bits(v))


class DefinitionTest(unittest.TestCase):
    """spec's numbers and hashes, pinned."""

    def test_e4m3_and_e8m0(self):
        self.assertEqual(0.0, spec.e4m3(0x00))
        self.assertEqual("-0.0", str(spec.e4m3(0x80)))
        self.assertEqual(2.0 ** -9, spec.e4m3(0x01))  # the smallest subnormal
        self.assertEqual(2.0 ** -6, spec.e4m3(0x08))
        self.assertEqual(1.0, spec.e4m3(0x38))
        self.assertEqual(448.0, spec.e4m3(0x7E))
        self.assertEqual(-448.0, spec.e4m3(0xFE))
        self.assertTrue(math.isnan(spec.e4m3(0x7F)) and math.isnan(spec.e4m3(0xFF)))
        self.assertEqual(sum(1 for c in range(256) if math.isnan(spec.e4m3(c))), 2)
        self.assertEqual(1.0, spec.e8m0(127))
        self.assertEqual(2.0 ** -127, spec.e8m0(0))
        self.assertEqual(2.0 ** 127, spec.e8m0(254))
        self.assertTrue(math.isnan(spec.e8m0(255)))

    def test_dequantisation_table(self):
        t = spec.dequant_table()
        self.assertEqual(0x3F80, t[127 << 8 | 0x38])  # 1 x 1
        self.assertEqual(0xC3E0, t[127 << 8 | 0xFE])  # -448
        self.assertEqual(0x7FC0, t[255 << 8 | 0x38])  # a NaN scale
        self.assertEqual(0x7FC0, t[127 << 8 | 0x7F])  # a NaN value, canonical
        self.assertEqual(0x7FC0, t[127 << 8 | 0xFF])  # the negative NaN too
        self.assertEqual(0x7F80, t[254 << 8 | 0x7E])  # 448 x 2^127 overflows float32: +inf
        self.assertEqual(0x0001, t[0 << 8 | 0x08])  # 2^-6 x 2^-127 = 2^-133, BF16's smallest subnormal
        self.assertEqual(0x0000, t[0 << 8 | 0x01])  # 2^-136 rounds to zero in BF16
        self.assertEqual(0x8000, t[127 << 8 | 0x80])  # -0

    def test_bf16_rounds_to_nearest_even(self):
        self.assertEqual(0x3F80, spec.bf16_bits_of_f32_bits(0x3F808000))  # a tie, to the even 0x3F80
        self.assertEqual(0x3F82, spec.bf16_bits_of_f32_bits(0x3F818000))  # a tie, to the even 0x3F82
        self.assertEqual(0x3F81, spec.bf16_bits_of_f32_bits(0x3F808001))
        self.assertEqual(0x7FC0, spec.bf16_bits_of_f32_bits(0xFFC12345))
        self.assertEqual(0x7F80, spec.bf16_bits_of_f32_bits(0x7F7FFFFF))  # float32's largest rounds to +inf

    def test_hash_and_tokens(self):
        self.assertEqual(0xE220A8397B1DCDAF, spec.mix64(0x9E3779B97F4A7C15))  # splitmix64's first output, seed 0
        self.assertEqual([84754, 43509, 101349, 115118], [spec.token(26, 0, i) for i in range(4)])
        lk = spec.prefill(26, 2)
        self.assertEqual([(0, 0, 0, 84755), (0, 0, 84755, 43510)], lk.contexts)
        ids = spec.row_ids(lk, 1, 384006168)
        self.assertEqual(2 * 24, len(ids))
        self.assertEqual([281482763, 364312580, 72093610, 244974201, 133465722, 84601053], ids[:6])
        self.assertEqual([190604976, 230565238, 205691646], spec.row_ids(lk, 14, 384016682)[24:27])
        d = spec.decode(0, 26, 2)
        self.assertEqual([(10670, 81928, 112794, 98325), (78719, 55171, 88103, 46901)], d.contexts)
        self.assertEqual([149737393, 318965564, 78628355], spec.row_ids(d, 1, 384006168)[:3])

    def test_the_workload(self):
        w = spec.workload(1, 8192, 8, 64)
        self.assertEqual(["prefill"] + [f"decode{k}" for k in range(8)], [lk.name for lk in w])
        self.assertEqual([8192] + [64] * 8, [lk.tokens for lk in w])
        self.assertEqual(64 * 24, len(spec.row_ids(w[1], 1, 1000)))

    def test_row_ranges(self):
        self.assertEqual([(0, 3), (3, 6), (6, 8), (8, 10)], spec.row_ranges(10, 4))
        self.assertEqual([(0, 2), (2, 4), (4, 6), (6, 8)], spec.row_ranges(8, 4))
        self.assertEqual([(0, 1), (1, 1)], spec.row_ranges(1, 2))
        r = spec.row_ranges(79310475, 4)
        self.assertEqual([19827619, 19827619, 19827619, 19827618], [hi - lo for lo, hi in r])
        self.assertEqual(79310475, r[-1][1])
        if np is not None:  # the same split as numpy.array_split (and torch.tensor_split)
            for rows in (10, 11, 4097):
                self.assertEqual([len(a) for a in np.array_split(np.arange(rows), 4)],
                                 [hi - lo for lo, hi in spec.row_ranges(rows, 4)])

    def test_the_projection_accumulates_in_float32_in_order(self):
        # 2^15, then 254 x 2^-9 (each half an ulp of 2^15 in float32: a tie, kept at the even 2^15), then -2^15:
        # in order in float32 the sum is 0; exactly it is 0.496 (BF16 0x3EFE)
        x = [bf16(2.0 ** 15)] + [bf16(2.0 ** -9)] * 254 + [bf16(-2.0 ** 15)]
        wkv = [bf16(1.0)] * 256 + [bf16(0.0)] * 256 * 511
        y = spec.project_rows(array("H", x), array("H", wkv))
        self.assertEqual(0x0000, y[0])
        self.assertEqual(0x0000, y[1])
        self.assertEqual(0x3EFE, bf16(254 * 2.0 ** -9))
        if np is not None:
            ny = spec.np_project_rows(np, np.array([x], dtype=np.uint16),
                                      np.array(wkv, dtype=np.uint16).reshape(512, 256))
            self.assertEqual(list(y), ny.reshape(-1).tolist())

    @unittest.skipIf(np is None, NO_NUMPY)
    def test_numpy_and_stdlib_agree(self):
        import random
        rng = random.Random(5)
        lk = spec.Lookup("t", [tuple(rng.randrange(130000) for _ in range(4)) for _ in range(50)])
        for rows in (1, 7, 384016682, (1 << 62) - 1):
            self.assertEqual(spec.row_ids(lk, 14, rows), spec.np_row_ids(np, lk, 14, rows).tolist())
        w, s = rng.randbytes(40 * 256), bytes(range(256))[:40 * 8] + rng.randbytes(40 * 8 - 256)
        self.assertEqual(list(spec.dequant_rows(w, s)),
                         spec.np_dequant_rows(np, np.frombuffer(w, np.uint8).reshape(40, 256),
                                              np.frombuffer(s, np.uint8).reshape(40, 8)).reshape(-1).tolist())

    def test_importing_needs_neither_torch_nor_numpy(self):
        code = ("import sys, engram_host.reference, engram_host.reference.cpu, engram_host.reference.layout, "
                "engram_host.reference.synthetic, engram_host.reference.gpu, engram_host.reference.gpu_ops, "
                "engram_host.reference.gpu_tables, engram_host.reference.gpu_workload; "
                "print('torch' in sys.modules, 'numpy' in sys.modules)")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": PYTHON_DIR})
        self.assertEqual(0, p.returncode, p.stderr)
        self.assertEqual("False False", p.stdout.strip())

    def test_the_gpu_commands_without_torch_fail_in_one_line(self):
        try:
            import torch  # noqa: F401
            self.skipTest("PyTorch is importable here: its absence cannot be checked")
        except ImportError:
            pass
        for command in ("engine", "expect", "check", "rank"):
            extra = {"expect": ["--out", "/nonexistent/x.pt"], "rank": ["--rank", "0"]}.get(command, [])
            p = run_reference(command, "--model", "/nonexistent", *extra)
            self.assertEqual(1, p.returncode, p.stderr)
            lines = p.stderr.strip().splitlines()
            self.assertEqual(1, len(lines), p.stderr)
            self.assertTrue(lines[0].startswith(f"python -m engram_host.reference {command}: needs PyTorch"), lines[0])
        self.assertEqual(2, run_reference("engine").returncode)  # --model missing: a usage error


def setUpModule():
    global WORK, M, FIN, OTHER, D, DFIN
    WORK = tempfile.mkdtemp(prefix="engram-py-reference-")
    logging.getLogger("engram_host").addHandler(QUIET)
    FIN = write_finite_model(os.path.join(WORK, "finite"), rows=3000)
    OTHER = write_finite_model(os.path.join(WORK, "other"), rows=3000, seed=8)
    D = DFIN = None
    if java_app_reason() is None:
        M = generate(os.path.join(WORK, "m"), rows=4096, model=True)
        D, DFIN = Daemon(M, wait_ready=False), Daemon(FIN, wait_ready=False)
        D.wait_ready()
        DFIN.wait_ready()


def tearDownModule():
    logging.getLogger("engram_host").removeHandler(QUIET)
    for d in (D, DFIN):
        if d is not None:
            d.close()
    shutil.rmtree(WORK, ignore_errors=True)


IMPLS = cpu.available_impls()
SMALL = spec.workload(spec.DEFAULT_SEED, 48, 2, 8)


class LookupTest(unittest.TestCase):
    """Lookups from a daemon's views against the same lookups on the files."""

    def setUp(self):
        reason = java_app_reason()
        if reason:
            self.skipTest(reason)

    def served_and_disk(self, daemon, model, impl, rows=2):
        with Layout(model) as layout, engram_host.connect(daemon.socket, expect=model) as imported:
            served = cpu.run(served_buffers(imported, layout), layout, SMALL, impl, project_rows=rows)
            disk = cpu.run(disk_buffers(layout), layout, SMALL, impl, project_rows=rows)
            return layout.layers, served, disk

    def test_generated_model_served_equals_disk(self):
        for impl in IMPLS:
            layers, served, disk = self.served_and_disk(D, M, impl)
            self.assertEqual([1, 14], [L.layer for L in layers])
            self.assertEqual([], cpu.differences(served, disk), impl)
            out = served["prefill"][14]
            self.assertEqual(48 * 24 * 8, len(out["ids"]))
            self.assertEqual(48 * 24 * 256, len(out["weight"]))
            self.assertEqual(48 * 24 * 8, len(out["scale"]))
            self.assertEqual(48 * 24 * 256 * 2, len(out["x"]))
            self.assertEqual(2 * 512 * 2, len(out["y"]))
            self.assertGreater(cpu.finite_fraction(served, "x"), 0.9)  # random bytes: few NaN codes or scales

    def test_finite_model_served_equals_disk_and_the_projection_is_numbers(self):
        results = {}
        for impl in IMPLS:
            _, served, disk = self.served_and_disk(DFIN, FIN, impl, rows=3)
            self.assertEqual([], cpu.differences(served, disk), impl)
            self.assertEqual(1.0, cpu.finite_fraction(served, "y"))
            results[impl] = served
        if len(results) == 2:
            self.assertEqual([], cpu.differences(results["numpy"], results["stdlib"]))
            self.assertEqual(cpu.digest(results["numpy"]), cpu.digest(results["stdlib"]))

    def test_a_wrong_table_is_seen(self):
        impl = IMPLS[0]
        with Layout(FIN) as fin, Layout(OTHER) as other, engram_host.connect(DFIN.socket, expect=FIN) as imported:
            served = cpu.run(served_buffers(imported, fin), fin, SMALL[:1], impl, project_rows=1)
            wrong = cpu.run(disk_buffers(other), other, SMALL[:1], impl, project_rows=1)
        diffs = cpu.differences(served, wrong)
        self.assertEqual({f"prefill layer {L} {f}" for L in (1, 14) for f in ("weight", "scale", "x", "y")},
                         {d.split(":")[0] for d in diffs})

    def test_four_ranks_of_the_same_views(self):
        """Each rank's contiguous row range of the served table, gathered with local ids, is the same rows of the
        file; together the ranks cover every lookup's rows once."""
        with Layout(M) as layout, engram_host.connect(D.socket, expect=M) as imported:
            served, disk = served_buffers(imported, layout), disk_buffers(layout)
            for L in layout.layers:
                ids = spec.row_ids(SMALL[0], L.layer, L.rows)
                covered = 0
                for lo, hi in spec.row_ranges(L.rows, 4):
                    view = served[L.weight][lo * 256:hi * 256]
                    mine = [i for i in ids if lo <= i < hi]
                    covered += len(mine)
                    got = b"".join(view[(i - lo) * 256:(i - lo + 1) * 256] for i in mine)
                    want = b"".join(disk[L.weight][i * 256:(i + 1) * 256] for i in mine)
                    self.assertEqual(want, got, (L.layer, lo, hi))
                self.assertEqual(len(ids), covered)

    def test_the_command(self):
        p = run_reference("cpu", "--model", FIN, "--socket", DFIN.socket, "--impl", "both", "--tokens", "32",
                          "--steps", "1", "--batch", "4")
        self.assertEqual(0, p.returncode, p.stderr)
        doc = json.loads(p.stdout)
        self.assertTrue(doc["ok"], doc)
        self.assertEqual(["memfd"], doc["served_backend"])
        self.assertIn("stdlib", doc["impls"])  # and NumPy too where the child can import it
        self.assertEqual({impl: [] for impl in doc["impls"]}, doc["served"])
        self.assertEqual(doc["numpy"], "impl_differences" in doc)
        self.assertEqual([], doc.get("impl_differences", []))
        self.assertEqual(1.0, doc["finite_y"])
        self.assertEqual(["prefill", "decode0"], doc["lookups"])


if __name__ == "__main__":
    unittest.main()
