#!/usr/bin/env python3
"""The engine patches' classes run for real against a live daemon (scripts/gpu/gpu-engines-live.sh runs this; its
header says how). What runs: vLLM's patched ``ParallelEngramEmbedding`` (built by the patched
``Engram._create_embedding``) and SGLang's patched ``EngramEmbedding``, from the engines' own source files with
deploy/engines/vllm.patch and sglang.patch applied, in rank processes joined by a real ``torch.distributed``
gloo group, on a tiny DeepSeek-V4.1-shaped model (``engram-host generate --model``) served by an
``engram-host serve`` process. What does not run: either engine's server, scheduler, model runner or loader
module. The engine internals the patched files import (vLLM's distributed groups, ``get_current_vllm_config``,
platform, logger, UVA helper, SGLang's runtime context, environ, kernels...) are the STAND-INS written below in
this file (``_vllm_stand_ins``, ``_sglang_stand_ins``), each as small as the patched code paths allow; none of them
is in the package. vLLM's lookup is its own Triton kernel where ``triton`` imports (else a torch gather on the
tensors ``_storage()`` returns, said in the report); SGLang's lookup is the engine's own torch path of
``_owned_rows`` (its CUDA kernels are not in the source tree: the stand-in ``is_cuda()`` says False).

Steps, each a line PASS/FAIL (OUT/checks.txt) and an entry of OUT/summary.json:
  sources   the engine files are the blobs the patches name; each patch applies (git apply) to a scratch copy
            and the patched files compile
  hostmem   vLLM's patched ``EngramConfig.verify_host_memory`` against a container limit (the stand-in cgroup
            reader) smaller than the tables: ``require`` passes, ``fallback`` and unset still refuse (no GPU)
  served    per backend (memfd, memfd-hugetlb when huge pages are reserved, cuda-vmm): ENGRAM_HOST_TABLES=require,
            2 TP ranks each building every Engram layer; the weight-loading path over the checkpoint (vLLM: the
            names its safetensors iterator asks ``should_skip_weight`` about, then ``get_tensor`` and the
            parameter's ``weight_loader``; SGLang: ``get_tensor`` of every name and its ``weight_loader``) after
            the checkpoint's page cache was dropped, then ``mincore`` over each table's bytes: none resident
            beyond the read-ahead edges; the lookup on random ids compared bit for bit with the same rows of
            ``safetensors.torch.load_file``
  fallback  no daemon, ENGRAM_HOST_TABLES=fallback: the engines' own allocation and loaders run; the tables'
            pages are resident after the load (the measurement's positive control) and the lookup matches
  together  one rank served, the other with no daemon (case (b) of docs/engines.md's traps): vLLM with
            ``dp_shared_memory`` over an Engram DP group of 2 (its DPSharedEngramStorage runs its collectives)
            and SGLang over TP 2; ``fallback``: both ranks load themselves and match; ``require``: both raise;
            under a timeout: a hang FAILs
``--dry`` runs what needs no GPU and no torch (sources, hostmem, the page-cache measurement on a generated
checkpoint) and says SKIP for the rest. Exit status: 0 when nothing FAILed.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import importlib.util
import json
import logging
import mmap
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import types

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))

# The patches and the files of the engine source tree they change (ENGINES_SRC/<engine>/<path>).
PATCHES = {"vllm": os.path.join(ROOT, "deploy", "engines", "vllm.patch"),
           "sglang": os.path.join(ROOT, "deploy", "engines", "sglang.patch")}
VLLM_ENGRAM = "vllm/models/deepseek_v41/common/engram.py"
VLLM_CONFIG = "vllm/config/engram.py"
SGLANG_ENGRAM = "python/sglang/srt/layers/engram.py"
DIM, BLOCK, HEADS = 256, 32, 24  # DeepSeek-V4.1: 256 values a row, E8M0 scales per 32, 24 hash heads a layer
CHECKS = {"PASS": 0, "FAIL": 0, "SKIP": 0}
SUMMARY: dict = {"steps": {}}
OUT = ""


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


def check(status: str, what: str, detail=None) -> bool:
    """One PASS/FAIL/SKIP line, in OUT/checks.txt and the summary."""
    CHECKS[status] += 1
    line = f"{status} {what}" + (f": {detail}" if detail not in (None, "") else "")
    log(line)
    with open(os.path.join(OUT, "checks.txt"), "a") as f:
        f.write(line + "\n")
    SUMMARY.setdefault("checks", []).append({"status": status, "what": what, "detail": detail})
    return status == "PASS"


def ok(cond: bool, what: str, detail=None) -> bool:
    return check("PASS" if cond else "FAIL", what, detail)


# ---------------------------------------------------------------------------------------------- sources, patches

def blob_id(path: str) -> str:
    with open(path, "rb") as f:
        data = f.read()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def targets(patch: str) -> dict:
    """PATH -> blob id of the "Target: PATH blob SHA1" lines of a patch's header."""
    out = {}
    with open(patch) as f:
        for line in f:
            if line.startswith("diff --git "):
                break
            parts = line.split()
            if len(parts) == 4 and parts[0] == "Target:" and parts[2] == "blob":
                out[parts[1]] = parts[3]
    return out


def prepare_sources(src: str, scratch: str) -> dict:
    """Copies each engine's target files from ``src`` to ``scratch``, checks their blob ids, applies the patch
    and compiles; returns engine -> the patched tree (None where a step failed)."""
    trees = {}
    for engine, patch in PATCHES.items():
        tree = os.path.join(scratch, engine)
        good = True
        for path, want in targets(patch).items():
            given = os.path.join(src, engine, path)
            if not os.path.isfile(given):
                good = ok(False, f"sources {engine}: {path}", f"not in {os.path.join(src, engine)} (lay the engine's "
                          "files out as its repository there: ENGINES_SRC/vllm/vllm/..., ENGINES_SRC/sglang/python/...)")
                break
            got = blob_id(given)
            good = ok(got == want, f"sources {engine}: {path} is the blob the patch names", f"blob {got}") and good
            os.makedirs(os.path.dirname(os.path.join(tree, path)), exist_ok=True)
            shutil.copyfile(given, os.path.join(tree, path))
        if not good:
            trees[engine] = None
            continue
        subprocess.run(["git", "init", "-q"], cwd=tree, check=True)  # git apply's paths are then the tree's own
        r = subprocess.run(["git", "apply", "--verbose", patch], cwd=tree, capture_output=True, text=True)
        good = ok(r.returncode == 0, f"sources {engine}: git apply {os.path.basename(patch)}",
                  (r.stdout + r.stderr).strip().replace("\n", "; "))
        for path in targets(patch):
            r2 = subprocess.run([sys.executable, "-m", "py_compile", os.path.join(tree, path)], capture_output=True,
                                text=True)
            good = ok(good and r2.returncode == 0, f"sources {engine}: patched {path} compiles", r2.stderr.strip())
        trees[engine] = tree if good else None
    return trees


