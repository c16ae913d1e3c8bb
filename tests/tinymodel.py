"""A tiny qwen2 GGUF that llama.cpp really loads and runs (a few hundred KB, random weights).

`write_loadable_gguf(path, **overrides)` writes it; an override replaces a metadata value (None
removes the key), so tests can build files with absurd hyperparameters. The tensors keep the
shapes of the valid model unless `consistent=True`, which sizes them from the overridden values
(the harder case: the file is self-consistent, only the values are impossible).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np

ARCH = "qwen2"
N_EMBD, N_HEAD, N_HEAD_KV, N_FF, N_LAYERS = 16, 4, 2, 32, 2


def tiny_vocab() -> tuple[list[str], list[int]]:
    tokens = [f"<0x{i:02X}>" for i in range(256)]
    types = [int(gguf.TokenType.BYTE)] * 256
    words = ["Ġ", "a", "b", "c"] + [f"w{i}" for i in range(40)]
    tokens += words
    types += [int(gguf.TokenType.NORMAL)] * len(words)
    tokens += ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types += [int(gguf.TokenType.CONTROL)] * 3
    return tokens, types


def _metadata(tokens: list[str], types: list[int]) -> dict[str, Any]:
    return {
        "general.name": "Tiny Loadable",
        f"{ARCH}.context_length": 256,
        f"{ARCH}.block_count": N_LAYERS,
        f"{ARCH}.embedding_length": N_EMBD,
        f"{ARCH}.feed_forward_length": N_FF,
        f"{ARCH}.attention.head_count": N_HEAD,
        f"{ARCH}.attention.head_count_kv": N_HEAD_KV,
        f"{ARCH}.rope.freq_base": 10000.0,
        f"{ARCH}.attention.layer_norm_rms_epsilon": 1e-6,
        "general.file_type": int(gguf.LlamaFileType.ALL_F32),
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": ["Ġ a"],
        "tokenizer.ggml.bos_token_id": len(tokens) - 3,
        "tokenizer.ggml.eos_token_id": len(tokens) - 1,
        "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": (
            "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
            "{% endfor %}<|im_start|>assistant\n"
        ),
    }


def _add(w: gguf.GGUFWriter, key: str, value: Any) -> None:
    if isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value) if value >= 0 else w.add_int32(key, value)
    elif isinstance(value, list):
        w.add_array(key, value)
    else:  # pragma: no cover - test helper
        raise TypeError(f"{key}: {value!r}")


def _first(value: Any, default: int) -> int:
    if isinstance(value, list):
        value = value[0] if value else default
    return int(value) if isinstance(value, int) and value > 0 else default


def write_loadable_gguf(
    path: Path,
    *,
    consistent: bool = False,
    extra_vocab_rows: int = 0,
    **overrides: Any,
) -> Path:
    """Write the tiny model; keyword names use "__" for "." (``qwen2__block_count=0``)."""
    tokens, types = tiny_vocab()
    md = _metadata(tokens, types)
    for name, value in overrides.items():
        key = name.replace("__", ".")
        if value is None:
            md.pop(key, None)
        else:
            md[key] = value
    n_embd, n_head, n_kv, n_layers = N_EMBD, N_HEAD, N_HEAD_KV, N_LAYERS
    if consistent:
        n_embd = _first(md.get(f"{ARCH}.embedding_length"), N_EMBD)
        n_head = _first(md.get(f"{ARCH}.attention.head_count"), N_HEAD)
        n_kv = _first(md.get(f"{ARCH}.attention.head_count_kv"), N_HEAD_KV)
        n_layers = min(_first(md.get(f"{ARCH}.block_count"), N_LAYERS), 4)
    w = gguf.GGUFWriter(str(path), ARCH)
    for key, value in md.items():
        _add(w, key, value)
    rng = np.random.default_rng(0)
    head = max(1, n_embd // n_head)

    def tensor(name: str, *shape: int) -> None:  # shape in ggml order (innermost first)
        w.add_tensor(name, (rng.random(shape[::-1], np.float32) - 0.5) * 0.1)

    tensor("token_embd.weight", n_embd, len(tokens) + extra_vocab_rows)
    tensor("output_norm.weight", n_embd)
    for i in range(n_layers):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", n_embd)
        tensor(p + "attn_q.weight", n_embd, n_embd)
        tensor(p + "attn_q.bias", n_embd)
        tensor(p + "attn_k.weight", n_embd, head * n_kv)
        tensor(p + "attn_k.bias", head * n_kv)
        tensor(p + "attn_v.weight", n_embd, head * n_kv)
        tensor(p + "attn_v.bias", head * n_kv)
        tensor(p + "attn_output.weight", n_embd, n_embd)
        tensor(p + "ffn_norm.weight", n_embd)
        tensor(p + "ffn_gate.weight", n_embd, N_FF)
        tensor(p + "ffn_up.weight", n_embd, N_FF)
        tensor(p + "ffn_down.weight", N_FF, n_embd)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
