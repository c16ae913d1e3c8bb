"""Runtime settings: what a model is loaded with, and how a request becomes what runs.

`RuntimeConfig` is what a user asks for (context, GPU layers, threads, batch) and refuses absurd
values with a message that names the limit. `adjust_config(requested, facts)` is a pure
function: the requested config, plus what is known about the model and the machine
(`RuntimeFacts`), give the effective config and one sentence per change. Nothing is changed
silently: the engine keeps the sentences (`Engine.notices`), the CLI prints them in its stats
line and the window in its gauge and status bar. ("auto" GPU layers are resolved before this,
by :mod:`specchat.core.placement.offload`.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace


class ModelLoadError(RuntimeError):
    """A model file passed validation but llama.cpp could not load it (or its context)."""


class ContextFullError(RuntimeError):
    pass


class PrefillCancelled(Exception):
    """A cancel request interrupted a long prompt prefill (the cache keeps what was decoded)."""


MAX_THREADS = 1024


@dataclass(frozen=True)
class RuntimeConfig:
    n_ctx: int = 4096
    n_gpu_layers: int = 0  # -1 = all
    n_threads: int = 0  # 0 = number of physical cores
    n_batch: int = 512

    def validate(self) -> RuntimeConfig:
        if not 256 <= self.n_ctx <= 1_048_576:
            raise ValueError("context size must be between 256 and 1,048,576 tokens")
        if not -1 <= self.n_gpu_layers <= 10_000:
            raise ValueError("GPU layers must be -1 (all), 0 (CPU only) or a layer count")
        if self.n_threads < 0:
            raise ValueError("threads must be 0 (automatic) or a positive count")
        if self.n_threads > MAX_THREADS:
            raise ValueError(
                f"threads must be 0 (automatic) or at most {MAX_THREADS:,}, not {self.n_threads:,}"
            )
        if not 8 <= self.n_batch <= 8192:
            raise ValueError("batch size must be between 8 and 8192")
        return self

    def threads(self) -> int:
        if self.n_threads > 0:
            return self.n_threads
        try:
            import psutil

            n = psutil.cpu_count(logical=False)
        except Exception:  # pragma: no cover - psutil is a dependency
            n = None
        return max(1, n or os.cpu_count() or 1)


@dataclass(frozen=True)
class RuntimeFacts:
    n_ctx_train: int | None  # the model's trained context (None: the header does not say)
    cpus: int  # CPUs this process may run on
    gpu_offload: bool  # whether this llama.cpp build can put layers on a GPU


@dataclass(frozen=True)
class Adjusted:
    config: RuntimeConfig
    notices: tuple[str, ...] = ()


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
