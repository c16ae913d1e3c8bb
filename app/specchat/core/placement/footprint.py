"""What one model needs in memory, from its GGUF header and tensor list, before it is loaded:
its weights, its KV cache per context token, its compute buffer per batch row, a hybrid's
recurrent state and rollback snapshots, a built-in MTP head's second load (`ModelFootprint`),
and what the model whole on a GPU puts there (`DevicePlan`). memory_plan.py weighs a pair's
footprints against the machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specchat.core.gguf.drafters import (
    HYBRID_ARCHS,
    MTP_ARCHS,
    RECURRENT_ARCHS,
    DrafterKind,
    drafter_kind,
    mtp_layers,
)
from specchat.core.gguf.info import GGUFInfo, as_int
from specchat.core.gguf.recurrent import (
    HYBRID_ROLLBACK_TOKENS,
    attention_kv_bytes_per_token,
    can_roll_back,
    recurrent_flags,
    snapshots_for,
    state_bytes,
)

COMPUTE_OVERHEAD = 256 << 20  # per model: compute and output buffers (estimate)
N_BATCH = 512  # RuntimeConfig's batch: the compute buffer's rows, and a bound on the snapshots
KV_TYPE_BYTES = 2  # f16 KV cache, llama.cpp's default


@dataclass(frozen=True)
class DevicePlan:
    """What a model whole on a GPU puts there, as llama.cpp allocates it (bytes)."""

    weights: int
    kv: int
    compute: int
    recurrent: int = 0  # a hybrid target's recurrent state and its rollback snapshots
    head: int = 0  # its built-in MTP head: the copy of its layers, the head's KV and buffers

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute + self.recurrent + self.head


@dataclass(frozen=True)
class ModelFootprint:
    """What one model costs: its weights and its KV cache per context token."""

    name: str
    weights_bytes: int
    kv_bytes_per_token: float | None
    n_layers: int | None = None
    # from the tensor list (0: unknown): the input embedding stays on the host (llama.cpp never
    # offloads it); the output matrix goes to the device (a copy of the embedding when tied)
    device_weights_bytes: int = 0  # every tensor but the input embedding, output included
    output_bytes: int = 0
    act_bytes_per_row: int = 0  # compute buffer per batch row: FFN and attention activations
    logits_bytes_per_row: int = 0  # ... and the logits (f32, vocabulary), with the output
    # a hybrid model: one sequence's recurrent state (0: none, a transformer; None: a hybrid
    # whose state size is not known here) and the rollback snapshots its context holds as a
    # target (0 as a draft, and for an architecture llama.cpp cannot roll back)
    state_bytes: int | None = 0
    snapshots: int = 0
    rollback: bool = True  # False: a hybrid whose state llama.cpp cannot roll back
    drafter: str = ""  # "mtp" (a sidecar) or "assistant": a drafter-only file; "" otherwise
    head_layers: int = 0  # NextN blocks built in: the engine loads an MTP head with the model
    head_kv_bytes_per_token: float = 0.0  # that head's own KV cache (its NextN blocks)

    @classmethod
    def from_info(
        cls,
        info: GGUFInfo,
        weights_bytes: int | None = None,
        *,
        n_batch: int = N_BATCH,
        rollback_tokens: int = HYBRID_ROLLBACK_TOKENS,
        as_draft: bool = False,
    ) -> ModelFootprint:
        """``weights_bytes``: the size of all the model's files (default: this file's size).
        ``n_batch`` and ``rollback_tokens``: the runtime's batch and how many tokens a hybrid
        target's context can take back (one snapshot each, within what llama.cpp can keep);
        ``as_draft``: the model drafts for another (its context keeps no snapshots)."""
        size = weights_bytes if weights_bytes is not None else info.file_size or info.data_end
        sizes = {t.name: t.nbytes for t in info.tensors}
        embd = sizes.get("token_embd.weight", 0)
        output = sizes.get("output.weight", embd)  # tied: llama.cpp copies the embedding
        device = sum(sizes.values()) - embd + (0 if "output.weight" in sizes else embd)
        ffn, n_embd = as_int(info.arch_value("feed_forward_length")) or 0, info.n_embd or 0
        kind = drafter_kind(info)
        hybrid = recurrent_flags(info)
        kv = info.kv_bytes_per_token(KV_TYPE_BYTES)
        if hybrid is not None and any(hybrid):  # only the attention layers have a KV cache
            kv = attention_kv_bytes_per_token(info, KV_TYPE_BYTES)
        state: int | None = 0
        if hybrid is not None and any(hybrid):
            state = state_bytes(info)
        elif _is_hybrid(info):
            state = None
        head = mtp_layers(info) if (info.architecture or "") in MTP_ARCHS else 0
        head_kv = _nextn_kv_bytes_per_token(info) if head or kind is DrafterKind.MTP else 0.0
        if kind is DrafterKind.MTP:  # a sidecar: the NextN blocks are all it has
            kv, state, head = head_kv, 0, 0
        elif kind is not None:  # an assistant reads the target's KV cache; others do not load
            kv, state, head = 0.0, 0, 0
        return cls(
            info.name,
            int(size),
            kv,
            info.n_layers,
            device if sizes else 0,
            output,
            4 * (2 * ffn + 8 * n_embd) if ffn and n_embd else 0,
            4 * info.vocab_size,
            state,
            0 if as_draft or state == 0 else snapshots_for(info, n_batch, rollback_tokens),
            not _is_hybrid(info) or can_roll_back(info),
            str(kind) if kind is not None else "",
            0 if as_draft else head,
            head_kv,
        )

    @property
    def hybrid(self) -> bool:
        """Recurrent layers beside attention (or a state of unknown size)."""
        return self.state_bytes != 0

    def kv_bytes(self, n_ctx: int) -> int:
        return int((self.kv_bytes_per_token or 0) * n_ctx)

    def recurrent_bytes(self, *, as_target: bool = True) -> int:
        """The recurrent state llama.cpp allocates for one sequence: the live state and, in a
        target's context, the rollback snapshots (0 when unknown)."""
        return (self.state_bytes or 0) * (1 + (self.snapshots if as_target else 0))

    @property
    def snapshot_bytes(self) -> int:
        """What the rollback snapshots alone cost (0 when unknown)."""
        return (self.state_bytes or 0) * self.snapshots

    def head_kv_bytes(self, n_ctx: int) -> int:
        return int(self.head_kv_bytes_per_token * n_ctx) if self.head_layers else 0

    def head_compute(self, n_ubatch: int = N_BATCH) -> int:
        """The built-in head's compute buffer: a batch of rows through one block and the
        output matrix (the allowance when the tensor list is unknown)."""
        if not self.head_layers:
            return 0
        rows = self.act_bytes_per_row + self.logits_bytes_per_row
        return n_ubatch * rows if rows else COMPUTE_OVERHEAD

    def device_plan(
        self, n_ctx: int, n_ubatch: int = 512, max_tensor: int | None = None
    ) -> DevicePlan | None:
        """The model whole on a GPU: weights, KV cache, compute buffer. ``max_tensor``: the
        largest tensor the device takes (Vulkan's maxStorageBufferRange); a bigger output
        matrix stays on the host with its logits. None when the tensor list is unknown."""
        if not (self.device_weights_bytes and self.act_bytes_per_row):
            return None
        out_here = max_tensor is None or self.output_bytes <= max_tensor
        weights = self.device_weights_bytes - (0 if out_here else self.output_bytes)
        rows = self.act_bytes_per_row + (self.logits_bytes_per_row if out_here else 0)
        head = 0
        if self.head_layers:  # a second load of the model, with its own context
            head = weights + self.head_kv_bytes(n_ctx) + self.head_compute(n_ubatch)
        return DevicePlan(
            weights, self.kv_bytes(n_ctx), n_ubatch * rows, self.recurrent_bytes(), head
        )


def _is_hybrid(info: GGUFInfo) -> bool:
    """A model with a recurrent state (purely recurrent or hybrid), by llama.cpp's lists."""
    arch = info.architecture or ""
    return arch in HYBRID_ARCHS or arch in RECURRENT_ARCHS


def _nextn_kv_bytes_per_token(info: GGUFInfo) -> float:
    """KV bytes per context token of the NextN blocks at the end of the layer list (what an
    MTP head's own context allocates: attention only, no recurrent state)."""
    n, blocks = mtp_layers(info), info.n_layers or 0
    total = info.kv_bytes_per_token(KV_TYPE_BYTES)
    if not n or not blocks or n > blocks or total is None:
        return 0.0
    heads = info.arch_value("attention.head_count_kv")
    if isinstance(heads, (list, tuple, np.ndarray)) and len(heads) >= blocks:
        per_layer = [as_int(h) or 0 for h in list(heads)[:blocks]]
        return total * sum(per_layer[blocks - n :]) / sum(per_layer) if sum(per_layer) else 0.0
    return total * n / blocks
