"""What the window asks the inference thread for (a load, a reply) and what it hears back about
the loaded models: plain values handed across the queued signals of `engine.py`."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from specchat.core.decoding.runtime import RuntimeConfig
from specchat.core.engines.local import LoadedModelInfo, Message
from specchat.core.params import GenerationParams
from specchat.core.types import Mode


@dataclass(frozen=True)
class LoadRequest:
    target: Path
    draft: Path | None
    target_config: RuntimeConfig = field(default_factory=RuntimeConfig)
    draft_config: RuntimeConfig = field(default_factory=RuntimeConfig)
    history_db: Path | None = None  # saved conversations for Lookup's history index (None: off)


@dataclass(frozen=True)
class ModelsInfo:
    """What is loaded now (after a load, successful or not)."""

    target: LoadedModelInfo | None = None
    draft: LoadedModelInfo | None = None
    notices: tuple[str, ...] = ()  # settings changed at load time, pair warnings (Engine.notices)
    head: str | None = None  # the target's MTP head or assistant (Engine.head_name), for Mode.MTP

    @property
    def has_draft(self) -> bool:
        return self.draft is not None

    @property
    def has_head(self) -> bool:
        return self.head is not None


@dataclass(frozen=True)
class GenerateRequest:
    messages: tuple[Message, ...]
    params: GenerationParams
    mode: Mode
    cancel: threading.Event
    fit: bool = False  # leave out the oldest exchanges when the conversation outgrows the context
