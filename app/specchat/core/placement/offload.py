"""How many layers of each model go to the GPU: ``"auto"``, or the user's own number.

``decide_offload`` is a pure function of the memory figures: when the build offloads and target
+ draft + both KV caches (+ their compute buffers) fit the GPU's free memory, every layer of both
goes to the GPU; when not, the draft is placed whole first (a draft left on the CPU while its
target runs on the GPU is a classic cause of "speculation made it slower") and the target gets
the layers that still fit; on a CPU-only build, nothing. ``resolve_offload`` gathers the figures
(GGUF headers, ggml's device memory) and calls it. Explicit numbers are kept as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specchat.core.gguf.header import read_gguf_info
from specchat.core.machine.backend_choice import choose_backend, detect_build_facts
from specchat.core.machine.backend_info import gpu_offload_supported
from specchat.core.placement.footprint import COMPUTE_OVERHEAD, ModelFootprint
from specchat.core.placement.memory_plan import detect_vram
from specchat.core.units import format_bytes

__all__ = [
    "AUTO",
    "GpuLayers",
    "OffloadDecision",
    "Placement",
    "decide_offload",
    "parse_gpu_layers",
    "resolve_offload",
]

AUTO = "auto"
GpuLayers = int | str  # a layer count, -1 (all), 0 (CPU only) or "auto"
CPU_ONLY = "CPU-only build"


def parse_gpu_layers(value: object) -> GpuLayers:
    """ "auto", or an int from -1 (all) up; raises ValueError with a readable message."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text == AUTO:
            return AUTO
        try:
            value = int(text)
        except ValueError:
            raise ValueError(
                f"GPU layers must be auto, -1 (all), 0 or a count, not {text!r}"
            ) from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"GPU layers must be auto, -1 (all), 0 or a count, not {value!r}")
    if not -1 <= value <= 10_000:
        raise ValueError("GPU layers must be -1 (all), 0 (CPU only) or a layer count")
    return value


@dataclass(frozen=True)
class Placement:
    """Where one model runs: ``layers`` as RuntimeConfig.n_gpu_layers takes it, and why."""

    layers: int  # -1 = all, 0 = CPU only, else that many layers on the GPU
    reason: str
    n_layers: int | None = None  # the model's layer count, when known

    def where(self) -> str:
        """ "GPU (all 28 layers)", "GPU 20/28 layers, rest on the CPU", "CPU"."""
        if self.layers == 0:
            return "CPU"
        total = f"{self.n_layers + 1}" if self.n_layers else None  # +1: the output layer
        if self.layers < 0 or (self.n_layers and self.layers > self.n_layers):
            return f"GPU (all {total} layers)" if total else "GPU (all layers)"
        return (
            f"GPU {self.layers}/{total} layers, rest on the CPU"
            if total
            else f"GPU, {self.layers} layers"
        )


@dataclass(frozen=True)
class OffloadDecision:
    target: Placement
    draft: Placement | None
    device: str | None = None  # the GPU the figures are for
    advice: str = ""  # what the user could do (a CPU-only build on a machine with a GPU)

    def summary(self) -> str:
        parts = [f"target: {self.target.where()} ({self.target.reason})"]
        if self.draft is not None:
            parts.append(f"draft: {self.draft.where()} ({self.draft.reason})")
        return "; ".join(parts)


def _need(model: ModelFootprint, n_ctx: int) -> int:
    """GPU memory for the whole model: weights, KV cache, compute buffers (as llama.cpp
    allocates them when the tensor list is known, else the file size and an allowance)."""
    plan = model.device_plan(n_ctx)
    if plan is not None:
        return plan.total
    return model.weights_bytes + model.kv_bytes(n_ctx) + COMPUTE_OVERHEAD


def _compute(model: ModelFootprint, n_ctx: int) -> int:
    plan = model.device_plan(n_ctx)
    return plan.compute if plan is not None else COMPUTE_OVERHEAD


