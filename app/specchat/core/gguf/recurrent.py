"""How big one sequence's recurrent state is, from a GGUF header, and which architectures llama.cpp
can roll that state back for.

A hybrid model (Qwen3.5's gated delta-net layers, LFM2's short convolutions) keeps, besides the
KV cache of its attention layers, one fixed-size state per recurrent layer: a convolution window
(``r``) and, for delta-net/SSM layers, a matrix (``s``), both float32 in llama.cpp. A context
created with ``n_rs_seq`` = n keeps n more copies of it (the state after each of the last n
tokens of the last decode) so that a speculative step can be cut back by up to n tokens
(llama-memory-recurrent.cpp: its buffers have ``mem_size * (1 + n_rs_seq)`` rows). So

    recurrent memory = (1 + n_rs_seq) * state_bytes(info)        (one sequence)

and the snapshots alone cost ``n_rs_seq * state_bytes(info)``, on the device of each layer
(the GPU when the layer and the KV cache are offloaded).

The formulas are llama.cpp's ``llama_hparams::n_embd_r`` / ``n_embd_s`` for these architectures;
`tests/core/test_hybrid_rollback.py` checks them against llama.cpp's logged ``RS buffer size``.
"""

from __future__ import annotations

import numpy as np

from specchat.core.gguf.info import GGUFInfo, as_int

__all__ = [
    "HYBRID_ROLLBACK_TOKENS",
    "ROLLBACK_ARCHES",
    "attention_kv_bytes_per_token",
    "can_roll_back",
    "max_snapshots",
    "recurrent_flags",
    "recurrent_layers",
    "snapshot_bytes",
    "snapshots_for",
    "state_bytes",
]

# How many tokens a hybrid target's context can take back: the longest draft SpecChat sends to
# one (llama.cpp's n_rs_seq, one snapshot of the whole recurrent state a token). The runtime's
# default `rollback_tokens` and the memory plan's count of snapshots (core.placement.memory_plan)
# are this one number.
HYBRID_ROLLBACK_TOKENS = 16

# llama.cpp's llm_arch_supports_rs_rollback (src/llama-arch.cpp): only these honour n_rs_seq; for
# any other architecture the context clamps it to 0.
ROLLBACK_ARCHES = frozenset(
    {
        "kimi-k3",
        "qwen35",
        "qwen35moe",
        "qwen4exp",
        "deepseek4",
        "glm5-next",
        "nemotron_h",
        "nemotron_h_moe",
        "lfm2",
        "lfm2moe",
        "bailingmoe3",
    }
)

F32 = 4  # llama.cpp keeps recurrent states in float32 (type_r = type_s = GGML_TYPE_F32)
_DELTA_NET = frozenset({"qwen35", "qwen35moe", "qwen3next"})
_SHORT_CONV = frozenset({"lfm2", "lfm2moe"})
_MAMBA2 = frozenset({"nemotron_h", "nemotron_h_moe"})  # Mamba-2 layers beside attention and FFN


def _int(info: GGUFInfo, suffix: str, default: int | None = None) -> int | None:
    value = as_int(info.arch_value(suffix))
    return default if value is None else value


def _array(info: GGUFInfo, suffix: str, n: int) -> list[int] | None:
    """The first n values of a per-layer array key (None: absent, a scalar, or too short)."""
    value = info.arch_value(suffix)
    if not isinstance(value, (list, tuple, np.ndarray)) or len(value) < n:
        return None
    return [as_int(v) or 0 for v in list(value)[:n]]


def _per_layer(info: GGUFInfo, suffix: str, n: int) -> list[int] | None:
    """A key that is either one value for every layer or an array of one per layer."""
    values = _array(info, suffix, n)
    if values is not None:
        return values
    one = as_int(info.arch_value(suffix))
    return None if one is None else [one] * n


def _trunk(info: GGUFInfo) -> int | None:
    """The model's own layers: block_count less the NextN (MTP) blocks appended to it."""
    blocks = _int(info, "block_count")
    if blocks is None:
        return None
    return blocks - (_int(info, "nextn_predict_layers", 0) or 0)


def recurrent_flags(info: GGUFInfo) -> list[bool] | None:
    """For each trunk layer, whether it keeps a recurrent state instead of a KV cache, as
    llama.cpp decides it when it loads the model (None: an architecture this module does not
    know, or keys missing)."""
    arch = info.architecture
    trunk = _trunk(info)
    if trunk is None or trunk < 0:
        return None
    if arch in _DELTA_NET:
        flags = _array(info, "attention.recurrent_layers", trunk)
        if flags is not None:
            return [bool(f) for f in flags]
        interval = _int(info, "full_attention_interval", 4) or 4
        return [(i + 1) % interval != 0 for i in range(trunk)]
    if arch in _SHORT_CONV:
        kv = _per_layer(info, "attention.head_count_kv", trunk)
        return None if kv is None else [h == 0 for h in kv]
    if arch in _MAMBA2:  # llama.cpp: no KV heads and no FFN
        kv = _per_layer(info, "attention.head_count_kv", trunk)
        ff = _per_layer(info, "feed_forward_length", trunk)
        if kv is None or ff is None:
            return None
        return [h == 0 and f == 0 for h, f in zip(kv, ff, strict=True)]
    return None


