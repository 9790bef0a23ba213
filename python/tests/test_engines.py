"""engram_host.engines without PyTorch, a GPU or an engine: what importing it imports, the TP row ranges against
the engines' own formulas, the environment's modes and what each does when no daemon listens, the vLLM weight
filter, and the patches of deploy/engines/ (their size, commit and calls). The tensors themselves are checked on
the GPU (tests/gpu/test_engines_gpu.py)."""

import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
ROOT = os.path.dirname(PYTHON_DIR)
sys.path.insert(0, PYTHON_DIR)
sys.path.insert(0, HERE)

import engram_host  # noqa: E402
from engram_host import engines  # noqa: E402
from engram_host.engines import sglang as eh_sglang  # noqa: E402
from engram_host.engines import vllm as eh_vllm  # noqa: E402
from support import write_published  # noqa: E402

# DeepSeek-V4.1's Engram: n-grams 2..4 over 8 heads, 24 hash heads per layer (config.json).
V41_HEADS = 24


def vllm_formula(head_sizes, num_shards, shard_rank):
    """vllm/models/deepseek_v41/common/engram.py, ParallelEngramEmbedding.__init__, statement by statement."""
    n_hash_cols = len(head_sizes)
    part_n_hash_cols = -(-n_hash_cols // num_shards)  # triton.cdiv
    assert (num_shards - 1) * part_n_hash_cols < n_hash_cols
    head_start = shard_rank * part_n_hash_cols
    head_end = head_start + part_n_hash_cols
    return sum(head_sizes[:head_start]), sum(head_sizes[:head_end])


def sglang_formula(num_embeddings, tp_size, tp_rank):
    """python/sglang/srt/layers/engram.py, EngramEmbedding.__init__."""
    row_start = num_embeddings * tp_rank // tp_size
    row_end = num_embeddings * (tp_rank + 1) // tp_size
    return row_start, row_end


class ImportPurity(unittest.TestCase):
    def test_importing_the_helpers_imports_neither_torch_nor_an_engine(self):
        with tempfile.TemporaryDirectory() as d:
            # Importable stand-ins that fail when imported: the check holds where torch is installed too.
            for mod in ("torch", "vllm", "sglang", "numpy"):
                os.makedirs(os.path.join(d, mod))
                with open(os.path.join(d, mod, "__init__.py"), "w") as f:
                    f.write(f"raise ImportError('{mod} was imported')\n")
            code = ("import sys, engram_host.engines, engram_host.engines.vllm, engram_host.engines.sglang\n"
                    "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'vllm', 'sglang', 'numpy')))")
            env = {**os.environ, "PYTHONPATH": PYTHON_DIR + os.pathsep + d}
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
            self.assertEqual(0, r.returncode, r.stderr)
            self.assertEqual("[]", r.stdout.strip())

    def test_off_returns_none_without_torch(self):
        code = ("import os, sys\nos.environ.pop('ENGRAM_HOST_TABLES', None)\n"
                "from engram_host.engines import vllm, sglang\n"
                "assert vllm.rank_tables(1, 0, 10, 256, 32, model='/nonexistent') is None\n"
                "assert sglang.rank_tables(1, 0, 10, 10, 256, 32, model='/nonexistent') is None\n"
                "print('torch' in sys.modules)")
        env = {**os.environ, "PYTHONPATH": PYTHON_DIR}
        env.pop("ENGRAM_HOST_TABLES", None)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(0, r.returncode, r.stderr)
        self.assertEqual("False", r.stdout.strip())


class RowRanges(unittest.TestCase):
    def test_vllm_heads_match_the_engine_and_tile_the_table(self):
        cases = 0
        for heads in range(1, 40):
            sizes = [1000 + 7 * h + (h * h) % 13 for h in range(heads)]  # every head of its own size
            for shards in range(1, 17):
                part = -(-heads // shards)
                if not (shards - 1) * part < heads:
                    with self.assertRaises(ValueError):
                        eh_vllm.row_range(sizes, shards, 0)
                    continue
                ranges = [eh_vllm.row_range(sizes, shards, r) for r in range(shards)]
                self.assertEqual([vllm_formula(sizes, shards, r) for r in range(shards)], ranges)
                self.assertEqual(0, ranges[0][0])
                self.assertEqual(sum(sizes), ranges[-1][1])
                for (_, end), (start, _) in zip(ranges, ranges[1:]):
                    self.assertEqual(end, start)
                cases += 1
        self.assertGreater(cases, 250)

    def test_vllm_deepseek_v41_tp_sizes(self):
        sizes = [1000003 + 2 * h for h in range(V41_HEADS)]
        for tp in (1, 2, 3, 4, 6, 8, 12, 24):  # 24 heads split evenly: V41_HEADS // tp whole heads a rank
            k = V41_HEADS // tp
            self.assertEqual([(sum(sizes[:r * k]), sum(sizes[:(r + 1) * k])) for r in range(tp)],
                             [eh_vllm.row_range(sizes, tp, r) for r in range(tp)])
        # Uneven: TP5 gives four ranks 5 heads and the last one 4.
        r = [eh_vllm.row_range(sizes, 5, k) for k in range(5)]
        self.assertEqual(sum(sizes[20:]), r[4][1] - r[4][0])
        self.assertEqual(sum(sizes[:5]), r[0][1] - r[0][0])
        # TP7: ceil(24/7) = 4 heads a shard leaves the 7th without heads; the engine asserts, so do we.
        with self.assertRaises(ValueError):
            eh_vllm.row_range(sizes, 7, 0)

    def test_sglang_even_rows_match_the_engine(self):
        for n in (0, 1, 7, 1000, 1000003, 384006168, 384016682):
            for tp in range(1, 17):
                ranges = [eh_sglang.row_range(n, tp, r) for r in range(tp)]
                self.assertEqual([sglang_formula(n, tp, r) for r in range(tp)], ranges)
                self.assertEqual((0, n), (ranges[0][0], ranges[-1][1]))
                sizes = {b - a for a, b in ranges}
                self.assertLessEqual(max(sizes) - min(sizes), 1)
        with self.assertRaises(ValueError):
            eh_sglang.row_range(10, 4, 4)


class Modes(unittest.TestCase):
    def setUp(self):
        self.saved = {k: os.environ.get(k) for k in (engines.MODE_ENV, engines.EXPECT_ENV, engines.WAIT_ENV,
                                                    "ENGRAM_HOST_SOCKET")}
        engines.forget_sessions()

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        engines.forget_sessions()

    def test_modes(self):
        self.assertEqual("off", engines.mode({}))
        self.assertEqual("off", engines.mode({engines.MODE_ENV: ""}))
        self.assertEqual("fallback", engines.mode({engines.MODE_ENV: " Fallback "}))
        self.assertEqual("require", engines.mode({engines.MODE_ENV: "require"}))
        with self.assertRaisesRegex(ValueError, "use off, fallback or require"):
            engines.mode({engines.MODE_ENV: "yes"})
        self.assertFalse(engines.enabled({}))
        self.assertTrue(engines.enabled({engines.MODE_ENV: "require"}))

    def test_expectation(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(d, engines.expectation(d, {}))
            self.assertEqual("/x", engines.expectation(d, {engines.EXPECT_ENV: "/x"}))
        with self.assertRaisesRegex(ValueError, "ENGRAM_HOST_EXPECT is not set"):
            engines.expectation("deepseek-ai/DeepSeek-V4.1-Flash", {})

    def _absent(self, mode):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        write_published(d)  # a model directory the expectation is computed from, as an engine's would be
        os.environ[engines.MODE_ENV] = mode
        os.environ["ENGRAM_HOST_SOCKET"] = os.path.join(d, "none.sock")
        os.environ.pop(engines.EXPECT_ENV, None)
        return d

    def test_fallback_when_no_daemon_listens_says_it_once(self):
        model = self._absent("fallback")
        with self.assertLogs("engram_host", logging.WARNING) as logs:
            self.assertIsNone(eh_vllm.rank_tables(1, 0, 10, 256, 32, model=model, device=0))
            self.assertIsNone(eh_vllm.rank_tables(14, 0, 10, 256, 32, model=model, device=0))
            self.assertIsNone(eh_sglang.rank_tables(1, 0, 10, 10, 256, 32, model=model, device=0))
        self.assertEqual(1, len(logs.records), logs.output)
        line = logs.records[0].getMessage()
        self.assertIn("no daemon listens on", line)
        self.assertIn("loads its Engram tables from the checkpoint itself", line)
        self.assertIn(f"engram-host serve --checkpoint {model}", line)

    def test_require_raises_when_no_daemon_listens(self):
        model = self._absent("require")
        with self.assertRaises(engram_host.DaemonAbsent):
            eh_vllm.rank_tables(1, 0, 10, 256, 32, model=model, device=0)
        with self.assertRaises(engram_host.DaemonAbsent):
            eh_sglang.rank_tables(1, 0, 10, 10, 256, 32, model=model, device=0)

    def test_wait_must_be_seconds(self):
        model = self._absent("require")
        os.environ[engines.WAIT_ENV] = "soon"
        with self.assertRaisesRegex(ValueError, "ENGRAM_HOST_WAIT='soon': give seconds"):
            eh_vllm.rank_tables(1, 0, 10, 256, 32, model=model, device=0)
        os.environ[engines.WAIT_ENV] = "0.5"
        with self.assertRaises(engram_host.DaemonAbsent):  # waiting is for NOT_READY, not for an absent daemon
            eh_vllm.rank_tables(1, 0, 10, 256, 32, model=model, device=0)

    def test_a_model_that_is_not_a_directory_needs_an_expectation(self):
        self._absent("fallback")
        with self.assertRaisesRegex(ValueError, "ENGRAM_HOST_EXPECT"):
            eh_vllm.rank_tables(1, 0, 10, 256, 32, model="deepseek-ai/DeepSeek-V4.1-Flash", device=0)


class Names(unittest.TestCase):
    def test_table_name_under_any_prefix(self):
        names = ["model.layers.1.engram.embed.weight", "model.layers.1.engram.embed.scale",
                 "layers.14.engram.embed.weight"]
        self.assertEqual("model.layers.1.engram.embed.weight", engines.table_name(names, 1, "weight"))
        self.assertEqual("layers.14.engram.embed.weight", engines.table_name(names, 14, "weight"))
        with self.assertRaisesRegex(engram_host.EngramHostError, "no table named layers.14.engram.embed.scale"):
            engines.table_name(names, 14, "scale")
        with self.assertRaisesRegex(engram_host.EngramHostError, "2 tables"):
            engines.table_name(names + ["x.layers.1.engram.embed.weight"], 1, "weight")
        with self.assertRaises(engram_host.EngramHostError):
            engines.table_name(["layers.11.engram.embed.weight"], 1, "weight")

    def test_skip_weight_touches_nothing(self):
        class Untouchable:
            def __getattribute__(self, name):
                raise AssertionError(f"touched .{name}")
        self.assertIsNone(engines.skip_weight(Untouchable(), Untouchable()))
        self.assertIs(eh_vllm.skip_weight, engines.skip_weight)
        self.assertIs(eh_sglang.skip_weight, engines.skip_weight)


class VllmWeightFilter(unittest.TestCase):
    def test_wraps_should_skip_weight_once(self):
        calls = []
        module = types.ModuleType("fake_weight_utils")

        def should_skip_weight(name, local_expert_ids):
            calls.append((name, local_expert_ids))
            return name.startswith("experts.")

        module.should_skip_weight = should_skip_weight
        eh_vllm._SKIP.add("layers.1.engram.embed.weight")
        self.addCleanup(eh_vllm._SKIP.discard, "layers.1.engram.embed.weight")
        self.assertTrue(eh_vllm.install_weight_filter(module))
        self.assertTrue(eh_vllm.install_weight_filter(module))
        wrapped = module.should_skip_weight
        self.assertIs(should_skip_weight, wrapped.__wrapped__)
        self.assertTrue(wrapped("layers.1.engram.embed.weight", None))
        self.assertEqual([], calls)  # a served name is skipped without asking the original
        self.assertFalse(wrapped("layers.1.attn.wq_a.weight", {3}))
        self.assertTrue(wrapped("experts.3.w1.weight", {3}))
        self.assertEqual([("layers.1.attn.wq_a.weight", {3}), ("experts.3.w1.weight", {3})], calls)
        self.assertIn("layers.1.engram.embed.weight", eh_vllm.skipped_names())

    def test_no_function_to_wrap(self):
        with self.assertLogs("engram_host", logging.WARNING) as logs:
            self.assertFalse(eh_vllm.install_weight_filter(types.ModuleType("empty")))
        self.assertIn("will not skip the served Engram tables before reading them", logs.output[0])
        with self.assertNoLogs("engram_host", logging.WARNING):  # once a process
            self.assertFalse(eh_vllm.install_weight_filter(types.ModuleType("empty")))


class Patches(unittest.TestCase):
    EXPECTED = {
        "vllm": ("vllm/models/deepseek_v41/nvidia/engram.py", "engram_host.engines import vllm"),
        "sglang": ("python/sglang/srt/layers/engram.py", "engram_host.engines import sglang"),
    }

    def test_each_patch_is_small_names_its_commit_and_calls_the_package(self):
        for engine, (path, call) in self.EXPECTED.items():
            with self.subTest(engine):
                with open(os.path.join(ROOT, "deploy", "engines", f"{engine}.patch")) as f:
                    text = f.read()
                self.assertRegex(text, r"at [0-9a-f]{40}\)")
                self.assertEqual([path], re.findall(r"^\+\+\+ b/(\S+)", text, re.M))
                changed = [ln for ln in text.splitlines()
                           if re.match(r"^[+-]([^+-]|$)", ln)]
                self.assertLessEqual(len(changed), 60)
                self.assertIn(call, text)
                self.assertIn('os.environ.get("ENGRAM_HOST_TABLES", "off") not in ("", "off")', text)
                self.assertIn("skip_weight", text)

    def test_docs_show_each_patch_whole(self):
        with open(os.path.join(ROOT, "docs", "engines.md")) as f:
            doc = f.read()
        for engine in self.EXPECTED:
            with open(os.path.join(ROOT, "deploy", "engines", f"{engine}.patch")) as f:
                self.assertIn("```diff\n" + f.read() + "```\n", doc, f"docs/engines.md does not show {engine}.patch")

    def test_the_patches_call_what_the_package_has(self):
        with open(os.path.join(ROOT, "deploy", "engines", "vllm.patch")) as f:
            self.assertIn("engram_host_vllm.rank_tables(", f.read())
        with open(os.path.join(ROOT, "deploy", "engines", "sglang.patch")) as f:
            self.assertIn("engram_host_sglang.rank_tables(", f.read())
        self.assertTrue(callable(eh_vllm.rank_tables) and callable(eh_sglang.rank_tables))


if __name__ == "__main__":
    unittest.main()
