"""The fallback: :func:`connect_or_load` loads a checkpoint from disk only when no daemon listens, and
:func:`load_from_disk` reads the tables ``serve`` would serve into this process's own memory.
"""

from __future__ import annotations

import os
import time
from typing import Optional, Sequence, Union

from .. import _memory, _wire, errors as E
from .attachment import _Attachment
from .connect import _begin
from .expectations import _is_checkpoint, _served
from .imported import ImportedTables
from .options import PathLike, _ms
from .tables import Table


def connect_or_load(checkpoint: Union[PathLike, Sequence[PathLike]], socket: Optional[str] = None, expect=None,
                    device: Optional[int] = None, cpu_view: bool = False, wait: float = 0.0, daemon_uid=None, *,
                    tables: Sequence[str] = (), threads: Optional[int] = None, notice=None,
                    **kwargs) -> ImportedTables:
    """:func:`connect`, or, only when no daemon listens at the socket (no socket file, or a socket whose connect
    is refused, as a killed daemon leaves), a load of ``checkpoint`` (``tables``: globs choosing the tables, of
    ``expect=PATH`` too; without them the model's config.json or every tensor, as ``serve``) into this
    process's own memory, said in one line on stderr (or to ``notice``). ``.source`` says which happened.
    Whatever a live daemon answers (a refusal, a mismatch, BUSY, a timeout) and a daemon this client does not
    trust raise: none of them turns into a slow disk load."""
    if kwargs.get("background"):
        raise TypeError("connect_or_load has no background= (only connect has): its fallback is decided by the "
                        "connect, on the caller's thread")
    paths = [checkpoint] if isinstance(checkpoint, (str, os.PathLike)) else list(checkpoint)
    try:
        # a daemon absent is final at once: the disk load is the fallback, not a wait for a daemon that may never come
        return _begin(False, socket, expect, device, cpu_view, wait, daemon_uid,
                      tables=tables if _is_checkpoint(expect) else (), **kwargs)
    except E.DaemonAbsent as absent:
        line = (f"engram-host: no daemon listens on {absent.socket_path} ({absent.reason}): loading "
                f"{', '.join(os.fspath(p) for p in paths)} from disk")
        if notice is None:
            import sys
            print(line, file=sys.stderr)
        else:
            notice(line)
        return load_from_disk(paths, tables=tables, device=device, threads=threads)


def load_from_disk(paths: Sequence[PathLike], tables: Sequence[str] = (), device: Optional[int] = None,
                   threads: Optional[int] = None) -> ImportedTables:
    """Loads the tables of a checkpoint that ``serve`` would serve (``tables``: globs; without them the model's
    config.json or every tensor) into anonymous memory of this process (the fallback), reading through the fds
    the checkpoint was validated from, and refusing a file that changed during the load. Its fingerprint is the
    one ``serve`` would have, content identities included. With ``device``, each table is registered with CUDA
    for a GPU view (which pins it)."""
    from concurrent.futures import ThreadPoolExecutor
    from .. import checkpoint
    t_start = time.perf_counter_ns()
    threads = threads or os.cpu_count() or 1
    attachment = _Attachment()
    try:
        with checkpoint.open_checkpoint([os.fspath(p) for p in paths]) as cp:
            served = _served(cp, tables, "")
            selected = list(served.selection.tensors)
            bases = []
            for t in selected:
                base = 0
                if t.nbytes:
                    base = _memory.map_anonymous(t.nbytes)
                    attachment.add(f"munmap of table {t.name}", lambda a=base, s=t.nbytes: _memory.unmap(a, s))
                bases.append(base)
            chunk = 16 << 20
            jobs = [(t, b, off) for t, b in zip(selected, bases) for off in range(0, t.nbytes, chunk)]

            def read(job) -> None:
                t, base, off = job
                n = min(chunk, t.nbytes - off)
                buf = memoryview(_memory.view(base + off, n)).cast("B")
                done = 0
                while done < n:
                    got = os.preadv(t.file.fd, [buf[done:]], t.offset + off + done)
                    if got <= 0:
                        raise E.EngramHostError(f"{t.file.path}: tensor '{t.name}': file ended at offset "
                                                f"{t.offset + off + done}")
                    done += got

            with ThreadPoolExecutor(max_workers=threads) as pool:
                list(pool.map(read, jobs))
            cp.check_unchanged()
        gpu = [0] * len(selected)
        if device is not None:
            from .._cuda.device import Device
            from .._cuda.driver import available, gpu_view_refusal
            from .._cuda.host_register import HostRegistration
            if not available():
                raise E.CudaUnavailable(gpu_view_refusal())
            attachment.device = Device(device)
            for i, (t, base) in enumerate(zip(selected, bases)):
                if base:
                    reg = HostRegistration(attachment.device, base, t.nbytes)
                    attachment.add(f"cuMemHostUnregister of table {t.name}", reg.close)
                    gpu[i] = reg.device_pointer
        total = _ms(time.perf_counter_ns() - t_start)
        imported = ImportedTables("disk", served.sha256_hex, attachment, device, False, None,
                                  None, -1, {"disk_load_ms": total, "total_ms": total}, [])
        for i, (t, base) in enumerate(zip(selected, bases)):
            e = _wire.TableEntry(t.name, t.dtype, tuple(t.shape), t.nbytes, i if t.nbytes else -1, 0, 0, 255, -1, -1)
            imported.tables[t.name] = Table(imported, e, base, gpu[i], None, "disk")
        return imported
    except BaseException:
        attachment.free_now()
        raise