def recurrent_layers(info: GGUFInfo) -> int | None:
    """How many layers keep a recurrent state (None: an architecture this module does not
    know)."""
    flags = recurrent_flags(info)
    return None if flags is None else sum(flags)


def attention_kv_bytes_per_token(info: GGUFInfo, type_bytes: float = 2) -> float | None:
    """KV-cache bytes per context token of a hybrid model: only its attention layers have a
    KV cache (llama.cpp filters the others out), and a NextN block only in the MTP head's own
    context. None: not a hybrid this module knows."""
    flags = recurrent_flags(info)
    if flags is None:
        return None
    heads = _per_layer(info, "attention.head_count_kv", len(flags))
    if heads is None:
        heads = _per_layer(info, "attention.head_count", len(flags))
    k_len, v_len = info.key_length, info.value_length
    if k_len is None or v_len is None:
        n_embd, n_head = info.n_embd, info.n_head
        if not n_embd or not n_head:
            return None
        k_len = n_embd // n_head if k_len is None else k_len
        v_len = n_embd // n_head if v_len is None else v_len
    if heads is None:
        return None
    kv_heads = sum(h for h, recurrent in zip(heads, flags, strict=True) if not recurrent)
    return kv_heads * (k_len + v_len) * type_bytes


def state_bytes(info: GGUFInfo) -> int | None:
    """Bytes of one sequence's recurrent state over all its layers (None: unknown
    architecture or missing keys)."""
    arch = info.architecture
    layers = recurrent_layers(info)
    if layers is None:
        return None
    if arch in _DELTA_NET or arch in _MAMBA2:  # llama_hparams::n_embd_r / n_embd_s
        conv = _int(info, "ssm.conv_kernel")
        inner = _int(info, "ssm.inner_size")
        state = _int(info, "ssm.state_size")
        groups = _int(info, "ssm.group_count")
        if conv is None or inner is None or state is None or groups is None:
            return None
        n_embd_r = max(conv - 1, 0) * (inner + 2 * groups * state)
        n_embd_s = state * inner
        return layers * (n_embd_r + n_embd_s) * F32
    n_embd, l_cache = _int(info, "embedding_length"), _int(info, "shortconv.l_cache")
    if n_embd is None or l_cache is None:
        return None
    return layers * n_embd * max(l_cache - 1, 0) * F32


def snapshot_bytes(info: GGUFInfo, n_rs_seq: int) -> int | None:
    """What `n_rs_seq` rollback snapshots add to a one-sequence context (None: unknown)."""
    one = state_bytes(info)
    return None if one is None else n_rs_seq * one


def max_snapshots(info: GGUFInfo, n_batch: int) -> int:
    """The most snapshots a context of this model may ask for without llama.cpp aborting the
    process (GGML_ASSERT, no error returned):

    - a micro-batch must hold more than n_rs_seq + 1 tokens (split_equal), so at most
      n_batch - 2;
    - LFM2's graph makes three tensors per snapshot and convolution layer in a graph context
      sized for max(1024, 8 x tensors) tensors (llama_context::graph_max_nodes). Measured limits
      with this runtime: 87 for 3 convolution layers of 5, 20 for LFM2-350M/1.2B's 10 of 16, 15
      for 22 of 30; the bound here (81, 12, 10) assumes 44 tensors a layer besides the
      snapshots' (64 for lfm2moe). Qwen3.5's graph is sized by the batch (40 nodes a token) and
      32 x tensors, far above its snapshots' 3 per delta-net layer."""
    cap = max(n_batch - 2, 0)
    arch = info.architecture
    if arch in _SHORT_CONV:
        conv = recurrent_layers(info) or 0
        layers = _int(info, "block_count", 0) or 0
        if conv:
            budget = max(1024, 8 * len(info.tensors))
            base = (64 if arch == "lfm2moe" else 44) * layers + 64
            cap = min(cap, max((budget - base) // (3 * conv) - 1, 0))
    return cap


def can_roll_back(info: GGUFInfo) -> bool:
    """Whether llama.cpp keeps rollback snapshots for this model's architecture."""
    return (info.architecture or "") in ROLLBACK_ARCHES


def snapshots_for(
    info: GGUFInfo, n_batch: int = 512, rollback_tokens: int = HYBRID_ROLLBACK_TOKENS
) -> int:
    """How many snapshots a target context of this model holds, as `ModelRuntime` asks for
    them: `rollback_tokens` at most, within `max_snapshots`, and none for an architecture
    llama.cpp cannot roll back (it clamps n_rs_seq to 0) or a model without a recurrent
    state."""
    if not can_roll_back(info) or recurrent_layers(info) == 0:
        return 0
    return min(rollback_tokens, max_snapshots(info, n_batch))
