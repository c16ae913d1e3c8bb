"""Will a target/draft pair fit this machine? An estimate made before anything is loaded.

Needed: the weights of both models (their file sizes: llama.cpp maps them into memory whole),
both KV caches at the chosen context (``GGUFInfo.kv_bytes_per_token``; for a hybrid model only
its attention layers), and a compute-buffer allowance per model. Compared with the RAM that is
available now (psutil) and, for layers offloaded to a GPU, with the free VRAM the llama.cpp
backend reports (when it reports any).

A hybrid target (recurrent layers beside attention: Qwen3.5, LFM2, Nemotron-H) also keeps its
recurrent state and, to roll a rejected draft back, ``HYBRID_ROLLBACK_TOKENS`` snapshots of it
(``core.gguf.recurrent``: the same count the runtime asks llama.cpp for), on the device of its
layers. A drafter costs what it loads: an MTP sidecar its weights, the KV cache of its NextN
blocks and buffers; a Gemma 4 assistant its weights and buffers (it reads the target's KV
cache); a target's built-in MTP head is a second load of the target file with its NextN blocks
(on a CPU the mapped file's pages are shared; on a GPU its layers take memory again) with a
KV cache of its own. Each model's needs are its `ModelFootprint` (footprint.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import psutil

from specchat.core.machine.backend_info import gpu_devices
from specchat.core.placement.footprint import COMPUTE_OVERHEAD, ModelFootprint
from specchat.core.units import format_bytes

__all__ = [
    "Fit",
    "MachineMemory",
    "MemoryPlan",
    "detect_vram",
    "file_fit",
    "machine_memory",
    "plan_memory",
]

log = logging.getLogger(__name__)

TIGHT_FRACTION = 0.85  # above this share of the available memory a plan is "tight"


@dataclass(frozen=True)
class MachineMemory:
    ram_available: int
    ram_total: int
    vram_free: int | None = None  # None: the backend reports no GPU memory
    vram_total: int | None = None
    gpu_name: str | None = None


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
    # a hybrid target's recurrent state: the live state and `snapshots` copies of it for
    # rollback (`snapshot_bytes` of the total); a hybrid draft's state (no snapshots)
    target_recurrent: int = 0
    snapshots: int = 0
    snapshot_bytes: int = 0
    draft_recurrent: int = 0
    head_bytes: int = 0  # the target's built-in MTP head: its KV, buffers, GPU copy of layers
    notes: tuple[str, ...] = ()  # what the estimate leaves out (not a reason it will not fit)

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
        extra = ""
        if self.target_recurrent or self.draft_recurrent:
            extra += (
                f", recurrent state {format_bytes(self.target_recurrent + self.draft_recurrent)}"
            )
            if self.snapshots:
                extra += (
                    f" with {self.snapshots} rollback snapshots "
                    f"({format_bytes(self.snapshot_bytes)})"
                )
        if self.head_bytes:
            extra += f", built-in MTP head {format_bytes(self.head_bytes)}"
        parts = [
            f"needs about {format_bytes(self.total)} at {self.n_ctx:,} tokens of context "
            f"(weights {format_bytes(self.target_weights + self.draft_weights)}, "
            f"KV caches {format_bytes(self.target_kv + self.draft_kv)}{extra}, "
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
        if self.warnings or self.notes:
            text += ". " + " ".join((*self.warnings, *self.notes))
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
    model's weights, KV cache and recurrent state is counted against VRAM, the rest against
    RAM. A hybrid target's rollback snapshots count with its recurrent state (a draft keeps
    none); a target's built-in MTP head counts unless the draft is a sidecar or an assistant,
    which drafts instead of it.
    """
    if machine is None:
        machine = machine_memory()
    if draft_gpu_layers is None:
        draft_gpu_layers = target_gpu_layers
    ram = vram = 0
    costs: dict[str, tuple[int, int, int]] = {}
    for role, model, layers in (
        ("target", target, target_gpu_layers),
        ("draft", draft, draft_gpu_layers),
    ):
        if model is None:
            continue
        weights, kv = model.weights_bytes, model.kv_bytes(n_ctx)
        recurrent = model.recurrent_bytes(as_target=role == "target")
        costs[role] = (weights, kv, recurrent)
        share = _gpu_share(layers, model.n_layers)
        on_gpu = int((weights + kv + recurrent) * share)
        vram += on_gpu
        ram += weights + kv + recurrent - on_gpu + COMPUTE_OVERHEAD
    head = 0
    if target.head_layers and (draft is None or not draft.drafter):
        # a second load of the target with its NextN blocks: on a CPU the mapped file's pages
        # are shared; offloaded layers go to the GPU again; its own KV cache and buffers
        share = _gpu_share(target_gpu_layers, target.n_layers)
        copy = target.device_weights_bytes or target.weights_bytes
        own = target.head_kv_bytes(n_ctx) + target.head_compute()
        on_gpu = int((copy + own) * share)
        head = on_gpu + int(own * (1 - share))
        vram += on_gpu
        ram += int(own * (1 - share))
    warnings, notes = _what_will_not_fit(target, draft, ram, vram, machine)
    t_w, t_kv, t_rs = costs["target"]
    d_w, d_kv, d_rs = costs.get("draft", (0, 0, 0))
    overhead = COMPUTE_OVERHEAD * len(costs)
    return MemoryPlan(
        n_ctx, t_w, d_w, t_kv, d_kv, overhead, ram, vram, machine, tuple(warnings),
        t_rs, target.snapshots, target.snapshot_bytes, d_rs, head, tuple(notes),
    )  # fmt: skip


def _what_will_not_fit(
    target: ModelFootprint,
    draft: ModelFootprint | None,
    ram: int,
    vram: int,
    machine: MachineMemory,
) -> tuple[list[str], list[str]]:
    """What a plan needing `ram` and `vram` bytes must say: the warnings (what will not fit, an
    estimate known to be low) and the notes (a recurrent state SpecChat cannot size)."""
    warnings: list[str] = []
    notes: list[str] = []
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
        if model is not None and model.state_bytes is None:
            notes.append(
                f"The {role}'s recurrent-state size is unknown (an architecture SpecChat "
                "cannot size); the estimate is low."
            )
    return warnings, notes


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
