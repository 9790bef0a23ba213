"""engram_host.engines without PyTorch, a GPU or an engine: what importing it imports, the TP row ranges against
the engines' own formulas, the environment's modes and what each does when no daemon listens or the model is a
Hugging Face id, the ranks' common decision (serve_together), the checks of a live daemon's tables against what
the engine expects (a real daemon process, CPU views), the vLLM weight filter, and the patches of deploy/engines/
(their size, targets and calls). The tensors themselves are checked on the GPU (tests/gpu/test_engines_gpu.py,
scripts/gpu/gpu-engines-live.py)."""

import json
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
from support import Daemon, generate, java_app_reason, write_published  # noqa: E402

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
                "assert vllm.rank_tables(1, 0, 10, 256, 32, num_embeddings=10, model='/nonexistent') is None\n"
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
        self.assertEqual("off", engines.mode({engines.MODE_ENV: "  "}))
        self.assertEqual("off", engines.mode({engines.MODE_ENV: " OFF\t"}))
        self.assertEqual("fallback", engines.mode({engines.MODE_ENV: " Fallback "}))
        self.assertEqual("require", engines.mode({engines.MODE_ENV: "REQUIRE\n"}))
        for bad in ("yes", "1", "on", "req uire", "fallback,require"):
            with self.assertRaisesRegex(ValueError, "use off, fallback or require"):
                engines.mode({engines.MODE_ENV: bad})
        self.assertFalse(engines.enabled({}))
        self.assertTrue(engines.enabled({engines.MODE_ENV: "require"}))

    def test_the_patches_inline_test_agrees_with_mode(self):
        # The patches decide whether to import the package with this expression (no import when off); for every
        # value it lets through, mode() must be fallback, require or raise: never a silent off.
        inline = lambda v: v.strip().lower() not in ("", "off")  # noqa: E731
        for value in ("", " ", "off", " Off ", "OFF\n", "fallback", " Require", "yes", "0", "of f"):
            env = {engines.MODE_ENV: value}
            if not inline(value):
                self.assertEqual("off", engines.mode(env), value)
                continue
            try:
                self.assertIn(engines.mode(env), ("fallback", "require"), value)
            except ValueError as e:
                self.assertIn("use off, fallback or require", str(e))

    def test_wait_seconds(self):
        self.assertEqual(0.0, engines.wait_seconds({}))
        self.assertEqual(0.0, engines.wait_seconds({engines.WAIT_ENV: " "}))
        self.assertEqual(2.5, engines.wait_seconds({engines.WAIT_ENV: " 2.5 "}))
        self.assertEqual(600.0, engines.wait_seconds({engines.WAIT_ENV: "600"}))
        for bad in ("soon", "-1", "nan", "inf", "-inf", "1e999", "5s", "0x10"):
            with self.assertRaisesRegex(ValueError, f"ENGRAM_HOST_WAIT={bad!r}: give seconds, 0 or more"):
                engines.wait_seconds({engines.WAIT_ENV: bad})

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
            self.assertIsNone(eh_vllm.rank_tables(1, 0, 10, 256, 32, num_embeddings=10, model=model, device=0))
            self.assertIsNone(eh_vllm.rank_tables(14, 0, 10, 256, 32, num_embeddings=10, model=model, device=0))
            self.assertIsNone(eh_sglang.rank_tables(1, 0, 10, 10, 256, 32, model=model, device=0))
        self.assertEqual(1, len(logs.records), logs.output)
        line = logs.records[0].getMessage()
        self.assertIn("no daemon listens on", line)
        self.assertIn("loads its Engram tables from the checkpoint itself", line)
        self.assertIn(f"engram-host serve --checkpoint {model}", line)

    def test_require_raises_when_no_daemon_listens(self):
        model = self._absent("require")
        with self.assertRaises(engram_host.DaemonAbsent):
            eh_vllm.rank_tables(1, 0, 10, 256, 32, num_embeddings=10, model=model, device=0)
        with self.assertRaises(engram_host.DaemonAbsent):
            eh_sglang.rank_tables(1, 0, 10, 10, 256, 32, model=model, device=0)

    def test_wait_must_be_seconds_in_both_modes(self):
        for mode in ("require", "fallback"):
            model = self._absent(mode)
            for bad in ("soon", "-3"):
                os.environ[engines.WAIT_ENV] = bad
                with self.assertRaisesRegex(ValueError, f"ENGRAM_HOST_WAIT={bad!r}: give seconds"):
                    eh_vllm.rank_tables(1, 0, 10, 256, 32, num_embeddings=10, model=model, device=0)
        os.environ[engines.MODE_ENV] = "require"
        os.environ[engines.WAIT_ENV] = "0.5"
        with self.assertRaises(engram_host.DaemonAbsent):  # waiting is for NOT_READY, not for an absent daemon
            eh_vllm.rank_tables(1, 0, 10, 256, 32, num_embeddings=10, model=model, device=0)

    def test_a_bad_mode_raises_from_the_engine_seam(self):
        model = self._absent("fallback")
        os.environ[engines.MODE_ENV] = "sometimes"
        with self.assertRaisesRegex(ValueError, "ENGRAM_HOST_TABLES='sometimes': use off, fallback or require"):
            eh_sglang.rank_tables(1, 0, 10, 10, 256, 32, model=model, device=0)

    def test_a_hugging_face_id_in_fallback_says_so_once_and_falls_back(self):
        self._absent("fallback")
        hf = "deepseek-ai/DeepSeek-V4.1-Flash"
        with self.assertLogs("engram_host", logging.WARNING) as logs:
            self.assertIsNone(eh_vllm.rank_tables(1, 0, 10, 256, 32, num_embeddings=10, model=hf, device=0))
            self.assertIsNone(eh_vllm.rank_tables(14, 0, 10, 256, 32, num_embeddings=10, model=hf, device=0))
            self.assertIsNone(eh_sglang.rank_tables(1, 0, 10, 10, 256, 32, model=hf, device=0))
        self.assertEqual(1, len(logs.records), logs.output)
        line = logs.records[0].getMessage()
        self.assertNotIn("\n", line)
        self.assertIn(f"ENGRAM_HOST_EXPECT is not set and the engine's model {hf!r} is not a local directory", line)
        self.assertIn("set ENGRAM_HOST_EXPECT=MODEL_DIR", line)
        self.assertIn("loads its Engram tables from the checkpoint itself", line)

    def test_a_hugging_face_id_in_require_raises_naming_the_variable(self):
        self._absent("require")
        for call in (lambda: eh_vllm.rank_tables(1, 0, 10, 256, 32, num_embeddings=10, model="org/model", device=0),
                     lambda: eh_sglang.rank_tables(1, 0, 10, 10, 256, 32, model=None, device=0)):
            with self.assertRaises(ValueError) as caught:
                call()
            message = str(caught.exception)
            self.assertNotIn("\n", message)
            self.assertIn("ENGRAM_HOST_EXPECT is not set", message)
            self.assertIn("set ENGRAM_HOST_EXPECT=MODEL_DIR", message)
            self.assertIn("(ENGRAM_HOST_TABLES=require)", message)

    def test_an_expectation_given_for_a_hugging_face_id_is_used(self):
        d = self._absent("require")
        os.environ[engines.EXPECT_ENV] = d
        with self.assertRaises(engram_host.DaemonAbsent):  # past the expectation: the daemon is asked
            eh_vllm.rank_tables(1, 0, 10, 256, 32, num_embeddings=10, model="org/model", device=0)


