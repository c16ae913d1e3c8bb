"""File names of models split into several files (``name-00001-of-00003.gguf`` …), the way
llama.cpp's ``gguf-split`` writes them: such a model is one model, named by its first part."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["model_part_names", "split_name", "split_part"]

_SPLIT_RE = re.compile(r"^(?P<base>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


def split_part(file_name: str) -> tuple[str, int, int] | None:
    """``(base, index, count)`` for a split file like ``m-00002-of-00003.gguf``, else None."""
    m = _SPLIT_RE.match(Path(file_name.replace("\\", "/")).name)
    if m is None:
        return None
    index, count = int(m["index"]), int(m["count"])
    if not 1 <= index <= count:
        return None
    return m["base"], index, count


def split_name(base: str, index: int, count: int) -> str:
    """The file name of part ``index`` of ``count``."""
    return f"{base}-{index:05d}-of-{count:05d}.gguf"


def model_part_names(file_name: str) -> list[str]:
    """All file names of the model ``file_name`` belongs to (itself when it is not split)."""
    parts = split_part(file_name)
    if parts is None:
        return [file_name]
    base, _, count = parts
    return [split_name(base, i, count) for i in range(1, count + 1)]
