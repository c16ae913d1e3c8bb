"""Our own GGUF header reader and validator (no llama.cpp).

llama.cpp may abort the whole process on some corrupt files, so every model file is checked
here first: the header is parsed completely, every tensor's data must lie inside the file, and
the hyperparameters llama.cpp asserts on must be possible (:mod:`specchat.core.gguf.hparams`).
Errors are `GGUFError`s whose message an end user can act on.

`parse_gguf_prefix` also works on the first bytes of a file only (for headers fetched with
HTTP range requests): it raises `NeedMoreData` when the header goes on past the bytes given.
The values it returns (`GGUFInfo`, `TensorInfo`) are defined in :mod:`specchat.core.gguf.info`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import mmap
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from specchat.core.gguf.hparams import check_hparams
from specchat.core.gguf.info import (
    DEFAULT_ALIGNMENT,
    TOKEN_BYTE,
    TOKEN_CONTROL,
    TOKEN_NORMAL,
    TOKEN_UNKNOWN,
    TOKEN_UNUSED,
    TOKEN_USER_DEFINED,
    GGUFError,
    GGUFInfo,
    NeedMoreData,
    TensorInfo,
    as_int,
)
from specchat.core.gguf.parser import MAX_TENSOR_BYTES, QUANT_SIZES, Buffer, HeaderReader

__all__ = [
    "TOKEN_BYTE",
    "TOKEN_CONTROL",
    "TOKEN_NORMAL",
    "TOKEN_UNKNOWN",
    "TOKEN_UNUSED",
    "TOKEN_USER_DEFINED",
    "GGUFError",
    "GGUFInfo",
    "NeedMoreData",
    "TensorInfo",
    "parse_gguf_prefix",
    "read_gguf_info",
]


def _alignment(metadata: dict[str, Any], parser: HeaderReader) -> int:
    value = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    align = as_int(value)
    if align is None or align <= 0 or align & (align - 1):
        raise parser.corrupt(f"general.alignment is {value!r}, not a power of two", 0)
    return align


def _tensor_info(
    raw: tuple[str, tuple[int, ...], int, int, int], alignment: int, parser: HeaderReader
) -> TensorInfo:
    name, shape, ggml_type, offset, start = raw
    sizes = QUANT_SIZES.get(ggml_type)
    if sizes is None:
        raise GGUFError(
            f"{parser.name}: tensor {name!r} uses unknown data type {ggml_type}; the file "
            "may be newer than this version of SpecChat, or corrupt"
        )
    block_size, type_size = sizes
    if shape and shape[0] % block_size:
        raise parser.corrupt(
            f"tensor {name!r} has row length {shape[0]}, not a multiple of {block_size}", start
        )
    if offset % alignment:
        raise parser.corrupt(f"tensor {name!r} data offset {offset} is not aligned", start)
    nbytes = math.prod(shape) // block_size * type_size
    if nbytes > MAX_TENSOR_BYTES or offset > MAX_TENSOR_BYTES:
        raise parser.corrupt(f"tensor {name!r} claims {nbytes:,} bytes at {offset:,}", start)
    return TensorInfo(name, ggml_type, shape, offset, nbytes)


def _check_tensor_bounds(info: GGUFInfo) -> None:
    """Every tensor's data must lie inside the file (else: truncated download)."""
    size = info.file_size
    if size is None or info.data_end <= size:
        return
    last = max(info.tensors, key=lambda t: t.offset + t.nbytes)
    raise GGUFError(
        f"{info.name} is truncated: tensor {last.name!r} ends at byte {info.data_end:,} "
        f"but the file has only {size:,} bytes (download incomplete?)"
    )


