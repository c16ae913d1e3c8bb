"""What doctor says about the selected target, from its GGUF header alone: whether it is a
hybrid model, whether llama.cpp can roll its recurrent state back (and this llama-cpp-python
passes the snapshots at all), what those snapshots cost, and whether an MTP head is built in;
and the rows `doctor.py` shows for it. No Qt.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specchat.core.gguf.header import GGUFError, read_gguf_info
from specchat.core.gguf.recurrent import recurrent_flags
from specchat.core.placement.footprint import ModelFootprint
from specchat.core.units import format_bytes

__all__ = ["TargetFacts", "target_facts", "target_rows"]


@dataclass(frozen=True)
class TargetFacts:
    """The selected target, from its GGUF header: is it hybrid, can its state be rolled back,
    and what its rollback snapshots cost (the memory plan's figures)."""

    path: str
    architecture: str = ""
    hybrid: bool = False
    recurrent_layers: int | None = None  # of `layers` (trunk layers; None: not known here)
    layers: int | None = None
    rollback: bool = True  # the architecture is in llama.cpp's list (a transformer: True)
    build_rollback: bool = True  # this llama-cpp-python has n_rs_seq at all
    snapshots: int = 0  # what a target context asks llama.cpp for
    state_bytes: int | None = 0  # one recurrent state (None: size not known here)
    snapshot_bytes: int = 0
    on_gpu: bool = False  # where the state goes: with the layers (the settings' GPU layers)
    mtp_head: int = 0  # built-in NextN layers: an MTP head loads with the target
    error: str | None = None  # the header could not be read

    @property
    def name(self) -> str:
        return Path(self.path).name


def _build_has_rollback() -> bool:
    """Whether the llama-cpp-python here passes rollback snapshots to llama.cpp at all."""
    try:
        import llama_cpp
    except Exception:
        return False
    fields = {name for name, *_ in getattr(llama_cpp.llama_context_params, "_fields_", ())}
    return "n_rs_seq" in fields and hasattr(llama_cpp, "llama_n_rs_seq")


def target_facts(
    path: str | Path, *, gpu: bool = False, build_rollback: bool | None = None
) -> TargetFacts:
    """What doctor says about a target, from its header (a read of its first megabytes).
    ``gpu``: its layers go to a GPU (and its recurrent state with them)."""
    build = _build_has_rollback() if build_rollback is None else build_rollback
    try:
        info = read_gguf_info(path)
    except (GGUFError, OSError) as exc:
        return TargetFacts(str(path), error=str(exc))
    fp = ModelFootprint.from_info(info)
    flags = recurrent_flags(info)
    return TargetFacts(
        str(path),
        info.architecture or "?",
        fp.hybrid,
        sum(flags) if flags is not None else None,
        len(flags) if flags is not None else info.n_layers,
        fp.rollback,
        build,
        fp.snapshots if build else 0,
        fp.state_bytes,
        fp.snapshot_bytes if build else 0,
        gpu,
        fp.head_layers,
    )


def target_rows(t: TargetFacts) -> list[tuple[str, str]]:
    if t.error is not None:
        return [("Target", f"{t.path}: cannot read its header: {t.error}")]
    if not t.hybrid:
        kind = f"{t.architecture}, a transformer: rejected draft tokens are cut from its KV cache"
        out = [("Target", f"{t.name} ({kind})")]
    else:
        layers = (
            f"{t.recurrent_layers} of {t.layers} layers recurrent"
            if t.recurrent_layers is not None
            else "recurrent layers"
        )
        out = [("Target", f"{t.name} ({t.architecture}, hybrid: {layers})")]
        if not t.rollback:
            text = (
                f"no: llama.cpp cannot roll back {t.architecture}'s recurrent state, "
                "so SpecChat does not speculate on this target"
            )
        elif not t.build_rollback:
            text = "no: this llama-cpp-python has no rollback snapshots (n_rs_seq)"
        else:
            where = "on the GPU, with its layers" if t.on_gpu else "in RAM"
            if t.state_bytes:
                size = (
                    f"{format_bytes(t.state_bytes)} each, {format_bytes(t.snapshot_bytes)} "
                    f"in all, {where}"
                )
            else:
                size = f"of a state whose size SpecChat does not know, {where}"
            text = (
                f"yes: {t.snapshots} snapshots of its recurrent state ({size}); "
                f"drafts of up to {t.snapshots} tokens"
            )
        out.append(("Hybrid rollback", text))
    if t.mtp_head:
        out.append(
            (
                "MTP head",
                f"built in ({t.mtp_head} NextN layer{'s' if t.mtp_head != 1 else ''}): "
                "loaded as a second copy of the target with its own KV cache "
                "(on a GPU its layers take memory again)",
            )
        )
    return out
