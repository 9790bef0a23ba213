"""What a table and the content check need of the imported set they belong to, without importing it."""

from __future__ import annotations

from typing import Protocol


class TablesOwner(Protocol):
    """The part of :class:`ImportedTables` its tables and the content check use: ``tables`` (name -> Table),
    ``_check_open()`` (raises once the set is closed) and ``close()``."""

    tables: dict

    def _check_open(self) -> None: ...

    def close(self) -> None: ...
