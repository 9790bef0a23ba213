"""``python -m engram_host import ...``: the Java CLI's ``import`` command, flag for flag, printing the same JSON
document (``--json``), so a check written against one runs against the other. Also ``status`` and ``stop``.

Exit codes as the Java CLI: 0 ok, 1 a runtime failure (one line on stderr), 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Optional

from . import __version__, _paths, client, errors as E
from ._wire import MAX_VERSION, MIN_VERSION

ALGORITHM = "sha256-tree-v1"


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # exit 2 with one line, as the Java CLI
        raise UsageError(message)


def _socket_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--socket", metavar="TEMPLATE",
                   help="Socket path or template with {instance}, {device}, {device_uuid} (default: "
                        "$ENGRAM_HOST_SOCKET, else /run/engram-host/{instance}.sock for root, "
                        "$XDG_RUNTIME_DIR/engram-host/{instance}.sock for other users, else "
                        "/tmp/engram-host-<euid>/{instance}.sock).")
    p.add_argument("--instance", metavar="NAME", help="Fills {instance} (default: default).")
    p.add_argument("--device", metavar="N", type=int, help="GPU ordinal: fills {device} and {device_uuid}.")
    p.add_argument("--daemon-uid", metavar="UID", type=int, action="append", default=[],
                   help="Also trust a daemon running as UID (repeatable); root's and this user's always are.")


def _parser() -> argparse.ArgumentParser:
    top = _Parser(prog="python -m engram_host", description="engram-host's Python client.")
    top.add_argument("--version", action="version",
                     version=f"engram_host {__version__} (protocol {MIN_VERSION}-{MAX_VERSION})")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    imp = sub.add_parser("import", help="Import the tables as an engine would, and report per-table rows and timings.",
                         description="Import the tables as an engine would, and report per-table rows and timings.")
    _socket_args(imp)
    group = imp.add_mutually_exclusive_group()
    group.add_argument("--expect", metavar="SHA256", help="Expected fingerprint (short form).")
    group.add_argument("--expect-checkpoint", metavar="PATH", nargs="+",
                       help="Compute the expected fingerprint from this checkpoint.")
    imp.add_argument("--tables", metavar="GLOB", default="",
                     help="With --expect-checkpoint and --fallback-checkpoint: the tables the daemon was told to "
                          "serve, comma-separated globs (default: as serve chooses them: the ones the model's "
                          "config.json names in engram_layer_ids, else all).")
    imp.add_argument("--digest", choices=["sha256", "engram"],
                     help="sha256: hash every table through the mapping; engram: recompute the daemon's digest and "
                          "fail on a difference (pure Python: slow on large tables).")
    imp.add_argument("--json", action="store_true", help="Print one JSON object.")
    imp.add_argument("--wait-ms", type=int, default=0, metavar="MS",
                     help="Keep retrying this long while the daemon is loading (default: 0).")
    imp.add_argument("--hold-ms", type=int, default=0, metavar="MS",
                     help="Keep the lease this long (or until the daemon goes), then read every table again.")
    imp.add_argument("--fallback-checkpoint", metavar="PATH", nargs="+",
                     help="When no daemon listens on the socket (no socket file, or connection refused), and only "
                          "then, load this checkpoint in-process instead.")
    imp.add_argument("--gpu", action="store_true",
                     help="Give every table a GPU view on --device (default 0): memfd tables are registered, "
                          "cuda-vmm ones imported and mapped; device tensors of that GPU are included.")
    imp.add_argument("--cpu-view", action="store_true", help="With --gpu: a CPU view of cuda-vmm tables too.")
    imp.add_argument("--verify", action="store_true",
                     help="With --gpu: the GPU reads every table through its view (PyTorch); its bytes must equal "
                          "the CPU's, and the daemon's digest.")
    imp.add_argument("--populate", action="store_true", help="Prefault the mappings (MAP_POPULATE).")
    imp.add_argument("--accept-future-write-seal", action="store_true",
                     help="Also accept memfds sealed FUTURE_WRITE instead of WRITE (a daemon of an older build; "
                          "FUTURE_WRITE leaves writable a mapping made before it).")
    imp.add_argument("--verify-content", metavar="CHECKPOINT_OR_SIDECAR", nargs="+",
                     help=f"After importing, check every CPU-readable table's {ALGORITHM} digest over the mapped "
                          "bytes against a sidecar (*.engram-digests.json, engram-digests.json) or against digests "
                          "computed from this checkpoint; any difference fails (exit 1).")
    imp.add_argument("--verify-threads", type=int, default=0, metavar="N",
                     help="Threads for --verify-content (default: one per CPU).")
    imp.add_argument("--torch", action="store_true",
                     help="Python only: also make every table a PyTorch tensor (GPU with --gpu), as an engine would, "
                          "and report the time ('torch' in the JSON).")
    for name, what in (("status", "Print the daemon's STATUS document (JSON)."),
                       ("stop", "Ask the daemon to stop; clients keep their mappings.")):
        p = sub.add_parser(name, help=what, description=what)
        _socket_args(p)
    return top


def main(argv: Optional[list] = None) -> int:
    """Runs the command line; the package's log lines (the logger ``engram_host``) go to stderr, one line each."""
    import logging
    log = logging.getLogger("engram_host")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("python -m engram_host: %(message)s"))
    log.addHandler(handler)
    propagate, log.propagate = log.propagate, False
    try:
        return _main(argv)
    finally:
        log.removeHandler(handler)
        log.propagate = propagate


