"""SGLang's Engram seam: ``EngramEmbedding`` of python/sglang/srt/layers/engram.py
(deploy/engines/sglang.patch; docs/engines.md, "SGLang").

The patched ``EngramEmbedding.__init__`` calls :func:`rank_tables`, which returns the parameters its default
(device) layout allocates for this rank, but as views of the daemon's memory: ``weight`` float8_e4m3fn
``[rows, dim]`` and ``scale`` float8_e8m0fnu ``[rows, dim // block_size]``, rows
``[row_start, row_start + rows)`` of the served tables, contiguous, on the rank's GPU. The engine's lookup then
runs as for its device layout: ``engram_gather`` on ``weight.data_ptr()`` and ``scale.data_ptr()`` with
``row_lo=row_start``, then the TP all-reduce. The TP ranks decide together (the ``group`` passed in): all take the
daemon's rows or none does.

Imports neither PyTorch nor SGLang at import time.
"""

from __future__ import annotations

from typing import Optional, Tuple

from . import describe, even_row_range, gpu_rows, layer_tables, open_tables, serve_together, skip_weight


def rank_tables(layer: int, row_start: int, rows: int, num_embeddings: int, dim: int, block_size: int = 32,
                model: Optional[str] = None, device: Optional[int] = None,
                socket: Optional[str] = None, group=None) -> Optional[Tuple[object, object]]:
    """``(weight, scale)`` for Engram layer ``layer`` and this rank's rows ``[row_start, row_start + rows)``, or
    None when the engine is to load its tables itself (``ENGRAM_HOST_TABLES`` off, or fallback with no daemon,
    or with a model that is no local directory and no ``ENGRAM_HOST_EXPECT``). ``num_embeddings``: the table's
    rows by the engine's config, which the served table must have. ``group``: the TP group's CPU process group
    (``cpu_group``), whose ranks decide together: see :func:`engram_host.engines.serve_together`."""

    def take():
        imported = open_tables(model, device, socket)
        if imported is None:
            return None
        w, s = layer_tables(imported, layer, dim, block_size, num_embeddings, row_start, rows)
        return gpu_rows(w, row_start, rows, "float8_e4m3fn"), gpu_rows(s, row_start, rows, "float8_e8m0fnu")

    return serve_together(take, group)


def row_range(num_embeddings: int, tp_size: int, tp_rank: int) -> Tuple[int, int]:
    """``(row_start, row_end)`` as EngramEmbedding computes them."""
    return even_row_range(num_embeddings, tp_size, tp_rank)


__all__ = ["rank_tables", "row_range", "skip_weight", "describe"]
