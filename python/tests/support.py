"""Real daemons for the tests: the Java daemon (bin/engram-host serve) as a separate process, generated
checkpoints, and the scripted peer of conformance/protocol_peer.py. Nothing here stands in for the daemon."""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest
from typing import Optional, Sequence

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYTHON_DIR = os.path.join(REPO, "python")
LAUNCHER = os.environ.get("ENGRAM_HOST_LAUNCHER", os.path.join(REPO, "bin", "engram-host"))
# The checkout's test launcher: the CLI with the test jar's hooks (ENGRAM_HOST_TEST_* gates); bin/engram-host ignores them.
TEST_LAUNCHER = os.environ.get("ENGRAM_HOST_TEST_LAUNCHER", os.path.join(REPO, "bin", "engram-host-test"))
PEER = os.path.join(REPO, "conformance", "protocol_peer.py")
CASES = os.path.join(REPO, "conformance", "cases.json")  # the peer's cases, which every client's runner iterates
SPEC = os.path.join(REPO, "docs", "protocol-spec.json")  # docs/protocol.md's numbers as data
NOBODY = 65534


def conformance_cases() -> list:
    """conformance/cases.json's cases (conformance/README.md)."""
    with open(CASES) as f:
        return json.load(f)["cases"]


def protocol_spec() -> dict:
    with open(SPEC) as f:
        return json.load(f)


def fill(text: str, socket_path: str = "") -> str:
    """A case's text with its placeholders filled in (cases.json, "placeholders"): {page}, {page*N}, {page-N},
    {socket} (escaped for a regular expression), {uid}, {nobody}."""
    import re
    page = os.sysconf("SC_PAGE_SIZE")
    text = re.sub(r"\{page\*(\d+)\}", lambda m: str(page * int(m.group(1))), text)
    text = re.sub(r"\{page-(\d+)\}", lambda m: str(page - int(m.group(1))), text)
    return (text.replace("{page}", str(page)).replace("{socket}", re.escape(socket_path))
            .replace("{uid}", str(os.geteuid())).replace("{nobody}", str(NOBODY)))


def java_app_reason() -> Optional[str]:
    """Why the Java launcher cannot run here, or None."""
    if "ENGRAM_HOST_LAUNCHER" in os.environ:
        return None if os.access(LAUNCHER, os.X_OK) else f"{LAUNCHER} is not executable"
    if not os.path.isdir(os.path.join(REPO, "engram-host", "cli", "target", "app", "lib")):
        return "the Java CLI is not built (mvn -DskipTests package builds engram-host/cli/target/app)"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no java on PATH"
    return None


def java_work_dir(prefix: str) -> str:
    """For a module's setUpModule: skips the module where the Java launcher cannot run, else a new work directory."""
    reason = java_app_reason()
    if reason:
        raise unittest.SkipTest(reason)
    return tempfile.mkdtemp(prefix=prefix)


def require_java(test: unittest.TestCase) -> None:
    reason = java_app_reason()
    if reason:
        test.skipTest(reason)


def test_launcher_reason() -> Optional[str]:
    """Why the test launcher (and its test jar) cannot run here, or None: a release has neither."""
    reason = java_app_reason()
    if reason:
        return reason
    jars = os.path.join(REPO, "engram-host", "cli", "target")
    if "ENGRAM_HOST_TEST_LAUNCHER" not in os.environ and not (
            os.path.isdir(jars) and any(f.endswith("-tests.jar") for f in os.listdir(jars))):
        return "the test launcher is not built (mvn -DskipTests package builds the cli test jar)"
    return None


def require_test_launcher(test: unittest.TestCase) -> None:
    """Skips unless the test launcher (and its test jar) can run here: a release has neither."""
    reason = test_launcher_reason()
    if reason:
        test.skipTest(reason)


