"""Tiny GGUF models that llama.cpp really loads and runs (random weights, the same bytes each run).

`write_loadable_gguf(path, **overrides)` writes a tiny qwen2 (a few hundred KB); an override
replaces a metadata value (None removes the key), so tests can build files with absurd
hyperparameters. The tensors keep the shapes of the valid model unless `consistent=True`, which
sizes them from the overridden values (the harder case: the file is self-consistent, only the
values are impossible).

Hybrid models, whose recurrent state llama.cpp can roll back by a few tokens (`n_rs_seq`):

- `write_qwen35_mtp(path)`: a `qwen35` (Qwen3.5: gated delta-net layers, every 4th layer full
  attention) with one NextN/MTP block after the trunk, as llama.cpp's loader expects it;
- `write_lfm2(path)`: an `lfm2` (short-convolution layers and attention layers);
- `write_qwen35_mtp(path, QWEN35_0_8B)`: the same architecture at the real Qwen3.5-0.8B shape,
  Q8_0, written tensor by tensor in row chunks (about 0.85 GB on disk, little RAM) for cost
  measurements.

Every tensor's values come from a generator seeded by the tensor's name, so a file is the same
bytes on every run. Command line (prints `target=PATH`, and `drafter=PATH` for a separate
drafter file)::

    .venv/bin/python tests/tinymodel.py {qwen35-mtp|lfm2|gemma4-assistant|qwen35-mtp-real} DIR
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
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
        **_tokenizer_metadata(tokens, types),
    }


def _tokenizer_metadata(tokens: list[str], types: list[int]) -> dict[str, Any]:
    return {
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


# -- hybrid models (qwen35 with its NextN/MTP block, lfm2) ----------------------------------------


@dataclass(frozen=True)
class Qwen35Shape:
    """The hyperparameters of a `qwen35` file (llama.cpp's names in the comments)."""

    n_embd: int
    n_ff: int
    n_layer: int  # trunk blocks; the MTP block is one more (block_count = n_layer + 1)
    n_head: int
    n_head_kv: int
    head_dim: int  # attention.key_length = value_length
    n_rot: int  # rope.dimension_count (a quarter of the head: partial_rotary_factor 0.25)
    sections: tuple[int, int, int, int]  # rope.dimension_sections (MRoPE)
    conv_kernel: int  # ssm.conv_kernel
    k_head_dim: int  # ssm.state_size (linear_key_head_dim = linear_value_head_dim)
    k_heads: int  # ssm.group_count (linear_num_key_heads)
    v_heads: int  # ssm.time_step_rank (linear_num_value_heads); inner_size = v_heads * k_head_dim
    n_vocab: int | None  # None: the tiny vocabulary (303 tokens)
    context: int
    rope_base: float
    quantized: bool  # Q8_0 for matrices whose rows are whole 32-value blocks; F32 otherwise
    name: str


QWEN35_TINY = Qwen35Shape(
    n_embd=32, n_ff=64, n_layer=4, n_head=2, n_head_kv=1, head_dim=16, n_rot=8,
    sections=(2, 1, 1, 0), conv_kernel=4, k_head_dim=16, k_heads=2, v_heads=2, n_vocab=None,
    context=4096, rope_base=10000.0, quantized=False, name="Tiny Qwen3.5 MTP",
)  # fmt: skip

# Qwen/Qwen3.5-0.8B's text_config (config.json on Hugging Face, as mirrored in public test
# fixtures, e.g. brolm's "compact mirror of Qwen/Qwen3.5-0.8B's config.json"; the layer count,
# width, heads and context agree with fitmygpu.com/models/qwen-3.5-0.8b): vocab_size 248320,
# hidden_size 1024, intermediate_size 3584, num_hidden_layers 24 (layer_types: 3 linear_attention
# then 1 full_attention, x6; full_attention_interval 4), num_attention_heads 8,
# num_key_value_heads 2, head_dim 256, linear_num_key_heads 16, linear_num_value_heads 16,
# linear_key_head_dim 128, linear_value_head_dim 128, linear_conv_kernel_dim 4, rms_norm_eps 1e-6,
# max_position_embeddings 262144, tie_word_embeddings true, mtp_num_hidden_layers 1,
# rope_parameters: rope_theta 1e7, partial_rotary_factor 0.25, mrope_section [11, 11, 10]
# (interleaved). llama.cpp's converter (conversion/qwen.py) turns these into the keys below.
QWEN35_0_8B = Qwen35Shape(
    n_embd=1024, n_ff=3584, n_layer=24, n_head=8, n_head_kv=2, head_dim=256, n_rot=64,
    sections=(11, 11, 10, 0), conv_kernel=4, k_head_dim=128, k_heads=16, v_heads=16,
    n_vocab=248320, context=262144, rope_base=1e7, quantized=True,
    name="Qwen3.5-0.8B shape (random weights)",
)  # fmt: skip


@dataclass(frozen=True)
class Lfm2Shape:
    n_embd: int
    n_ff: int
    n_head: int
    head_kv: tuple[int, ...]  # per layer: 0 = a short-convolution layer, else attention
    l_cache: int  # shortconv.l_cache (the convolution's width)
    n_vocab: int | None
    context: int
    name: str


LFM2_TINY = Lfm2Shape(
    n_embd=32, n_ff=64, n_head=2, head_kv=(0, 0, 1, 0, 1), l_cache=3, n_vocab=None,
    context=4096, name="Tiny LFM2",
)  # fmt: skip


@dataclass(frozen=True)
class _T:
    """One tensor to write: its name, shape in ggml order (innermost first), how to fill it."""

    name: str
    shape: tuple[int, ...]
    init: str  # "w" matrix (scaled by its input width), "norm", "a" (decay), "small", "conv"


def vocab(n: int | None = None) -> tuple[list[str], list[int]]:
    """The tiny vocabulary, or one of exactly n tokens (filler words before the 3 control
    tokens, which stay last as in the tiny one)."""
    tokens, types = tiny_vocab()
    if n is None or n == len(tokens):
        return tokens, types
    if n < len(tokens):
        raise ValueError(f"a vocabulary needs at least {len(tokens)} tokens, not {n}")
    fill = [f"x{i}" for i in range(n - len(tokens))]
    return (
        tokens[:-3] + fill + tokens[-3:],
        types[:-3] + [int(gguf.TokenType.NORMAL)] * len(fill) + types[-3:],
    )


def _qwen35_tensors(s: Qwen35Shape, n_vocab: int) -> list[_T]:
    e, ff, hd = s.n_embd, s.n_ff, s.head_dim
    key_dim = s.k_head_dim * s.k_heads
    value_dim = s.k_head_dim * s.v_heads
    out = [_T("token_embd.weight", (e, n_vocab), "w"), _T("output_norm.weight", (e,), "norm")]

    def attention(p: str) -> list[_T]:
        return [
            _T(p + "attn_q.weight", (e, hd * s.n_head * 2), "w"),  # query and its gate
            _T(p + "attn_k.weight", (e, hd * s.n_head_kv), "w"),
            _T(p + "attn_v.weight", (e, hd * s.n_head_kv), "w"),
            _T(p + "attn_output.weight", (hd * s.n_head, e), "w"),
            _T(p + "attn_q_norm.weight", (hd,), "norm"),
            _T(p + "attn_k_norm.weight", (hd,), "norm"),
        ]

    def ffn(p: str) -> list[_T]:
        return [
            _T(p + "ffn_gate.weight", (e, ff), "w"),
            _T(p + "ffn_up.weight", (e, ff), "w"),
            _T(p + "ffn_down.weight", (ff, e), "w"),
        ]

    for i in range(s.n_layer):
        p = f"blk.{i}."
        out += [_T(p + "attn_norm.weight", (e,), "norm")]
        out += [_T(p + "post_attention_norm.weight", (e,), "norm")]
        if (i + 1) % 4 == 0:  # full_attention_interval 4
            out += attention(p)
        else:  # gated delta net
            out += [
                _T(p + "attn_qkv.weight", (e, key_dim * 2 + value_dim), "w"),
                _T(p + "attn_gate.weight", (e, value_dim), "w"),
                _T(p + "ssm_conv1d.weight", (s.conv_kernel, key_dim * 2 + value_dim), "conv"),
                _T(p + "ssm_dt.bias", (s.v_heads,), "small"),
                _T(p + "ssm_a", (s.v_heads,), "a"),
                _T(p + "ssm_beta.weight", (e, s.v_heads), "w"),
                _T(p + "ssm_alpha.weight", (e, s.v_heads), "w"),
                _T(p + "ssm_norm.weight", (s.k_head_dim,), "norm"),
                _T(p + "ssm_out.weight", (value_dim, e), "w"),
            ]
        out += ffn(p)
    # The NextN/MTP block (llama.cpp: load_block_mtp in models/qwen35.cpp): a full-attention
    # block plus eh_proj over [embedding; hidden], its two input norms and the head's norm. The
    # real model has no own embedding or head (nextn.embed_tokens / shared_head_head: optional).
    p = f"blk.{s.n_layer}."
    out += [
        _T(p + "attn_norm.weight", (e,), "norm"),
        _T(p + "post_attention_norm.weight", (e,), "norm"),
        *attention(p),
        *ffn(p),
        _T(p + "nextn.eh_proj.weight", (2 * e, e), "w"),
        _T(p + "nextn.enorm.weight", (e,), "norm"),
        _T(p + "nextn.hnorm.weight", (e,), "norm"),
        _T(p + "nextn.shared_head_norm.weight", (e,), "norm"),
    ]
    return out


def _qwen35_metadata(s: Qwen35Shape, tokens: list[str], types: list[int]) -> dict[str, Any]:
    a = "qwen35"
    ftype = gguf.LlamaFileType.MOSTLY_Q8_0 if s.quantized else gguf.LlamaFileType.ALL_F32
    return {
        "general.name": s.name,
        f"{a}.context_length": s.context,
        f"{a}.block_count": s.n_layer + 1,
        f"{a}.nextn_predict_layers": 1,
        f"{a}.embedding_length": s.n_embd,
        f"{a}.feed_forward_length": s.n_ff,
        f"{a}.attention.head_count": s.n_head,
        f"{a}.attention.head_count_kv": s.n_head_kv,
        f"{a}.attention.key_length": s.head_dim,
        f"{a}.attention.value_length": s.head_dim,
        f"{a}.attention.layer_norm_rms_epsilon": 1e-6,
        f"{a}.rope.freq_base": s.rope_base,
        f"{a}.rope.dimension_count": s.n_rot,
        f"{a}.rope.dimension_sections": list(s.sections),
        f"{a}.ssm.conv_kernel": s.conv_kernel,
        f"{a}.ssm.state_size": s.k_head_dim,
        f"{a}.ssm.group_count": s.k_heads,
        f"{a}.ssm.time_step_rank": s.v_heads,
        f"{a}.ssm.inner_size": s.k_head_dim * s.v_heads,
        f"{a}.full_attention_interval": 4,
        "general.file_type": int(ftype),
        **_tokenizer_metadata(tokens, types),
    }


def _lfm2_tensors(s: Lfm2Shape, n_vocab: int) -> list[_T]:
    e, ff = s.n_embd, s.n_ff
    hd = e // s.n_head
    out = [_T("token_embd.weight", (e, n_vocab), "w"), _T("token_embd_norm.weight", (e,), "norm")]
    for i, kv in enumerate(s.head_kv):
        p = f"blk.{i}."
        out += [
            _T(p + "ffn_norm.weight", (e,), "norm"),
            _T(p + "ffn_gate.weight", (e, ff), "w"),
            _T(p + "ffn_up.weight", (e, ff), "w"),
            _T(p + "ffn_down.weight", (ff, e), "w"),
            _T(p + "attn_norm.weight", (e,), "norm"),
        ]
        if kv:
            out += [
                _T(p + "attn_q_norm.weight", (hd,), "norm"),
                _T(p + "attn_k_norm.weight", (hd,), "norm"),
                _T(p + "attn_q.weight", (e, e), "w"),
                _T(p + "attn_k.weight", (e, hd * kv), "w"),
                _T(p + "attn_v.weight", (e, hd * kv), "w"),
                _T(p + "attn_output.weight", (e, e), "w"),
            ]
        else:
            out += [
                _T(p + "shortconv.conv.weight", (s.l_cache, e), "conv"),
                _T(p + "shortconv.in_proj.weight", (e, 3 * e), "w"),
                _T(p + "shortconv.out_proj.weight", (e, e), "w"),
            ]
    return out


def _lfm2_metadata(s: Lfm2Shape, tokens: list[str], types: list[int]) -> dict[str, Any]:
    a = "lfm2"
    return {
        "general.name": s.name,
        f"{a}.context_length": s.context,
        f"{a}.block_count": len(s.head_kv),
        f"{a}.embedding_length": s.n_embd,
        f"{a}.feed_forward_length": s.n_ff,
        f"{a}.attention.head_count": s.n_head,
        f"{a}.attention.head_count_kv": list(s.head_kv),
        f"{a}.attention.layer_norm_rms_epsilon": 1e-5,
        f"{a}.rope.freq_base": 1e6,
        f"{a}.shortconv.l_cache": s.l_cache,
        "general.file_type": int(gguf.LlamaFileType.ALL_F32),
        **_tokenizer_metadata(tokens, types),
    }


_ROWS_PER_CHUNK = 4096  # rows generated (and quantized) at once: 16 MB of float32 at width 1024


def _rows(t: _T, seed: int) -> Iterator[np.ndarray]:
    """The tensor's values as float32 row chunks (numpy order: rows of shape[0] values), from a
    generator seeded by the name: the same values whatever else the file holds."""
    rng = np.random.default_rng([seed, zlib.crc32(t.name.encode())])
    width = t.shape[0]
    n_rows = int(np.prod(t.shape[1:], dtype=np.int64)) if len(t.shape) > 1 else 1
    for start in range(0, n_rows, _ROWS_PER_CHUNK):
        n = min(_ROWS_PER_CHUNK, n_rows - start)
        if t.init == "w":  # unit-variance outputs from unit-variance inputs
            x = rng.standard_normal((n, width), np.float32) * np.float32(width**-0.5)
        elif t.init == "norm":
            x = 1.0 + 0.1 * rng.standard_normal((n, width), np.float32)
        elif t.init == "a":  # the delta net's decay, -exp(A_log): keeps a few tokens in view
            x = -rng.uniform(0.2, 1.0, (n, width)).astype(np.float32)
        elif t.init == "conv":
            x = 0.5 * rng.standard_normal((n, width), np.float32)
        else:
            x = 0.1 * rng.standard_normal((n, width), np.float32)
        yield x.astype(np.float32, copy=False)


def _qtype(t: _T, quantized: bool) -> gguf.GGMLQuantizationType:
    q8 = gguf.GGMLQuantizationType.Q8_0
    if quantized and len(t.shape) == 2 and t.shape[0] % gguf.GGML_QUANT_SIZES[q8][0] == 0:
        return q8
    return gguf.GGMLQuantizationType.F32


def _write_streamed(
    path: Path, arch: str, md: dict[str, Any], tensors: list[_T], quantized: bool, seed: int
) -> Path:
    """Write the file one tensor (and one row chunk) at a time: a real-shape model never sits
    whole in memory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in md.items():
        _add(w, key, value)
    types = [_qtype(t, quantized) for t in tensors]
    for t, qt in zip(tensors, types, strict=True):
        rows = int(np.prod(t.shape[1:], dtype=np.int64)) if len(t.shape) > 1 else 1
        if qt == gguf.GGMLQuantizationType.F32:
            w.add_tensor_info(t.name, t.shape[::-1], np.dtype(np.float32), rows * t.shape[0] * 4)
        else:
            byte_shape = gguf.quant_shape_to_byte_shape((rows, t.shape[0]), qt)
            nbytes = byte_shape[0] * byte_shape[1]
            shape = (*t.shape[:0:-1], byte_shape[1])  # numpy order, last axis in bytes
            w.add_tensor_info(t.name, shape, np.dtype(np.uint8), nbytes, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    assert w.fout is not None
    fout = w.fout[0]
    for t, qt in zip(tensors, types, strict=True):
        w.write_padding(fout, fout.tell())
        n = 0
        for chunk in _rows(t, seed):
            data = chunk if qt == gguf.GGMLQuantizationType.F32 else gguf.quantize(chunk, qt)
            data.tofile(fout)
            n += data.nbytes
        w.write_padding(fout, n)
    w.close()
    return path


def write_qwen35_mtp(path: Path, shape: Qwen35Shape = QWEN35_TINY, *, seed: int = 0) -> Path:
    """A `qwen35` model with one NextN/MTP block (`qwen35.nextn_predict_layers` = 1). The
    tiny shape is about 0.3 MB; QWEN35_0_8B about 0.85 GB (Q8_0)."""
    tokens, types = vocab(shape.n_vocab)
    md = _qwen35_metadata(shape, tokens, types)
    return _write_streamed(
        Path(path), "qwen35", md, _qwen35_tensors(shape, len(tokens)), shape.quantized, seed
    )


def write_lfm2(path: Path, shape: Lfm2Shape = LFM2_TINY, *, seed: int = 0) -> Path:
    """An `lfm2` model: short-convolution layers (recurrent state) and attention layers."""
    tokens, types = vocab(shape.n_vocab)
    md = _lfm2_metadata(shape, tokens, types)
    return _write_streamed(Path(path), "lfm2", md, _lfm2_tensors(shape, len(tokens)), False, seed)


def write_arch(arch: str, directory: Path) -> dict[str, Path]:
    """Write the model(s) of `arch` into `directory`: {"target": path[, "drafter": path]}."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if arch == "qwen35-mtp":
        return {"target": write_qwen35_mtp(d / "tiny-qwen35-mtp.gguf")}
    if arch == "qwen35-mtp-real":
        return {"target": write_qwen35_mtp(d / "qwen35-0.8b-shape-mtp-q8_0.gguf", QWEN35_0_8B)}
    if arch == "lfm2":
        return {"target": write_lfm2(d / "tiny-lfm2.gguf")}
    if arch == "gemma4-assistant":
        try:
            import tinymodel_gemma4  # type: ignore[import-not-found]  # tests/, another helper's
        except ImportError as exc:
            raise SystemExit(f"gemma4-assistant needs tests/tinymodel_gemma4.py: {exc}") from exc
        target, drafter = tinymodel_gemma4.write_gemma4_pair(d)
        return {"target": Path(target), "drafter": Path(drafter)}
    raise SystemExit(f"unknown architecture {arch!r}: choose one of {', '.join(ARCHES)}")


ARCHES = ("qwen35-mtp", "lfm2", "gemma4-assistant", "qwen35-mtp-real")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: tinymodel.py {{{'|'.join(ARCHES)}}} DIR", file=sys.stderr)
        return 2
    for role, path in write_arch(argv[0], Path(argv[1])).items():
        print(f"{role}={path}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(main(sys.argv[1:]))