def _layers_in(model: ModelFootprint, n_ctx: int, room: int) -> int:
    """How many of the model's layers fit in ``room`` bytes (0 when the layer count is unknown)."""
    compute = _compute(model, n_ctx)
    if not model.n_layers or room <= compute:
        return 0
    per_layer = (_need(model, n_ctx) - compute) / (model.n_layers + 1)
    return max(0, min(model.n_layers, int((room - compute) // per_layer)))


def _share(model: ModelFootprint, n_ctx: int, layers: int) -> int:
    """GPU memory an explicit layer count takes (counted first, before "auto" is decided)."""
    if layers == 0:
        return 0
    if layers < 0 or not model.n_layers or layers > model.n_layers:
        return _need(model, n_ctx)
    return int((_need(model, n_ctx) - _compute(model, n_ctx)) * layers / (model.n_layers + 1))


def _explicit(layers: int, offload: bool, n_layers: int | None) -> Placement:
    if layers == 0:
        return Placement(0, "set to CPU only", n_layers)
    if not offload:
        asked = "all layers" if layers < 0 else f"{layers} layers"
        return Placement(0, f"{CPU_ONLY} ({asked} asked for the GPU)", n_layers)
    return Placement(layers, "set in the settings" if layers > 0 else "all layers asked", n_layers)


def decide_offload(
    target: ModelFootprint,
    draft: ModelFootprint | None,
    n_ctx: int,
    *,
    offload: bool,
    vram_free: int | None,
    target_layers: GpuLayers = AUTO,
    draft_layers: GpuLayers = AUTO,
) -> tuple[Placement, Placement | None]:
    """Placements of target and draft. ``offload``: the build can offload to a GPU;
    ``vram_free``: the GPU's free memory as llama.cpp reports it (None: unknown)."""
    models = {"target": (target, target_layers)}
    if draft is not None:
        models["draft"] = (draft, draft_layers)
    out: dict[str, Placement] = {}
    room = vram_free or 0
    for role, (model, setting) in models.items():  # explicit numbers first: they are kept
        if setting != AUTO:
            out[role] = _explicit(int(setting), offload, model.n_layers)
            if offload:
                room -= _share(model, n_ctx, out[role].layers)
    autos = [role for role in ("draft", "target") if role in models and role not in out]
    if autos and not offload:
        for role in autos:
            out[role] = Placement(0, CPU_ONLY, models[role][0].n_layers)
    elif autos and vram_free is None:
        for role in autos:
            why = "the backend reports no GPU memory, so nothing is offloaded"
            out[role] = Placement(0, why, models[role][0].n_layers)
    elif autos:
        total = sum(_need(models[r][0], n_ctx) for r in autos)
        if total <= room:
            for role in autos:
                why = f"all fits: {format_bytes(total)} needed, {format_bytes(room)} free"
                out[role] = Placement(-1, why, models[role][0].n_layers)
        else:
            for role in autos:  # the draft first
                model = models[role][0]
                need = _need(model, n_ctx)
                if need <= room:
                    out[role] = Placement(-1, f"fits whole ({format_bytes(need)})", model.n_layers)
                    room -= need
                    continue
                layers = _layers_in(model, n_ctx, room)
                why = (
                    f"{format_bytes(total)} needed for everything, "
                    f"{format_bytes(max(room, 0))} of GPU memory left for it"
                )
                out[role] = Placement(layers, why, model.n_layers)
                room = 0
    return out["target"], out.get("draft")


def resolve_offload(
    target_path: str | Path,
    draft_path: str | Path | None,
    n_ctx: int,
    target_layers: GpuLayers = AUTO,
    draft_layers: GpuLayers = AUTO,
) -> OffloadDecision:
    """Read the models' headers and the backend's figures, then `decide_offload`."""

    target = ModelFootprint.from_info(read_gguf_info(target_path))
    draft = ModelFootprint.from_info(read_gguf_info(draft_path)) if draft_path else None
    offload = gpu_offload_supported()
    gpu = detect_vram() if offload else None
    t, d = decide_offload(
        target,
        draft,
        n_ctx,
        offload=offload,
        vram_free=gpu[1] if gpu else None,
        target_layers=parse_gpu_layers(target_layers),
        draft_layers=parse_gpu_layers(draft_layers),
    )
    advice = ""
    if not offload:
        facts = detect_build_facts()
        if facts.has_gpu:
            try:
                choice = choose_backend(facts)
            except ValueError:
                choice = None
            if choice is not None and choice.backend != "cpu":
                advice = (
                    f"this machine has a GPU but llama-cpp-python was built for the CPU only: "
                    f"`specchat-cli doctor` gives the command that rebuilds it for {choice.label}"
                )
    return OffloadDecision(t, d, gpu[0] if gpu else None, advice)