def _main(argv: Optional[list]) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            raise UsageError("missing COMMAND: one of import, status, stop")
        for uid in args.daemon_uid:
            if not 0 <= uid < 0xFFFFFFFF:
                raise UsageError(f"--daemon-uid: {uid} is not a uid")
        if args.command == "import":
            if (args.cpu_view or args.verify) and not args.gpu:
                raise UsageError("--cpu-view and --verify need --gpu")
            return _import(args)
        if args.command == "status":
            print(json.dumps(client.status(args.socket, instance=args.instance, device=args.device,
                                           daemon_uid=args.daemon_uid)))
            return 0
        client.stop(args.socket, instance=args.instance, device=args.device, daemon_uid=args.daemon_uid)
        return 0
    except UsageError as e:
        print(f"python -m engram_host: {e}", file=sys.stderr)
        print("Try 'python -m engram_host COMMAND --help' for more information.", file=sys.stderr)
        return 2
    except (E.EngramHostError, ValueError, OSError, ImportError) as e:
        # one line; an EngramHostError adds the daemon's details under it (a mismatch: at most 5, then a count)
        lines = str(e).splitlines() if isinstance(e, E.EngramHostError) else str(e).splitlines()[:1]
        print(f"python -m engram_host: {lines[0] if lines else type(e).__name__}", file=sys.stderr)
        for line in lines[1:]:
            print(line, file=sys.stderr)
        return 1
    except Exception as e:  # a bug or an unexpected native failure: one line too
        print(f"python -m engram_host: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


def _expectation(args):
    if args.expect:
        return client.expect_sha256(args.expect)
    if args.expect_checkpoint:
        return client.expect_checkpoint(args.expect_checkpoint, _tables(args))
    return None


def _tables(args) -> list:
    return [t for t in args.tables.split(",") if t] if args.tables else []


def _import(args) -> int:
    expectation = _expectation(args)
    device = (args.device if args.device is not None else 0) if args.gpu else None
    # The path is resolved with --device as given (as the Java CLI does), even when --gpu defaults it to 0.
    path = _paths.socket_path(args.socket, args.instance, args.device)
    kwargs = dict(socket=path, expect=expectation, device=device, cpu_view=args.cpu_view,
                  wait=args.wait_ms / 1000.0, daemon_uid=args.daemon_uid, populate=args.populate,
                  name="engram_host import (python)", accept_future_write_seal=args.accept_future_write_seal)
    import_torch_ms = None
    if args.torch:  # first, as in an engine, which has imported torch before it asks for its tables
        t0 = time.perf_counter_ns()
        import torch  # noqa: F401
        import_torch_ms = (time.perf_counter_ns() - t0) / 1e6
    t0 = time.perf_counter_ns()
    if args.fallback_checkpoint:
        imported = client.connect_or_load(args.fallback_checkpoint, tables=_tables(args), **kwargs)
    else:
        imported = client.connect(**kwargs)
    import_ms = (time.perf_counter_ns() - t0) / 1e6
    with imported:
        checked = _content_check(imported, args) if args.verify_content else None
        gone = threading.Event()
        reason: list = []

        def on_gone(r: str) -> None:
            reason.append(r)
            gone.set()

        imported.on_daemon_gone(on_gone)
        rows = _describe(imported, args)
        if checked is not None:
            for row in rows:
                r = checked["by_table"].get(row["name"])
                if r is not None:
                    row["content"] = r[0]
                    if r[1] is not None:
                        row[ALGORITHM] = r[1]
        tensors = None
        if args.torch:
            tensors = _make_tensors(imported, import_torch_ms)
        if args.verify:
            for row in rows:
                row["gpu_verify"] = _gpu_verify(imported.tables[row["name"]])
        out: dict = {"source": imported.source, "fingerprint": imported.fingerprint,
                     "daemon_pid": imported.daemon_pid}
        timings = dict(imported.timings)
        timings["import_ms"] = import_ms
        out["timings"] = timings
        out["tables"] = rows
        if checked is not None:
            out["content_check"] = checked["summary"]
        if tensors is not None:
            out["torch"] = tensors["report"]
        if args.hold_ms > 0:
            went = gone.wait(args.hold_ms / 1000.0)
            out["daemon_gone"] = reason[0] if went else None
            out["tables_after_hold"] = _describe(imported, args)
        _print(out, rows, args.json)
        if tensors is not None:
            tensors["tensors"].clear()
    return 0


def _describe(imported: client.ImportedTables, args) -> list:
    from . import digests
    rows = []
    for t in imported.tables.values():
        m: dict = {"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "bytes": t.nbytes, "backend": t.backend,
                   "numa_node": t.numa_node}
        if t.device is not None:
            m["device"] = t.device
        if t.gpu_address:
            m["gpu_address"] = f"0x{t.gpu_address:x}"
        m["region"] = t.region
        if len(t.regions) > 1:  # a cuda-vmm host table over a run of regions
            m["regions"] = list(t.regions)
        if t.region >= 0 and t.region < len(imported.region_timings):
            m["attach"] = imported.region_timings[t.region]
        m["digest"] = t.digest_hex
        if not t.has_cpu_view:
            m["cpu_view"] = False
        elif args.digest == "sha256":
            import hashlib
            m["sha256"] = hashlib.sha256(t.buffer()).hexdigest()
        elif args.digest == "engram":
            again = digests.engram_digest(t.buffer())
            if again != t.digest:
                raise E.EngramHostError(f"table {t.name}: digest through the mapping is {again:016x} but the daemon "
                                        f"computed {t.digest:016x}")
            m["digest_verified"] = True
        rows.append(m)
    return rows


def _content_check(imported: client.ImportedTables, args) -> dict:
    threads = args.verify_threads if args.verify_threads > 0 else None
    report = imported.verify_content(args.verify_content, threads)
    if not args.json:
        for name, (status, d) in report.tables.items():
            print(f"content {name:<48} {status}{'' if d is None else ' ' + d}")
        c = report.summary
        print(f"content check ({ALGORITHM}): {c['verified']} tables verified, {c['not_checked']} not checked, "
              f"against {c['trusted']}; {c['bytes']} bytes checked in {c['check_s']:.3f} s ({c['gb_per_s']:.2f} GB/s, "
              f"{c['threads']} threads)")
    return {"summary": report.summary, "by_table": report.tables}


def _make_tensors(imported: client.ImportedTables, import_torch_ms: float) -> dict:
    import torch
    t1 = time.perf_counter_ns()
    tensors = {name: t.to_torch() for name, t in imported.tables.items()}
    if imported.gpu_device is not None:
        torch.cuda.synchronize(imported.gpu_device)
    t2 = time.perf_counter_ns()
    report = {"import_torch_ms": import_torch_ms, "tensors_ms": (t2 - t1) / 1e6, "torch_version": torch.__version__,
              "tensors": {n: {"dtype": str(x.dtype).replace("torch.", ""), "shape": list(x.shape),
                              "device": str(x.device), "data_ptr": f"0x{x.data_ptr():x}"} for n, x in tensors.items()}}
    return {"report": report, "tensors": tensors}


def _gpu_verify(table: client.Table) -> dict:
    """The GPU reads every byte of the table through its view and compares it with the CPU's bytes (the CPU
    view, or a device-to-host copy where there is none, whose engram digest must then equal the daemon's)."""
    import torch
    from . import digests
    out: dict = {}
    if table.nbytes == 0:
        return {"cpu_bytes_from": "none (empty table)", "verified": True}
    gpu = table.to_torch(cpu=False)
    g = gpu.reshape(-1).view(torch.uint8) if gpu.dtype != torch.uint8 else gpu.reshape(-1)
    step = 256 << 20
    t0 = time.perf_counter()
    if table.has_cpu_view:
        cpu = table.to_torch(cpu=True)
        c = cpu.reshape(-1).view(torch.uint8) if cpu.dtype != torch.uint8 else cpu.reshape(-1)
        for off in range(0, table.nbytes, step):
            if not torch.equal(g[off:off + step], c[off:off + step].to(g.device, non_blocking=False)):
                raise E.EngramHostError(f"table {table.name}: the GPU view and the CPU view differ in bytes "
                                        f"[{off}, {min(off + step, table.nbytes)})")
        out["cpu_bytes_from"] = "cpu view"
        out["compared"] = "every byte, on the GPU"
    else:
        host = g.cpu()
        digest = digests.engram_digest(memoryview(host.numpy()).cast("B"))
        if digest != table.digest:
            raise E.EngramHostError(f"table {table.name}: digest {digest:016x} of the GPU's bytes differs from the "
                                    f"daemon's {table.digest:016x}")
        out["cpu_bytes_from"] = "device-to-host copy"
        out["compared"] = "engram digest of the GPU's bytes"
    torch.cuda.synchronize(g.device)
    out["kernel_ms"] = (time.perf_counter() - t0) * 1e3
    out["verified"] = True
    return out


def _print(out: dict, rows: list, as_json: bool) -> None:
    if as_json:
        print(json.dumps(out))
        sys.stdout.flush()
        return
    for r in rows:
        check = f"sha256 {r['sha256']}" if "sha256" in r else \
            f"digest {r['digest']}" + (" (verified)" if "digest_verified" in r else "")
        print(f"{r['name']:<48} {r['dtype']:<8} {str(r['shape']):<18} {r['bytes']:>14} B  {r['backend']} "
              f"numa={r['numa_node']}  {check}" + (" gpu-verified" if "gpu_verify" in r else ""))
    print(f"imported {len(rows)} tables from {out['source']} (fingerprint {out['fingerprint']}); timings "
          f"{out['timings']}")
    if "daemon_gone" in out:
        print(f"after holding the lease: daemon gone: {out['daemon_gone']}; tables still readable: "
              f"{len(out['tables_after_hold'])}")
    sys.stdout.flush()
