"""Will a target/draft pair fit this machine? An estimate made before anything is loaded.

Needed: the weights of both models (their file sizes: llama.cpp maps them into memory whole),
both KV caches at the chosen context (``GGUFInfo.kv_bytes_per_token``), and a compute-buffer
allowance per model. Compared with the RAM that is available now (psutil) and, for layers
offloaded to a GPU, with the free VRAM the llama.cpp backend reports (when it reports any).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import psutil

from specchat.core.gguf.info import GGUFInfo, as_int
from specchat.core.machine.backend_info import gpu_devices
from specchat.core.units import format_bytes

__all__ = [
    "DevicePlan",
    "Fit",
    "MachineMemory",
    "MemoryPlan",
    "ModelFootprint",
    "detect_vram",
    "file_fit",
    "machine_memory",
    "plan_memory",
]

log = logging.getLogger(__name__)

COMPUTE_OVERHEAD = 256 << 20  # per model: compute and output buffers (estimate)
KV_TYPE_BYTES = 2  # f16 KV cache, llama.cpp's default
TIGHT_FRACTION = 0.85  # above this share of the available memory a plan is "tight"


@dataclass(frozen=True)
class MachineMemory:
    ram_available: int
    ram_total: int
    vram_free: int | None = None  # None: the backend reports no GPU memory
    vram_total: int | None = None
    gpu_name: str | None = None


@dataclass(frozen=True)
class DevicePlan:
    """What a model whole on a GPU puts there, as llama.cpp allocates it (bytes)."""

    weights: int
    kv: int
    compute: int

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute


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

    @classmethod
    def from_info(cls, info: GGUFInfo, weights_bytes: int | None = None) -> ModelFootprint:
        """``weights_bytes``: the size of all the model's files (default: this file's size)."""
        size = weights_bytes if weights_bytes is not None else info.file_size or info.data_end
        sizes = {t.name: t.nbytes for t in info.tensors}
        embd = sizes.get("token_embd.weight", 0)
        output = sizes.get("output.weight", embd)  # tied: llama.cpp copies the embedding
        device = sum(sizes.values()) - embd + (0 if "output.weight" in sizes else embd)
        ffn, n_embd = as_int(info.arch_value("feed_forward_length")) or 0, info.n_embd or 0
        return cls(
            info.name,
            int(size),
            info.kv_bytes_per_token(KV_TYPE_BYTES),
            info.n_layers,
            device if sizes else 0,
            output,
            4 * (2 * ffn + 8 * n_embd) if ffn and n_embd else 0,
            4 * info.vocab_size,
        )

    def kv_bytes(self, n_ctx: int) -> int:
        return int((self.kv_bytes_per_token or 0) * n_ctx)

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
        return DevicePlan(weights, self.kv_bytes(n_ctx), n_ubatch * rows)


class Fit:
    FITS = "fits"
    TIGHT = "tight"
    TOO_BIG = "too big"


@dataclass(frozen=True)
class MemoryPlan:
    n_ctx: int
    target_weights: int
    draft_weights: int
    target_kv: int
    draft_kv: int
    overhead: int
    ram_needed: int
    vram_needed: int
    machine: MachineMemory
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def total(self) -> int:
        return self.ram_needed + self.vram_needed

    @property
    def fits(self) -> bool:
        return not self.warnings

    @property
    def fit(self) -> str:
        if self.warnings:
            return Fit.TOO_BIG
        if self.ram_needed > TIGHT_FRACTION * self.machine.ram_available:
            return Fit.TIGHT
        return Fit.FITS

    def summary(self) -> str:
        parts = [
            f"needs about {format_bytes(self.total)} at {self.n_ctx:,} tokens of context "
            f"(weights {format_bytes(self.target_weights + self.draft_weights)}, "
            f"KV caches {format_bytes(self.target_kv + self.draft_kv)}, "
            f"buffers {format_bytes(self.overhead)})"
        ]
        parts.append(f"{format_bytes(self.machine.ram_available)} of RAM available")
        if self.vram_needed:
            free = self.machine.vram_free
            parts.append(
                f"{format_bytes(self.vram_needed)} on the GPU"
                + (f" ({format_bytes(free)} free)" if free is not None else "")
            )
        text = "; ".join(parts)
        if self.warnings:
            text += ". " + " ".join(self.warnings)
        return text


def plan_memory(
    target: ModelFootprint,
    draft: ModelFootprint | None,
    n_ctx: int,
    *,
    machine: MachineMemory | None = None,
    target_gpu_layers: int = 0,
    draft_gpu_layers: int | None = None,
) -> MemoryPlan:
    """Estimate the memory a pair needs at ``n_ctx`` and say what will not fit.

    GPU layers follow :class:`RuntimeConfig`: 0 = CPU only, -1 = all; the offloaded share of a
    model's weights and KV cache is counted against VRAM, the rest against RAM.
    """
    if machine is None:
        machine = machine_memory()
    if draft_gpu_layers is None:
        draft_gpu_layers = target_gpu_layers
    ram = vram = 0
    costs: dict[str, tuple[int, int]] = {}
    for role, model, layers in (
        ("target", target, target_gpu_layers),
        ("draft", draft, draft_gpu_layers),
    ):
        if model is None:
            continue
        weights, kv = model.weights_bytes, model.kv_bytes(n_ctx)
        costs[role] = (weights, kv)
        share = _gpu_share(layers, model.n_layers)
        on_gpu = int((weights + kv) * share)
        vram += on_gpu
        ram += weights + kv - on_gpu + COMPUTE_OVERHEAD
    warnings: list[str] = []
    if ram > machine.ram_available:
        warnings.append(
            f"This will not fit in RAM: it needs about {format_bytes(ram)} but only "
            f"{format_bytes(machine.ram_available)} is available. Choose a smaller context, "
            "a smaller quantisation, or close other programs."
        )
    if vram:
        if machine.vram_free is None:
            warnings.append(
                "GPU layers are requested but the backend reports no GPU memory, so they will "
                "run on the CPU."
            )
        elif vram > machine.vram_free:
            warnings.append(
                f"The GPU part will not fit: it needs about {format_bytes(vram)} but only "
                f"{format_bytes(machine.vram_free)} of VRAM is free. Offload fewer layers."
            )
    for role, model in (("target", target), ("draft", draft)):
        if model is not None and model.kv_bytes_per_token is None:
            warnings.append(f"The {role}'s KV-cache size is unknown; the estimate is low.")
    t_w, t_kv = costs["target"]
    d_w, d_kv = costs.get("draft", (0, 0))
    overhead = COMPUTE_OVERHEAD * len(costs)
    return MemoryPlan(n_ctx, t_w, d_w, t_kv, d_kv, overhead, ram, vram, machine, tuple(warnings))


def _gpu_share(layers: int, n_layers: int | None) -> float:
    if layers == 0:
        return 0.0
    if layers < 0 or not n_layers:
        return 1.0
    return min(1.0, layers / (n_layers + 1))  # +1: the output layer


def file_fit(size: int | None, machine: MachineMemory, n_ctx: int = 4096) -> str | None:
    """A quick "fits your machine" hint for a file not yet read: its size plus an allowance
    for the KV cache (2% per 4k context) and buffers, against available RAM and free VRAM."""
    if size is None:
        return None
    need = size * (1 + 0.02 * n_ctx / 4096) + COMPUTE_OVERHEAD
    room = max(machine.ram_available, machine.vram_free or 0)
    if need > room:
        return Fit.TOO_BIG
    if need > TIGHT_FRACTION * room:
        return Fit.TIGHT
    return Fit.FITS


# ---------------------------------------------------------------------------------------------
# What this machine has


def machine_memory(*, probe_gpu: bool = True) -> MachineMemory:
    vm = psutil.virtual_memory()
    gpu = detect_vram() if probe_gpu else None
    if gpu is None:
        return MachineMemory(int(vm.available), int(vm.total))
    name, free, total = gpu
    return MachineMemory(int(vm.available), int(vm.total), free, total, name)


def detect_vram() -> tuple[str, int, int] | None:
    """(name, free, total) of the largest GPU the llama.cpp backend knows, or None.

    Best effort: asks ggml's device registry (``specchat.core.machine.backend_info``); a
    CPU-only build, a missing library or any error gives None.
    """

    best: tuple[str, int, int] | None = None
    for dev in gpu_devices():
        if dev.total is None:
            continue
        if best is None or dev.total > best[2]:
            best = (dev.description or dev.name, int(dev.free or 0), dev.total)
    return best
