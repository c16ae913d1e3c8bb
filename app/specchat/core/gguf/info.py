"""What a GGUF header says, as values: :class:`GGUFInfo` (metadata, architecture, tokenizer,
tensors) and :class:`TensorInfo`, plus the two errors of the reader in
:mod:`specchat.core.gguf.header`."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, LlamaFileType

__all__ = [
    "DEFAULT_ALIGNMENT",
    "GGUFError",
    "GGUFInfo",
    "NeedMoreData",
    "TensorInfo",
    "as_int",
]

DEFAULT_ALIGNMENT = 32

# GGUF token types (gguf.TokenType): ids of these kinds are not ordinary text tokens.
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = range(
    1, 7
)


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
    def display_name(self) -> str | None:
        """`general.name` as a person reads it: without the packaging and quantisation words
        an uploader left at its end ("Qwen2.5 Coder 0.5B Instruct AWQ" for a Q4_K_M GGUF,
        "... GGUF"), which the file's own format and type contradict or repeat. None when
        nothing is left (the caller shows the file name)."""
        words = (self.model_name or "").split()
        while words and _PACKAGING.fullmatch(words[-1].strip("()[]-_")):
            words.pop()
        return " ".join(words) or None

    @property
    def quantization(self) -> str | None:
        """A label like "Q4_K_M" from general.file_type, or None when absent or unknown."""
        ftype = as_int(self.metadata.get("general.file_type"))
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
        return as_int(self.metadata.get("split.count")) or 1

    # -- architecture ----------------------------------------------------------
    def arch_value(self, suffix: str) -> Any:
        """`{architecture}.{suffix}` from the metadata, or None."""
        arch = self.architecture
        return None if arch is None else self.metadata.get(f"{arch}.{suffix}")

    @property
    def context_length(self) -> int | None:
        return as_int(self.arch_value("context_length"))

    @property
    def n_layers(self) -> int | None:
        return as_int(self.arch_value("block_count"))

    @property
    def n_embd(self) -> int | None:
        return as_int(self.arch_value("embedding_length"))

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
        return as_int(self.arch_value("attention.key_length"))

    @property
    def value_length(self) -> int | None:
        return as_int(self.arch_value("attention.value_length"))

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
        return as_int(self.metadata.get("tokenizer.ggml.bos_token_id"))

    @property
    def eos_id(self) -> int | None:
        return as_int(self.metadata.get("tokenizer.ggml.eos_token_id"))

    @property
    def add_bos(self) -> bool | None:
        value = self.metadata.get("tokenizer.ggml.add_bos_token")
        return bool(value) if isinstance(value, (bool, int)) else None

    @property
    def chat_template(self) -> str | None:
        return _as_str(self.metadata.get("tokenizer.chat_template"))


# a word naming a file format or a quantisation, not the model: GGUF, AWQ, GPTQ, EXL2, MLX, the
# bit widths, and llama.cpp's types (Q4_K_M, IQ3_XXS, Q8_0, F16, BF16, ...)
_PACKAGING = re.compile(
    r"(?i)gguf|ggml|awq|gptq|exl2|mlx|bnb|int[48]|[0-9]+-?bits?|fp(16|32|8)|b?f(16|32)"
    r"|i?q[0-9]+(_[0-9a-z]+)*"
)


def _as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def as_int(value: Any) -> int | None:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    return None


def _as_count(value: Any) -> int | None:
    """An int, or the largest entry of a per-layer list of ints."""
    if isinstance(value, (list, np.ndarray)):
        return int(max(value)) if len(value) else None
    return as_int(value)


def _per_layer(value: Any, n_layers: int) -> list[int] | None:
    if isinstance(value, (list, np.ndarray)):
        return [int(v) for v in value[:n_layers]] if len(value) else None
    count = as_int(value)
    return None if count is None else [count] * n_layers
