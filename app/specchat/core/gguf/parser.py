"""The byte-level GGUF header reader: a sequential little-endian parser over a buffer (a memory
map, or the first bytes of a file) that turns anything wrong into a `GGUFError` for users, or
`NeedMoreData` when the header goes on past the bytes given. :mod:`specchat.core.gguf.header`
assembles its pieces into a `GGUFInfo` and checks them against each other."""

from __future__ import annotations

import mmap
import struct
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES

from specchat.core.gguf.info import GGUFError, NeedMoreData

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)

# Sanity limits: a corrupt header must fail fast instead of allocating gigabytes.
MAX_TENSORS = 1_000_000
MAX_KV = 1_000_000
MAX_STRING_LEN = 1 << 26  # 64 MiB; real strings (chat templates) are kilobytes
MAX_ARRAY_LEN = 1 << 24
MAX_ARRAY_DEPTH = 8
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_TENSOR_BYTES = 1 << 50  # 1 PiB
# Numeric arrays longer than this are kept as numpy arrays instead of Python lists.
LIST_LIMIT = 1024

# GGUF value types (gguf.GGUFValueType): struct format for scalars, numpy dtype for arrays.
_T_STRING = 8
_T_ARRAY = 9
_T_BOOL = 7
_SCALAR_FORMATS: dict[int, str] = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<B",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_SCALARS = {t: struct.Struct(f) for t, f in _SCALAR_FORMATS.items()}
_DTYPES = {t: np.dtype(f.replace("B", "u1").replace("b", "i1")) for t, f in _SCALAR_FORMATS.items()}
QUANT_SIZES: dict[int, tuple[int, int]] = {int(k): v for k, v in GGML_QUANT_SIZES.items()}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

Buffer = bytes | bytearray | memoryview | mmap.mmap


def describe_start(head: bytes) -> str:
    """Why the first bytes are not GGUF, in words."""
    text = f"it starts with {head[:4]!r}"
    if head[:4] in (b"ggml", b"ggmf", b"ggjt", b"lmgg", b"fmgg", b"tjgg"):
        return text + "; this is the old GGML format, convert it or download a GGUF version"
    if head.startswith(b"PK"):
        return text + "; it looks like a zip archive"
    if head.lstrip()[:1] == b"<":
        return text + "; it looks like a web page, the download probably failed"
    if head.lstrip()[:1] in (b"{", b"["):
        return text + "; it looks like a JSON file"
    if head.startswith(b"vers"):
        return text + "; it may be a Git LFS pointer instead of the model itself"
    return text


