"""Our own GGUF header reader and validator (no llama.cpp).

llama.cpp may abort the whole process on some corrupt files, so every model file is checked
here first: the header is parsed completely and every tensor's data must lie inside the file.
Errors are `GGUFError`s whose message an end user can act on.

`parse_gguf_prefix` also works on the first bytes of a file only (for headers fetched with
HTTP range requests): it raises `NeedMoreData` when the header goes on past the bytes given.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import stat
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType

__all__ = [
    "GGUFError",
    "GGUFInfo",
    "NeedMoreData",
    "TensorInfo",
    "parse_gguf_prefix",
    "read_gguf_info",
]

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

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
_QUANT_SIZES: dict[int, tuple[int, int]] = {int(k): v for k, v in GGML_QUANT_SIZES.items()}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

# GGUF token types (gguf.TokenType): ids of these kinds are not ordinary text tokens.
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = range(
    1, 7
)

Buffer = bytes | bytearray | memoryview | mmap.mmap


class GGUFError(ValueError):
    """A model file is missing, unreadable, not GGUF, corrupt or truncated (message for users)."""


class NeedMoreData(Exception):
    """The bytes given end inside the header; `needed` is the least total prefix length to go on."""

    def __init__(self, needed: int) -> None:
        super().__init__(f"need at least {needed} bytes of the file to parse its header")
        self.needed = needed


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as described by the header. `shape` is in ggml order (innermost first);
    `offset` is relative to the start of the data section (`GGUFInfo.header_size`)."""

    name: str
    ggml_type: int
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def type_name(self) -> str:
        try:
            return GGMLQuantizationType(self.ggml_type).name
        except ValueError:
            return f"type{self.ggml_type}"