# The decision logic run by N rank threads. The group is a stand-in, for this test only: a `torch` package whose
# all_reduce(MIN) meets the threads at a barrier. The GPU harness (scripts/gpu/gpu-engines-live.py) runs the same
# decision through a real torch.distributed gloo group of real processes.
_FAKE_TORCH = {
    "torch/__init__.py": (
        "int32 = 'int32'\n"
        "class _Scalar:\n"
        "    def __init__(self, values): self.values = list(values)\n"
        "    def item(self): return self.values[0]\n"
        "def tensor(values, dtype=None): return _Scalar(values)\n"
        "from . import distributed\n"),
    "torch/distributed.py": (
        "class ReduceOp:\n    MIN = 'min'\n"
        "def all_reduce(t, op, group):\n    assert op == ReduceOp.MIN\n    group.reduce_min(t)\n"),
}
_RANKS = r"""
import json, sys, threading, logging
import engram_host
from engram_host import engines

class BarrierGroup:  # the stand-in group: every rank's value, the minimum handed back at a barrier
    def __init__(self, n):
        self.values, self.barrier, self.lock = [], threading.Barrier(n, timeout=20), threading.Lock()
    def reduce_min(self, t):
        with self.lock:
            self.values.append(t.values[0])
        self.barrier.wait()
        t.values[0] = min(self.values)
        self.barrier.wait()

def run(attempts):
    group, out = BarrierGroup(len(attempts)), [None] * len(attempts)
    def rank(i, attempt):
        def take():
            if attempt == "served":
                return ("weight", "scale")
            if attempt == "local":
                return None
            raise engram_host.FingerprintMismatch("rank %d: the daemon serves another model" % i)
        try:
            got = engines.serve_together(take, group)
            out[i] = "serve" if got == ("weight", "scale") else ("local" if got is None else repr(got))
        except engram_host.EngramHostError as e:
            out[i] = "raise: " + str(e)
    threads = [threading.Thread(target=rank, args=(i, a)) for i, a in enumerate(attempts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out

logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="LOG %(message)s")
print(json.dumps({",".join(case): run(case) for case in json.loads(sys.argv[1])}))
"""


