"""A small model directory in DeepSeek-V4.1's layout whose values are all finite, for the projection's check.

``engram-host generate --model`` fills tensors with pseudo-random bytes: as FP8 most rows then hold a NaN (E4M3's
0x7F and 0xFF) or a huge E8M0 scale, so nearly every ``wkv`` output is NaN or infinite and comparing two
projections says little beyond the rows themselves. This writer draws the bytes the same way (seeded) but maps
them to finite FP8 codes of moderate size: weights 2^-3..30, table scales 2^-4..2^4, wkv scales 2^-7..2^-3.
Standard library only: ``python -m engram_host.reference make-finite --out DIR --rows N``.
"""

from __future__ import annotations

import json
import os
import random
import struct
from typing import Sequence

from . import spec

# E4M3 codes with exponent field 4..11 (never 15, so never NaN), sign and mantissa kept
_WEIGHT = bytes((b & 0x87) | ((4 + ((b >> 3) & 7)) << 3) for b in range(256))
_TABLE_SCALE = bytes(123 + b % 9 for b in range(256))
_WKV_SCALE = bytes(120 + b % 5 for b in range(256))


def _tensor_bytes(rng: random.Random, n: int, table: bytes) -> bytes:
    return rng.randbytes(n).translate(table)


def _write(path: str, tensors: Sequence[tuple]) -> None:
    header: dict = {"__metadata__": {"format": "pt", "generator": "engram_host.reference.synthetic"}}
    offset = 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for t in tensors:
            f.write(t[3])
    os.replace(tmp, path)


def write_finite_model(out: str, rows: int, layers: Sequence[int] = (1, 14), seed: int = 7,
                       prefix: str = "") -> str:
    """Writes the model into ``out`` (created; files of these names replaced): one shard per layer with its
    ``embed.weight``, ``embed.scale``, ``wkv.weight`` and ``wkv.scale``, ``model.safetensors.index.json`` and a
    config.json naming the layers. Layer i (from 0) has ``rows + i * (rows // 36523)`` rows, as ``generate``."""
    os.makedirs(out, exist_ok=True)
    layers = sorted(layers)
    weight_map = {}
    rows_per_layer = []
    for i, layer in enumerate(layers):
        n = rows + i * (rows // 36523)
        rows_per_layer.append(n)
        rng = random.Random(seed * 1000003 + layer)
        at = f"{prefix}layers.{layer}.engram."
        tensors = [
            (at + "embed.weight", "F8_E4M3", (n, spec.DIM), _tensor_bytes(rng, n * spec.DIM, _WEIGHT)),
            (at + "embed.scale", "F8_E8M0", (n, spec.SCALES), _tensor_bytes(rng, n * spec.SCALES, _TABLE_SCALE)),
            (at + "wkv.weight", "F8_E4M3", (spec.WKV_ROWS, spec.DIM),
             _tensor_bytes(rng, spec.WKV_ROWS * spec.DIM, _WEIGHT)),
            (at + "wkv.scale", "F8_E8M0", (spec.WKV_ROWS, spec.SCALES),
             _tensor_bytes(rng, spec.WKV_ROWS * spec.SCALES, _WKV_SCALE)),
        ]
        shard = f"model-{i + 1:05d}-of-{len(layers):05d}.safetensors"
        _write(os.path.join(out, shard), tensors)
        weight_map.update({t[0]: shard for t in tensors})
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    config = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
              "text_config": {"engram_layer_ids": layers, "engram_num_embeddings": rows_per_layer,
                              "engram_head_dim": spec.DIM, "engram_n_heads": spec.HEADS,
                              "engram_max_ngram_size": max(spec.NGRAM_ORDERS)}}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f)
    return out
