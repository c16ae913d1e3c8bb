"""A Gemma 4 target and its Gemma 4 "assistant" drafter, as GGUF files the pinned llama.cpp loads.

`write_gemma4_pair(dir)` writes a tiny seeded pair (a few hundred KB, F32): a 5-layer `gemma4`
target shaped like Gemma 4 E2B in miniature (sliding and full attention layers, the last two
layers reading the KV of earlier ones, per-layer embeddings, proportional RoPE on the full
layers, a final logit soft cap) and a 2-layer `gemma4-assistant` whose attention reads the
target's last sliding and last full layer's KV (llama.cpp shares them through `ctx_other`).

The weights are random but arranged so the pair behaves like a trained one, with a known answer:

- Every token t has a code: a random unit vector `c_t` in 16 dimensions (and a second one,
  `d_t`). The target embeds t as (c_t, d_t, 0...) / sqrt 2 and its output row j is the
  embedding of sigma(j), where sigma is one cycle through the whole vocabulary: the target's
  greedy next token after t is g(t) = sigma^-1(t), up to the small contributions of its
  attention, FFN and per-layer blocks (their post-norms are small, not zero: they are there).
- The assistant's pre-projection routes the first 16 dimensions of the target's hidden state h
  (which holds c of the target's last input token u) into its first half, and the first 16 of
  the token embedding x (c of the token it is given) into its second half. Its output row j is
  (c of g^-1(g^-1(j)), 0): it predicts g(g(u)). Its post-projection hands its second half on as
  the next h.

So with the right hidden state the assistant predicts the target's next tokens nearly always,
and with a wrong one (another row of the target's batch, a stale one) it predicts something
else: a test sees a broken hand-off in the acceptance, not only in the speed.

`write_gemma4_e2b_pair(dir, quant="Q8_0")` writes the same two architectures at the real shape
of Gemma 4 E2B and its assistant (random weights, matrices in Q8_0 or F16, written tensor by
tensor in row chunks, never whole in memory): for measuring what the drafter costs, not for
tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

TARGET_ARCH, ASSISTANT_ARCH = "gemma4", "gemma4-assistant"
SEED = 4


def _vocab() -> tuple[list[str], list[int]]:
    tokens = [f"<0x{i:02X}>" for i in range(256)]
    types = [int(gguf.TokenType.BYTE)] * 256
    words = ["Ġ", "a", "b", "c"] + [f"w{i}" for i in range(60)]
    tokens += words
    types += [int(gguf.TokenType.NORMAL)] * len(words)
    tokens += ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"]
    types += [int(gguf.TokenType.CONTROL)] * 4
    return tokens, types


def _tokenizer(tokens: list[str], types: list[int]) -> dict[str, Any]:
    n = len(tokens)
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": ["Ġ a"],
        "tokenizer.ggml.bos_token_id": n - 4,
        "tokenizer.ggml.eos_token_id": n - 3,
        "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": (
            "{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n"
            "{% endfor %}<start_of_turn>model\n"
        ),
    }


@dataclass(frozen=True)
class Shape:
    """The hyperparameters of one pair (target and assistant)."""

    vocab: int
    n_embd: int  # target
    n_layer: int
    n_head: int
    n_head_kv: int
    head_swa: int
    head_full: int
    n_ff: int
    n_ff_shared: int  # feed-forward width of the layers that reuse KV (E2B: double)
    n_shared: int  # layers at the end that read earlier layers' KV
    n_per_layer: int  # per-layer embedding width (0: none)
    swa_every: int  # every swa_every-th layer is full attention, the others sliding
    window: int
    n_ctx: int
    a_embd: int  # assistant
    a_layer: int
    a_head: int
    a_ff: int

    def swa(self, n_layer: int) -> list[bool]:
        return [(i + 1) % self.swa_every != 0 for i in range(n_layer)]


TINY = Shape(
    vocab=len(_vocab()[0]),
    n_embd=64,
    n_layer=5,
    n_head=2,
    n_head_kv=1,
    head_swa=32,
    head_full=64,
    n_ff=96,
    n_ff_shared=192,
    n_shared=2,
    n_per_layer=8,
    swa_every=3,  # S S F S S -> made to end on a full layer below
    window=16,
    n_ctx=512,
    a_embd=32,
    a_layer=2,
    a_head=2,
    a_ff=64,
)

# Gemma 4 E2B (google/gemma-4-E2B-it) and its assistant, as their configs give them
E2B = Shape(
    vocab=262144,
    n_embd=1536,
    n_layer=35,
    n_head=8,
    n_head_kv=1,
    head_swa=256,
    head_full=512,
    n_ff=6144,
    n_ff_shared=12288,
    n_shared=20,
    n_per_layer=256,
    swa_every=5,
    window=512,
    n_ctx=131072,
    a_embd=256,
    a_layer=4,
    a_head=4,
    a_ff=2048,
)


def _target_swa(s: Shape) -> list[bool]:
    """Sliding/full per target layer: the last layer full, the one before it sliding (the
    assistant reads those two)."""
    if s is TINY:
        return [True, True, False, True, False]
    return s.swa(s.n_layer)


def _assistant_swa(s: Shape) -> list[bool]:
    return [True] * (s.a_layer - 1) + [False]


def _common(arch: str, s: Shape, swa: list[bool], name: str, file_type: int) -> dict[str, Any]:
    n_rot_full = s.head_full  # proportional RoPE: the unrotated dims get huge freq factors
    return {
        "general.name": name,
        "general.file_type": file_type,
        f"{arch}.context_length": s.n_ctx,
        f"{arch}.attention.head_count": s.n_head,
        f"{arch}.attention.head_count_kv": s.n_head_kv,
        f"{arch}.attention.key_length": s.head_full,
        f"{arch}.attention.value_length": s.head_full,
        f"{arch}.attention.key_length_swa": s.head_swa,
        f"{arch}.attention.value_length_swa": s.head_swa,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-6,
        f"{arch}.attention.sliding_window": s.window,
        f"{arch}.attention.sliding_window_pattern": swa,
        f"{arch}.rope.freq_base": 1_000_000.0,
        f"{arch}.rope.freq_base_swa": 10_000.0,
        f"{arch}.rope.dimension_count": n_rot_full,
        f"{arch}.rope.dimension_count_swa": s.head_swa,
    }


def _target_metadata(s: Shape, file_type: int) -> dict[str, Any]:
    swa = _target_swa(s)
    first_shared = s.n_layer - s.n_shared
    md = _common(TARGET_ARCH, s, swa, "Tiny Gemma4" if s is TINY else "Gemma4 E2B shape", file_type)
    md.update(
        {
            f"{TARGET_ARCH}.embedding_length": s.n_embd,
            f"{TARGET_ARCH}.block_count": s.n_layer,
            f"{TARGET_ARCH}.feed_forward_length": [
                s.n_ff if i < first_shared else s.n_ff_shared for i in range(s.n_layer)
            ],
            f"{TARGET_ARCH}.attention.shared_kv_layers": s.n_shared,
            f"{TARGET_ARCH}.embedding_length_per_layer_input": s.n_per_layer,
            f"{TARGET_ARCH}.final_logit_softcapping": 30.0,
        }
    )
    return md


def _assistant_metadata(s: Shape, file_type: int) -> dict[str, Any]:
    swa = _assistant_swa(s)
    name = "Tiny Gemma4 assistant" if s is TINY else "Gemma4 E2B assistant shape"
    md = _common(ASSISTANT_ARCH, s, swa, name, file_type)
    md.update(
        {
            f"{ASSISTANT_ARCH}.embedding_length": s.a_embd,
            f"{ASSISTANT_ARCH}.embedding_length_out": s.n_embd,
            f"{ASSISTANT_ARCH}.block_count": s.a_layer,
            f"{ASSISTANT_ARCH}.nextn_predict_layers": s.a_layer,
            f"{ASSISTANT_ARCH}.feed_forward_length": s.a_ff,
            f"{ASSISTANT_ARCH}.attention.head_count": s.a_head,
        }
    )
    return md


# A tensor: name, numpy shape (outermost first, as ggml's reversed), and what fills it:
# "norm" (about 1), "small-norm" (a post-norm that keeps a block's contribution small),
# "mat" (a random matrix), or a fixed array.
Fill = str | np.ndarray


def _target_tensors(s: Shape) -> Iterator[tuple[str, tuple[int, ...], Fill]]:
    swa = _target_swa(s)
    first_shared = s.n_layer - s.n_shared
    n, npl = s.n_embd, s.n_per_layer
    yield "token_embd.weight", (s.vocab, n), "mat"
    yield "output.weight", (s.vocab, n), "mat"
    yield "output_norm.weight", (n,), "norm"
    rot = s.head_full // 8  # Gemma 4's partial_rotary_factor 0.25 on the full layers
    freqs = np.array([1.0] * rot + [1e30] * (s.head_full // 2 - rot), dtype=np.float32)
    yield "rope_freqs.weight", (s.head_full // 2,), freqs
    if npl:
        yield "per_layer_token_embd.weight", (s.vocab, npl * s.n_layer), "mat"
        yield "per_layer_model_proj.weight", (npl * s.n_layer, n), "mat"
        yield "per_layer_proj_norm.weight", (npl,), "norm"
    for i in range(s.n_layer):
        p = f"blk.{i}."
        hd = s.head_swa if swa[i] else s.head_full
        ff = s.n_ff if i < first_shared else s.n_ff_shared
        yield p + "attn_norm.weight", (n,), "norm"
        yield p + "attn_q.weight", (s.n_head * hd, n), "mat"
        if i < first_shared:
            yield p + "attn_k.weight", (s.n_head_kv * hd, n), "mat"
            yield p + "attn_v.weight", (s.n_head_kv * hd, n), "mat"
            yield p + "attn_k_norm.weight", (hd,), "norm"
        yield p + "attn_q_norm.weight", (hd,), "norm"
        yield p + "attn_output.weight", (n, s.n_head * hd), "mat"
        yield p + "post_attention_norm.weight", (n,), "small-norm"
        yield p + "layer_output_scale.weight", (1,), np.ones(1, np.float32)
        yield p + "ffn_norm.weight", (n,), "norm"
        yield p + "ffn_gate.weight", (ff, n), "mat"
        yield p + "ffn_up.weight", (ff, n), "mat"
        yield p + "ffn_down.weight", (n, ff), "mat"
        yield p + "post_ffw_norm.weight", (n,), "small-norm"
        if npl:
            yield p + "inp_gate.weight", (npl, n), "mat"
            yield p + "proj.weight", (n, npl), "mat"
            yield p + "post_norm.weight", (n,), "small-norm"


def _assistant_tensors(s: Shape) -> Iterator[tuple[str, tuple[int, ...], Fill]]:
    swa = _assistant_swa(s)
    a = s.a_embd
    yield "token_embd.weight", (s.vocab, a), "mat"  # also its output (tied)
    yield "output_norm.weight", (a,), "norm"
    yield "nextn.pre_projection.weight", (a, 2 * s.n_embd), "mat"
    yield "nextn.post_projection.weight", (s.n_embd, a), "mat"
    rot = s.head_full // 8
    freqs = np.array([1.0] * rot + [1e30] * (s.head_full // 2 - rot), dtype=np.float32)
    yield "rope_freqs.weight", (s.head_full // 2,), freqs
    for i in range(s.a_layer):
        p = f"blk.{i}."
        hd = s.head_swa if swa[i] else s.head_full
        yield p + "attn_norm.weight", (a,), "norm"
        yield p + "attn_q.weight", (s.a_head * hd, a), "mat"
        yield p + "attn_q_norm.weight", (hd,), "norm"
        yield p + "attn_output.weight", (a, s.a_head * hd), "mat"
        yield p + "post_attention_norm.weight", (a,), "small-norm"
        yield p + "layer_output_scale.weight", (1,), np.ones(1, np.float32)
        yield p + "ffn_norm.weight", (a,), "norm"
        yield p + "ffn_gate.weight", (s.a_ff, a), "mat"
        yield p + "ffn_up.weight", (s.a_ff, a), "mat"
        yield p + "ffn_down.weight", (a, s.a_ff), "mat"
        yield p + "post_ffw_norm.weight", (a,), "small-norm"


def _add(w: gguf.GGUFWriter, key: str, value: Any) -> None:
    if isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value)
    elif isinstance(value, list):
        w.add_array(key, value)
    else:  # pragma: no cover - test helper
        raise TypeError(f"{key}: {value!r}")


# -- the tiny pair: structured values --------------------------------------------------------


def _unit_rows(rng: np.random.Generator, rows: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((rows, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


class _Tiny:
    """The structured values of the tiny pair (see the module's docstring)."""

    def __init__(self, s: Shape) -> None:
        rng = np.random.default_rng(SEED)
        self.rng = rng
        v = s.vocab
        self.c = _unit_rows(rng, v, 16)
        self.d = _unit_rows(rng, v, 16)
        order = rng.permutation(v)  # one cycle through the vocabulary: sigma
        sigma = np.empty(v, dtype=np.int64)
        sigma[order] = np.roll(order, -1)
        self.sigma = sigma
        self.g = np.argsort(sigma)  # g = sigma^-1: the target's next token
        self.s = s

    def target(self, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
        s = self.s
        if name == "token_embd.weight":
            e = np.zeros(shape, np.float32)
            e[:, :16], e[:, 16:32] = self.c, self.d
            return (e / np.float32(np.sqrt(2.0))).astype(np.float32)
        if name == "output.weight":  # row j: the embedding of sigma(j)
            o = np.zeros(shape, np.float32)
            o[:, :16], o[:, 16:32] = self.c[self.sigma], self.d[self.sigma]
            return o
        del s
        return None

    def assistant(self, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
        n = self.s.n_embd
        if name == "token_embd.weight":  # row j: c of g^-1(g^-1(j)) = sigma(sigma(j))
            e = np.zeros(shape, np.float32)
            e[:, :16] = self.c[self.sigma[self.sigma]]
            return e
        if name == "nextn.pre_projection.weight":  # input: (x [n], h [n])
            p = np.zeros(shape, np.float32)
            for r in range(16):
                p[r, n + r] = 1.0  # h's code -> first half (what it predicts from)
                p[16 + r, r] = 1.0  # x's code -> second half (handed on as the next h)
            return p
        if name == "nextn.post_projection.weight":
            q = np.zeros(shape, np.float32)
            for r in range(16):
                q[r, 16 + r] = 1.0
            return q
        return None


def _value(fill: Fill, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if isinstance(fill, np.ndarray):
        return fill.astype(np.float32).reshape(shape)
    if fill == "norm":
        return (1.0 + 0.05 * rng.standard_normal(shape)).astype(np.float32)
    if fill == "small-norm":
        return (0.02 + 0.005 * rng.standard_normal(shape)).astype(np.float32)
    fan_in = shape[-1]
    return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)


def _write_small(
    path: Path,
    arch: str,
    md: dict[str, Any],
    tensors: Iterator[tuple[str, tuple[int, ...], Fill]],
    special: Callable[[str, tuple[int, ...]], np.ndarray | None],
    rng: np.random.Generator,
) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in md.items():
        _add(w, key, value)
    for name, shape, fill in tensors:
        arr = special(name, shape)
        arr = arr if arr is not None else _value(fill, shape, rng)
        w.add_tensor(name, arr.astype(np.float32, copy=False))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_gemma4_pair(directory: Path) -> tuple[Path, Path]:
    """Write the tiny seeded target and assistant into `directory`; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    tokens, types = _vocab()
    tiny = _Tiny(TINY)
    f32 = int(gguf.LlamaFileType.ALL_F32)
    md = _target_metadata(TINY, f32) | _tokenizer(tokens, types)
    target = _write_small(
        directory / "tiny-gemma4.gguf",
        TARGET_ARCH,
        md,
        _target_tensors(TINY),
        tiny.target,
        tiny.rng,
    )
    md = _assistant_metadata(TINY, f32) | _tokenizer(tokens, types)
    drafter = _write_small(
        directory / "tiny-gemma4-assistant.gguf",
        ASSISTANT_ARCH,
        md,
        _assistant_tensors(TINY),
        tiny.assistant,
        tiny.rng,
    )
    return target, drafter


def tiny_next(token: int) -> int:
    """The tiny target's next token after `token` when its small blocks are left out: what
    its greedy decoding follows (a test's expectation of the design, not of llama.cpp)."""
    return int(_Tiny(TINY).g[token])


# -- the real shape: random values, streamed -------------------------------------------------


def _write_streamed(
    path: Path,
    arch: str,
    md: dict[str, Any],
    tensors: list[tuple[str, tuple[int, ...], Fill]],
    quant: gguf.GGMLQuantizationType,
    rng: np.random.Generator,
    rows_per_chunk: int = 4096,
) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in md.items():
        _add(w, key, value)
    kinds: list[gguf.GGMLQuantizationType] = []
    for name, shape, fill in tensors:
        kind = quant if len(shape) == 2 and isinstance(fill, str) else gguf.GGMLQuantizationType.F32
        block, type_size = gguf.GGML_QUANT_SIZES[kind]
        nbytes = int(np.prod(shape[:-1])) * shape[-1] // block * type_size
        w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes, raw_dtype=kind)
        kinds.append(kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    assert w.fout is not None
    out = w.fout[0]
    for (_name, shape, fill), kind in zip(tensors, kinds, strict=True):
        w.write_padding(out, out.tell())
        written = 0
        rows = shape[0] if len(shape) == 2 else 1
        for r0 in range(0, rows, rows_per_chunk):
            part = (min(rows_per_chunk, rows - r0),) + shape[1:] if len(shape) == 2 else shape
            arr = _value(fill, part, rng)
            if kind == gguf.GGMLQuantizationType.F32:
                data = arr.tobytes()
            elif kind == gguf.GGMLQuantizationType.F16:
                data = arr.astype(np.float16).tobytes()
            else:
                data = gguf.quants.quantize(arr, kind).tobytes()
            out.write(data)
            written += len(data)
        w.write_padding(out, written)
    w.close()
    return path


def write_gemma4_e2b_pair(
    directory: Path, quant: str = "Q8_0", *, layers: int | None = None
) -> tuple[Path, Path]:
    """Write a target and an assistant at Gemma 4 E2B's shape (random weights; matrices in
    `quant`: "Q8_0" or "F16"); `layers` cuts the target to fewer layers (a quick check of the
    writer; the KV-sharing layout is kept). About 5 GB at Q8_0 for the full target."""
    kind = {"Q8_0": gguf.GGMLQuantizationType.Q8_0, "F16": gguf.GGMLQuantizationType.F16}[quant]
    ftype = {"Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "F16": gguf.LlamaFileType.MOSTLY_F16}[quant]
    s = E2B
    if layers is not None:
        from dataclasses import replace

        keep = max(layers, 2 * s.swa_every)
        s = replace(s, n_layer=keep, n_shared=min(s.n_shared, keep - s.swa_every))
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    tokens = [f"t{i}" for i in range(s.vocab)]
    types = [int(gguf.TokenType.NORMAL)] * s.vocab
    tok = _tokenizer(tokens, types) | {"tokenizer.ggml.merges": ["t 1"]}
    tag = quant.lower().replace("_", "")
    target = _write_streamed(
        directory / f"gemma4-e2b-shape-{tag}.gguf",
        TARGET_ARCH,
        _target_metadata(s, int(ftype)) | tok,
        list(_target_tensors(s)),
        kind,
        rng,
    )
    drafter = _write_streamed(
        directory / f"gemma4-e2b-shape-assistant-{tag}.gguf",
        ASSISTANT_ARCH,
        _assistant_metadata(s, int(ftype)) | tok,
        list(_assistant_tensors(s)),
        kind,
        rng,
    )
    return target, drafter
