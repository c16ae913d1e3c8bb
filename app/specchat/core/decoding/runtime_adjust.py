"""From the runtime settings a user asked for to the ones a model really runs with, saying why.

`adjust_config(requested, facts)` is a pure function: the requested `RuntimeConfig`, plus what
is known about the model and the machine (`RuntimeFacts`), give the effective config and one
sentence per change. Nothing is changed silently: the engine keeps the sentences
(`Engine.notices`), the CLI prints them in its stats line and the window in its gauge and status
bar. ("auto" GPU layers are resolved before this, by :mod:`specchat.core.offload`.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from .runtime import RuntimeConfig

__all__ = ["Adjusted", "RuntimeFacts", "adjust_config", "cpu_count"]


@dataclass(frozen=True)
class RuntimeFacts:
    n_ctx_train: int | None  # the model's trained context (None: the header does not say)
    cpus: int  # CPUs this process may run on
    gpu_offload: bool  # whether this llama.cpp build can put layers on a GPU


@dataclass(frozen=True)
class Adjusted:
    config: RuntimeConfig
    notices: tuple[str, ...] = ()


def cpu_count() -> int:
    """CPUs available to this process (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _cpus(n: int) -> str:
    return f"{n} CPU" if n == 1 else f"{n} CPUs"


def adjust_config(requested: RuntimeConfig, facts: RuntimeFacts) -> Adjusted:
    """The config to load with, and a notice for every value that had to change."""
    cfg = requested
    notices: list[str] = []
    if cfg.n_gpu_layers != 0 and not facts.gpu_offload:
        asked = "-1 (all)" if cfg.n_gpu_layers < 0 else f"{cfg.n_gpu_layers:,}"
        notices.append(
            f"GPU layers {asked} ignored: this llama-cpp-python build cannot offload to a GPU, "
            "so the model runs on the CPU (install a CUDA or Metal build to use the GPU)"
        )
        cfg = replace(cfg, n_gpu_layers=0)
    train = facts.n_ctx_train
    if train and cfg.n_ctx > train:
        notices.append(
            f"context {cfg.n_ctx:,} tokens cut to {train:,}: the model was trained on "
            f"{train:,} tokens at most"
        )
        cfg = replace(cfg, n_ctx=max(train, 256))  # RuntimeConfig's floor; the runtime caps it
    if cfg.n_threads > facts.cpus:
        notices.append(
            f"threads {cfg.n_threads:,} lowered to {facts.cpus}: this machine has "
            f"{_cpus(facts.cpus)}, and more threads than CPUs makes llama.cpp many times slower"
        )
        cfg = replace(cfg, n_threads=facts.cpus)
    return Adjusted(cfg, tuple(notices))