def run_cli(*args: str, env: Optional[dict] = None, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([LAUNCHER, *args], capture_output=True, text=True, timeout=timeout,
                       env=None if env is None else {**os.environ, **env})
    if check and p.returncode != 0:
        raise AssertionError(f"engram-host {' '.join(args)} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    return p


def run_python_cli(*args: str, env: Optional[dict] = None, timeout: float = 120,
                   prefix: tuple = ()) -> subprocess.CompletedProcess:
    e = {**os.environ, **(env or {})}
    e["PYTHONPATH"] = PYTHON_DIR + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return subprocess.run([*prefix, sys.executable, "-m", "engram_host", *args], capture_output=True, text=True,
                          timeout=timeout, env=e)


def generate(out: str, rows: int = 4096, layers: str = "1,14", single_file: bool = False, seed: int = 42,
             dim: int = 256, model: bool = False, prefix: Optional[str] = None, force: bool = False) -> str:
    """``engram-host generate`` into ``out``: the published layout (docs/checkpoints.md, "Synthetic checkpoints"),
    per layer L of ``layers`` ``PREFIXlayers.L.engram.embed.weight`` (F8_E4M3 [rows, dim]) and ``.scale``
    (F8_E8M0 [rows, dim/32]) and a config.json naming them; with ``model`` the whole model's shape (six shards,
    small Engram weights and ordinary tensors beside the tables). Returns ``out``."""
    args = ["generate", "--out", out, "--rows", str(rows), "--layers", layers, "--seed", str(seed), "--dim", str(dim)]
    if single_file:
        args.append("--single-file")
    if model:
        args.append("--model")
    if prefix is not None:
        args += ["--prefix", prefix]
    if force:
        args.append("--force")
    run_cli(*args)
    return out


def table_names(layers: Sequence[int] = (1, 14), prefix: str = "") -> list:
    """The Engram tables generate writes for ``layers`` (and config.json names), sorted as the daemon lists them."""
    return sorted(f"{prefix}layers.{L}.engram.embed.{part}" for L in layers for part in ("scale", "weight"))


def safetensors_tables(paths: list) -> dict:
    """Every tensor's (dtype, shape, bytes) of these .safetensors files, read with a parser of this test's own
    (not the package's), so that the tests check the package against the files themselves."""
    out = {}
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".safetensors"))
        else:
            files.append(p)
    for f in files:
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
            base = 8 + n
            for name, e in header.items():
                if name == "__metadata__":
                    continue
                b, end = e["data_offsets"]
                fh.seek(base + b)
                out[name] = (e["dtype"], tuple(e["shape"]), fh.read(end - b))
    return out


def write_raw(path: str, header, data: bytes = b"", data_len: int = 0, n: Optional[int] = None) -> str:
    """A file of: u64le n (default: the header's length), the header bytes, then ``data`` or ``data_len``
    zero bytes."""
    h = header.encode("utf-8") if isinstance(header, str) else header
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h) if n is None else n) + h + (data or bytes(data_len)))
    return path


def write_safetensors(path: str, tensors: Sequence[tuple], metadata: Optional[dict] = None) -> str:
    """A valid safetensors file: ``tensors`` are (name, dtype, shape, data) laid out in the order given, the
    header padded with spaces to a multiple of 8 as writers do."""
    header: dict = {"__metadata__": metadata} if metadata is not None else {}
    offset = 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    h = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    h += b" " * (-len(h) % 8)
    return write_raw(path, h, b"".join(t[3] for t in tensors))


