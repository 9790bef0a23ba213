"""vLLM's Engram seam: ``ParallelEngramEmbedding`` of vllm/models/deepseek_v41/nvidia/engram.py
(deploy/engines/vllm.patch; docs/engines.md, "vLLM").

The patched ``_allocate_weights`` calls :func:`rank_tables`, which returns exactly what the unpatched one
allocates for this rank, but as views of the daemon's memory: ``weight`` float8_e4m3fn
``[part_num_embeddings, dim]`` and ``weight_scale_inv`` uint8 ``[part_num_embeddings, dim // block_size]`` (the
E8M0 bytes, as vLLM's parameter stores them), rows ``[vocab_start_idx, vocab_start_idx + part_num_embeddings)`` of
the served tables, contiguous, on the rank's GPU, once every rank of the group passed in has them. The first table
taken installs :func:`install_weight_filter`, so vLLM's weight iterators skip the served names before reading them.

Imports neither PyTorch nor vLLM at import time.
"""

from __future__ import annotations

import logging
import threading
from typing import Optional, Set, Tuple

from . import describe, gpu_rows, head_row_range, layer_tables, open_tables, serve_together, skip_weight

logger = logging.getLogger("engram_host")

#: The module whose ``should_skip_weight`` vLLM's safetensors iterators call for every name before reading it.
WEIGHT_UTILS = "vllm.model_executor.model_loader.weight_utils"

_SKIP: Set[str] = set()
_FILTER_LOCK = threading.Lock()
_WARNED = []  # a warning of install_weight_filter is said once a process


def rank_tables(layer: int, vocab_start: int, num_rows: int, dim: int, block_size: int = 32, *,
                num_embeddings: int, model: Optional[str] = None, device: Optional[int] = None,
                socket: Optional[str] = None, group=None) -> Optional[Tuple[object, object]]:
    """``(weight, weight_scale_inv)`` for Engram layer ``layer`` (a layer id of config.json's
    ``engram_layer_ids``) and this rank's rows ``[vocab_start, vocab_start + num_rows)``, or None when the engine
    is to load its tables itself (``ENGRAM_HOST_TABLES`` off, or fallback with no daemon, or with a model that is
    no local directory and no ``ENGRAM_HOST_EXPECT``). ``num_embeddings``: the table's rows by the engine's config
    (``ParallelEngramEmbedding.num_embeddings``), which the served table must have. ``model``: the engine's model
    path (``expect`` unless ``ENGRAM_HOST_EXPECT`` is set); ``device``: default PyTorch's current one.
    ``group``: the CPU process group of the ranks that must decide together (the Engram DP group's
    ``cpu_group`` with ``dp_shared_memory``, whose storage runs collectives): see
    :func:`engram_host.engines.serve_together`."""
    names = []

    def take():
        imported = open_tables(model, device, socket)
        if imported is None:
            return None
        w, s = layer_tables(imported, layer, dim, block_size, num_embeddings, vocab_start, num_rows)
        names.extend((w.name, s.name))
        return gpu_rows(w, vocab_start, num_rows, "float8_e4m3fn"), gpu_rows(s, vocab_start, num_rows, "uint8")

    served = serve_together(take, group)
    if served is not None:
        with _FILTER_LOCK:
            _SKIP.update(names)
        install_weight_filter()
    return served


def row_range(head_sizes, num_shards: int, shard_rank: int) -> Tuple[int, int]:
    """``(vocab_start_idx, vocab_end_idx)`` as ParallelEngramEmbedding computes them (whole hash heads)."""
    return head_row_range(head_sizes, num_shards, shard_rank)


def skipped_names() -> Set[str]:
    """The checkpoint names the weight filter skips: the tables :func:`rank_tables` handed out."""
    with _FILTER_LOCK:
        return set(_SKIP)


def install_weight_filter(module=None) -> bool:
    """Wraps ``should_skip_weight`` of vLLM's weight_utils (or ``module``) so that it also skips the names of
    :func:`skipped_names`; vLLM's safetensors iterators ask it for every name before ``get_tensor``. Idempotent.
    False, with one warning line a process, where the module or the function is not there (then vLLM's iterator
    gets each table with ``get_tensor`` and the patched weight loader leaves it untouched)."""
    with _FILTER_LOCK:
        if module is None:
            import importlib
            try:
                module = importlib.import_module(WEIGHT_UTILS)
            except ImportError as e:
                _warn_once(f"cannot import {WEIGHT_UTILS} ({e})")
                return False
        original = getattr(module, "should_skip_weight", None)
        if original is None:
            _warn_once(f"{getattr(module, '__name__', module)} has no should_skip_weight")
            return False
        if getattr(original, "_engram_host_filter", False):
            return True

        def should_skip_weight(name, *args, **kwargs):
            return name in _SKIP or original(name, *args, **kwargs)

        should_skip_weight._engram_host_filter = True
        should_skip_weight.__wrapped__ = original
        module.should_skip_weight = should_skip_weight
        return True


def _warn_once(why: str) -> None:
    if why not in _WARNED:
        _WARNED.append(why)
        logger.warning("engram-host: %s: vLLM's loader will not skip the served Engram tables before reading them "
                       "(the patched weight loader leaves them untouched)", why)


__all__ = ["rank_tables", "row_range", "skipped_names", "install_weight_filter", "skip_weight", "describe",
           "WEIGHT_UTILS"]
