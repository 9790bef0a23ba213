"""Which tensors are served (docs/checkpoints.md, "Which tensors are served"): ``--tables`` globs when
given, else the Engram tables the model's config.json names (``engram_layer_ids``, under any prefix, checked against
``engram_num_embeddings`` and ``engram_head_dim``), else every tensor.
"""

from __future__ import annotations

import decimal
import os
import re
from dataclasses import dataclass
from typing import Optional, Sequence

from .base import CheckpointError, INDEX_SUFFIX, _shape_text, counted, names_in_short
from .model import Checkpoint, _read_index
from .safetensors import TensorInfo, _absolute, _name
from .strict_json import JsonError, _kind, _quoted, parse_json


# ---------------------------------------------------------------------------------------------------------------
# the selection: which tensors are served

CONFIG_FILE = "config.json"
_ENGRAM_TENSOR = re.compile(r"(?:.*\.)?layers\.([0-9]+)\.engram\.embed\.(weight|scale)", re.DOTALL)
_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
#: Values in an E8M0 scale row per scale (docs/checkpoints.md: one E8M0 scale per 32 values).
_VALUES_PER_SCALE = 32


def format_bytes(n: int) -> str:
    """A byte count as the Java's ``Bytes.format`` writes it: ``100 B``, ``512.0 KiB``, ``1.2 GiB`` (one decimal,
    half up, in the largest binary unit that keeps the value at least 1)."""
    v = float(abs(n))
    if v < 1024:
        return f"{n} B"
    u = -1
    while v >= 1024 and u < len(_UNITS) - 1:
        v /= 1024
        u += 1
    # Java's %.1f rounds the shortest decimal form of the double half up; repr() is that form
    shown = decimal.Decimal(repr(v)).quantize(decimal.Decimal("0.1"), decimal.ROUND_HALF_UP)
    return f"{'-' if n < 0 else ''}{shown} {_UNITS[u]}"


@dataclass(frozen=True)
class Selection:
    """The tensors a checkpoint serves, chosen by the one rule of docs/checkpoints.md, "Which tensors are
    served" (the Java's ``Selection``): ``rule`` is ``"tables"`` (globs given), ``"config"`` (config.json's
    engram_layer_ids) or ``"all"``; ``tensors`` the :class:`TensorInfo` chosen, by name; ``patterns`` the
    fingerprint's patterns (the globs, the chosen tensors' exact names, or ``*``); ``description`` the one line
    ``serve`` logs, STATUS shows as ``selection`` and ``inspect`` prints after ``selection: ``."""

    rule: str
    tensors: tuple
    patterns: tuple
    description: str

    @property
    def warning(self) -> Optional[str]:
        """For the rule ``all``, the one line to show (a warning): every tensor is served, and how to choose."""
        if self.rule != "all":
            return None
        return (f"selecting every tensor of the checkpoint (no --tables, and no {CONFIG_FILE} naming {_LAYER_IDS}): "
                f"give --tables GLOB,... or the model's directory (its {CONFIG_FILE} names the Engram layers) to "
                "serve only the Engram tables")


_LAYER_IDS = "engram_layer_ids"
_NUM_EMBEDDINGS = "engram_num_embeddings"
_HEAD_DIM = "engram_head_dim"
_TEXT_CONFIG = "text_config"
#: The largest config.json read.
_MAX_CONFIG_BYTES = 16 << 20
#: What every message about a malformed config.json ends with.
_CONFIG_FIX = ": fix the model's config.json, or choose the tables with --tables"


