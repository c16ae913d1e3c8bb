"""Hyperparameters llama.cpp asserts on, checked before llama.cpp sees the file.

A GGUF header can be perfectly well-formed and still describe an impossible model: 0 or 100,000
layers, an embedding width that the heads do not divide, more KV heads than heads, a RoPE width
larger than a head, a vocabulary that does not match the embedding matrix. llama.cpp meets some
of these with a `GGML_ASSERT` that aborts the whole process (exit 134, nothing printed), which in
the window takes the app down. `check_hparams` refuses such a file with a `GGUFError` that names
the key and its value. Values llama.cpp itself reports as an ordinary load error (a missing key,
a wrong tensor shape) are left to it; only what it would crash on, or what no model can have,
is refused here, so that no valid model is turned away.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from specchat.core.gguf.info import GGUFError, GGUFInfo, as_int

__all__ = ["LLAMA_MAX_EXPERTS", "LLAMA_MAX_LAYERS", "check_hparams"]

LLAMA_MAX_LAYERS = 512  # llama-hparams.h
LLAMA_MAX_EXPERTS = 1024
MAX_EMBEDDING = 1 << 20  # far wider than any model (Llama 3.1 405B: 16,384)
ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")

# Architectures whose graph asserts that every layer has attention with key size == value size
# == RoPE width (llama.cpp's src/models/<arch>.cpp: GGML_ASSERT(n_embd_head == n_rot) ...).
# Hybrid architectures (Jamba, LFM2, Qwen3-Next, ...) mark recurrent layers with 0 KV heads and
# are not listed.
PLAIN_ATTENTION = frozenset(
    {
        "llama",
        "llama4",
        "mistral3",
        "qwen2",
        "qwen2moe",
        "qwen2vl",
        "qwen3",
        "qwen3moe",
        "qwen3vl",
        "qwen3vlmoe",
        "granite",
        "olmo",
        "olmo2",
        "olmoe",
        "starcoder2",
        "smollm3",
        "internlm2",
        "exaone",
        "exaone4",
        "deepseek",
        "baichuan",
        "xverse",
        "orion",
        "arctic",
        "dbrx",
        "nemotron",
        "apertus",
        "seed_oss",
    }
)


def _bad(info: GGUFInfo, key: str, value: Any, why: str) -> GGUFError:
    shown = value if not isinstance(value, (list, np.ndarray)) else list(np.asarray(value))
    return GGUFError(
        f"{info.name}: impossible model setting {key} = {shown!r}: {why}; the file was "
        "converted wrongly or is damaged, so it is not loaded"
    )


def _count(info: GGUFInfo, key: str, low: int, high: int, why: str) -> int | None:
    """The integer at `key` (None when absent); GGUFError outside [low, high] or not a whole
    number."""
    if key not in info.metadata:
        return None
    value = info.metadata[key]
    n = as_int(value)
    if n is None:
        raise _bad(info, key, value, "it must be a whole number")
    if not low <= n <= high:
        raise _bad(info, key, value, why)
    return n


def _per_layer(info: GGUFInfo, key: str, n_layers: int) -> list[int] | None:
    """A count that is one value for all layers or a list with one per layer (None: absent)."""
    if key not in info.metadata:
        return None
    value = info.metadata[key]
    if isinstance(value, (list, np.ndarray)):
        items = [as_int(v) for v in list(value)[:n_layers]]
        if not items or any(v is None or v < 0 for v in items):
            raise _bad(info, key, value, "every layer needs a count of 0 or more")
        return [int(v) for v in items if v is not None]
    n = as_int(value)
    if n is None or n < 0:
        raise _bad(info, key, value, "it must be a count of 0 or more")
    return [n] * n_layers


def check_hparams(info: GGUFInfo) -> None:
    """Raise GGUFError for a hyperparameter llama.cpp would abort on (see the module doc).
    Files without an architecture and the later parts of a split model are not checked."""
    arch = info.architecture
    if not arch or (as_int(info.metadata.get("split.no")) or 0) > 0:
        return
    md = info.metadata

    def k(suffix: str) -> str:
        return f"{arch}.{suffix}"

    n_layers = _count(
        info, k("block_count"), 1, LLAMA_MAX_LAYERS, f"a model has 1 to {LLAMA_MAX_LAYERS} layers"
    )
    layers = n_layers or 1
    _count(info, k("context_length"), 1, 2**63, "a model is trained on at least 1 token")
    n_embd = _count(
        info, k("embedding_length"), 1, MAX_EMBEDDING, f"it must be 1 to {MAX_EMBEDDING:,}"
    )
    _count(info, k("vocab_size"), 1, 2**31 - 1, "a model needs at least 1 token")
    _count(
        info,
        k("nextn_predict_layers"),
        0,
        n_layers if n_layers is not None else LLAMA_MAX_LAYERS,
        f"it cannot exceed {k('block_count')} ({n_layers})",
    )
    _check_experts(info, k, layers)
    _check_attention(info, k, layers, n_embd, arch)
    scaling = md.get(k("rope.scaling.type"))
    if scaling is not None and scaling not in ROPE_SCALING_TYPES:
        raise _bad(
            info,
            k("rope.scaling.type"),
            scaling,
            "llama.cpp knows " + ", ".join(ROPE_SCALING_TYPES),
        )
    _check_embeddings(info, n_embd)


def _check_experts(info: GGUFInfo, k: Callable[[str], str], layers: int) -> None:
    n_expert = (
        _count(info, k("expert_count"), 0, LLAMA_MAX_EXPERTS, f"at most {LLAMA_MAX_EXPERTS}") or 0
    )
    used = _per_layer(info, k("expert_used_count"), layers) or [0]
    groups = _count(info, k("expert_group_count"), 0, 2**31, "it must be 0 or more") or 0
    group_used = _count(info, k("expert_group_used_count"), 0, 2**31, "it must be 0 or more") or 0
    used_max = max(used)
    if used_max > n_expert:
        raise _bad(
            info,
            k("expert_used_count"),
            info.metadata[k("expert_used_count")],
            f"more experts used per token than {k('expert_count')} ({n_expert})",
        )
    if n_expert > 0 and used_max == 0:
        raise _bad(info, k("expert_count"), n_expert, "a mixture of experts must use 1 or more")
    if n_expert == 0 and groups:
        raise _bad(info, k("expert_group_count"), groups, "the model has no experts")
    if n_expert > 0 and groups and (groups >= n_expert or n_expert % groups):
        raise _bad(info, k("expert_group_count"), groups, f"it must divide {n_expert} experts")
    if groups > 1 and not 0 < group_used < groups:
        raise _bad(info, k("expert_group_used_count"), group_used, f"it must be 1 to {groups - 1}")


def _check_attention(
    info: GGUFInfo, k: Callable[[str], str], layers: int, n_embd: int | None, arch: str
) -> None:
    heads = _per_layer(info, k("attention.head_count"), layers)
    if heads is None:
        return
    kv_key = k("attention.head_count_kv")
    kv = _per_layer(info, kv_key, layers) or heads
    kv_scalar = not isinstance(info.metadata.get(kv_key), (list, np.ndarray))
    for il, (h, h_kv) in enumerate(zip(heads, kv, strict=False)):
        where = "" if kv_scalar else f" (layer {il})"
        if h == 0:
            continue
        if h_kv == 0 and (kv_scalar or arch in PLAIN_ATTENTION):
            raise _bad(
                info,
                kv_key,
                info.metadata.get(kv_key),
                f"{h} attention heads need at least 1 KV head{where}",
            )
        if h_kv and h % h_kv:
            raise _bad(
                info,
                kv_key,
                info.metadata.get(kv_key),
                f"the {h} attention heads must be a multiple of the KV heads{where}",
            )
    h0 = heads[0]
    if h0 == 0:  # no attention (recurrent models): llama.cpp skips the head sizes
        return
    key_len = _count(info, k("attention.key_length"), 1, MAX_EMBEDDING, "a head needs 1 or more")
    val_len = _count(info, k("attention.value_length"), 1, MAX_EMBEDDING, "a head needs 1 or more")
    if key_len is None or val_len is None:
        if n_embd is None:
            return
        if n_embd % h0:
            raise _bad(
                info,
                k("embedding_length"),
                n_embd,
                f"it is not a multiple of {k('attention.head_count')} ({h0})",
            )
    head_k = key_len if key_len is not None else (n_embd or 0) // h0
    head_v = val_len if val_len is not None else (n_embd or 0) // h0
    rot_key = k("rope.dimension_count")
    n_rot = _count(info, rot_key, 0, MAX_EMBEDDING, "it must be 0 or more")
    if n_rot is not None and n_rot > head_k:
        raise _bad(info, rot_key, n_rot, f"RoPE cannot rotate more than the head size ({head_k})")
    rot = head_k if n_rot is None else n_rot
    if rot % 2:
        what = (
            f"{rot_key} = {n_rot}"
            if n_rot is not None
            else f"the head size {head_k} ({k('embedding_length')} / {k('attention.head_count')})"
        )
        raise _bad(info, k("attention.head_count"), h0, f"{what} is odd; RoPE needs it even")
    if arch in PLAIN_ATTENTION and not head_k == head_v == rot:
        key = rot_key if n_rot is not None and n_rot != head_k else k("attention.key_length")
        raise _bad(
            info,
            key,
            info.metadata.get(key, head_k),
            f"{arch} needs key size, value size and RoPE width equal "
            f"(here {head_k}, {head_v} and {rot})",
        )


def _check_embeddings(info: GGUFInfo, n_embd: int | None) -> None:
    """The token embedding matrix must be n_embd x n_vocab."""
    emb = next((t for t in info.tensors if t.name == "token_embd.weight"), None)
    if emb is None or len(emb.shape) != 2:
        return
    width, rows = emb.shape
    if n_embd is not None and width != n_embd:
        key = f"{info.architecture}.embedding_length"
        raise _bad(info, key, n_embd, f"token_embd.weight is {width} wide")
    n_vocab = info.vocab_size or as_int(info.arch_value("vocab_size"))
    if n_vocab and rows != n_vocab:
        raise GGUFError(
            f"{info.name}: impossible model: the vocabulary has {n_vocab} tokens but "
            f"token_embd.weight has {rows} rows; the file was converted wrongly or is damaged, "
            "so it is not loaded"
        )