class Decision(unittest.TestCase):
    def test_verdict_of_every_state_pair(self):
        F, L, S = engines.FAILED, engines.LOCAL, engines.SERVED
        self.assertEqual("serve", engines.verdict(S, S))
        self.assertEqual("local", engines.verdict(S, L))
        self.assertEqual("local", engines.verdict(L, L))
        for mine in (F, L, S):
            self.assertEqual("raise", engines.verdict(mine, F))
        for mine, lowest in ((L, S), (F, L), (F, S), (3, 1), (1, -1)):  # the minimum above this rank's state
            with self.assertRaisesRegex(ValueError, "are not of 0..2"):
                engines.verdict(mine, lowest)

    def test_every_rank_acts_alike_for_every_mix_of_attempts(self):
        import itertools
        for states in itertools.product((engines.FAILED, engines.LOCAL, engines.SERVED), repeat=3):
            actions = {engines.verdict(s, min(states)) for s in states}
            self.assertEqual(1, len(actions), states)

    def test_alone_a_rank_decides_for_itself(self):
        self.assertEqual(("w", "s"), engines.serve_together(lambda: ("w", "s")))
        self.assertIsNone(engines.serve_together(lambda: None))

        def refused():
            raise engram_host.NotAllowed("uid 1000 is not allowed")
        with self.assertRaisesRegex(engram_host.NotAllowed, "uid 1000"):
            engines.serve_together(refused)

    def test_ranks_decide_together(self):
        cases = [["served", "served", "served"], ["served", "local", "served"], ["local", "local"],
                 ["served", "fail", "served"], ["local", "fail"], ["fail", "fail"]]
        with tempfile.TemporaryDirectory() as d:
            for rel, text in _FAKE_TORCH.items():
                os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
                with open(os.path.join(d, rel), "w") as f:
                    f.write(text)
            env = {**os.environ, "PYTHONPATH": d + os.pathsep + PYTHON_DIR}
            r = subprocess.run([sys.executable, "-c", _RANKS, json.dumps(cases)], capture_output=True, text=True,
                               env=env, timeout=120)
        self.assertEqual(0, r.returncode, r.stderr)
        got = json.loads(r.stdout)
        self.assertEqual(["serve"] * 3, got["served,served,served"])
        self.assertEqual(["local"] * 3, got["served,local,served"])  # nobody serves while one rank cannot
        self.assertEqual(["local"] * 2, got["local,local"])
        for case in ("served,fail,served", "local,fail", "fail,fail"):
            attempts = case.split(",")
            for i, (attempt, outcome) in enumerate(zip(attempts, got[case])):
                self.assertTrue(outcome.startswith("raise: "), (case, outcome))
                if attempt == "fail":  # the failed rank raises its own error
                    self.assertIn(f"rank {i}: the daemon serves another model", outcome)
                else:
                    self.assertIn("another rank of this engine's group failed", outcome)
                    self.assertIn("every rank decides together", outcome)
        # A served rank that falls back because another cannot be served says so in one line, once a process.
        said = [ln for ln in r.stderr.splitlines() if ln.startswith("LOG ")]
        self.assertEqual(1, len(said), r.stderr)
        self.assertIn("another rank of this engine's group cannot take its Engram tables", said[0])