def select_served(checkpoint: Checkpoint, tables: Sequence[str] = ()) -> Selection:
    """The tensors of ``checkpoint`` that ``serve`` serves (docs/checkpoints.md, "Which tensors are served"):
    1. ``tables`` (globs, as ``--tables``) when given; 2. otherwise, when the checkpoint was given as one
    directory or one ``*.safetensors.index.json`` whose directory's config.json names ``engram_layer_ids`` (at
    its top level, or in ``text_config``; the top level wins), exactly ``PREFIXlayers.L.engram.embed.weight``
    and ``.scale`` for each layer id L, PREFIX empty or ending in ``.``, checked against
    ``engram_num_embeddings`` and ``engram_head_dim`` where present; 3. otherwise every tensor. Raises
    :class:`CheckpointError`, one line, for a glob matching nothing and for a config.json that is not JSON,
    has Engram fields of the wrong type, names a tensor missing or twice, or disagrees with a shape."""
    if isinstance(tables, str):
        raise TypeError("tables must be a sequence of globs, not one string")
    if tables:
        chosen = checkpoint.select(list(tables))
        return Selection("tables", tuple(chosen), tuple(tables), f"--tables {','.join(tables)}: {_amount(chosen)}")
    directory = _model_directory(checkpoint)
    config = os.path.join(directory, CONFIG_FILE) if directory is not None else None
    fields = _engram_fields(config) if config is not None and os.path.exists(config) else None
    if fields is not None:
        chosen = _engram_tensors(checkpoint, config, *fields)
        names = [t.name for t in chosen]
        return Selection("config", tuple(chosen), tuple(names),
                         f"{CONFIG_FILE} {_LAYER_IDS} {_shape_text(fields[0])}: {_amount(chosen)} "
                         f"({names_in_short(names)})")
    every = list(checkpoint.tensors.values())
    return Selection("all", tuple(every), ("*",),
                     f"every tensor (no --tables, and no {CONFIG_FILE} naming {_LAYER_IDS}): {_amount(every)}")


def _amount(tensors: Sequence[TensorInfo]) -> str:
    """``4 tensors, 1.2 GiB``."""
    return f"{counted(len(tensors), 'tensor')}, {format_bytes(sum(t.nbytes for t in tensors))}"


def _model_directory(checkpoint: Checkpoint) -> Optional[str]:
    """Where the model's config.json would be: the one directory given, or the one index's directory."""
    if len(checkpoint.given) != 1:
        return None
    given = checkpoint.given[0]
    if os.path.isdir(given):
        return given
    if not os.path.basename(given).endswith(INDEX_SUFFIX):
        return None
    return os.path.dirname(given) or os.path.dirname(_absolute(given))


def _engram_fields(config: str) -> Optional[tuple]:
    """(layer ids, rows per layer or None, head dim or None) from config.json (the Java's ``ModelConfig``), or
    None when it names no engram_layer_ids: read from the top level when it names them, else from
    ``text_config``, all from that one object; every Engram field present is checked."""
    try:
        size = os.path.getsize(config)
    except OSError as e:
        raise CheckpointError(f"{config}: cannot read: {e}") from None
    if size > _MAX_CONFIG_BYTES:
        raise CheckpointError(f"{config}: {size} bytes, over the limit of {_MAX_CONFIG_BYTES} for a {CONFIG_FILE}"
                              f"{_CONFIG_FIX}")
    try:
        root = parse_json(_read_index(config, CONFIG_FILE))
    except JsonError as e:
        raise CheckpointError(f"{config}: not JSON: at byte {e.position}: {e.problem}{_CONFIG_FIX}") from None
    if type(root) is not dict:
        raise CheckpointError(f"{config}: not a JSON object but {_kind(root)}{_CONFIG_FIX}")
    fields = root
    if _LAYER_IDS not in root:
        text = root.get(_TEXT_CONFIG)
        if text is None:
            return None
        if type(text) is not dict:
            raise CheckpointError(f"{config}: {_TEXT_CONFIG} is {_kind(text)}, not an object{_CONFIG_FIX}")
        if _LAYER_IDS not in text:
            return None
        fields = text
    distinct = "distinct non-negative integers"
    ids = _config_integers(config, _LAYER_IDS, fields[_LAYER_IDS], distinct)
    if not ids:
        raise CheckpointError(f"{config}: {_LAYER_IDS} is an empty list: it names no Engram layer{_CONFIG_FIX}")
    for i, v in enumerate(ids):
        if v in ids[:i]:
            raise CheckpointError(f"{config}: {_LAYER_IDS}[{i}] repeats layer {v}, not a list of {distinct}"
                                  f"{_CONFIG_FIX}")
    rows = None
    if _NUM_EMBEDDINGS in fields:
        rows = _config_integers(config, _NUM_EMBEDDINGS, fields[_NUM_EMBEDDINGS], "non-negative integers")
        if len(rows) != len(ids):
            raise CheckpointError(f"{config}: {_NUM_EMBEDDINGS} has {len(rows)} entries but {_LAYER_IDS} has "
                                  f"{len(ids)}: one per layer{_CONFIG_FIX}")
    dim = None
    if _HEAD_DIM in fields:
        dim = fields[_HEAD_DIM]
        if type(dim) is not int or dim <= 0 or dim % _VALUES_PER_SCALE:
            raise CheckpointError(f"{config}: {_HEAD_DIM} is {_config_value(dim)}, not a positive multiple of "
                                  f"{_VALUES_PER_SCALE} (one E8M0 scale per {_VALUES_PER_SCALE} values){_CONFIG_FIX}")
    return ids, rows, dim