def write_published(directory: str, layers: Sequence[int] = (1, 14), rows: int = 64, dim: int = 256, prefix: str = "",
                    config: Optional[dict] = None, where: str = "text_config", index: bool = True,
                    seed: int = 0) -> str:
    """A checkpoint in the layout DeepSeek-V4.1 is published in: per layer L, ``PREFIXlayers.L.engram.embed.weight``
    (F8_E4M3 [rows, dim]) and ``.scale`` (F8_E8M0 [rows, dim/32]) in a shard of their own, beside other tensors
    (an attention weight per layer, an embedding) in a first shard; ``model.safetensors.index.json`` (unless
    ``index`` is False); and ``config.json``: ``config`` when given, else ``{"model_type": ...,
    WHERE: {"engram_layer_ids": layers, "engram_num_embeddings": [rows, ...], "engram_head_dim": dim}}`` with
    ``where`` "text_config" (as published) or "" (at the top level). Bytes are random from ``seed``."""
    import random
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    shards = {"model-00000.safetensors": [(f"{prefix}embed.weight", "U8", [8], rng.randbytes(8))] + [
        (f"{prefix}layers.{L}.attn.weight", "BF16", [4, 4], rng.randbytes(32)) for L in layers]}
    for L in layers:
        shards[f"model-{L:05d}.safetensors"] = [
            (f"{prefix}layers.{L}.engram.embed.weight", "F8_E4M3", [rows, dim], rng.randbytes(rows * dim)),
            (f"{prefix}layers.{L}.engram.embed.scale", "F8_E8M0", [rows, dim // 32], rng.randbytes(rows * dim // 32))]
    for name, tensors in shards.items():
        write_safetensors(os.path.join(directory, name), tensors)
    if index:
        weight_map = {t[0]: name for name, tensors in shards.items() for t in tensors}
        with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
    if config is None:
        engram = {"engram_layer_ids": list(layers), "engram_num_embeddings": [rows] * len(layers),
                  "engram_head_dim": dim}
        config = {"model_type": "deepseek_v4", **({where: engram} if where else engram)}
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    return directory


def hf_snapshot(source: str, cache: str, revision: str = "0123abcd", absolute: bool = False) -> str:
    """Lays the files of the directory ``source`` out as ``huggingface_hub`` caches a model:
    ``CACHE/models--org--model/blobs/<SHA-256 of the file>`` holding the bytes, and
    ``CACHE/models--org--model/snapshots/REVISION/<name>`` a symbolic link to its blob (relative, as
    huggingface_hub makes them, or ``absolute``). Returns the snapshot directory."""
    import hashlib
    repo = os.path.join(cache, "models--org--model")
    blobs = os.path.join(repo, "blobs")
    snapshot = os.path.join(repo, "snapshots", revision)
    os.makedirs(blobs, exist_ok=True)
    os.makedirs(snapshot, exist_ok=True)
    for name in sorted(os.listdir(source)):
        with open(os.path.join(source, name), "rb") as f:
            data = f.read()
        blob = hashlib.sha256(data).hexdigest()
        with open(os.path.join(blobs, blob), "wb") as f:
            f.write(data)
        target = os.path.join(blobs, blob) if absolute else os.path.join("..", "..", "blobs", blob)
        os.symlink(target, os.path.join(snapshot, name))
    return snapshot


def write_record(path: str, tables: dict) -> str:
    """A digest record, version 2 (docs/checkpoints.md), at ``path``: ``tables`` maps a name to (engram digest
    v1, sha256-tree-v1) as hex strings."""
    doc = {"format": "engram-content-digests", "version": 2, "chunk_bytes": 16777216,
           "tables": {n: {"engram-digest-v1": e, "sha256-tree-v1": t} for n, (e, t) in sorted(tables.items())}}
    with open(path, "w") as f:
        f.write(json.dumps(doc, separators=(",", ":")) + "\n")
    return path


def fd_count() -> int:
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


def memfd_mappings() -> int:
    """How many mappings of this process are memfds (/proc/self/maps names them 'memfd:')."""
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if "/memfd:" in line)


class Daemon:
    """``engram-host serve`` as a separate process, ready when its ready file names its pid."""

    def __init__(self, checkpoint: str, *extra: str, backend: str = "memfd", socket_path: Optional[str] = None,
                 env: Optional[dict] = None, wait_ready: bool = True, timeout: float = 120,
                 launcher: str = LAUNCHER):
        self.dir = tempfile.mkdtemp(prefix="engram-py-daemon-")
        os.chmod(self.dir, 0o700)
        self.socket = socket_path or os.path.join(self.dir, "d.sock")
        self.log_path = os.path.join(self.dir, "daemon.log")
        self._log = open(self.log_path, "w")
        args = [launcher, "serve", "--checkpoint", checkpoint, "--socket", self.socket, "--backend", backend,
                "--numa", "none", "--threads", "2", *extra]
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=None if env is None else {**os.environ, **env})
        if wait_ready:
            self.wait_ready(timeout)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def wait_socket(self, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if os.path.exists(self.socket):
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"the daemon exited {self.proc.returncode}: {self.log()[-3000:]}")
            time.sleep(0.02)
        raise AssertionError(f"no socket at {self.socket} after {timeout} s: {self.log()[-3000:]}")

    def wait_ready(self, timeout: float = 120) -> None:
        ready = self.socket + ".ready"
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                with open(ready) as f:
                    if f"pid={self.proc.pid}\n" in f.read():
                        return
            except FileNotFoundError:
                pass
            if self.proc.poll() is not None:
                raise AssertionError(f"the daemon exited {self.proc.returncode}: {self.log()[-3000:]}")
            time.sleep(0.02)
        raise AssertionError(f"the daemon was not ready after {timeout} s: {self.log()[-3000:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def close(self) -> None:
        self.stop()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Daemon":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Peer:
    """conformance/protocol_peer.py serving one connection with a scripted CASE."""

    def __init__(self, case: str, directory: str, prefix: tuple = ()):
        self.socket = os.path.join(directory, f"peer-{case}.sock")
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        self.proc = subprocess.Popen([*prefix, sys.executable, PEER, self.socket, case], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        end = time.monotonic() + 20
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > end:
                raise AssertionError(f"protocol_peer {case}: no socket: {self.proc.communicate()[0]}")
            time.sleep(0.01)

    def finish(self, timeout: float = 60) -> tuple:
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        return self.proc.returncode, out


def unlistened_socket(path: str) -> socket.socket:
    """A socket file nobody listens on, as a daemon killed with SIGKILL leaves (connect: ECONNREFUSED)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    return s