class LiveDaemonChecks(unittest.TestCase):
    """What layer_tables checks, against a real daemon process (CPU views; the GPU views are the GPU tests')."""

    @classmethod
    def setUpClass(cls):
        reason = java_app_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.work = tempfile.mkdtemp(prefix="engram-engines-live-")
        cls.ckpt = generate(os.path.join(cls.work, "ckpt"), rows=4096, layers="1,14")
        with open(os.path.join(cls.ckpt, "config.json")) as f:
            cls.rows = json.load(f)["text_config"]["engram_num_embeddings"][0]
        cls.daemon = Daemon(cls.ckpt)
        cls.weight_only = Daemon(cls.ckpt, "--tables", "layers.1.engram.embed.weight")

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()
        cls.weight_only.close()
        shutil.rmtree(cls.work, ignore_errors=True)

    def test_the_layers_tables_pass_and_every_mismatch_is_named(self):
        with engram_host.connect(self.daemon.socket, expect=self.ckpt) as imported:
            w, s = engines.layer_tables(imported, 14, 256, 32, self.rows, 0, self.rows)
            self.assertEqual(("layers.14.engram.embed.weight", "layers.14.engram.embed.scale"), (w.name, s.name))
            engines.layer_tables(imported, 1, 256, 32, None, self.rows - 1, 1)
            with self.assertRaisesRegex(engram_host.EngramHostError,
                                        f"layers.1.engram.embed.weight has {self.rows} rows; the engine's config "
                                        f"says {self.rows + 1}"):
                engines.layer_tables(imported, 1, 256, 32, self.rows + 1)
            with self.assertRaisesRegex(engram_host.EngramHostError, "no table named layers.2.engram.embed.weight"):
                engines.layer_tables(imported, 2, 256, 32, self.rows)
            with self.assertRaisesRegex(engram_host.EngramHostError, r"the engine expects F8_E4M3 \[rows, 128\]"):
                engines.layer_tables(imported, 1, 128, 32, self.rows)
            with self.assertRaisesRegex(engram_host.EngramHostError, r"the engine expects F8_E8M0 \[4096, 16\]"):
                engines.layer_tables(imported, 1, 256, 16, self.rows)
            with self.assertRaisesRegex(engram_host.EngramHostError,
                                        rf"rows \[4000, 4100\) are outside its {self.rows} rows"):
                engines.layer_tables(imported, 1, 256, 32, self.rows, 4000, 100)
            with self.assertRaisesRegex(ValueError, "not a positive multiple of the block size"):
                engines.layer_tables(imported, 1, 250, 32, self.rows)

    def test_a_daemon_serving_one_of_the_two_tables(self):
        with engram_host.connect(self.weight_only.socket, expect=self.ckpt,
                                 tables=["layers.1.engram.embed.weight"]) as imported:
            self.assertEqual(["layers.1.engram.embed.weight"], sorted(imported.tables))
            with self.assertRaisesRegex(engram_host.EngramHostError,
                                        "the daemon serves no table named layers.1.engram.embed.scale .under any "
                                        "prefix.; it serves: layers.1.engram.embed.weight"):
                engines.layer_tables(imported, 1, 256, 32, self.rows)


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


