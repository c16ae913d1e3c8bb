"""The user's settings, kept as a small JSON file in the data directory (no Qt).

Values are checked with the same rules the engine applies (`GenerationParams.validate()` and
`RuntimeConfig.validate()`), so a form can show exactly the engine's messages.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from specchat.core.decoding.config import RuntimeConfig
from specchat.core.params import GenerationParams, params_from
from specchat.core.placement.offload import AUTO, GpuLayers, parse_gpu_layers
from specchat.core.state.paths import data_dir
from specchat.core.types import Mode

SETTINGS_FILE = "settings.json"
# Each an int, or "auto" (resolved in core/placement/offload.py).
GPU_FIELDS = ("target_gpu_layers", "draft_gpu_layers")


@dataclass(frozen=True)
class Settings:
    # sampling
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    max_tokens: int = 512
    repeat_penalty: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()  # stop strings
    # speculation
    mode: str = Mode.AUTO.value  # new users: the cost model picks; an explicit choice is kept
    k_max: int = 8
    p_min: float = 0.5
    lookup_history: bool = True  # Lookup also drafts from earlier conversations (all local)
    # models
    n_ctx: int = 4096
    target_gpu_layers: GpuLayers = AUTO
    draft_gpu_layers: GpuLayers = AUTO
    n_threads: int = 0
    target_path: str = ""  # last loaded target ("" = the default pair)
    draft_path: str = ""
    use_draft: bool = True
    # view
    highlight_draft: bool = True

    # -- derived configurations -------------------------------------------------------------
    def generation_params(self, **overrides: Any) -> GenerationParams:
        return params_from(self, **overrides)

    def target_config(self, gpu_layers: int | None = None) -> RuntimeConfig:
        """``gpu_layers``: the resolved count when the setting is "auto" (else 0 for auto)."""
        layers = gpu_layers if gpu_layers is not None else _layers(self.target_gpu_layers)
        return RuntimeConfig(n_ctx=self.n_ctx, n_gpu_layers=layers, n_threads=self.n_threads)

    def draft_config(self, gpu_layers: int | None = None) -> RuntimeConfig:
        layers = gpu_layers if gpu_layers is not None else _layers(self.draft_gpu_layers)
        return RuntimeConfig(n_ctx=self.n_ctx, n_gpu_layers=layers, n_threads=self.n_threads)

    def problems(self) -> list[str]:
        """Every reason these settings are refused (empty when they are fine)."""
        out: list[str] = []
        try:
            self.generation_params().validate()
        except ValueError as exc:
            text = str(exc).removeprefix("invalid generation settings: ")
            out.extend(p for p in text.split("; ") if p)
        # RuntimeConfig.validate() stops at the first problem: check one field at a time.
        for layers in (self.target_gpu_layers, self.draft_gpu_layers):
            try:
                parse_gpu_layers(layers)
            except ValueError as exc:
                if str(exc) not in out:
                    out.append(str(exc))
        for name, value in (("n_ctx", self.n_ctx), ("n_threads", self.n_threads)):
            try:
                RuntimeConfig(**{name: value}).validate()
            except ValueError as exc:
                if str(exc) not in out:
                    out.append(str(exc))
        try:
            Mode.parse(self.mode)
        except ValueError as exc:
            out.append(str(exc))
        return out

    def validate(self) -> Settings:
        problems = self.problems()
        if problems:
            raise ValueError("invalid settings: " + "; ".join(problems))
        return self

    def needs_reload(self, other: Settings) -> bool:
        """Whether going from self to `other` needs the models loaded again."""
        keys = ("n_ctx", "target_gpu_layers", "draft_gpu_layers", "n_threads")
        return any(getattr(self, k) != getattr(other, k) for k in keys)

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)

    # -- persistence ------------------------------------------------------------------------
    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Settings:
        """Known keys with a value of the right type; anything else keeps its default."""
        base = cls()
        good: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                continue
            value, default = data[f.name], getattr(base, f.name)
            if f.name in GPU_FIELDS:
                if value == AUTO or (isinstance(value, int) and not isinstance(value, bool)):
                    good[f.name] = value
            elif f.name == "seed":
                if value is None or (isinstance(value, int) and not isinstance(value, bool)):
                    good[f.name] = value
            elif f.name == "stop":
                if isinstance(value, (list, tuple)) and all(isinstance(x, str) for x in value):
                    good[f.name] = tuple(value)
            elif isinstance(default, bool):
                if isinstance(value, bool):
                    good[f.name] = value
            elif isinstance(default, float):
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    good[f.name] = float(value)
            elif isinstance(default, int):
                if isinstance(value, int) and not isinstance(value, bool):
                    good[f.name] = value
            elif isinstance(value, type(default)):
                good[f.name] = value
        candidate = replace(base, **good)
        if not candidate.problems():
            return candidate
        # Drop the offending values one by one rather than losing everything.
        for name in list(good):
            trial = replace(base, **{k: v for k, v in good.items() if k != name})
            if not trial.problems():
                return trial
        return base


def _layers(value: GpuLayers) -> int:
    return value if isinstance(value, int) else 0  # "auto" unresolved: the CPU


def settings_path() -> Path:
    return data_dir() / SETTINGS_FILE


def load_settings(path: Path | None = None) -> Settings:
    path = path or settings_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return Settings()
    return Settings.from_dict(data) if isinstance(data, dict) else Settings()


def save_settings(settings: Settings, path: Path | None = None) -> None:
    """Write atomically (temporary file, then rename)."""
    path = path or settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(settings.as_dict(), indent=2), encoding="utf-8")
    os.replace(tmp, path)
