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

from specchat.core.gguf.info import GGUFInfo, as_int

__all__ = [
    "ROLLBACK_ARCHES",
    "max_snapshots",
    "recurrent_layers",
    "snapshot_bytes",
    "state_bytes",
]

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


def _int(info: GGUFInfo, suffix: str, default: int | None = None) -> int | None:
    value = as_int(info.arch_value(suffix))
    return default if value is None else value


def recurrent_layers(info: GGUFInfo) -> int | None:
    """How many layers keep a recurrent state (None: an architecture this module does not
    know)."""
    arch = info.architecture
    blocks = _int(info, "block_count")
    if blocks is None:
        return None
    if arch in _DELTA_NET:
        trunk = blocks - (_int(info, "nextn_predict_layers", 0) or 0)
        flags = info.arch_value("attention.recurrent_layers")
        if isinstance(flags, (list, tuple)) and len(flags) >= trunk:
            return sum(1 for f in list(flags)[:trunk] if f)
        interval = _int(info, "full_attention_interval", 4) or 4
        return sum(1 for i in range(trunk) if (i + 1) % interval != 0)
    if arch in _SHORT_CONV:
        kv = info.arch_value("attention.head_count_kv")
        if isinstance(kv, (list, tuple)):
            return sum(1 for h in list(kv)[:blocks] if as_int(h) == 0)
        return 0 if as_int(kv) else blocks
    return None


def state_bytes(info: GGUFInfo) -> int | None:
    """Bytes of one sequence's recurrent state over all its layers (None: unknown
    architecture or missing keys)."""
    arch = info.architecture
    layers = recurrent_layers(info)
    if layers is None:
        return None
    if arch in _DELTA_NET:
        conv = _int(info, "ssm.conv_kernel")
        inner = _int(info, "ssm.inner_size")
        state = _int(info, "ssm.state_size")
        groups = _int(info, "ssm.group_count")
        if None in (conv, inner, state, groups):
            return None
        assert conv is not None and inner is not None and state is not None and groups is not None
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