def parse_gguf_prefix(data: Buffer, *, name: str, file_size: int | None) -> GGUFInfo:
    """Parse a GGUF header from `data`, the whole file or only its first bytes.

    Raises NeedMoreData when `data` ends inside the header and more of the file may exist,
    and GGUFError for anything wrong with the file (with `file_size`: also truncation).
    """
    if isinstance(data, memoryview) and (data.format != "B" or data.ndim != 1):
        data = data.cast("B")
    parser = HeaderReader(data, name, file_size)
    version, n_tensors, n_kv = parser.preamble()
    metadata = parser.metadata(n_kv)
    raw_tensors = parser.tensors(n_tensors)
    alignment = _alignment(metadata, parser)
    header_size = -(-parser.pos // alignment) * alignment
    tensors = [_tensor_info(raw, alignment, parser) for raw in raw_tensors]
    _check_duplicate_names(tensors, parser)
    data_end = max((header_size + t.offset + t.nbytes for t in tensors), default=header_size)
    info = GGUFInfo(
        name=name,
        version=version,
        n_tensors=n_tensors,
        n_kv=n_kv,
        metadata=metadata,
        header_size=header_size,
        data_end=data_end,
        file_size=file_size,
        tensors=tensors,
        alignment=alignment,
    )
    _check_tensor_bounds(info)
    check_hparams(info)  # values llama.cpp would abort the process on
    return info


def _check_duplicate_names(tensors: list[TensorInfo], parser: HeaderReader) -> None:
    seen: set[str] = set()
    for t in tensors:
        if t.name in seen:
            raise GGUFError(f"{parser.name}: header is corrupt: tensor {t.name!r} appears twice")
        seen.add(t.name)


# ---------------------------------------------------------------------------------------------
# Local files

_FIRST_CHUNK = 1 << 23  # 8 MiB covers most headers (a 150k-token vocabulary is ~6 MB)


def read_gguf_info(path: str | os.PathLike[str]) -> GGUFInfo:
    """Validate a local model file and return its header; GGUFError for any problem."""
    p = Path(path)
    name = p.name or str(p)
    st = _stat(p, name)
    if stat.S_ISDIR(st.st_mode):
        raise GGUFError(f"{name} is a directory, not a model file")
    if not stat.S_ISREG(st.st_mode):
        raise GGUFError(f"{name} is not a regular file")
    if st.st_size == 0:
        raise GGUFError(f"{name} is empty (0 bytes; download incomplete?)")
    key = _memo_key(st)
    if key is not None:
        with _memo_lock:
            known = _memo.get(key)
            if known is not None:
                _memo.move_to_end(key)
                return dataclasses.replace(known, name=name)
    try:
        with open(p, "rb") as f:
            info = _parse_open_file(f, name)
    except PermissionError:
        raise GGUFError(f"{name} cannot be read: permission denied") from None
    except OSError as e:
        raise GGUFError(f"{name} cannot be read: {e.strerror or e}") from None
    if key is not None:
        with _memo_lock:
            _memo[key] = info
            while len(_memo) > _MEMO_SIZE:
                _memo.popitem(last=False)
    return dataclasses.replace(info, name=name)


# A model's header is read at every load, pair check and model list: for a 150k-token
# vocabulary that is ~0.4 s of Python each time. Headers of large files are kept by the file's
# identity (device, inode, size, modification and change times): a file replaced or written
# to is read again. Small files (hand-made or partial) are always read.
_MEMO_MIN_BYTES = 16 << 20
_MEMO_SIZE = 8
_memo: OrderedDict[tuple[object, ...], GGUFInfo] = OrderedDict()
_memo_lock = threading.Lock()


def _memo_key(st: os.stat_result) -> tuple[object, ...] | None:
    if st.st_size < _MEMO_MIN_BYTES:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _stat(p: Path, name: str) -> os.stat_result:
    try:
        return p.stat()
    except FileNotFoundError:
        raise GGUFError(f"{name} does not exist ({p})") from None
    except PermissionError:
        raise GGUFError(f"{name} cannot be accessed: permission denied") from None
    except OSError as e:
        raise GGUFError(f"{name} cannot be accessed: {e.strerror or e}") from None


def _parse_open_file(f: IO[bytes], name: str) -> GGUFInfo:
    """Parse through a read-only memory map; read growing chunks where mapping fails."""
    try:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return _parse_by_reading(f, name)
    try:
        return parse_gguf_prefix(mm, name=name, file_size=len(mm))
    finally:
        _close_quietly(mm.close)


def _close_quietly(close: Callable[[], None]) -> None:
    # BufferError: a view still refers to the map (only while an error unwinds); GC closes it
    with contextlib.suppress(BufferError):
        close()


def _parse_by_reading(f: IO[bytes], name: str) -> GGUFInfo:
    size = os.fstat(f.fileno()).st_size
    data = bytearray()
    want = min(size, _FIRST_CHUNK)
    while True:
        chunk = f.read(want - len(data))
        data += chunk
        if len(data) < want:  # the file shrank while we read it
            size = len(data)
        try:
            return parse_gguf_prefix(data, name=name, file_size=size)
        except NeedMoreData as e:
            want = min(size, max(e.needed, 2 * len(data)))
