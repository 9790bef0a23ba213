#!/usr/bin/env python3
"""The GPU fact issue 12 (live takeover, systemd's fd store) rests on, measured: memory whose fds a THIRD process
holds outlives the SIGKILL of the process that created it, and a successor imports those fds and reads the same
bytes, on the GPU and on the CPU.

Kinds, each filled by the creator with a pattern (64-bit word i = i XOR a per-region seed, so a fresh zero page
or another region's memory cannot pass):
  host_numa      cuMemCreate, HOST_NUMA location (the GPU's CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, or 0), exported as
                 a POSIX fd (cuMemExportToShareableHandle)
  device         cuMemCreate on GPU 0, exported as a POSIX fd
  memfd          a sealed memfd (SEAL|SHRINK|GROW|FUTURE_WRITE, as the daemon seals)
  memfd_hugetlb  a sealed MFD_HUGETLB memfd (2 MiB pages; skipped, saying why, when there are none)

Three separate processes (no fork: CUDA does not survive one), all started by this script's driver:
  1. creator    ("the old daemon"): makes and fills the regions, exports the VMM ones, sends every fd to the
                holder over a Unix socket (SCM_RIGHTS), then waits to be killed, holding everything.
  2. holder     ("the fd store", or the predecessor's hand-over): receives the fds and keeps them. No CUDA.
  The driver SIGKILLs the creator and reaps it, waits a second, then starts
  3. successor  ("the new daemon"): receives the fds from the holder (SCM_RIGHTS again), imports the VMM fds
                (engram_host._cuda.VmmImport: cuMemImportFromShareableHandle, one VA range, GPU access, and a CPU
                view through a HOST_NUMA access descriptor for host memory), maps the memfds (and registers them
                with the GPU, cuMemHostRegister READ_ONLY), and checks every byte with a GPU read (a torch kernel
                over the device pointer; without torch a cuMemcpyDtoH) and a CPU read (the CPU view, the memfd
                mapping, or a cuMemcpyDtoH of device memory). Then the holder closes its fds and exits; the
                successor checks its imports still read right, releases them one kind at a time and checks the
                memory comes back (cuMemGetInfo for device memory; MemAvailable for host memory and the memfd;
                HugePages_Free for hugetlb).
Negative control: a creator whose fds nobody else holds is SIGKILLed; its memory returns to the system (there is
no fd left anywhere for a successor to import).

Also a probe (reported, not a requirement): can the successor export a fresh fd from the handle it imported? On
the H200 (driver 580.159.04) it cannot: cuMemExportToShareableHandle of an imported handle fails with
1 CUDA_ERROR_INVALID_VALUE, so whoever hands VMM memory on must keep (and dup) the fd it was given.

Output: one JSON line per check ({"check": ..., "kind": ..., "ok": ...}), per probe ({"probe": ..., "works": ...})
and per step ({"info": ...}), on stdout and in OUT/results.jsonl with --out OUT. Exit status 0 only if every check
passes.

Usage:  python3 bench/experiments/gpu-fact-handover.py [--out DIR] [--kinds host_numa,device,memfd,memfd_hugetlb]
                                            [--host-mib 1024] [--device-mib 256] [--memfd-mib 256] [--huge-mib 64]
        (echo 64 > /proc/sys/vm/nr_hugepages first for memfd_hugetlb.) Needs numpy or torch for the patterns;
        torch for kernel reads. The roles (creator, holder, successor) are this script run with that word first.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import gc
import json
import mmap
import os
import platform
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))

MiB = 1 << 20
GiB = 1 << 30
ALL_KINDS = ("host_numa", "device", "memfd", "memfd_hugetlb")
VMM_KINDS = ("host_numa", "device")
SEEDS = {"host_numa": 0x5EED0000A11CE001, "device": 0x5EED0000DE71CE02, "memfd": 0x5EED00006E3F0D03,
         "memfd_hugetlb": 0x5EED0000B16F0D04}  # all < 2**63, so torch's int64 holds them
HUGE_PAGE = 2 * MiB
F_ADD_SEALS = getattr(fcntl, "F_ADD_SEALS", 1033)
F_GET_SEALS = getattr(fcntl, "F_GET_SEALS", 1034)
DAEMON_SEALS = 0x1 | 0x2 | 0x4 | 0x10  # SEAL, SHRINK, GROW, FUTURE_WRITE
CHUNK_WORDS = 32 * MiB  # 256 MiB of 64-bit words per compare/fill step
FREED_FRACTION = 0.9  # host memory counts as returned when MemAvailable rises by at least this share of its size

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FAILED = ctypes.c_void_p(-1).value


# --- small helpers ------------------------------------------------------------------------------------------------

def emit(obj: dict) -> None:
    """One JSON line on stdout (a child's lines are read and re-emitted by the driver)."""
    sys.stdout.write(json.dumps(obj, sort_keys=False) + "\n")
    sys.stdout.flush()


def ms_since(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1e3, 3)


def meminfo() -> dict:
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            parts = v.split()
            out[k] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    return out


def mem_snapshot() -> dict:
    m = meminfo()
    return {"mem_available": m.get("MemAvailable"), "shmem": m.get("Shmem"), "mem_free": m.get("MemFree"),
            "hugepages_free": m.get("HugePages_Free"), "hugepages_total": m.get("HugePages_Total"),
            "gpu_used_mib": nvidia_smi_used_mib()}


def nvidia_smi_used_mib():
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=30)
        return int(out.stdout.strip().splitlines()[0])
    except Exception:  # informational only
        return None


def map_fd(fd: int, size: int, writable: bool) -> int:
    prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
    addr = _libc.mmap(None, size, prot, mmap.MAP_SHARED, fd, 0)
    if addr in (None, MAP_FAILED):
        e = ctypes.get_errno()
        raise OSError(e, f"mmap(fd={fd}, size={size}, {'RW' if writable else 'R'}, MAP_SHARED): {os.strerror(e)}")
    return addr