class HeaderReader:
    """Sequential little-endian reader over `buf[:end]` that raises the right errors."""

    def __init__(self, buf: Buffer, name: str, file_size: int | None) -> None:
        self.buf = buf
        self.end = len(buf)
        self.pos = 0
        self.name = name
        self.file_size = file_size

    # -- errors --------------------------------------------------------------------------------
    def short(self, needed: int) -> Exception:
        """Error for a header that goes on past the bytes available."""
        size = self.file_size
        if size is not None and (self.end >= size or needed > size):
            return GGUFError(
                f"{self.name} is truncated: its header needs at least {needed:,} bytes "
                f"but the file has only {size:,} bytes (download incomplete?)"
            )
        return NeedMoreData(needed)

    def corrupt(self, what: str, offset: int) -> GGUFError:
        return GGUFError(f"{self.name}: header is corrupt: {what} at offset {offset:,}")

    def check_length(self, n: int, limit: int, what: str, offset: int) -> None:
        """Refuse a length that no valid file can have (bigger than a limit or the file)."""
        if n > limit or (self.file_size is not None and n > self.file_size):
            raise self.corrupt(f"{what} {n:,}", offset)

    # -- primitives ----------------------------------------------------------------------------
    def take(self, n: int) -> int:
        """Reserve n bytes at the current position and return that position."""
        p = self.pos
        q = p + n
        if q > self.end:
            raise self.short(q)
        self.pos = q
        return p

    def u32(self) -> int:
        return int(_U32.unpack_from(self.buf, self.take(4))[0])

    def u64(self) -> int:
        return int(_U64.unpack_from(self.buf, self.take(8))[0])

    def string(self) -> str:
        start = self.pos
        n = self.u64()
        if self.pos + n > self.end:
            self.check_length(n, MAX_STRING_LEN, "string length", start)
        p = self.take(n)
        return str(self.buf[p : p + n], "utf-8", "backslashreplace")

    # -- values --------------------------------------------------------------------------------
    def value(self, vtype: int, key: str, depth: int = 0) -> Any:
        scalar = _SCALARS.get(vtype)
        if scalar is not None:
            v = scalar.unpack_from(self.buf, self.take(scalar.size))[0]
            return bool(v) if vtype == _T_BOOL else v
        if vtype == _T_STRING:
            return self.string()
        if vtype == _T_ARRAY:
            return self.array(key, depth)
        raise self.corrupt(f"unknown value type {vtype} for key {key!r}", self.pos - 4)

    def array(self, key: str, depth: int) -> Any:
        start = self.pos
        if depth >= MAX_ARRAY_DEPTH:
            raise self.corrupt(f"arrays nested too deeply in key {key!r}", start)
        item_type = self.u32()
        count = self.u64()
        self.check_length(count, MAX_ARRAY_LEN, f"array length of key {key!r} is", start)
        if item_type == _T_STRING:
            return self.string_array(count)
        dtype = _DTYPES.get(item_type)
        if dtype is not None:
            return self.numeric_array(dtype, count, item_type == _T_BOOL)
        if item_type == _T_ARRAY:
            return [self.array(key, depth + 1) for _ in range(count)]
        raise self.corrupt(f"unknown array item type {item_type} for key {key!r}", start)

    def numeric_array(self, dtype: np.dtype, count: int, is_bool: bool) -> Any:
        p = self.take(count * dtype.itemsize)
        # copy() so no view into the (possibly memory-mapped) buffer outlives the parse
        arr = np.frombuffer(self.buf, dtype=dtype, count=count, offset=p).copy()
        if is_bool:
            arr = arr != 0
        return arr.tolist() if count <= LIST_LIMIT else arr

    def string_array(self, count: int) -> list[str]:
        # Hot loop (150k+ tokens and merges): locals only, no per-item method calls.
        buf, end, pos = self.buf, self.end, self.pos
        unpack = _U64.unpack_from
        out: list[str] = []
        append = out.append
        for _ in range(count):
            q = pos + 8
            if q > end:
                self.pos = pos
                raise self.short(q)
            n = unpack(buf, pos)[0]
            pos = q + n
            if pos > end:
                self.check_length(n, MAX_STRING_LEN, "string length", q - 8)
                self.pos = q
                raise self.short(pos)
            append(str(buf[q:pos], "utf-8", "backslashreplace"))
        self.pos = pos
        return out

    # -- sections ------------------------------------------------------------------------------
    def preamble(self) -> tuple[int, int, int]:
        """Magic, version and the two counts."""
        if self.end < 4:
            raise self.short(4)
        head = bytes(self.buf[:16])
        if head[:4] != GGUF_MAGIC:
            raise GGUFError(f"{self.name} is not a GGUF file ({describe_start(head)})")
        self.pos = 4
        version = self.u32()
        if version == 1:
            raise GGUFError(
                f"{self.name} uses GGUF version 1, which is too old to load; "
                "download a newer conversion of this model"
            )
        if version not in SUPPORTED_VERSIONS:
            swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
            if swapped in SUPPORTED_VERSIONS:
                raise GGUFError(f"{self.name} is a big-endian GGUF file, which cannot be loaded")
            raise GGUFError(f"{self.name} uses unsupported GGUF version {version}")
        n_tensors = self.u64()
        if n_tensors > MAX_TENSORS:
            raise self.corrupt(f"tensor count {n_tensors:,}", 8)
        n_kv = self.u64()
        if n_kv > MAX_KV:
            raise self.corrupt(f"metadata count {n_kv:,}", 16)
        return version, n_tensors, n_kv

    def metadata(self, n_kv: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for _ in range(n_kv):
            start = self.pos
            key = self.string()
            value = self.value(self.u32(), key)
            if key in out:
                raise self.corrupt(f"duplicate key {key!r}", start)
            out[key] = value
        return out

    def tensor_header(self) -> tuple[str, tuple[int, ...], int, int, int]:
        """One tensor info: name, shape, type, offset, and where it was found."""
        start = self.pos
        name = self.string()
        n_dims = self.u32()
        if n_dims > MAX_DIMS:
            raise self.corrupt(f"tensor {name!r} has {n_dims} dimensions", start)
        shape = struct.unpack_from(f"<{n_dims}Q", self.buf, self.take(8 * n_dims))
        ggml_type = self.u32()
        offset = self.u64()
        return name, tuple(int(d) for d in shape), ggml_type, offset, start

    def tensors(self, n_tensors: int) -> list[tuple[str, tuple[int, ...], int, int, int]]:
        return [self.tensor_header() for _ in range(n_tensors)]
