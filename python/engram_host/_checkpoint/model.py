"""A checkpoint as given: files, a sharded checkpoint's index (``*.safetensors.index.json``) or a model
directory, resolved to its files, each opened and validated once (:func:`open_checkpoint`), and the change check
(:meth:`Checkpoint.check_unchanged`).
"""

from __future__ import annotations

import os
import re
from typing import Optional, Sequence, Union

from .base import CheckpointError, FILE_SUFFIX, INDEX_SUFFIX, MAX_INDEX_BYTES, PathArg
from .safetensors import CheckpointFile, _absolute, _display, _open_fd, _read_file
from .strict_json import JsonError, _kind, parse_json


# ---------------------------------------------------------------------------------------------------------------
# checkpoints

class Checkpoint:
    """A validated checkpoint of one or more safetensors files, each held open on its fd.

    ``files`` in the order given (shards of an index or a directory by name); ``tensors`` maps every tensor
    name to its :class:`TensorInfo`, ordered by name. Close it (or use it as a context manager) to close
    every fd.
    """

    def __init__(self, files: list, tensors: dict, given: Sequence[str] = (), given_as: Optional[dict] = None):
        self.files = files
        self.tensors = tensors
        #: The paths as given to :func:`open_checkpoint` (where the selection looks for config.json, and the
        #: content identity for digest records).
        self.given = tuple(given)
        self._given_as = given_as or {}

    def given_as(self, f: "CheckpointFile") -> str:
        """The path given to :func:`open_checkpoint` through which the file ``f`` was found."""
        return self._given_as[id(f)]

    def select(self, patterns: Sequence[str]) -> list:
        """The tensors whose names match any of ``patterns`` (``*`` any run of characters, ``?`` one, the
        rest literal; the whole name must match), ordered by name. An empty list or ``*`` selects all; any
        other pattern that matches nothing raises :class:`CheckpointError` naming it."""
        if isinstance(patterns, str):
            raise TypeError("patterns must be a sequence of strings, not one string")
        if not patterns:
            return list(self.tensors.values())
        chosen: dict = {}
        for text in patterns:
            if not text:
                raise CheckpointError("tensor selection: empty tensor name pattern")
            regex = re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text),
                               re.DOTALL)
            matched = [name for name in self.tensors if regex.fullmatch(name)]
            if not matched and text != "*":
                raise CheckpointError(f"tensor selection: pattern '{text}' matches none of the {len(self.tensors)}"
                                      f" tensors of {self._describe_files()}")
            for name in matched:
                chosen[name] = self.tensors[name]
        return [chosen[name] for name in sorted(chosen)]

    def _describe_files(self) -> str:
        if len(self.files) == 1:
            return self.files[0].path
        return f"{len(self.files)} files in {os.path.dirname(_absolute(self.files[0].path))}"

    def check_unchanged(self, during: str = "since it was opened",
                        consequence: str = "what was read may not be what was validated; run again once the "
                                           "file is stable") -> None:
        """Raises :class:`CheckpointError` ("checkpoint PATH changed DURING (WHAT): CONSEQUENCE", naming
        any other changed file too) when a file changed since it was opened: its size, mtime or ctime (fstat
        of the fd), its header bytes (read again through the fd), or what its path names (stat of the path,
        following symlinks: same device and inode)."""
        first: Optional[str] = None
        others: list = []
        for f in self.files:
            what = f.changes()
            if not what:
                continue
            if first is None:
                first = f"checkpoint {f.path} changed {during} ({', '.join(what)})"
            else:
                others.append(f"{f.path} ({', '.join(what)})")
        if first is not None:
            also = f"; also changed: {', '.join(others)}" if others else ""
            raise CheckpointError(f"{first}{also}: {consequence}")

    def close(self) -> None:
        """Closes every file's fd once; later calls do nothing."""
        for f in self.files:
            f.close()

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Checkpoint({len(self.files)} files, {len(self.tensors)} tensors)"