@dataclass
class GGUFInfo:
    """Everything the header of a GGUF file says, plus where its tensor data ends."""

    name: str
    version: int
    n_tensors: int
    n_kv: int
    metadata: dict[str, Any]
    header_size: int  # bytes before the (aligned) start of tensor data
    data_end: int  # absolute end of the last tensor's data (header_size without tensors)
    file_size: int | None
    tensors: list[TensorInfo] = field(default_factory=list)
    alignment: int = DEFAULT_ALIGNMENT

    # -- general ---------------------------------------------------------------
    @property
    def architecture(self) -> str | None:
        return _as_str(self.metadata.get("general.architecture"))

    @property
    def model_name(self) -> str | None:
        return _as_str(self.metadata.get("general.name"))

    @property
    def quantization(self) -> str | None:
        """A label like "Q4_K_M" from general.file_type, or None when absent or unknown."""
        ftype = _as_int(self.metadata.get("general.file_type"))
        if ftype is None:
            return None
        try:
            label = LlamaFileType(ftype).name
        except ValueError:
            return None
        if label == "GUESSED":
            return None
        return label.removeprefix("MOSTLY_").removeprefix("ALL_")

    @property
    def n_params(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    @property
    def split_count(self) -> int:
        """Number of files the model is split into (1 for an ordinary single file)."""
        return _as_int(self.metadata.get("split.count")) or 1

    # -- architecture ----------------------------------------------------------
    def arch_value(self, suffix: str) -> Any:
        """`{architecture}.{suffix}` from the metadata, or None."""
        arch = self.architecture
        return None if arch is None else self.metadata.get(f"{arch}.{suffix}")

    @property
    def context_length(self) -> int | None:
        return _as_int(self.arch_value("context_length"))

    @property
    def n_layers(self) -> int | None:
        return _as_int(self.arch_value("block_count"))

    @property
    def n_embd(self) -> int | None:
        return _as_int(self.arch_value("embedding_length"))

    @property
    def n_head(self) -> int | None:
        """Attention heads (the largest value when the count varies per layer)."""
        return _as_count(self.arch_value("attention.head_count"))

    @property
    def n_head_kv(self) -> int | None:
        """KV heads; defaults to n_head like llama.cpp (largest value when per layer)."""
        value = self.arch_value("attention.head_count_kv")
        return self.n_head if value is None else _as_count(value)

    @property
    def key_length(self) -> int | None:
        return _as_int(self.arch_value("attention.key_length"))

    @property
    def value_length(self) -> int | None:
        return _as_int(self.arch_value("attention.value_length"))

    def kv_bytes_per_token(self, type_bytes: float = 2) -> float | None:
        """KV-cache bytes per context token (K and V, all layers), or None if not computable."""
        n_layers = self.n_layers
        heads = self.arch_value("attention.head_count_kv")
        if heads is None:
            heads = self.arch_value("attention.head_count")
        if not n_layers or heads is None:
            return None
        k_len, v_len = self.key_length, self.value_length
        if k_len is None or v_len is None:
            n_embd, n_head = self.n_embd, self.n_head
            if not n_embd or not n_head:
                return None
            head_dim = n_embd // n_head
            k_len = head_dim if k_len is None else k_len
            v_len = head_dim if v_len is None else v_len
        per_layer = _per_layer(heads, n_layers)
        if per_layer is None:
            return None
        return sum(per_layer) * (k_len + v_len) * type_bytes

    # -- tokenizer -------------------------------------------------------------
    @property
    def vocab_type(self) -> str | None:
        return _as_str(self.metadata.get("tokenizer.ggml.model"))

    @property
    def tokens(self) -> list[str]:
        value = self.metadata.get("tokenizer.ggml.tokens")
        return value if isinstance(value, list) else []

    @property
    def token_types(self) -> np.ndarray | list[int] | None:
        value = self.metadata.get("tokenizer.ggml.token_type")
        return value if isinstance(value, (np.ndarray, list)) else None

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    @property
    def bos_id(self) -> int | None:
        return _as_int(self.metadata.get("tokenizer.ggml.bos_token_id"))

    @property
    def eos_id(self) -> int | None:
        return _as_int(self.metadata.get("tokenizer.ggml.eos_token_id"))

    @property
    def add_bos(self) -> bool | None:
        value = self.metadata.get("tokenizer.ggml.add_bos_token")
        return bool(value) if isinstance(value, (bool, int)) else None

    @property
    def chat_template(self) -> str | None:
        return _as_str(self.metadata.get("tokenizer.chat_template"))


def _as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _as_int(value: Any) -> int | None:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    return None


def _as_count(value: Any) -> int | None:
    """An int, or the largest entry of a per-layer list of ints."""
    if isinstance(value, (list, np.ndarray)):
        return int(max(value)) if len(value) else None
    return _as_int(value)


def _per_layer(value: Any, n_layers: int) -> list[int] | None:
    if isinstance(value, (list, np.ndarray)):
        return [int(v) for v in value[:n_layers]] if len(value) else None
    count = _as_int(value)
    return None if count is None else [count] * n_layers


# ---------------------------------------------------------------------------------------------
# Parsing


def _describe_start(head: bytes) -> str:
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


class _Parser:
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
            raise GGUFError(f"{self.name} is not a GGUF file ({_describe_start(head)})")
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


def _alignment(metadata: dict[str, Any], parser: _Parser) -> int:
    value = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    align = _as_int(value)
    if align is None or align <= 0 or align & (align - 1):
        raise parser.corrupt(f"general.alignment is {value!r}, not a power of two", 0)
    return align


def _tensor_info(
    raw: tuple[str, tuple[int, ...], int, int, int], alignment: int, parser: _Parser
) -> TensorInfo:
    name, shape, ggml_type, offset, start = raw
    sizes = _QUANT_SIZES.get(ggml_type)
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
    parser = _Parser(data, name, file_size)
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
    return info


def _check_duplicate_names(tensors: list[TensorInfo], parser: _Parser) -> None:
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
    try:
        with open(p, "rb") as f:
            return _parse_open_file(f, name)
    except PermissionError:
        raise GGUFError(f"{name} cannot be read: permission denied") from None
    except OSError as e:
        raise GGUFError(f"{name} cannot be read: {e.strerror or e}") from None


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