def load_module(name: str, path: str):
    """The engine's (patched) file at ``path`` imported as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def stand_in(name: str, **attrs) -> types.ModuleType:
    """A STAND-IN module of the engine, registered in sys.modules with its parent packages."""
    parts = name.split(".")
    for i in range(1, len(parts)):
        parent = ".".join(parts[:i])
        if parent not in sys.modules:
            pkg = types.ModuleType(parent)
            pkg.__path__ = []
            sys.modules[parent] = pkg
    module = sys.modules.get(name) or types.ModuleType(name)
    module.__dict__.update(attrs)
    if "." in name:
        setattr(sys.modules[".".join(parts[:-1])], parts[-1], module)
    sys.modules[name] = module
    return module


def _unavailable(what: str):
    def call(*args, **kwargs):
        raise RuntimeError(f"stand-in: {what} is not part of this harness (the engine's own is not installed)")
    return call


# ---------------------------------------------------------------------------------------- page cache, mincore

PAGE = os.sysconf("SC_PAGE_SIZE")
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))


def table_ranges(ckpt: str) -> dict:
    """name -> (file, first byte, end byte) of every Engram table of the checkpoint's .safetensors files."""
    out = {}
    for f in sorted(os.listdir(ckpt)):
        if not f.endswith(".safetensors"):
            continue
        path = os.path.join(ckpt, f)
        with open(path, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
        for name, e in header.items():
            if name != "__metadata__" and ".engram.embed." in name:
                a, b = e["data_offsets"]
                out[name] = (path, 8 + n + a, 8 + n + b)
    return out


def drop_page_cache(paths) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_pages(path: str, start: int, end: int) -> list:
    """The page-cache residency (mincore) of each page of bytes [start, end) of ``path``: a list of bools."""
    first = start // PAGE * PAGE
    length = end - first
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, first)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            pages = (length + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, length, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            return [bool(v & 1) for v in vec]
        finally:
            _libc.munmap(addr, length)
    finally:
        os.close(fd)


def read_ahead_edge(path: str) -> int:
    """Bytes of a table's edges where resident pages are accepted: 2 x the device's read_ahead_kb, at least
    2 MiB. Reads of the bytes beside a table (its file's header, a neighbouring tensor that is loaded) make the
    kernel read ahead into the table's first or last pages; nothing may read its interior."""
    st = os.stat(path)
    kb = 128
    with contextlib.suppress(OSError, ValueError):
        with open(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/bdi/read_ahead_kb") as f:
            kb = int(f.read())
    return max(2 << 20, 2 * kb * 1024)


def residency(ranges: dict) -> dict:
    """name -> {bytes, resident bytes, resident bytes of its interior (beyond the edges)} of each table."""
    out = {}
    for name, (path, start, end) in ranges.items():
        pages = resident_pages(path, start, end)
        edge = read_ahead_edge(path)
        first = start // PAGE * PAGE
        inner = sum(1 for i, r in enumerate(pages)
                    if r and first + i * PAGE >= start + edge and first + (i + 1) * PAGE <= end - edge)
        out[name] = {"bytes": end - start, "resident": sum(pages) * PAGE, "interior_resident": inner * PAGE,
                     "edge_bytes": edge}
    return out


# ------------------------------------------------------------------------------------------------- the model

def model_shape(ckpt: str) -> dict:
    with open(os.path.join(ckpt, "config.json")) as f:
        text = json.load(f)["text_config"]
    layers, rows = text["engram_layer_ids"], text["engram_num_embeddings"]
    return {"layers": layers, "rows": dict(zip(map(str, layers), rows)), "dim": text["engram_head_dim"]}


def head_sizes(rows: int, exact: bool) -> list:
    """24 hash heads (3 n-gram sizes x 8 heads), each of its own size, summing to ``rows`` (``exact``, as
    SGLang's column bounds must) or to less (vLLM asserts sum <= num_embeddings)."""
    base = rows // HEADS - (0 if exact else 3)
    sizes = [base + (7 * h) % 5 - 2 for h in range(HEADS)]
    if exact:
        sizes[-1] += rows - sum(sizes)
    assert sum(sizes) <= rows and min(sizes) > 0
    return sizes


# ----------------------------------------------------------------------------------- the rank processes: vLLM

class StandInGroupCoordinator:
    """STAND-IN for vLLM's and SGLang's GroupCoordinator: what the patched code paths use of it, over a real
    torch.distributed gloo group of the rank processes."""

    def __init__(self, group, ranks):
        import torch.distributed as dist
        self.cpu_group = self.device_group = group
        self.ranks = ranks
        self.world_size = len(ranks)
        self.rank_in_group = ranks.index(dist.get_rank())
        self.unique_name = "stand-in"

    def broadcast_object(self, obj=None, src: int = 0):
        import torch.distributed as dist
        box = [obj]
        dist.broadcast_object_list(box, src=self.ranks[src], group=self.cpu_group)
        return box[0]

    def barrier(self):
        import torch.distributed as dist
        dist.barrier(group=self.cpu_group)


class _OnceLogger(logging.LoggerAdapter):
    def warning_once(self, msg, *args):
        self.warning(msg, *args)

    def info_once(self, msg, *args):
        self.info(msg, *args)


def _cuda_view_of_pinned(t):
    """STAND-IN for vllm.utils.torch_utils.get_accelerator_view_from_cpu_tensor: the pinned (or registered) host
    tensor's CUDA view at the same address (UVA), as vLLM's custom op makes it."""
    import torch
    u8 = t.view(torch.uint8).reshape(-1)
    holder = types.SimpleNamespace(__cuda_array_interface__={
        "shape": (u8.numel(),), "typestr": "|u1", "strides": None, "data": (u8.data_ptr(), False), "version": 3},
        owner=t)
    view = torch.as_tensor(holder)
    if view.device.type != "cuda" or view.data_ptr() != u8.data_ptr():
        raise RuntimeError(f"stand-in UVA view: torch made {view.device} 0x{view.data_ptr():x} of 0x{u8.data_ptr():x}")
    return view.view(t.dtype).view(t.shape)


def _vllm_stand_ins(spec: dict, tp_group, edp_group, model: str) -> None:
    """STAND-INS of the vLLM internals common/engram.py imports, and of the config it reads."""
    import torch
    try:
        import triton
        import triton.language as tl
    except ImportError:
        triton = types.SimpleNamespace(__version__="stand-in", cdiv=lambda a, b: -(-a // b),
                                       next_power_of_2=lambda n: 1 << max(0, int(n) - 1).bit_length(),
                                       jit=lambda fn=None, **kw: (fn if fn is not None else (lambda f: f)))
        tl = types.SimpleNamespace(constexpr=lambda v=None: v)
    engram_config = types.SimpleNamespace(cpu_offload=spec["cpu_offload"], dp_shared_memory=spec["dp_shared_memory"],
                                          use_thp=False)
    vllm_config = types.SimpleNamespace(model_config=types.SimpleNamespace(model=model), engram_config=engram_config,
                                        scheduler_config=types.SimpleNamespace(max_num_batched_tokens=64),
                                        lora_config=None)
    stand_in("vllm.compilation.breakable_cudagraph", eager_break_during_capture=lambda fn: fn)
    stand_in("vllm.config", VllmConfig=type("VllmConfig", (), {}), get_current_vllm_config=lambda: vllm_config)
    stand_in("vllm.distributed",
             get_dp_group=lambda: edp_group, get_engram_dp_group=lambda: edp_group,
             get_engram_dp_size=lambda: 1 if edp_group is None else edp_group.world_size,
             get_tensor_model_parallel_rank=lambda: tp_group.rank_in_group,
             get_tensor_model_parallel_world_size=lambda: tp_group.world_size,
             tensor_model_parallel_all_gather=_unavailable("vLLM's TP all-gather"))

    def check_shm_free_space(num_bytes, allocation_name=None):
        free = shutil.disk_usage("/dev/shm").free
        if free < num_bytes:
            raise RuntimeError(f"/dev/shm has {free} bytes free, {num_bytes} needed")
    stand_in("vllm.distributed.device_communicators.shm_broadcast", SHM_PATH="/dev/shm",
             check_shm_free_space=check_shm_free_space)
    stand_in("vllm.distributed.parallel_state", GroupCoordinator=StandInGroupCoordinator)
    stand_in("vllm.forward_context", get_forward_context=_unavailable("vLLM's forward context"),
             is_forward_context_available=lambda: False)
    stand_in("vllm.logger", init_logger=lambda name: _OnceLogger(logging.getLogger(name), {}))
    stand_in("vllm.model_executor.layers.fusion.quant_activation", QuantizedActivation=type("QuantizedActivation", (), {}))
    stand_in("vllm.model_executor.layers.linear", ColumnParallelLinear=_unavailable("vLLM's ColumnParallelLinear"))
    stand_in("vllm.model_executor.layers.quantization", QuantizationConfig=type("QuantizationConfig", (), {}))
    stand_in("vllm.model_executor.layers.quantization.utils.quant_utils", kMxfp8Dynamic=object())

    def set_weight_attrs(weight, attrs):
        for k, v in (attrs or {}).items():
            setattr(weight, k, v)
    stand_in("vllm.model_executor.utils", set_weight_attrs=set_weight_attrs)
    # What the package wraps (engram_host.engines.vllm.install_weight_filter): the unwrapped one skips nothing.
    stand_in("vllm.model_executor.model_loader.weight_utils", should_skip_weight=lambda name, *a, **k: False)
    stand_in("vllm.models.deepseek_v41.common.ops.query_quant", can_fuse_query_quant=lambda *a: False,
             mxfp8_scale_bytes=_unavailable("vLLM's MXFP8 staging"), mxfp8_scale_offset=None)

    class Platform:
        @staticmethod
        def is_cuda():
            return True

        @staticmethod
        def is_rocm():
            return False

        @staticmethod
        def is_device_capability_family(family, device=0):
            major, _ = torch.cuda.get_device_capability(device)
            return major * 10 == family
    stand_in("vllm.platforms", current_platform=Platform())
    stand_in("vllm.triton_utils", tl=tl, triton=triton)
    stand_in("vllm.utils.platform_utils", is_uva_available=lambda: True)
    stand_in("vllm.utils.torch_utils", get_accelerator_view_from_cpu_tensor=_cuda_view_of_pinned)


def _load_like_vllm(params: dict, ckpt: str) -> dict:
    """The weight-loading path of vLLM's lazy safetensors iterator, emulated (vLLM's loader module is not in the
    tree): per file and name, ``should_skip_weight(name)`` first, else ``get_tensor(name)`` and the parameter's
    ``weight_loader``. Only the Engram tables' names are looked at (the model's other tensors have no parameter
    here). ``params``: checkpoint name -> parameter. Returns what was skipped and loaded."""
    from safetensors import safe_open
    weight_utils = sys.modules["vllm.model_executor.model_loader.weight_utils"]
    done = {"skipped": [], "loaded": []}
    for f in sorted(os.listdir(ckpt)):
        if not f.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(ckpt, f), framework="pt") as st:
            for name in st.keys():
                if name not in params:
                    continue
                if weight_utils.should_skip_weight(name):
                    done["skipped"].append(name)
                    continue
                param = params[name]
                param.weight_loader(param, st.get_tensor(name))
                done["loaded"].append(name)
    return done


def _load_like_sglang(params: dict, ckpt: str) -> dict:
    """SGLang's safetensors iterator as docs/engines.md reads it (no name filter): ``get_tensor`` of every name,
    then the parameter's ``weight_loader``."""
    from safetensors import safe_open
    done = {"skipped": [], "loaded": []}
    for f in sorted(os.listdir(ckpt)):
        if not f.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(ckpt, f), framework="pt") as st:
            for name in st.keys():
                if name in params:
                    param = params[name]
                    param.weight_loader(param, st.get_tensor(name))
                    done["loaded"].append(name)
    return done


def _reference(ckpt: str) -> dict:
    """Every Engram table of the checkpoint by safetensors.torch.load_file, as uint8 [rows, cols] on cuda:0."""
    import torch
    import safetensors.torch
    ref = {}
    for f in sorted(os.listdir(ckpt)):
        if f.endswith(".safetensors"):
            for name, t in safetensors.torch.load_file(os.path.join(ckpt, f)).items():
                if ".engram.embed." in name:
                    ref[name] = (t if t.dtype == torch.uint8 else t.view(torch.uint8)).reshape(t.shape[0], -1).cuda()
    return ref


def _ids(sizes, tokens: int, seed: int):
    """Random hash ids [tokens, 24], column h inside head h's bucket range, as the engine's hash produces them."""
    import torch
    g = torch.Generator().manual_seed(seed)
    starts = torch.tensor([sum(sizes[:h]) for h in range(len(sizes))], dtype=torch.int64)
    span = torch.tensor(sizes, dtype=torch.int64)
    return (starts + (torch.rand(tokens, len(sizes), generator=g) * span).long().clamp_max(span - 1)).cuda()


def _vllm_rank(spec: dict, report: dict) -> None:
    import torch
    import torch.distributed as dist
    ranks = list(range(spec["world"]))
    group = StandInGroupCoordinator(dist.group.WORLD, ranks)
    singles = [dist.new_group([r], backend="gloo") for r in ranks]  # every rank creates every group, in order
    me = dist.get_rank()
    tp_group = group if spec["tp"] > 1 else StandInGroupCoordinator(singles[me], [me])
    edp = group if spec["edp"] > 1 else None
    _vllm_stand_ins(spec, tp_group, edp, spec["model"])
    mod = load_module("vllm.models.deepseek_v41.common.engram", os.path.join(spec["tree"], VLLM_ENGRAM))
    shape = model_shape(spec["model"])
    layers = shape["layers"]
    sizes = {L: head_sizes(shape["rows"][str(L)], exact=False) for L in layers}
    per = len(sizes[layers[0]]) // 3
    layout = types.SimpleNamespace(
        layer_ids=tuple(layers), head_dim=DIM,
        num_embeddings=tuple(shape["rows"][str(L)] for L in layers),
        primes=tuple(tuple(tuple(sizes[L][n * per:(n + 1) * per]) for n in range(3)) for L in layers))
    embeds, params = {}, {}
    with torch.device("cuda", 0):
        for i, L in enumerate(layers):
            # The patched Engram._create_embedding, as Engram.__init__ calls it (ENGRAM_HOST_TABLES read there).
            emb = mod.Engram._create_embedding(None, layout, i)
            embeds[L] = emb
            params[f"layers.{L}.engram.embed.weight"] = emb.weight
            params[f"layers.{L}.engram.embed.scale"] = emb.weight_scale_inv
    report["served"] = {str(L): bool(e._engram_host) for L, e in embeds.items()}
    report["rows"] = {str(L): [e.vocab_start_idx, e.vocab_end_idx] for L, e in embeds.items()}
    report["storage"] = {str(L): ("daemon" if e._engram_host else "dp_shared_memory" if e._shared_memory is not None
                                  else "pinned host" if e.cpu_offload else "device") for L, e in embeds.items()}
    report["load"] = _load_like_vllm(params, spec["model"])
    torch.cuda.synchronize()
    _handshake(spec)
    ref = _reference(spec["model"])
    report["lookup"] = {}
    for L, emb in embeds.items():
        w_ref, s_ref = ref[f"layers.{L}.engram.embed.weight"], ref[f"layers.{L}.engram.embed.scale"]
        a, b = emb.vocab_start_idx, emb.vocab_end_idx
        weight, scale = emb._storage()
        rows_equal = (torch.equal(weight.view(torch.uint8), w_ref[a:b]) and torch.equal(scale.view(torch.uint8), s_ref[a:b]))
        ids = _ids(sizes[L], 64, seed=L)
        # What a rank's lookup must produce for its local heads: the row's FP8 bytes then its scale bytes where the
        # rank owns the id, zeros elsewhere (the PACKED output of vLLM's lookup kernel).
        heads = torch.arange(emb.head_start, emb.head_start + emb.part_n_hash_cols, device="cuda")
        valid = heads < emb.n_hash_cols
        local = ids[:, heads.clamp_max(emb.n_hash_cols - 1)]
        owned = valid & (local >= a) & (local < b)
        want = torch.cat([w_ref[local.clamp(0, w_ref.shape[0] - 1)], s_ref[local.clamp(0, s_ref.shape[0] - 1)]], -1)
        want = torch.where(owned.unsqueeze(-1), want, torch.zeros_like(want))
        try:
            out = torch.zeros(64, emb.part_n_hash_cols, DIM + DIM // BLOCK, dtype=torch.uint8, device="cuda")
            emb.lookup(ids, out)
            torch.cuda.synchronize()
            path = "vLLM's _engram_lookup_kernel (Triton), packed output"
        except Exception as e:  # no Triton: the gather done with torch indexing on the tensors _storage() returns
            path = f"torch indexing on _storage()'s tensors ({type(e).__name__}: {e})"
            rel = (local - a).clamp(0, max(b - a - 1, 0))
            got = torch.cat([weight.view(torch.uint8)[rel], scale.view(torch.uint8)[rel]], -1)
            out = torch.where(owned.unsqueeze(-1), got, torch.zeros_like(got))
        report["lookup"][str(L)] = {"path": path, "rows_equal": bool(rows_equal), "lookup_equal": bool(torch.equal(out, want)),
                                    "owned_ids": int(owned.sum()), "describe": _describe(weight)}


def _describe(t) -> dict:
    from engram_host import engines
    return engines.describe(t)


# --------------------------------------------------------------------------------- the rank processes: SGLang

def _sglang_stand_ins(spec: dict, tp_group, model: str) -> None:
    """STAND-INS of the SGLang internals layers/engram.py imports."""
    try:
        import msgspec  # noqa: F401
    except ImportError:
        class Struct:  # STAND-IN for msgspec.Struct: a class taking keyword fields (frozen=True accepted)
            def __init_subclass__(cls, **kwargs):
                pass

            def __init__(self, **fields):
                self.__dict__.update(fields)
        stand_in("msgspec", Struct=Struct)
    stand_in("sglang.kernels.ops.attention.dsv4.torch_quant", FP8_BLOCK_SIZE=BLOCK)
    stand_in("sglang.kernels.ops.embeddings.engram_gate", fused_engram_gate=_unavailable("SGLang's fused gate"))
    stand_in("sglang.kernels.ops.embeddings.engram_gather", engram_gather=_unavailable("SGLang's engram_gather kernel"))
    stand_in("sglang.kernels.ops.embeddings.engram_hash", MODE_DECODE=0, MODE_EXTEND=1, MODE_VERIFY=2,
             engram_commit_history=_unavailable("SGLang's hash kernels"), engram_hash_ids=_unavailable("SGLang's hash kernels"),
             engram_hash_ids_and_commit=_unavailable("SGLang's hash kernels"))
    stand_in("sglang.srt.distributed", tensor_model_parallel_all_reduce=_unavailable("SGLang's TP all-reduce"))
    stand_in("sglang.srt.distributed.device_communicators.cuda_wrapper", find_loaded_library=lambda name: None)
    stand_in("sglang.srt.distributed.parallel_state", inplace_all_reduce=_unavailable("SGLang's all-reduce"),
             get_tp_group=lambda: tp_group)
    stand_in("sglang.srt.distributed.symmetric_memory", symmetric_context=lambda device: contextlib.nullcontext())

    class Env:  # STAND-IN for an SGLang environment variable: its default (host tables off)
        def __init__(self, value):
            self.value = value

        def get(self):
            return self.value
    stand_in("sglang.srt.environ", envs=types.SimpleNamespace(
        SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=Env(False), SGLANG_DSV41_ENGRAM_HOST_TABLE_LAYOUT=Env("shared"),
        SGLANG_ENABLE_DSV41_ENGRAM_DROP_PAGE_CACHE=Env(False), SGLANG_OPT_DSV41_ENGRAM_TP_FUSION_MIN_TOKENS=Env(0)))
    stand_in("sglang.srt.layers.dp_attention", **{n: _unavailable("SGLang's DP attention") for n in (
        "attn_cp_all_gather_into_tensor", "dp_gather_replicate", "dp_reduce_scatter_tensor", "dp_scatter",
        "get_global_dp_buffer_len", "is_dp_gatherv_active")})
    stand_in("sglang.srt.layers.linear", ReplicatedLinear=_unavailable("SGLang's ReplicatedLinear"))
    stand_in("sglang.srt.layers.quantization.base_config", QuantizationConfig=type("QuantizationConfig", (), {}))
    stand_in("sglang.srt.managers.schedule_batch", MM_PAD_SHIFT_VALUE=1 << 30)
    stand_in("sglang.srt.model_executor.forward_batch_info", ForwardBatch=type("ForwardBatch", (), {}))
    parallel = types.SimpleNamespace(tp_size=tp_group.world_size, tp_rank=tp_group.rank_in_group, tp_group=tp_group,
                                     attn_dp_size=1, attn_cp_size=1, attn_cp_rank=0)
    stand_in("sglang.srt.runtime_context", get_model=lambda: types.SimpleNamespace(model_path=model),
             get_parallel=lambda: parallel, get_serving=_unavailable("SGLang's serving args"))
    # is_cuda() False: the engine's own torch lookup path runs (its CUDA kernels are not in the tree).
    stand_in("sglang.srt.utils", add_prefix=lambda name, prefix: f"{prefix}.{name}" if prefix else name,
             is_cuda=lambda: False, is_gfx95_supported=lambda: False, is_hip=lambda: False)
    stand_in("sglang.srt.utils.hf_transformers.tokenizer", get_tokenizer=_unavailable("SGLang's tokenizer"))


def _sglang_rank(spec: dict, report: dict) -> None:
    import torch
    import torch.distributed as dist
    tp_group = StandInGroupCoordinator(dist.group.WORLD, list(range(spec["world"])))
    _sglang_stand_ins(spec, tp_group, spec["model"])
    mod = load_module("sglang.srt.layers.engram", os.path.join(spec["tree"], SGLANG_ENGRAM))
    shape = model_shape(spec["model"])
    embeds, params, sizes = {}, {}, {}
    with torch.device("cuda", 0):
        for L in shape["layers"]:
            rows = shape["rows"][str(L)]
            sizes[L] = head_sizes(rows, exact=True)
            bounds = tuple(sum(sizes[L][:c]) for c in range(len(sizes[L]) + 1))
            emb = mod.EngramEmbedding(rows, DIM, L, column_bounds=bounds)
            embeds[L] = emb
            params[f"layers.{L}.engram.embed.weight"] = emb.weight
            params[f"layers.{L}.engram.embed.scale"] = emb.scale
    from engram_host.engines import skip_weight
    report["served"] = {str(L): e.weight.weight_loader is skip_weight for L, e in embeds.items()}
    report["rows"] = {str(L): [e.row_start, e.row_start + e.rows] for L, e in embeds.items()}
    report["load"] = _load_like_sglang(params, spec["model"])
    torch.cuda.synchronize()
    _handshake(spec)
    ref = _reference(spec["model"])
    report["lookup"] = {}
    for L, emb in embeds.items():
        w_ref, s_ref = ref[f"layers.{L}.engram.embed.weight"], ref[f"layers.{L}.engram.embed.scale"]
        a, b = emb.row_start, emb.row_start + emb.rows
        rows_equal = torch.equal(emb.weight.view(torch.uint8), w_ref[a:b]) and torch.equal(emb.scale.view(torch.uint8), s_ref[a:b])
        ids = _ids(sizes[L], 64, seed=L)
        got = emb._owned_rows(ids)  # the engine's own torch path (is_cuda() is False here)
        # The same expression over safetensors' rows: dequantized with the same torch ops, so equal bit for bit.
        local = ids - a
        owned = (local >= 0) & (local < emb.rows)
        local = local.masked_fill(~owned, 0)
        wr = w_ref[a:b].view(torch.float8_e4m3fn)[local].float().unflatten(-1, (-1, BLOCK))
        want = (wr * s_ref[a:b].view(torch.float8_e8m0fnu)[local].float().unsqueeze(-1)).flatten(-2)
        want = want.to(torch.bfloat16).masked_fill(~owned.unsqueeze(-1), 0)
        report["lookup"][str(L)] = {"path": "SGLang's EngramEmbedding._owned_rows, torch path", "rows_equal": bool(rows_equal),
                                    "lookup_equal": bool(torch.equal(got.view(torch.int16), want.view(torch.int16))),
                                    "owned_ids": int(owned.sum()), "describe": _describe(emb.weight)}


# ---------------------------------------------------------------------------------------------- rank protocol

def _handshake(spec: dict) -> None:
    """After the load: say so, and wait until the parent has measured the page cache (it reads the files after)."""
    if not spec.get("measure"):
        return
    with open(spec["loaded"] + f".{spec['rank']}", "w") as f:
        f.write("loaded\n")
    end = time.monotonic() + spec["timeout"]
    while not os.path.exists(spec["measured"]):
        if time.monotonic() > end:
            raise TimeoutError("the parent did not measure the page cache in time")
        time.sleep(0.05)


def rank_main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    for k, v in spec["env"].items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    logging.basicConfig(level=logging.WARNING, format=f"rank {spec['rank']}: %(name)s: %(message)s")
    report = {"rank": spec["rank"], "ok": False}
    try:
        import torch
        import torch.distributed as dist
        torch.cuda.set_device(0)
        dist.init_process_group("gloo", init_method=f"file://{spec['rendezvous']}", rank=spec["rank"],
                                world_size=spec["world"])
        (_vllm_rank if spec["engine"] == "vllm" else _sglang_rank)(spec, report)
        report["ok"] = True
    except Exception as e:
        report["error"] = f"{type(e).__name__}: {e}"
        report["error_type"] = type(e).__name__
    with open(spec["result"], "w") as f:
        json.dump(report, f, indent=1)
    return 0


def run_ranks(name: str, engine: str, tree: str, model: str, envs: list, timeout: float, measure_ranges=None,
              **spec) -> tuple:
    """Starts one process per entry of ``envs`` (the rank's environment changes) and waits for them under
    ``timeout``; with ``measure_ranges``, measures the tables' page cache once every rank has loaded. Returns
    (reports, residency or None, timed out)."""
    work = tempfile.mkdtemp(prefix=f"ranks-{name}-", dir=OUT)
    base = {"engine": engine, "tree": tree, "model": model, "world": len(envs), "timeout": timeout,
            "rendezvous": os.path.join(work, "rendezvous"), "loaded": os.path.join(work, "loaded"),
            "measured": os.path.join(work, "measured"), "measure": measure_ranges is not None,
            "tp": len(envs), "edp": 1, "cpu_offload": True, "dp_shared_memory": False, **spec}
    procs = []
    for rank, env in enumerate(envs):
        s = dict(base, rank=rank, env=env, result=os.path.join(work, f"result-{rank}.json"))
        path = os.path.join(work, f"spec-{rank}.json")
        with open(path, "w") as f:
            json.dump(s, f)
        logf = open(os.path.join(work, f"rank-{rank}.log"), "w")
        penv = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
        procs.append((subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", path], stdout=logf,
                                       stderr=subprocess.STDOUT, env=penv), logf))
    end = time.monotonic() + timeout
    res = None
    timed_out = False
    if measure_ranges is not None:
        while not all(os.path.exists(base["loaded"] + f".{r}") for r in range(len(envs))):
            if time.monotonic() > end or any(p.poll() is not None for p, _ in procs):
                break
            time.sleep(0.05)
        if all(os.path.exists(base["loaded"] + f".{r}") for r in range(len(envs))):
            res = residency(measure_ranges)
        with open(base["measured"], "w") as f:
            f.write("measured\n")
    for p, logf in procs:
        try:
            p.wait(max(1.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            p.kill()
            p.wait()
        logf.close()
    reports = []
    for rank in range(len(envs)):
        try:
            with open(os.path.join(work, f"result-{rank}.json")) as f:
                reports.append(json.load(f))
        except (OSError, ValueError):
            with open(os.path.join(work, f"rank-{rank}.log")) as f:
                reports.append({"rank": rank, "ok": False, "error": "no result: " + f.read()[-1500:]})
    return reports, res, timed_out


# ------------------------------------------------------------------------------------------------------ steps

def step_hostmem(tree: str) -> None:
    """Trap (a): the patched verify_host_memory against a container limit smaller than the tables."""
    saved = {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.") or k == "pydantic"}
    try:
        try:
            import pydantic  # noqa: F401
        except ImportError:  # STAND-IN: the decorator the config module applies, a no-op here
            stand_in("pydantic", model_validator=lambda mode=None: (lambda fn: fn))
        import dataclasses
        stand_in("vllm.config.utils", config=dataclasses.dataclass, get_hash_factors=lambda *a: {},
                 hash_factors=lambda f: "")
        warned = []
        stand_in("vllm.utils.cpu_resource_utils", get_cgroup_memory_limit=lambda: 1 << 30,
                 check_cgroup_memory_available=lambda required, name: warned.append(required))
        with contextlib.suppress(ImportError):
            import psutil  # noqa: F401
        if "psutil" not in sys.modules:  # STAND-IN: physical RAM larger than the container limit
            stand_in("psutil", virtual_memory=lambda: types.SimpleNamespace(total=1 << 40))
        mod = load_module("vllm.config.engram", os.path.join(tree, VLLM_CONFIG))
        cfg = mod.EngramConfig(cpu_offload=True, embedding_across_dp=False, dp_shared_memory=False)
        parallel = types.SimpleNamespace(data_parallel_size=1, data_parallel_size_local=1)
        table_bytes = 4 << 30  # more than the stand-in container limit of 1 GiB
        outcome = {}
        for mode in ("require", " Require ", "fallback", None):
            if mode is None:
                os.environ.pop("ENGRAM_HOST_TABLES", None)
            else:
                os.environ["ENGRAM_HOST_TABLES"] = mode
            try:
                cfg.verify_host_memory(table_bytes, parallel)
                outcome[repr(mode)] = "passed"
            except ValueError as e:
                outcome[repr(mode)] = f"refused: {e}"
        os.environ.pop("ENGRAM_HOST_TABLES", None)
        SUMMARY["steps"]["hostmem"] = outcome
        ok(outcome["'require'"] == "passed" and outcome["' Require '"] == "passed",
           "hostmem: require skips vLLM's host-memory check of tables the daemon holds", outcome["'require'"])
        ok(all(outcome[k].startswith("refused: Engram tables need 4.0 GiB") and "container memory limit" in outcome[k]
               for k in ("'fallback'", "None")), "hostmem: fallback and unset keep vLLM's check (the engine may load "
           "the tables itself)", outcome["'fallback'"][:120])
    except Exception as e:
        ok(False, "hostmem", f"{type(e).__name__}: {e}")
    finally:
        for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.") or k in ("pydantic",)]:
            if k not in saved:
                del sys.modules[k]
        sys.modules.update(saved)


def hugepages_free() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("HugePages_Free:"):
                return int(line.split()[1])
    return 0


def verdict_ranks(what: str, reports: list, timed_out: bool, want_served: bool) -> bool:
    if timed_out:
        return ok(False, what, "a rank process did not finish in time (a hang)")
    good = all(r.get("ok") for r in reports)
    if not good:
        return ok(False, what, "; ".join(f"rank {r['rank']}: {r.get('error')}" for r in reports if not r.get("ok")))
    served = [v for r in reports for v in r["served"].values()]
    good = ok(all(s == want_served for s in served), f"{what}: every rank's every layer "
              f"{'took the daemon' if want_served else 'loaded itself'}", {r["rank"]: r["served"] for r in reports})
    eq = {(r["rank"], L): (v["rows_equal"], v["lookup_equal"], v["owned_ids"]) for r in reports for L, v in r["lookup"].items()}
    good = ok(all(a and b and n > 0 for a, b, n in eq.values()), f"{what}: rows and lookups equal the safetensors "
              "rows bit for bit", {f"rank{k[0]} layer{k[1]}": v for k, v in eq.items()}) and good
    return good


def step_engines(args, trees: dict) -> None:
    from support import Daemon, generate
    work = tempfile.mkdtemp(prefix="model-", dir=OUT)
    ckpt = generate(os.path.join(work, "ckpt"), rows=args.rows, model=True)
    shape = model_shape(ckpt)
    ranges = table_ranges(ckpt)
    SUMMARY["model"] = {**shape, "dir": ckpt, "tables": {n: [os.path.basename(p), a, b] for n, (p, a, b) in ranges.items()}}
    absent = os.path.join(work, "no-daemon.sock")
    on = lambda mode, sock: {"ENGRAM_HOST_TABLES": mode, "ENGRAM_HOST_SOCKET": sock, "ENGRAM_HOST_EXPECT": None}  # noqa: E731
    engines = [e for e in ("vllm", "sglang") if trees.get(e)]
    for backend in (args.backends if "served" in args.steps else ()):
        if backend == "memfd-hugetlb" and hugepages_free() * 2 * 1024 * 1024 < 2 * sum(b - a for _, a, b in ranges.values()):
            check("SKIP", f"served {backend}", f"{hugepages_free()} free huge pages are too few (vm.nr_hugepages)")
            continue
        with Daemon(ckpt, backend=backend) as d:
            for engine in engines:
                what = f"served {engine} {backend} TP2"
                drop_page_cache({p for p, _, _ in ranges.values()})
                before = residency(ranges)
                reports, res, timed_out = run_ranks(f"{engine}-{backend}", engine, trees[engine], ckpt,
                                                    [on("require", d.socket)] * 2, args.timeout, measure_ranges=ranges)
                SUMMARY["steps"][what] = {"reports": reports, "page_cache_before": before, "page_cache_after": res}
                if verdict_ranks(what, reports, timed_out, want_served=True):
                    loads = {r["rank"]: r["load"] for r in reports}
                    if engine == "vllm":  # the package's filter in vLLM's iterator: no table is even taken
                        ok(all(len(v["skipped"]) == 2 * len(shape["layers"]) and not v["loaded"] for v in loads.values()),
                           f"{what}: should_skip_weight skipped every served table before get_tensor", loads)
                    else:  # SGLang's iterator takes every table; skip_weight touches none
                        ok(all(len(v["loaded"]) == 2 * len(shape["layers"]) for v in loads.values()),
                           f"{what}: every table went to skip_weight", loads)
                if res is None:
                    ok(False, f"{what}: page cache", "not measured (a rank failed before its load)")
                    continue
                interior = {n: v["interior_resident"] for n, v in res.items()}
                if any(v["interior_resident"] for v in before.values()):
                    ok(False, f"{what}: page cache", "the checkpoint's pages could not be dropped first (posix_fadvise "
                       f"DONTNEED left {sum(v['interior_resident'] for v in before.values())} bytes)")
                else:
                    ok(not any(interior.values()), f"{what}: 0 table bytes read (mincore; pages within "
                       f"{max(v['edge_bytes'] for v in res.values())} bytes of a table's edges are read-ahead)",
                       {n: f"{v['resident']} of {v['bytes']} resident, {v['interior_resident']} inside" for n, v in res.items()})
    # fallback: no daemon, the engines' own allocation and loaders
    for engine in (engines if "fallback" in args.steps else ()):
        what = f"fallback {engine} no daemon TP2"
        drop_page_cache({p for p, _, _ in ranges.values()})
        reports, res, timed_out = run_ranks(f"{engine}-fallback", engine, trees[engine], ckpt,
                                            [on("fallback", absent)] * 2, args.timeout, measure_ranges=ranges)
        SUMMARY["steps"][what] = {"reports": reports, "page_cache_after": res}
        verdict_ranks(what, reports, timed_out, want_served=False)
        if res is not None:
            ok(all(v["resident"] >= 0.99 * v["bytes"] for v in res.values()), f"{what}: the tables' pages are resident "
               "after the engine's own load (the measurement's positive control)",
               {n: f"{v['resident']} of {v['bytes']}" for n, v in res.items()})
    # together: rank 0 has a daemon, rank 1 none
    if "together" not in args.steps:
        return
    with Daemon(ckpt, backend="memfd") as d:
        for engine in engines:
            spec = {"tp": 1, "edp": 2, "dp_shared_memory": True} if engine == "vllm" else {}
            label = "EDP2 dp_shared_memory" if engine == "vllm" else "TP2"
            for mode in ("fallback", "require"):
                what = f"together {engine} {label} {mode}: rank 0 served, rank 1 no daemon"
                reports, _, timed_out = run_ranks(f"{engine}-together-{mode}", engine, trees[engine], ckpt,
                                                  [on(mode, d.socket), on(mode, absent)], args.timeout, **spec)
                SUMMARY["steps"][what] = {"reports": reports, "timed_out": timed_out}
                if mode == "fallback":
                    verdict_ranks(what, reports, timed_out, want_served=False)
                elif timed_out:
                    ok(False, what, "a rank process did not finish in time (a hang)")
                else:
                    errors = [r.get("error", "") for r in reports]
                    ok(not any(r.get("ok") for r in reports) and errors[1].startswith("DaemonAbsent")
                       and "another rank of this engine's group failed" in errors[0],
                       f"{what}: both ranks raise (rank 1 its DaemonAbsent, rank 0 that another rank failed)", errors)


def step_dry_measure() -> None:
    """The page-cache measurement itself, without a GPU: a generated checkpoint, dropped, then one table read."""
    from support import generate, java_app_reason
    why = java_app_reason()
    if why:
        check("SKIP", "measure (dry)", why)
        return
    work = tempfile.mkdtemp(prefix="dry-", dir=OUT)
    ckpt = generate(os.path.join(work, "ckpt"), rows=65536, model=True)
    ranges = table_ranges(ckpt)
    drop_page_cache({p for p, _, _ in ranges.values()})
    before = residency(ranges)
    name = sorted(ranges)[0]
    path, a, b = ranges[name]
    with open(path, "rb") as f:
        f.seek(a)
        f.read(b - a)
    after = residency(ranges)
    SUMMARY["steps"]["measure (dry)"] = {"before": before, "after": after, "read": name}
    if any(v["interior_resident"] for v in before.values()):
        check("SKIP", "measure (dry)", "posix_fadvise DONTNEED left pages in this machine's page cache")
        return
    ok(after[name]["resident"] >= 0.99 * after[name]["bytes"]
       and not any(v["interior_resident"] for n, v in after.items() if n != name),
       "measure (dry): mincore sees the one table read, and none of the others",
       {n: f"{v['resident']} of {v['bytes']}" for n, v in after.items()})


def main() -> int:
    global OUT
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rank", help=argparse.SUPPRESS)
    p.add_argument("--engines-src", help="the engines' files laid out as their repositories: DIR/vllm/vllm/..., "
                   "DIR/sglang/python/sglang/...")
    p.add_argument("--out", help="a new or empty directory for checks.txt, summary.json and the ranks' logs")
    p.add_argument("--rows", type=int, default=100003, help="rows of the first Engram table (generate --rows)")
    p.add_argument("--backends", default="memfd,memfd-hugetlb,cuda-vmm")
    p.add_argument("--timeout", type=float, default=180, help="seconds each group of rank processes may take")
    p.add_argument("--steps", default="served,fallback,together", help="the GPU steps to run (sources and hostmem "
                   "always run)")
    p.add_argument("--dry", action="store_true", help="no GPU, no torch: sources, hostmem and the measurement only")
    args = p.parse_args()
    if args.rank:
        return rank_main(args.rank)
    if not args.engines_src or not args.out:
        p.error("--engines-src and --out are needed")
    OUT = os.path.abspath(args.out)
    os.makedirs(OUT, exist_ok=True)
    if os.listdir(OUT):
        p.error(f"{OUT} is not empty")
    args.backends = [b for b in args.backends.split(",") if b]
    args.steps = [x for x in args.steps.split(",") if x]
    unknown = set(args.steps) - {"served", "fallback", "together"}
    if unknown:
        p.error(f"--steps: {', '.join(sorted(unknown))}: use served, fallback, together")
    SUMMARY.update({"what_ran": "the engines' patched classes with the stand-ins of this harness for the engines' "
                    "runtime; not the engines' servers", "dry": args.dry, "engines_src": os.path.abspath(args.engines_src),
                    "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    trees = prepare_sources(os.path.abspath(args.engines_src), os.path.join(OUT, "patched"))
    SUMMARY["patched_trees"] = trees
    if trees.get("vllm"):
        step_hostmem(trees["vllm"])
    else:
        check("SKIP", "hostmem", "the vLLM tree did not patch")
    if args.dry:
        step_dry_measure()
        for what in ("served", "fallback", "together"):
            check("SKIP", what, "--dry: no GPU and no torch here; run without --dry on the GPU machine")
    else:
        try:
            import torch
            import safetensors  # noqa: F401
            if not torch.cuda.is_available():
                raise ImportError("torch sees no GPU")
            SUMMARY["torch"] = torch.__version__
            try:
                import triton
                SUMMARY["triton"] = triton.__version__
            except ImportError:
                SUMMARY["triton"] = None
            step_engines(args, trees)
        except ImportError as e:
            ok(False, "engines", f"cannot run the engines' classes: {e}")
    SUMMARY["counts"] = CHECKS
    with open(os.path.join(OUT, "summary.json"), "w") as f:
        json.dump(SUMMARY, f, indent=1, default=str)
    log(f"{CHECKS['PASS']} PASS, {CHECKS['FAIL']} FAIL, {CHECKS['SKIP']} SKIP; {OUT}/summary.json")
    return 1 if CHECKS["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
