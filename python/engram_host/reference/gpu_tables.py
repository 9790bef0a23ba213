"""The tables the reference engine's PyTorch part reads, on the GPU: the daemon's served views, the disk-loaded copy
in the GPU's memory, or the engine's own load into pinned host memory read through UVA (as vLLM's default)."""

from __future__ import annotations

import time
from typing import Optional

from . import spec
from .gpu_ops import as_u8, dequant, gather_view, need_safetensors
from .layout import Layout


class Tables:
    """Gather views of each layer's weight and scale on the GPU, and its wkv as BF16 on the GPU."""

    def __init__(self, torch, layout: Layout, device, gather: dict, keep=()):
        self.torch = torch
        self.layout = layout
        self.device = device
        self.gather = gather  # layer -> (weight view, scale view)
        self.keep = list(keep)
        self.wkv = {}

    def load_wkv(self) -> None:
        torch = self.torch
        for L in self.layout.layers:
            w = torch.frombuffer(bytearray(self.layout.read(L.wkv)), dtype=torch.uint8).view(spec.WKV_ROWS, spec.DIM)
            s = torch.frombuffer(bytearray(self.layout.read(L.wkv_scale)),
                                 dtype=torch.uint8).view(spec.WKV_ROWS, spec.SCALES)
            self.wkv[L.layer] = dequant(torch, w.to(self.device), s.to(self.device))


def served_tables(torch, imported, layout: Layout, device) -> Tables:
    gather = {}
    for L in layout.layers:
        w = as_u8(torch, imported[L.weight].to_torch(), (L.rows, spec.DIM))
        s = as_u8(torch, imported[L.scale].to_torch(), (L.rows, spec.SCALES))
        gather[L.layer] = (gather_view(torch, w), gather_view(torch, s))
    return Tables(torch, layout, device, gather)


def disk_tables_on_gpu(torch, layout: Layout, device, timings: Optional[dict] = None) -> Tables:
    """safetensors -> the GPU's memory (the expected outputs' and the in-process check's tables)."""
    safe_open = need_safetensors()
    gather = {}
    for L in layout.layers:
        pair = []
        for name, width in ((L.weight, spec.DIM), (L.scale, spec.SCALES)):
            t0 = time.perf_counter()
            with safe_open(layout.tensor(name).file.path, framework="pt") as f:
                t = f.get_tensor(name)
                g = as_u8(torch, t, (L.rows, width)).to(device)
                del t
            if timings is not None:
                timings[name] = round(time.perf_counter() - t0, 3)
            pair.append(gather_view(torch, g))
        gather[L.layer] = tuple(pair)
    return Tables(torch, layout, device, gather)


def pow2ceil(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else n


def _device_pointer(host: int, notes: dict) -> int:
    """The GPU's address of pinned host memory, as vLLM's view of a pinned tensor takes it
    (cuMemHostGetDevicePointer, in the context PyTorch made current); with unified addressing it is ``host``."""
    try:
        from .._cuda.driver import _driver
        from .._cuda.host_register import HostRegistration
        p = HostRegistration._device_pointer(_driver(), host)
        notes["device_pointer"] = "cuMemHostGetDevicePointer" + ("" if p == host else " (not the host address)")
        return p
    except Exception as e:
        notes["device_pointer"] = f"the host address (cuMemHostGetDevicePointer failed: {e})"
        return host


def self_loaded_tables(torch, layout: Layout, device, timings: dict) -> Tables:
    """The engine's own load, as vLLM's default: safetensors get_tensor, then pin_memory(), read through UVA."""
    from .._tensors import torch_tensor
    safe_open = need_safetensors()
    gather, keep = {}, []
    pinned_bytes = asked = 0
    for L in layout.layers:
        pair = []
        for name, width in ((L.weight, spec.DIM), (L.scale, spec.SCALES)):
            t0 = time.perf_counter()
            with safe_open(layout.tensor(name).file.path, framework="pt") as f:
                t = f.get_tensor(name)
                t1 = time.perf_counter()
                pinned = as_u8(torch, t, (L.rows, width)).pin_memory()
                del t
            t2 = time.perf_counter()
            timings[name] = {"get_tensor_s": round(t1 - t0, 3), "pin_memory_s": round(t2 - t1, 3)}
            asked += pinned.numel()
            pinned_bytes += pow2ceil(pinned.numel())
            keep.append(pinned)
            uva = torch_tensor(_device_pointer(pinned.data_ptr(), timings), pinned.numel(), "U8", (L.rows, width),
                               device.index, pinned)
            pair.append(gather_view(torch, uva))
        gather[L.layer] = tuple(pair)
    timings["pinned_bytes_asked"] = asked
    timings["pinned_bytes_power_of_two"] = pinned_bytes
    try:  # what PyTorch's pinned allocator holds (PyTorch 2.6 and later)
        timings["host_memory_stats"] = {k: v for k, v in torch.cuda.host_memory_stats().items() if "bytes" in k}
    except Exception as e:
        timings["host_memory_stats"] = f"unavailable: {e}"
    return Tables(torch, layout, device, gather, keep)