def _harness():
    """scripts/gpu/gpu-engines-live.py, imported (its GPU steps need torch only when they run)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_engines_live",
                                                  os.path.join(ROOT, "scripts", "gpu", "gpu-engines-live.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LiveHarnessDry(unittest.TestCase):
    """The GPU harness's parts that need no GPU and no torch; its GPU steps run on the GPU machine only."""

    def test_blob_ids_and_targets(self):
        h = _harness()
        with tempfile.NamedTemporaryFile("wb", delete=False) as f:
            f.write(b"engram \xe2\x80\x94 host\n")
        self.addCleanup(os.unlink, f.name)
        git = subprocess.run(["git", "hash-object", f.name], capture_output=True, text=True)
        if git.returncode == 0:
            self.assertEqual(git.stdout.strip(), h.blob_id(f.name))
        with open(os.path.join(ROOT, "deploy", "engines", "vllm.patch")) as p:
            header = p.read().split("diff --git ")[0]
        self.assertEqual(dict(re.findall(r"^Target: (\S+) blob ([0-9a-f]{40})$", header, re.M)),
                         h.targets(os.path.join(ROOT, "deploy", "engines", "vllm.patch")))
        self.assertEqual(sorted(h.targets(h.PATCHES["vllm"])), sorted([h.VLLM_CONFIG, h.VLLM_ENGRAM]))
        self.assertEqual([h.SGLANG_ENGRAM], list(h.targets(h.PATCHES["sglang"])))

    def test_head_sizes_fit_each_engine(self):
        h = _harness()
        for rows in (4096, 100003, 384006168):
            exact, loose = h.head_sizes(rows, exact=True), h.head_sizes(rows, exact=False)
            self.assertEqual((24, rows), (len(exact), sum(exact)))  # SGLang's column bounds end at the table's rows
            self.assertEqual(24, len(loose))
            self.assertLessEqual(sum(loose), rows)  # vLLM asserts sum(head_sizes) <= num_embeddings
            self.assertGreater(min(exact + loose), 0)

    def test_mincore_sees_what_was_read(self):
        h = _harness()
        d = tempfile.mkdtemp(prefix="engram-mincore-")  # on tmpfs the drop does nothing and the test skips
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "t.bin")
        size = 16 << 20
        with open(path, "wb") as f:
            f.write(os.urandom(size))
            f.flush()
            os.fsync(f.fileno())
        h.drop_page_cache([path])
        if any(h.resident_pages(path, 0, size)):
            self.skipTest("posix_fadvise DONTNEED left this file's pages in the page cache (tmpfs or overlay)")
        with open(path, "rb") as f:
            f.seek(8 << 20)
            f.read(1 << 20)
        pages = h.resident_pages(path, 8 << 20, 9 << 20)
        self.assertTrue(all(pages), "the bytes read are resident")
        self.assertFalse(any(h.resident_pages(path, 0, 4 << 20)), "bytes far from the read are not")
        got = h.residency({"t": (path, 6 << 20, 12 << 20)})["t"]
        self.assertGreaterEqual(got["resident"], 1 << 20)
        self.assertEqual(6 << 20, got["bytes"])

    def test_dry_run_refuses_a_tree_without_the_engines_files(self):
        with tempfile.TemporaryDirectory() as src, tempfile.TemporaryDirectory() as out:
            r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu", "gpu-engines-live.py"),
                                "--engines-src", src, "--out", os.path.join(out, "run"), "--dry"],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(1, r.returncode, r.stdout + r.stderr)
            with open(os.path.join(out, "run", "checks.txt")) as f:
                lines = f.read().splitlines()
            with open(os.path.join(out, "run", "summary.json")) as f:
                summary = json.load(f)
        self.assertTrue(any(ln.startswith("FAIL sources vllm: vllm/") and "lay the engine's files out" in ln
                            for ln in lines), lines)
        self.assertTrue(any(ln.startswith("FAIL sources sglang: python/sglang/") for ln in lines), lines)
        self.assertIn("SKIP hostmem: the vLLM tree did not patch", lines)
        self.assertIn("not the engines' servers", summary["what_ran"])
        for step in ("served", "fallback", "together"):
            self.assertTrue(any(ln.startswith(f"SKIP {step}: --dry") for ln in lines), lines)
        if java_app_reason() is None:
            self.assertTrue(any(ln.startswith(("PASS measure (dry)", "SKIP measure (dry)")) for ln in lines), lines)

    def test_dry_run_with_the_engines_files(self):
        src = os.environ.get("ENGRAM_ENGINES_SRC")
        if not src:
            self.skipTest("ENGRAM_ENGINES_SRC is not set (the engines' files are not in this repository: "
                          "bench/engines-patch-check.md)")
        with tempfile.TemporaryDirectory() as out:
            r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu", "gpu-engines-live.py"),
                                "--engines-src", src, "--out", os.path.join(out, "run"), "--dry"],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(0, r.returncode, r.stdout + r.stderr)
            self.assertIn("PASS hostmem: require skips vLLM's host-memory check", r.stdout)


