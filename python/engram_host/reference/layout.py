"""Where a model's Engram tables and projections are: the names ``serve`` selects for a model directory (its
config.json's ``engram_layer_ids``), under any prefix, and the same layer's ``wkv`` beside them; and the tables'
bytes, read from the checkpoint's files (through the fds the package's reader validated) or from a served
import's CPU views. Standard library only."""

from __future__ import annotations

import mmap
import os
import re
from .. import checkpoint as _checkpoint
from ..errors import EngramHostError
from . import spec

_WEIGHT = re.compile(r"(.*)layers\.(\d+)\.engram\.embed\.weight")


class Layer:
    """One Engram layer: its id, the names of its table (``weight``, ``scale``) and projection (``wkv``,
    ``wkv_scale``), and the table's rows."""

    def __init__(self, layer: int, prefix: str, rows: int):
        self.layer = layer
        self.rows = rows
        at = f"{prefix}layers.{layer}.engram."
        self.weight = at + "embed.weight"
        self.scale = at + "embed.scale"
        self.wkv = at + "wkv.weight"
        self.wkv_scale = at + "wkv.scale"

    def __repr__(self) -> str:
        return f"Layer({self.layer}, rows={self.rows})"


class Layout:
    """The Engram layers of a model directory, in layer order, and the checkpoint (open) they were found in."""

    def __init__(self, model: str):
        self.model = model
        self.checkpoint = _checkpoint.open_checkpoint(model)
        try:
            selection = _checkpoint.select_served(self.checkpoint)
            if selection.rule != "config":
                raise EngramHostError(f"{model}: no config.json naming engram_layer_ids: the reference engine needs a "
                                      "model directory in DeepSeek-V4.1's layout (engram-host generate --model)")
            self.layers = []
            for t in selection.tensors:
                m = _WEIGHT.fullmatch(t.name)
                if m:
                    layer = Layer(int(m.group(2)), m.group(1), t.shape[0])
                    self._check(layer)
                    self.layers.append(layer)
            self.layers.sort(key=lambda L: L.layer)
        except BaseException:
            self.checkpoint.close()
            raise
        self._maps: dict = {}

    def _check(self, L: Layer) -> None:
        want = {L.weight: ("F8_E4M3", (L.rows, spec.DIM)), L.scale: ("F8_E8M0", (L.rows, spec.SCALES)),
                L.wkv: ("F8_E4M3", (spec.WKV_ROWS, spec.DIM)), L.wkv_scale: ("F8_E8M0", (spec.WKV_ROWS, spec.SCALES))}
        for name, (dtype, shape) in want.items():
            t = self.checkpoint.tensors.get(name)
            if t is None:
                raise EngramHostError(f"{self.model}: no tensor {name}: the reference engine needs each Engram layer's "
                                      "embed.weight/scale and wkv.weight/scale (engram-host generate --model)")
            if t.dtype != dtype or tuple(t.shape) != shape:
                raise EngramHostError(f"{self.model}: {name} is {t.describe()}, the reference engine needs {dtype} "
                                      f"{list(shape)}")

    @property
    def table_names(self) -> list:
        return sorted(n for L in self.layers for n in (L.weight, L.scale))

    def tensor(self, name: str) -> "_checkpoint.TensorInfo":
        return self.checkpoint.tensors[name]

    def file_bytes(self, name: str) -> memoryview:
        """The tensor's bytes in its file, mapped read-only (the file's validated fd), no copy."""
        t = self.tensor(name)
        m = self._maps.get(t.file.path)
        if m is None:
            m = mmap.mmap(t.file.fd, 0, access=mmap.ACCESS_READ)
            self._maps[t.file.path] = m
        return memoryview(m)[t.offset:t.offset + t.nbytes]

    def read(self, name: str) -> bytes:
        """The tensor's bytes, read with pread through the validated fd."""
        t = self.tensor(name)
        out = bytearray(t.nbytes)
        view = memoryview(out)
        done = 0
        while done < t.nbytes:
            got = os.preadv(t.file.fd, [view[done:]], t.offset + done)
            if got <= 0:
                raise EngramHostError(f"{t.file.path}: tensor '{name}': file ended at offset {t.offset + done}")
            done += got
        return bytes(out)

    def close(self) -> None:
        for m in self._maps.values():
            try:
                m.close()
            except BufferError:  # a view is still alive; the mapping goes with it
                pass
        self._maps.clear()
        self.checkpoint.close()

    def __enter__(self) -> "Layout":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def served_buffers(imported, layout: Layout) -> dict:
    """name -> read-only memoryview of each of the layout's tables in a served import (CPU views)."""
    out = {}
    for name in layout.table_names:
        if name not in imported.tables:
            raise EngramHostError(f"the daemon serves no table {name} (it serves {', '.join(sorted(imported.tables))})")
        out[name] = imported[name].buffer()
    return out


def disk_buffers(layout: Layout) -> dict:
    return {name: layout.file_bytes(name) for name in layout.table_names}