def unmap(addr: int, size: int) -> None:
    if _libc.munmap(addr, size) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"munmap(0x{addr:x}, {size}): {os.strerror(e)}")


def seal_names(seals: int) -> str:
    names = [(0x1, "SEAL"), (0x2, "SHRINK"), (0x4, "GROW"), (0x8, "WRITE"), (0x10, "FUTURE_WRITE")]
    return "|".join(n for bit, n in names if seals & bit) or "none"


def fd_facts(fd: int) -> dict:
    st = os.fstat(fd)
    try:
        link = os.readlink(f"/proc/self/fd/{fd}")
    except OSError as e:
        link = f"(readlink: {e})"
    try:
        seals = seal_names(fcntl.fcntl(fd, F_GET_SEALS))
    except OSError as e:
        seals = f"(F_GET_SEALS: {os.strerror(e.errno)})"
    return {"link": link, "st_size": st.st_size, "st_mode": oct(st.st_mode), "seals": seals}


# --- the pattern ----------------------------------------------------------------------------------------------------

class Pattern:
    """word i of a region = i XOR seed, built and compared with numpy (or torch on the CPU), 256 MiB at a time."""

    def __init__(self):
        self.np = None
        self.torch = None
        try:
            import numpy
            self.np = numpy
        except ImportError:
            try:
                import torch
                self.torch = torch
            except ImportError:
                raise SystemExit("gpu-fact-handover: needs numpy or torch to build and compare the patterns")
        self.backend = "numpy" if self.np is not None else "torch-cpu"

    def expected(self, start: int, n: int, seed: int):
        """(object keeping the words alive, its address) of words start..start+n."""
        if self.np is not None:
            a = self.np.arange(start, start + n, dtype=self.np.uint64)
            a ^= self.np.uint64(seed)
            return a, a.ctypes.data
        t = self.torch.arange(start, start + n, dtype=self.torch.int64)
        t ^= seed
        return t, t.data_ptr()

    def empty(self, n: int):
        if self.np is not None:
            a = self.np.empty(n, dtype=self.np.uint64)
            return a, a.ctypes.data
        t = self.torch.empty(n, dtype=self.torch.int64)
        return t, t.data_ptr()

    def fill(self, addr: int, nbytes: int, seed: int, copy=None) -> None:
        """Writes the pattern at addr (CPU memory), or through copy(dst_offset, src_ptr, n) when given."""
        words = nbytes // 8
        for s in range(0, words, CHUNK_WORDS):
            n = min(CHUNK_WORDS, words - s)
            keep, ptr = self.expected(s, n, seed)
            if copy is None:
                ctypes.memmove(addr + s * 8, ptr, n * 8)
            else:
                copy(s * 8, ptr, n * 8)
            del keep

    def compare(self, addr: int, start: int, n: int, seed: int) -> dict:
        """Compares n words of CPU-readable memory at addr with words start..start+n of the pattern."""
        if self.np is not None:
            np = self.np
            got = np.ctypeslib.as_array((ctypes.c_uint64 * n).from_address(addr))
            exp, _ = self.expected(start, n, seed)
            bad = got != exp
            nbad = int(np.count_nonzero(bad))
            if not nbad:
                return {"mismatched_words": 0}
            idx = np.flatnonzero(bad)
            i = int(idx[0])
            return {"mismatched_words": nbad, "zero_words_among_them": int(np.count_nonzero(got[bad] == 0)),
                    "first_bad_word": start + i, "got": hex(int(got[i])), "expected": hex(int(exp[i]))}
        torch = self.torch
        got = torch.frombuffer((ctypes.c_ubyte * (n * 8)).from_address(addr), dtype=torch.uint8).view(torch.int64)
        exp, _ = self.expected(start, n, seed)
        bad = got != exp
        nbad = int(bad.sum())
        if not nbad:
            return {"mismatched_words": 0}
        i = int(bad.nonzero()[0])
        return {"mismatched_words": nbad, "zero_words_among_them": int((got[bad] == 0).sum()),
                "first_bad_word": start + i, "got": hex(int(got[i]) & (2**64 - 1)),
                "expected": hex(int(exp[i]) & (2**64 - 1))}


def merge(total: dict, part: dict) -> None:
    total["mismatched_words"] = total.get("mismatched_words", 0) + part["mismatched_words"]
    if part["mismatched_words"]:
        total["zero_words_among_them"] = total.get("zero_words_among_them", 0) + part["zero_words_among_them"]
        total.setdefault("first_bad_word", part["first_bad_word"])
        total.setdefault("got", part["got"])
        total.setdefault("expected", part["expected"])


def cpu_read_check(pat: Pattern, addr: int, nbytes: int, seed: int) -> dict:
    t0 = time.perf_counter()
    res: dict = {"mismatched_words": 0}
    words = nbytes // 8
    for s in range(0, words, CHUNK_WORDS):
        n = min(CHUNK_WORDS, words - s)
        merge(res, pat.compare(addr + s * 8, s, n, seed))
    res["ms"] = ms_since(t0)
    res["gbps"] = round(nbytes / (res["ms"] / 1e3) / 1e9, 2) if res["ms"] else None
    return res


def dtoh_read_check(pat: Pattern, cuda, dev, devptr: int, nbytes: int, seed: int) -> dict:
    """Copies the range to the CPU (cuMemcpyDtoH, 256 MiB at a time) and compares there."""
    lib = cuda._driver()
    t0 = time.perf_counter()
    res: dict = {"mismatched_words": 0}
    words = nbytes // 8
    buf, ptr = pat.empty(min(CHUNK_WORDS, words))
    for s in range(0, words, CHUNK_WORDS):
        n = min(CHUNK_WORDS, words - s)
        with dev.current():
            cuda._check(lib.cuMemcpyDtoH_v2(ptr, devptr + s * 8, n * 8),
                        f"cuMemcpyDtoH_v2(0x{devptr + s * 8:x}, {n * 8})")
        merge(res, pat.compare(ptr, s, n, seed))
    del buf
    res["ms"] = ms_since(t0)
    res["gbps"] = round(nbytes / (res["ms"] / 1e3) / 1e9, 2) if res["ms"] else None
    return res