class Patches(unittest.TestCase):
    # patch: (its files, the module it imports, the group it decides over, pinned to a commit)
    EXPECTED = {
        "vllm": (["vllm/config/engram.py", "vllm/models/deepseek_v41/common/engram.py"],
                 "engram_host.engines import vllm", "group.cpu_group", False),
        "vllm-0130d488": (["vllm/models/deepseek_v41/nvidia/engram.py"], "engram_host.engines import vllm",
                          "group.cpu_group", True),
        "sglang": (["python/sglang/srt/layers/engram.py"], "engram_host.engines import sglang",
                   "get_parallel().tp_group.cpu_group", False),
        "sglang-4be612a4": (["python/sglang/srt/layers/engram.py"], "engram_host.engines import sglang",
                            "get_tp_group().cpu_group", True),
    }
    INLINE = 'os.environ.get("ENGRAM_HOST_TABLES", "").strip().lower()'

    def read(self, name):
        with open(os.path.join(ROOT, "deploy", "engines", f"{name}.patch")) as f:
            return f.read()

    def test_every_patch_here_is_checked(self):
        names = sorted(f[:-len(".patch")] for f in os.listdir(os.path.join(ROOT, "deploy", "engines"))
                       if f.endswith(".patch"))
        self.assertEqual(sorted(self.EXPECTED), names)

    def test_each_patch_is_small_names_its_targets_and_calls_the_package(self):
        for name, (paths, call, group, pinned) in self.EXPECTED.items():
            with self.subTest(name):
                text = self.read(name)
                header = text[:text.index("diff --git ")]
                self.assertEqual(paths, re.findall(r"^\+\+\+ b/(\S+)", text, re.M))
                self.assertEqual(paths, [m[0] for m in re.findall(r"^Target: (\S+) blob ([0-9a-f]{40})$", header,
                                                                   re.M)])
                if pinned:
                    self.assertRegex(header, r"at [0-9a-f]{40}\)")
                else:
                    self.assertNotRegex(header, r"at [0-9a-f]{40}")
                changed = [ln for ln in text.splitlines() if re.match(r"^[+-]([^+-]|$)", ln)]
                self.assertLessEqual(len(changed), 60)
                self.assertIn(call, text)
                self.assertIn(self.INLINE, text)
                self.assertNotIn('os.environ.get("ENGRAM_HOST_TABLES", "off")', text)
                self.assertIn("skip_weight", text)
                self.assertIn(f"group={group}" if "sglang" in name else "group=None if group is None else "
                              f"{group}", text)
                if "vllm" in name:  # (d): the engine's num_embeddings goes to the row check
                    self.assertRegex(text, r"\+ +num_embeddings=self\.(num_embeddings|_engram_host_rows),")
                else:
                    self.assertRegex(text, r"\+ +num_embeddings,\n")

    def test_the_current_vllm_patch_skips_the_host_memory_check_only_in_require(self):
        text = self.read("vllm")
        hunk = text[text.index("+++ b/vllm/config/engram.py"):text.index("diff --git", text.index("+++ b/"))]
        self.assertIn(f'+        if {self.INLINE} == "require":', hunk)
        self.assertIn("+import os", hunk)
        self.assertIn(" if not self.cpu_offload or self.dp_shared_memory:", hunk)

    def test_docs_show_the_current_patches_whole_and_name_the_pinned_ones(self):
        with open(os.path.join(ROOT, "docs", "engines.md")) as f:
            doc = f.read()
        for name in self.EXPECTED:
            if name in ("vllm", "sglang"):
                self.assertIn("```diff\n" + self.read(name) + "```\n", doc, f"docs/engines.md does not show {name}.patch")
            else:
                self.assertIn(f"deploy/engines/{name}.patch", doc)

    def test_the_patches_call_what_the_package_has(self):
        import inspect
        for name in self.EXPECTED:
            self.assertIn("engram_host_vllm.rank_tables(" if "vllm" in name else "engram_host_sglang.rank_tables(",
                          self.read(name))
        self.assertIn("num_embeddings", inspect.signature(eh_vllm.rank_tables).parameters)
        self.assertIn("group", inspect.signature(eh_vllm.rank_tables).parameters)
        self.assertIn("group", inspect.signature(eh_sglang.rank_tables).parameters)


if __name__ == "__main__":
    unittest.main()