def open_checkpoint(paths: Union[PathArg, Sequence[PathArg]]) -> Checkpoint:
    """Opens and validates a checkpoint: each path a ``.safetensors`` file, a ``*.safetensors.index.json``
    (its shards are checked against its weight_map both ways) or a directory (its single index, else every
    ``*.safetensors`` in it by name). Tensor names must be unique across files and no file may be given
    twice. Every file stays open on its fd; on any failure every fd opened is closed and
    :class:`CheckpointError` says why."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not paths:
        raise CheckpointError("no checkpoint path given")
    opened: list = []

    def open_file(where: str) -> CheckpointFile:
        fd = _open_fd(where)
        try:
            f = _read_file(where, fd)
        except BaseException:
            os.close(fd)
            raise
        opened.append(f)
        return f

    try:
        files: dict = {}
        given_as: dict = {}
        for p in paths:
            given = _display(p)
            for f in _resolve(given, open_file):
                key = os.path.normpath(_absolute(f.path))
                if key in files:
                    raise CheckpointError(f"{f.path}: given more than once (via {given})")
                files[key] = f
                given_as[id(f)] = given
        tensors: dict = {}
        for f in files.values():
            for t in f.tensors:
                other = tensors.setdefault(t.name, t)
                if other is not t:
                    raise CheckpointError(f"tensor '{t.name}' is in both {other.file.path} and {f.path}")
        return Checkpoint(list(files.values()), {name: tensors[name] for name in sorted(tensors)},
                          [_display(p) for p in paths], given_as)
    except BaseException:
        for f in opened:
            f.close()
        raise


def _resolve(p: str, open_file) -> list:
    if os.path.isdir(p):
        return _directory(p, open_file)
    if not os.path.exists(p):
        raise CheckpointError(f"{p}: no such file or directory")
    name = os.path.basename(p)
    if name.endswith(INDEX_SUFFIX):
        return _open_index(p, open_file)
    if name.endswith(FILE_SUFFIX):
        return [open_file(p)]
    raise CheckpointError(f"{p}: not a {FILE_SUFFIX} file, a *{INDEX_SUFFIX} or a directory")


def _directory(d: str, open_file) -> list:
    try:
        names = sorted(os.listdir(d), key=os.fsencode)
    except OSError as e:
        raise CheckpointError(f"{d}: cannot list: {e}") from None
    indexes = [n for n in names if n.endswith(INDEX_SUFFIX) and os.path.isfile(os.path.join(d, n))]
    shards = [n for n in names if n.endswith(FILE_SUFFIX) and os.path.isfile(os.path.join(d, n))]
    if len(indexes) > 1:
        raise CheckpointError(f"{d}: holds {len(indexes)} index files [{', '.join(indexes)}]: name the one to use")
    if indexes:
        return _open_index(_display(os.path.join(d, indexes[0])), open_file)
    if not shards:
        raise CheckpointError(f"{d}: holds no *{FILE_SUFFIX} file and no *{INDEX_SUFFIX}")
    return [open_file(_display(os.path.join(d, n))) for n in shards]


def _open_index(index: str, open_file) -> list:
    """The shards of a ``*.safetensors.index.json``, by name, once the weight_map and the shards agree."""
    weight_map = _weight_map(index, _read_index(index))
    directory = os.path.dirname(_absolute(index))
    shards: dict = {}
    for shard_name in sorted(set(weight_map.values())):
        shard = os.path.join(directory, shard_name)
        if not os.path.isfile(shard):
            tensor = next(t for t, s in weight_map.items() if s == shard_name)
            raise CheckpointError(f"{index}: weight_map names shard '{shard_name}' (for tensor '{tensor}'), but "
                                  f"{shard} does not exist")
        shards[shard_name] = open_file(shard)
    held = {shard_name: {t.name for t in shard.tensors} for shard_name, shard in shards.items()}
    for tensor, shard_name in weight_map.items():
        if tensor not in held[shard_name]:
            raise CheckpointError(f"{index}: weight_map puts tensor '{tensor}' in '{shard_name}', but that shard has"
                                  " no such tensor")
    for shard_name, shard in shards.items():
        for t in shard.tensors:
            mapped = weight_map.get(t.name)
            if mapped is None:
                raise CheckpointError(f"{index}: shard '{shard_name}' holds tensor '{t.name}', which weight_map "
                                      "does not list")
            if mapped != shard_name:
                raise CheckpointError(f"{index}: shard '{shard_name}' holds tensor '{t.name}', which weight_map "
                                      f"puts in '{mapped}'")
    return list(shards.values())


def _read_index(index: str, what: str = "index") -> bytes:
    """The bytes of a JSON file beside the checkpoint (an index, a config.json), at most 100 MiB."""
    try:
        with os.fdopen(os.open(index, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_INDEX_BYTES:
                raise CheckpointError(f"{index}: {what} is {size} bytes, over the limit of {MAX_INDEX_BYTES}")
            return f.read()
    except FileNotFoundError:
        raise CheckpointError(f"{index}: no such file") from None
    except OSError as e:
        raise CheckpointError(f"{index}: cannot read: {e}") from None


def _weight_map(index: str, data: bytes) -> dict:
    """tensor name -> shard file name, sorted by tensor name."""
    try:
        root = parse_json(data)
    except JsonError as e:
        raise CheckpointError(f"{index}: index JSON {e}") from None
    if type(root) is not dict:
        raise CheckpointError(f"{index}: index is not a JSON object")
    entries = root.get("weight_map")
    if type(entries) is not dict:
        raise CheckpointError(f"{index}: index has no weight_map object")
    for tensor, shard in entries.items():
        if type(shard) is not str:
            raise CheckpointError(f"{index}: weight_map entry for tensor '{tensor}' is not a file name but "
                                  f"{_kind(shard)}")
        if not shard or "/" in shard or shard in (".", "..") or "\0" in shard:
            raise CheckpointError(f"{index}: weight_map entry for tensor '{tensor}' is '{shard}', not a file name in "
                                  "the index's directory")
    return {tensor: entries[tensor] for tensor in sorted(entries)}