def gpu_read_check(pat: Pattern, cuda, dev, torch, devptr: int, nbytes: int, seed: int) -> dict:
    """A GPU read of every byte: torch kernels compare the range with the pattern computed on the GPU (without
    torch, a cuMemcpyDtoH of the range compared on the CPU). Also times the very first read (one word)."""
    if torch is None:
        t0 = time.perf_counter()
        one, p = pat.empty(1)
        lib = cuda._driver()
        with dev.current():
            cuda._check(lib.cuMemcpyDtoH_v2(p, devptr, 8), "cuMemcpyDtoH_v2(first word)")
        first_ms = ms_since(t0)
        first = int(one[0]) & (2**64 - 1)
        res = dtoh_read_check(pat, cuda, dev, devptr, nbytes, seed)
        res.update(method="cuMemcpyDtoH (no torch)", first_read_ms=first_ms, first_word=hex(first),
                   first_word_ok=first == seed)
        return res
    from engram_host import _tensors
    where = f"cuda:{dev.ordinal}"
    t = _tensors.torch_tensor(devptr, nbytes, "I64", [nbytes // 8], dev.ordinal, None)
    t0 = time.perf_counter()
    first = int((t[:1] + 0).item()) & (2**64 - 1)  # a kernel reads the first word; .item() copies the result back
    first_ms = ms_since(t0)
    res: dict = {"method": "torch kernels (torch.equal with arange^seed on the GPU)", "first_read_ms": first_ms,
                 "first_read": "(t[:1] + 0).item(): one kernel launch reading the first word, and an 8-byte copy",
                 "first_word": hex(first), "first_word_ok": first == seed, "mismatched_words": 0}
    words = nbytes // 8
    t0 = time.perf_counter()
    for s in range(0, words, CHUNK_WORDS):
        n = min(CHUNK_WORDS, words - s)
        exp = torch.arange(s, s + n, dtype=torch.int64, device=where)
        exp ^= seed
        got = t[s:s + n]
        if not torch.equal(got, exp):
            bad = got != exp
            idx = int(bad.nonzero()[0])
            merge(res, {"mismatched_words": int(bad.sum()), "zero_words_among_them": int((got[bad] == 0).sum()),
                        "first_bad_word": s + idx, "got": hex(int(got[idx]) & (2**64 - 1)),
                        "expected": hex(int(exp[idx]) & (2**64 - 1))})
        del exp, got
    torch.cuda.synchronize()
    res["ms"] = ms_since(t0)
    res["gbps"] = round(nbytes / (res["ms"] / 1e3) / 1e9, 2) if res["ms"] else None
    del t
    return res


# --- CUDA: the creator's side ----------------------------------------------------------------------------------

def _prop(cuda, kind: str, ordinal: int, numa: int):
    prop = cuda.CUmemAllocationProp()
    prop.type = cuda.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = cuda.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    if kind == "host_numa":
        prop.location = cuda.CUmemLocation(cuda.CU_MEM_LOCATION_TYPE_HOST_NUMA, numa)
    else:
        prop.location = cuda.CUmemLocation(cuda.CU_MEM_LOCATION_TYPE_DEVICE, ordinal)
    return prop


def granularity(cuda, dev, kind: str, numa: int) -> int:
    lib = cuda._driver()
    prop = _prop(cuda, kind, dev.ordinal, numa)
    out = ctypes.c_size_t()
    with dev.current():
        cuda._check(lib.cuMemGetAllocationGranularity(ctypes.byref(out), ctypes.byref(prop), 0),
                    f"cuMemGetAllocationGranularity({kind})")
    return out.value


class Created:
    """What the old daemon does (as python/tests/gpu/test_cuda_gpu.py's Exported): cuMemCreate, map it read-write
    for the GPU (and the CPU for host memory), fill it, export a POSIX fd. Never released: the process is killed
    holding it."""

    def __init__(self, cuda, dev, kind: str, size: int, numa: int):
        self.kind, self.size, self.numa = kind, size, numa
        lib = cuda._driver()
        prop = _prop(cuda, kind, dev.ordinal, numa)
        self.timings = {}
        with dev.current():
            h = ctypes.c_uint64()
            t0 = time.perf_counter()
            cuda._check(lib.cuMemCreate(ctypes.byref(h), size, ctypes.byref(prop), 0), f"cuMemCreate({kind}, {size})")
            self.timings["create_ms"] = ms_since(t0)
            self.handle = h.value
            va = ctypes.c_uint64()
            cuda._check(lib.cuMemAddressReserve(ctypes.byref(va), size, 0, 0, 0), "cuMemAddressReserve")
            self.va = va.value
            cuda._check(lib.cuMemMap(self.va, size, 0, self.handle, 0), "cuMemMap")
            descs = [cuda.CUmemAccessDesc(cuda.CUmemLocation(cuda.CU_MEM_LOCATION_TYPE_DEVICE, dev.ordinal),
                                          cuda.CU_MEM_ACCESS_FLAGS_PROT_READWRITE)]
            if kind == "host_numa":
                descs.append(cuda.CUmemAccessDesc(cuda.CUmemLocation(cuda.CU_MEM_LOCATION_TYPE_HOST_NUMA, numa),
                                                  cuda.CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
            arr = (cuda.CUmemAccessDesc * len(descs))(*descs)
            cuda._check(lib.cuMemSetAccess(self.va, size, arr, len(descs)), "cuMemSetAccess")

    def export(self, cuda, dev) -> int:
        lib = cuda._driver()
        fd = ctypes.c_int(-1)
        t0 = time.perf_counter()
        with dev.current():
            cuda._check(lib.cuMemExportToShareableHandle(ctypes.byref(fd), self.handle,
                                                         cuda.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                        f"cuMemExportToShareableHandle({self.kind})")
        self.timings["export_ms"] = ms_since(t0)
        return fd.value


def make_memfd(kind: str, size: int, pat: Pattern, seed: int) -> tuple:
    """A memfd (MFD_HUGETLB for memfd_hugetlb) of size bytes filled through a shared mapping, then sealed as the
    daemon seals. The creator keeps the mapping (it dies with the process). Returns (fd, address, facts)."""
    flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING | (os.MFD_HUGETLB if kind == "memfd_hugetlb" else 0)
    fd = os.memfd_create(f"engram-handover-{kind}", flags)
    os.ftruncate(fd, size)
    addr = map_fd(fd, size, writable=True)
    t0 = time.perf_counter()
    pat.fill(addr, size, seed)
    facts = {"fill_ms": ms_since(t0)}
    try:
        fcntl.fcntl(fd, F_ADD_SEALS, DAEMON_SEALS)
        facts["seals"] = seal_names(fcntl.fcntl(fd, F_GET_SEALS))
    except OSError as e:
        facts["seals"] = f"F_ADD_SEALS refused: {os.strerror(e.errno)}"
    return fd, addr, facts


# --- roles ---------------------------------------------------------------------------------------------------------

def role_creator(args) -> int:
    """The old daemon. Prints {"event": "SENT"} (or "READY" with --no-holder) and waits to be killed."""
    kinds = [k for k in args.kinds.split(",") if k]
    pat = Pattern()
    sizes = {"host_numa": args.host_mib * MiB, "device": args.device_mib * MiB, "memfd": args.memfd_mib * MiB,
             "memfd_hugetlb": args.huge_mib * MiB}
    keep = []  # everything the process holds until it is killed
    regions, fds, notes = [], [], []
    info = {"pid": os.getpid(), "pattern_backend": pat.backend}
    cuda = dev = None
    if any(k in VMM_KINDS for k in kinds):
        from engram_host import _cuda as cuda
        if not cuda.available():
            raise SystemExit(f"creator: CUDA is not available: {cuda.unavailable_reason()}")
        dev = cuda.Device(0)
        numa = dev.host_numa_id()
        info["host_numa_id_attribute"] = numa
        info["driver_version"] = cuda.driver_version()
        info["gpu_uuid"] = dev.uuid()
        numa = max(numa, 0)
        info["gpu_free_before"] = dev.mem_info()[0]
    for kind in kinds:
        size = sizes[kind]
        seed = SEEDS[kind]
        if kind in VMM_KINDS:
            g = granularity(cuda, dev, kind, numa)
            size = -(-size // g) * g
            before = mem_snapshot()
            free_before = dev.mem_info()[0]
            c = Created(cuda, dev, kind, size, numa if kind == "host_numa" else -1)
            after_create = mem_snapshot()
            t0 = time.perf_counter()
            if kind == "host_numa":
                pat.fill(c.va, size, seed)  # through the CPU mapping (HOST_NUMA access descriptor)
            else:
                lib = cuda._driver()

                def copy(off, src, n, c=c, lib=lib):
                    with dev.current():
                        cuda._check(lib.cuMemcpyHtoD_v2(c.va + off, src, n), "cuMemcpyHtoD_v2")
                pat.fill(0, size, seed, copy)
            c.timings["fill_ms"] = ms_since(t0)
            after_fill = mem_snapshot()
            fd = c.export(cuda, dev)
            keep.append(c)
            facts = {"granularity": g, "numa": c.numa, "timings": c.timings,
                     "mem_available_drop_at_create": before["mem_available"] - after_create["mem_available"],
                     "mem_available_drop_after_fill": before["mem_available"] - after_fill["mem_available"]}
            if kind == "device":
                facts["gpu_free_drop"] = free_before - dev.mem_info()[0]
        else:
            if kind == "memfd_hugetlb":
                size = -(-size // HUGE_PAGE) * HUGE_PAGE
            try:
                fd, addr, facts = make_memfd(kind, size, pat, seed)
            except OSError as e:
                notes.append({"kind": kind, "skipped": f"{type(e).__name__}: {e}"})
                continue
            keep.append((fd, addr))
        facts.update(fd_facts(fd))
        regions.append({"kind": kind, "size": size, "seed": seed, "numa": numa if kind == "host_numa" else -1,
                        "facts": facts})
        fds.append(fd)
    info["regions"] = regions
    info["skipped"] = notes
    info["mem_after_all"] = mem_snapshot()
    if args.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(args.socket)
        manifest = json.dumps({"regions": [{k: r[k] for k in ("kind", "size", "seed", "numa")} for r in regions],
                               "creator_pid": os.getpid()}).encode()
        t0 = time.perf_counter()
        socket.send_fds(s, [manifest], fds)
        info["send_fds_ms"] = ms_since(t0)
        keep.append(s)
        emit({"event": "SENT", **info})
    else:
        emit({"event": "READY", **info})
    while True:  # held until SIGKILL
        signal.pause()


def recv_manifest(conn) -> tuple:
    msg, fds, flags, _addr = socket.recv_fds(conn, 1 << 16, 64)
    if flags & socket.MSG_CTRUNC:
        raise SystemExit("SCM_RIGHTS message truncated (MSG_CTRUNC): fds lost")
    return json.loads(msg.decode()), fds


def role_holder(args) -> int:
    """The fd store: holds what the creator sent; SERVE hands it on, CLOSE closes it all. No CUDA here."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(args.socket)
    srv.listen(4)
    emit({"event": "LISTENING", "pid": os.getpid()})
    conn, _ = srv.accept()
    t0 = time.perf_counter()
    manifest, fds = recv_manifest(conn)
    conn.close()
    facts = [dict(kind=r["kind"], fd=fd, **fd_facts(fd)) for r, fd in zip(manifest["regions"], fds)]
    emit({"event": "READY", "pid": os.getpid(), "recv_ms": ms_since(t0), "fds": facts})
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "SERVE":
            c, _ = srv.accept()
            t0 = time.perf_counter()
            socket.send_fds(c, [json.dumps(manifest).encode()], fds)
            c.close()
            emit({"event": "SERVED", "send_ms": ms_since(t0)})
        elif cmd == "CLOSE":
            for fd in fds:
                os.close(fd)
            fds = []
            emit({"event": "CLOSED", "open_fds": len(os.listdir("/proc/self/fd"))})
            return 0
    return 0


def role_successor(args) -> int:
    """The new daemon: receive, import, verify; after the holder is gone, verify again, release, measure."""
    pat = Pattern()
    ok_all = True

    def check(name: str, kind: str, ok: bool, **details):
        nonlocal ok_all
        ok_all &= bool(ok)
        emit({"check": name, "kind": kind, "ok": bool(ok), **details})

    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(args.socket)
    t0 = time.perf_counter()
    manifest, fds = recv_manifest(s)
    recv_ms = ms_since(t0)
    s.close()
    regions = manifest["regions"]
    emit({"info": "successor received", "pid": os.getpid(), "creator_pid": manifest["creator_pid"],
          "creator_alive": os.path.exists(f"/proc/{manifest['creator_pid']}"), "recv_fds_ms": recv_ms,
          "fds": [dict(kind=r["kind"], fd=fd, **fd_facts(fd)) for r, fd in zip(regions, fds)]})

    torch = cuda = dev = None
    want_cuda = not args.no_cuda
    if want_cuda:
        from engram_host import _cuda as cuda
        if not cuda.available():
            emit({"info": f"no CUDA in the successor: {cuda.unavailable_reason()}"})
            cuda = None
    if cuda is not None:
        try:
            import torch as _t
            if _t.cuda.is_available():
                torch = _t
                t0 = time.perf_counter()
                torch.zeros(1, device="cuda:0").add_(1)  # torch's lazy init, outside the timings
                torch.cuda.synchronize()
                emit({"info": "torch initialised", "torch": torch.__version__, "ms": ms_since(t0)})
        except ImportError:
            emit({"info": "no torch: GPU reads are cuMemcpyDtoH copies"})
        dev = cuda.Device(0)

    live = {}  # kind -> dict(import/mapping/registration, size, seed, device pointer, cpu address)
    for r, fd in zip(regions, fds):
        kind, size, seed = r["kind"], r["size"], r["seed"]
        ent = {"size": size, "seed": seed}
        if kind in VMM_KINDS:
            if cuda is None:
                check("import", kind, False, error="no CUDA in the successor")
                os.close(fd)
                continue
            t0 = time.perf_counter()
            try:
                if kind == "host_numa":
                    imp = cuda.VmmImport(dev, [(fd, size, "host", r["numa"])], cpu_view=True)
                else:
                    imp = cuda.VmmImport(dev, [(fd, size, "device", -1)])
            except Exception as e:  # the driver's exact answer is the result
                check("import", kind, False, error=f"{type(e).__name__}: {e}", ms=ms_since(t0))
                os.close(fd)
                continue
            wall = ms_since(t0)
            os.close(fd)  # the import holds the allocation now
            ent.update(imp=imp, devptr=imp.address_of(0),
                       cpu=imp.address_of(0) if kind == "host_numa" else None)
            check("import", kind, True, wall_ms=wall, **imp.timings,
                  note="cuMemImportFromShareableHandle + reserve + map + set access"
                       + (" (GPU and HOST_NUMA CPU view, PROT_READ)" if kind == "host_numa" else " (GPU, PROT_READ)"))
            ent["numa"] = r["numa"]
        else:
            try:
                st = os.fstat(fd)
                seals = fcntl.fcntl(fd, F_GET_SEALS)
                check("size_and_seals", kind, st.st_size == size and (seals & DAEMON_SEALS) == DAEMON_SEALS,
                      st_size=st.st_size, expected_size=size, seals=seal_names(seals))
                t0 = time.perf_counter()
                addr = map_fd(fd, size, writable=False)
                map_ms = ms_since(t0)
                os.close(fd)  # the mapping holds the memory now
                ent.update(addr=addr, cpu=addr, devptr=None)
                details = {"mmap_ms": map_ms}
                if cuda is not None:
                    t0 = time.perf_counter()
                    reg = cuda.HostRegistration(dev, addr, size)
                    details["host_register_ms"] = ms_since(t0)
                    ent.update(reg=reg, devptr=reg.device_pointer)
                check("import", kind, True, **details,
                      note="mmap PROT_READ MAP_SHARED" + (" + cuMemHostRegister READ_ONLY|DEVICEMAP|PORTABLE"
                                                          if cuda is not None else " (no CUDA: CPU only)"))
            except Exception as e:
                check("import", kind, False, error=f"{type(e).__name__}: {e}")
                continue
        live[kind] = ent

    def verify(stage: str, cpu_too: bool = True):
        for kind, ent in live.items():
            size, seed = ent["size"], ent["seed"]
            if ent.get("devptr") is not None:
                try:
                    g = gpu_read_check(pat, cuda, dev, torch, ent["devptr"], size, seed)
                    check(f"gpu_read_{stage}", kind, g["mismatched_words"] == 0 and g["first_word_ok"], bytes=size,
                          **g)
                except Exception as e:
                    check(f"gpu_read_{stage}", kind, False, error=f"{type(e).__name__}: {e}")
            if not cpu_too:
                continue
            try:
                if ent.get("cpu") is not None:
                    c = cpu_read_check(pat, ent["cpu"], size, seed)
                    how = "the CPU view (HOST_NUMA access)" if kind == "host_numa" else "the mmap of the fd"
                else:
                    c = dtoh_read_check(pat, cuda, dev, ent["devptr"], size, seed)
                    how = "cuMemcpyDtoH of the whole range, compared on the CPU"
                check(f"cpu_read_{stage}", kind, c["mismatched_words"] == 0, bytes=size, method=how, **c)
            except Exception as e:
                check(f"cpu_read_{stage}", kind, False, error=f"{type(e).__name__}: {e}")


    def reexport(kind: str, ent: dict):
        """A probe, not a requirement: can the successor hand the memory on from the IMPORTED handle alone
        (cuMemExportToShareableHandle of it), or must it keep the fd it was given? If the export works, a second
        import of that fd is read and dropped, and the first import must still read right. Reported as a "probe"
        line (works or not, the driver's exact error), which does not decide the exit status."""
        size, seed, imp = ent["size"], ent["seed"], ent["imp"]
        h = imp._state.handles[0]
        lib = cuda._driver()
        result: dict = {"probe": "reexport_from_imported_handle", "kind": kind}
        prop = cuda.CUmemAllocationProp()
        with dev.current():
            r = lib.cuMemGetAllocationPropertiesFromHandle(ctypes.byref(prop), h)
        result["imported_handle_props"] = {
            "result": r, "type": prop.type, "requestedHandleTypes": prop.requestedHandleTypes,
            "location_type": prop.location.type, "location_id": prop.location.id} if r == 0 else {"result": r}
        out = ctypes.c_int(-1)
        t0 = time.perf_counter()
        with dev.current():
            r = lib.cuMemExportToShareableHandle(ctypes.byref(out), h, cuda.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
        result["export_ms"] = ms_since(t0)
        if r != 0:
            result.update(works=False, error=f"cuMemExportToShareableHandle(imported handle, POSIX_FILE_DESCRIPTOR) "
                                             f"failed: {r} {cuda.error_name(r)}")
            emit(result)
            return
        try:
            result["fd"] = fd_facts(out.value)
            try:
                imp2 = cuda.VmmImport(dev, [(out.value, size, "host" if kind == "host_numa" else "device",
                                             ent["numa"])])
            finally:
                os.close(out.value)
            part = min(size, 64 * MiB)
            second = gpu_read_check(pat, cuda, dev, torch, imp2.address_of(0), part, seed)
            imp2.close()
            first = gpu_read_check(pat, cuda, dev, torch, ent["devptr"], part, seed)
            result.update(works=second["mismatched_words"] == 0 and second["first_word_ok"]
                          and first["mismatched_words"] == 0,
                          second_import_first_64MiB=second, first_import_after_second_released_first_64MiB=first)
        except Exception as e:
            result.update(works=False, error=f"{type(e).__name__}: {e}")
        emit(result)

    verify("after_creator_killed")
    emit({"event": "VERIFIED"})
    line = sys.stdin.readline().strip()
    if line != "HOLDER_CLOSED":
        emit({"info": f"successor: unexpected command {line!r}"})
        return 2
    # The holder's fds are closed: only this process's imports and mappings hold the memory now.
    verify("after_holder_closed", cpu_too=True)
    for kind, ent in live.items():
        if "imp" in ent:
            reexport(kind, ent)

    for kind in list(live):
        ent = live.pop(kind)
        size = ent["size"]
        gc.collect()
        if torch is not None:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        before = mem_snapshot()
        gpu_before = dev.mem_info()[0] if dev is not None else None
        t0 = time.perf_counter()
        release_error = None
        try:
            if "imp" in ent:
                ent["imp"].close()
            if "reg" in ent:
                ent["reg"].close()
            if "addr" in ent:
                unmap(ent["addr"], size)
        except Exception as e:
            release_error = f"{type(e).__name__}: {e}"
        release_ms = ms_since(t0)
        time.sleep(0.2)
        after = mem_snapshot()
        gpu_after = dev.mem_info()[0] if dev is not None else None
        d_avail = after["mem_available"] - before["mem_available"]
        d_free = after["mem_free"] - before["mem_free"]
        details = {"release_ms": release_ms, "size": size, "mem_available_rise": d_avail, "mem_free_rise": d_free,
                   "shmem_drop": before["shmem"] - after["shmem"]}
        if gpu_before is not None:
            details["gpu_free_rise"] = gpu_after - gpu_before
        if kind == "device":
            ok = details["gpu_free_rise"] >= size
            details["criterion"] = "cuMemGetInfo free rises by at least the allocation's size"
        elif kind == "memfd_hugetlb":
            rise = after["hugepages_free"] - before["hugepages_free"]
            details["hugepages_free_rise"] = rise
            ok = rise == size // HUGE_PAGE
            details["criterion"] = "HugePages_Free rises by size / 2 MiB"
        elif kind == "memfd":
            ok = details["shmem_drop"] >= FREED_FRACTION * size
            details["criterion"] = f"Shmem in /proc/meminfo drops by at least {FREED_FRACTION} x size (system-wide)"
        else:
            ok = max(d_avail, d_free) >= FREED_FRACTION * size
            details["criterion"] = f"MemFree or MemAvailable rises by at least {FREED_FRACTION} x size"
        if release_error:
            details["release_error"] = release_error
        check("freed_on_last_release", kind, ok and not release_error, **details)
    emit({"event": "DONE", "ok": ok_all})
    return 0 if ok_all else 1


# --- the driver ----------------------------------------------------------------------------------------------------

class Child:
    """A role of this script in its own process (python3 script.py ROLE ...). Its JSON stdout lines are collected:
    events go to a queue, checks and infos are re-emitted by the driver at once."""

    def __init__(self, driver, role: str, *argv: str):
        self.role = role
        self.driver = driver
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), role, *argv], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, bufsize=1)
        self.events: "queue.Queue[dict]" = queue.Queue()
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                self.driver.out({"info": f"{self.role} said", "line": line})
                continue
            if "event" in obj:
                self.driver.out({"info": f"{self.role} event", **obj})
                self.events.put(obj)
            else:
                self.driver.out({"from": self.role, **obj})
        self.events.put({"event": "EOF"})

    def wait_event(self, name: str, timeout: float = 240) -> dict:
        deadline = time.time() + timeout
        while True:
            try:
                ev = self.events.get(timeout=max(0.1, deadline - time.time()))
            except queue.Empty:
                raise RuntimeError(f"{self.role}: no {name} within {timeout} s")
            if ev["event"] == name:
                return ev
            if ev["event"] == "EOF":
                raise RuntimeError(f"{self.role} ended (rc {self.p.wait()}) before {name}")

    def send(self, line: str) -> None:
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()


class Driver:
    def __init__(self, args):
        self.args = args
        self.results = []
        self.probes = []
        self.lock = threading.Lock()
        self.file = None
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            self.file = open(os.path.join(args.out, "results.jsonl"), "w")

    def out(self, obj: dict) -> None:
        with self.lock:
            line = json.dumps(obj)
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
            if self.file:
                self.file.write(line + "\n")
                self.file.flush()
            if "check" in obj:
                self.results.append(obj)
            if "probe" in obj:
                self.probes.append(obj)

    def check(self, name: str, kind: str, ok: bool, **details):
        self.out({"check": name, "kind": kind, "ok": bool(ok), **details})


def env_info() -> dict:
    info = {"python": sys.version.split()[0], "kernel": platform.release(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                                 time.gmtime())}
    try:
        import numpy
        info["numpy"] = numpy.__version__
    except ImportError:
        info["numpy"] = None
    exe = shutil.which("nvidia-smi")
    if exe:
        out = subprocess.run([exe, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True)
        info["gpu"] = out.stdout.strip()
    m = meminfo()
    info.update(mem_total=m.get("MemTotal"), hugepages_total=m.get("HugePages_Total"),
                numa_nodes=len([d for d in os.listdir("/sys/devices/system/node") if d.startswith("node")])
                if os.path.isdir("/sys/devices/system/node") else None)
    return info


def kill_and_reap(d: Driver, child: Child, what: str) -> float:
    t0 = time.perf_counter()
    os.kill(child.p.pid, signal.SIGKILL)
    rc = child.p.wait()
    ms = ms_since(t0)
    gone = not os.path.exists(f"/proc/{child.p.pid}")
    d.check(f"{what}_sigkilled_and_reaped", "all", rc == -signal.SIGKILL and gone, rc=rc, proc_gone=gone,
            kill_to_reaped_ms=ms)
    return ms


def run_driver(args) -> int:
    d = Driver(args)
    kinds = [k for k in args.kinds.split(",") if k]
    sizes = ["--host-mib", str(args.host_mib), "--device-mib", str(args.device_mib), "--memfd-mib",
             str(args.memfd_mib), "--huge-mib", str(args.huge_mib)]
    d.out({"info": "environment", **env_info(), "kinds": kinds})
    tmp = tempfile.mkdtemp(prefix="engram-handover-")
    sock = os.path.join(tmp, "holder.sock")
    children = []
    t_start = time.perf_counter()
    try:
        # --- the hand-over ---
        base = mem_snapshot()
        d.out({"info": "step baseline", **base})
        holder = Child(d, "holder", "--socket", sock)
        children.append(holder)
        holder.wait_event("LISTENING", 30)
        creator = Child(d, "creator", "--socket", sock, "--kinds", ",".join(kinds), *sizes)
        children.append(creator)
        sent = creator.wait_event("SENT")
        holder.wait_event("READY", 60)
        created = mem_snapshot()
        d.out({"info": "step created, held by the creator and the holder", **created})
        made = {r["kind"]: r for r in sent["regions"]}
        for sk in sent["skipped"]:
            d.check("created", sk["kind"], True, skipped=sk["skipped"],
                    note="skipped: no huge pages?" if sk["kind"] == "memfd_hugetlb" else "skipped")
        kill_and_reap(d, creator, "creator")
        time.sleep(1.0)
        killed = mem_snapshot()
        d.out({"info": "step creator killed and reaped, +1 s; the holder alone holds the fds", **killed})
        # The memory is still accounted as in use while only the holder's fds reference it (the pattern reads
        # below are the proof that it is the same memory; these say the system has not taken it back).
        gpu_delta = (killed["gpu_used_mib"] - base["gpu_used_mib"]) \
            if base["gpu_used_mib"] is not None and killed["gpu_used_mib"] is not None else None
        d.out({"info": "held after the kill, vs the baseline before any role started",
               "mem_free_below_baseline": base["mem_free"] - killed["mem_free"],
               "mem_available_below_baseline": base["mem_available"] - killed["mem_available"],
               "shmem_above_baseline": killed["shmem"] - base["shmem"],
               "gpu_used_mib_above_baseline": gpu_delta,
               "hugepages_free_below_baseline": (base["hugepages_free"] or 0) - (killed["hugepages_free"] or 0),
               "note": "nvidia-smi memory.used, informational"})
        if "memfd" in made:
            d.check("held_by_holder_after_kill", "memfd",
                    killed["shmem"] - base["shmem"] >= FREED_FRACTION * made["memfd"]["size"],
                    shmem_above_baseline=killed["shmem"] - base["shmem"], size=made["memfd"]["size"],
                    criterion=f"Shmem above the baseline >= {FREED_FRACTION} x size (Shmem is system-wide)")
        if "memfd_hugetlb" in made:
            pages = made["memfd_hugetlb"]["size"] // HUGE_PAGE
            below = base["hugepages_free"] - killed["hugepages_free"]
            d.check("held_by_holder_after_kill", "memfd_hugetlb", below == pages, hugepages_free_below_baseline=below,
                    pages=pages)
        if "host_numa" in made:
            below = base["mem_free"] - killed["mem_free"] - (killed["shmem"] - base["shmem"])
            d.check("held_by_holder_after_kill", "host_numa", below >= FREED_FRACTION * made["host_numa"]["size"],
                    mem_free_below_baseline_less_shmem=below, size=made["host_numa"]["size"],
                    criterion=f"MemFree below the baseline, less the memfds' Shmem, >= {FREED_FRACTION} x size")
        successor = Child(d, "successor", "--socket", sock, *(["--no-cuda"] if args.no_cuda else []))
        children.append(successor)
        holder.send("SERVE")
        holder.wait_event("SERVED", 60)
        successor.wait_event("VERIFIED")
        holder.send("CLOSE")
        holder.wait_event("CLOSED", 30)
        holder_rc = holder.p.wait(timeout=30)
        successor.send("HOLDER_CLOSED")
        done = successor.wait_event("DONE")
        succ_rc = successor.p.wait(timeout=60)
        d.check("roles_exited_cleanly", "all", holder_rc == 0 and succ_rc == 0, holder_rc=holder_rc,
                successor_rc=succ_rc, successor_ok=done.get("ok"))
        time.sleep(0.5)
        end = mem_snapshot()
        d.out({"info": "step everything released, every process gone", **end,
               "mem_available_vs_baseline": end["mem_available"] - base["mem_available"],
               "gpu_used_mib_vs_baseline": (end["gpu_used_mib"] - base["gpu_used_mib"])
               if base["gpu_used_mib"] is not None and end["gpu_used_mib"] is not None else None})
        if "memfd_hugetlb" in made:
            d.check("hugepages_back_at_end", "memfd_hugetlb", end["hugepages_free"] == base["hugepages_free"],
                    baseline=base["hugepages_free"], end=end["hugepages_free"])

        # --- the negative control: nobody else holds the fds ---
        neg = [k for k in kinds if k in ("host_numa", "device", "memfd")]
        if neg and not args.no_negative:
            b0 = mem_snapshot()
            c2 = Child(d, "creator", "--kinds", ",".join(neg), *sizes)
            children.append(c2)
            ready = c2.wait_event("READY")
            b1 = mem_snapshot()
            kill_and_reap(d, c2, "negative_control_creator")
            time.sleep(1.0)
            b2 = mem_snapshot()
            rs = {r["kind"]: r["size"] for r in ready["regions"]}
            rise = b2["mem_available"] - b1["mem_available"]
            free_rise = b2["mem_free"] - b1["mem_free"]
            shmem_drop = b1["shmem"] - b2["shmem"]
            common = dict(mem_available_rise_at_kill=rise, mem_free_rise_at_kill=free_rise,
                          shmem_drop_at_kill=shmem_drop,
                          mem_available_after_kill_vs_before_start=b2["mem_available"] - b0["mem_available"],
                          note="the creator held the only references (its handles, mappings and exported fds); "
                               "after SIGKILL there is no fd left anywhere for a successor to import")
            if "memfd" in rs:
                d.check("negative_control_memory_returned", "memfd", shmem_drop >= FREED_FRACTION * rs["memfd"],
                        size=rs["memfd"], criterion=f"Shmem drops by >= {FREED_FRACTION} x size at the kill",
                        **common)
            if "host_numa" in rs:
                host_rise = max(rise, free_rise) - (shmem_drop if "memfd" in rs else 0)
                d.check("negative_control_memory_returned", "host_numa", host_rise >= FREED_FRACTION * rs["host_numa"],
                        size=rs["host_numa"], rise_less_shmem=host_rise,
                        criterion=f"MemFree or MemAvailable rises at the kill, less the memfd's Shmem, by >= "
                                  f"{FREED_FRACTION} x size (the creator's own memory comes back too)", **common)
            if "device" in rs and b0["gpu_used_mib"] is not None:
                d.check("negative_control_memory_returned", "device",
                        b2["gpu_used_mib"] - b0["gpu_used_mib"] <= 8,
                        gpu_used_mib_before_start=b0["gpu_used_mib"], while_alive=b1["gpu_used_mib"],
                        after_kill=b2["gpu_used_mib"], device_bytes=rs["device"],
                        note="nvidia-smi memory.used; the dead creator's context is freed too")
    except Exception as e:
        d.check("driver", "all", False, error=f"{type(e).__name__}: {e}", trace=traceback.format_exc())
    finally:
        for c in children:
            if c.p.poll() is None:
                c.p.kill()
                c.p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    failed = [r for r in d.results if not r["ok"]]
    d.out({"summary": True, "checks": len(d.results), "failed": len(failed),
           "failed_checks": [f"{r['check']}:{r['kind']}" for r in failed],
           "probes": [f"{p['probe']}:{p['kind']}:{'works' if p.get('works') else 'does not work'}" for p in d.probes],
           "wall_s": round(time.perf_counter() - t_start, 2)})
    return 0 if not failed and d.results else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("role", nargs="?", default="driver", choices=["driver", "creator", "holder", "successor"])
    ap.add_argument("--socket")
    ap.add_argument("--kinds", default=",".join(ALL_KINDS))
    ap.add_argument("--host-mib", type=int, default=1024)
    ap.add_argument("--device-mib", type=int, default=256)
    ap.add_argument("--memfd-mib", type=int, default=256)
    ap.add_argument("--huge-mib", type=int, default=64)
    ap.add_argument("--no-cuda", action="store_true", help="successor: CPU reads only (for a machine without a GPU)")
    ap.add_argument("--no-negative", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.role == "creator":
        return role_creator(args)
    if args.role == "holder":
        return role_holder(args)
    if args.role == "successor":
        return role_successor(args)
    return run_driver(args)


if __name__ == "__main__":
    sys.exit(main())
