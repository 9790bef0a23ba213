"""Host memory through libc (ctypes): read-only shared mappings of memfds, anonymous mappings for a load from
disk, and the memfd seal check of docs/protocol.md ("How to map a region")."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

MAP_FAILED = ctypes.c_void_p(-1).value
MAP_POPULATE = 0x8000
PAGE_SIZE = mmap.PAGESIZE

F_GET_SEALS = getattr(fcntl, "F_GET_SEALS", 1034)
F_SEAL_SEAL = 0x0001
F_SEAL_SHRINK = 0x0002
F_SEAL_GROW = 0x0004
F_SEAL_WRITE = 0x0008
F_SEAL_FUTURE_WRITE = 0x0010
SEAL_NAMES = ((F_SEAL_SEAL, "SEAL"), (F_SEAL_SHRINK, "SHRINK"), (F_SEAL_GROW, "GROW"), (F_SEAL_WRITE, "WRITE"),
              (F_SEAL_FUTURE_WRITE, "FUTURE_WRITE"))


class LibcError(OSError):
    """A libc call failed; the message names the call and its errno."""


def _fail(call: str) -> LibcError:
    e = ctypes.get_errno()
    return LibcError(e, f"{call} failed: {errno.errorcode.get(e, e)} ({os.strerror(e)})")


def map_read_only(fd: int, size: int, populate: bool = False) -> int:
    """``mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0)``; returns the address."""
    flags = mmap.MAP_SHARED | (MAP_POPULATE if populate else 0)
    addr = _libc.mmap(None, size, mmap.PROT_READ, flags, fd, 0)
    if addr in (None, MAP_FAILED):
        raise _fail(f"mmap(fd={fd}, size={size}, PROT_READ, MAP_SHARED)")
    return addr


def map_anonymous(size: int) -> int:
    """A private anonymous read-write mapping of ``size`` bytes; returns the address."""
    addr = _libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if addr in (None, MAP_FAILED):
        raise _fail(f"mmap(anonymous, size={size})")
    return addr


def unmap(address: int, size: int) -> None:
    if _libc.munmap(address, size) != 0:
        raise _fail(f"munmap(0x{address:x}, {size})")


def seal_names(seals: int) -> str:
    return "|".join(n for bit, n in SEAL_NAMES if seals & bit) or "none"


def check_memfd(fd: int, size: int, what: str, accept_future_write_seal: bool = False) -> None:
    """The client's check of a memfd before mapping it: it carries SEAL, SHRINK, GROW and WRITE (FUTURE_WRITE is not
    enough: it leaves writable a mapping made before it; accepted only with ``accept_future_write_seal``, for a daemon
    of an older build), and holds at least ``size`` bytes. Raises ValueError saying what is missing."""
    try:
        seals = fcntl.fcntl(fd, F_GET_SEALS)
    except OSError as e:
        raise ValueError(f"{what}: fcntl(F_GET_SEALS) failed: {errno.errorcode.get(e.errno, e.errno)}: not a sealed "
                         "memfd, so its bytes could change under this client") from None
    need = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW
    write = F_SEAL_WRITE | (F_SEAL_FUTURE_WRITE if accept_future_write_seal else 0)
    if seals & need != need or not seals & write:
        want = "WRITE or FUTURE_WRITE" if accept_future_write_seal else "WRITE"
        why = (" (FUTURE_WRITE leaves writable a mapping made before it)"
               if seals & F_SEAL_FUTURE_WRITE and not accept_future_write_seal else "")
        raise ValueError(f"{what}: seals are {seal_names(seals)}; need SEAL, SHRINK, GROW and {want}{why}, "
                         "so its bytes could change under this client")
    actual = os.fstat(fd).st_size
    if actual < size:
        raise ValueError(f"{what}: holds {actual} bytes but the manifest says {size}")


def view(address: int, nbytes: int) -> "ctypes.Array":
    """A ctypes byte array over ``nbytes`` at ``address`` (no copy; it does not own the memory)."""
    return (ctypes.c_ubyte * nbytes).from_address(address)