def _config_integers(config: str, field: str, value: object, expected: str) -> list:
    if type(value) is not list:
        raise CheckpointError(f"{config}: {field} is {_config_value(value)}, not a list of {expected}{_CONFIG_FIX}")
    for i, v in enumerate(value):
        if type(v) is not int or v < 0:
            raise CheckpointError(f"{config}: {field}[{i}] is {_config_value(v)}, not a list of {expected}"
                                  f"{_CONFIG_FIX}")
    return list(value)


def _config_value(v: object) -> str:
    """A JSON value for a config.json message: an integer as itself, anything else as :func:`_kind` says."""
    return str(v) if type(v) is int else _kind(v)


def _engram_tensors(checkpoint: Checkpoint, config: str, ids: list, rows: Optional[list],
                    dim: Optional[int]) -> list:
    """Each layer's weight and scale, found once under any prefix ending in '.', checked against the config."""
    found: dict = {}
    for name in checkpoint.tensors:
        m = _ENGRAM_TENSOR.fullmatch(name)
        if m:
            found.setdefault((m.group(1), m.group(2)), []).append(name)

    def tensor(layer: int, kind: str) -> TensorInfo:
        base = f"layers.{layer}.engram.embed.{kind}"
        names = found.get((str(layer), kind), [])
        if not names:
            raise CheckpointError(f"{config}: {_LAYER_IDS} names layer {layer} but the checkpoint has no tensor {base}"
                                  f" (under any prefix ending in '.'): serve the files this {CONFIG_FILE} belongs to, "
                                  "or choose the tables with --tables")
        if len(names) > 1:
            raise CheckpointError(f"{config}: layer {layer}: two tensors are named {base} under different prefixes, "
                                  f"{_quoted(names[0])} and {_quoted(names[1])}: choose the tables with --tables")
        return checkpoint.tensors[names[0]]

    chosen = []
    for i, layer in enumerate(ids):
        weight, scale = tensor(layer, "weight"), tensor(layer, "scale")
        if rows is not None:
            for t in (weight, scale):
                if not t.shape or t.shape[0] != rows[i]:
                    has = f"has {t.shape[0]} rows" if t.shape else "has no rows (a scalar)"
                    raise CheckpointError(f"{config}: {_NUM_EMBEDDINGS}[{i}] is {rows[i]} but {t.name} {has}")
        if dim is not None:
            for t, columns, why in ((weight, dim, ""), (scale, dim // _VALUES_PER_SCALE,
                                                         f" (one scale per {_VALUES_PER_SCALE} values)")):
                if len(t.shape) != 2 or t.shape[1] != columns:
                    raise CheckpointError(f"{config}: {_HEAD_DIM} is {dim} but {t.name} is {t.describe()}, not "
                                          f"[rows, {columns}]{why}")
        chosen += [weight, scale]
    return sorted(chosen, key=_name)
