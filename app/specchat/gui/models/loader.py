"""Which models are loaded, and loading others: what the window's model actions ask for.

`ModelLoader` turns "open this target", "use the default pair", "the settings changed" into
`LoadRequest`s for the inference thread, reports progress, success and failure as texts for the
window to show, remembers the loaded pair in the settings, and decides at start-up what to load
(the last session's pair, else the installed default pair, else nothing: the first run).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot

from specchat.core.placement.offload import OffloadDecision, resolve_offload
from specchat.core.state.settings import Settings
from specchat.core.store.local_models import (
    FETCH_DEFAULT_COMMAND,
    default_pair_installed,
    default_pair_paths,
)
from specchat.gui.threads.engine import EngineController
from specchat.gui.threads.requests import LoadRequest, ModelsInfo

NO_MODELS_TEXT = (
    "<p><b>No model is loaded yet.</b></p>"
    "<p>To get the default pair (Qwen2.5-Coder 1.5B with a 0.5B draft, about 1.4 GB), run this "
    f"in a terminal:</p><p><code>{FETCH_DEFAULT_COMMAND}</code></p>"
    "<p>then choose <b>Models → Use default pair</b>. Or open a local GGUF file with "
    "<b>File → Open target…</b></p>"
)
NO_MODEL_STATUS = "No model loaded"

log = logging.getLogger(__name__)


class ModelLoader(QObject):
    loading = Signal(str)  # a load started or moved on ("" once it ended)
    loaded = Signal(object)  # ModelsInfo: what is loaded after a load, successful or not
    status = Signal(str)  # a line for the status bar
    historyIndexed = Signal(str)  # what the lookup history index holds (kept in view)
    message = Signal(str, str)  # HTML for the banner, and its kind ("error" | "info")
    offloadDecided = Signal(object)  # OffloadDecision: where the pair being loaded will run
    curveStatus = Signal(str)  # the target's cost curve being measured ("" when not)

    def __init__(
        self,
        engine: EngineController,
        *,
        settings: Callable[[], Settings],
        update_settings: Callable[..., None],
        history_db: Callable[[], Path | None] = lambda: None,
        parent: QObject | None = None,
    ) -> None:
        """`settings()` gives the current settings; `update_settings(**changes)` saves
        changes (the loaded paths, whether to use a draft)."""
        super().__init__(parent)
        self.engine = engine
        self._settings = settings
        self._update_settings = update_settings
        self._history_db = history_db
        self.models = ModelsInfo()
        self.offload: OffloadDecision | None = None
        engine.loading.connect(self._on_loading)
        engine.loaded.connect(self._on_loaded)
        engine.loadFailed.connect(self._on_failed)
        engine.historyIndexed.connect(self.historyIndexed.emit)
        engine.curveStatus.connect(self.curveStatus.emit)

    @property
    def draft_path(self) -> Path | None:
        return self.models.draft.path if self.models.draft is not None else None

    # -- start-up -------------------------------------------------------------------------------
    def start(self, autoload: bool = True) -> bool:
        """Show what the inference thread holds already, or (with `autoload`) load the last
        session's pair, else the installed default pair. False: nothing to load (first run)."""
        if self.engine.engine is not None:
            self.engine.describe()
            return True
        if not autoload:
            return True
        s = self._settings()
        target = Path(s.target_path) if s.target_path else None
        draft = Path(s.draft_path) if s.draft_path else None
        if target is None or not target.is_file():
            target = draft = None
            if default_pair_installed():
                target, default_draft = default_pair_paths()
                draft = default_draft if s.use_draft else None
        if target is None:
            self.status.emit(NO_MODEL_STATUS)
            return False
        if draft is not None and not draft.is_file():
            draft = None
        self.load(target, draft)
        return True

    # -- requests -------------------------------------------------------------------------------
    def load(self, target: Path, draft: Path | None) -> None:
        s = self._settings()
        decision = self.decide_offload(target, draft)
        t_layers = decision.target.layers if decision is not None else None
        d_layers = decision.draft.layers if decision is not None and decision.draft else None
        history = self._history_db() if s.lookup_history else None
        self.engine.load(
            LoadRequest(target, draft, s.target_config(t_layers), s.draft_config(d_layers), history)
        )
        self.loading.emit("Loading…")

    def decide_offload(self, target: Path, draft: Path | None) -> OffloadDecision | None:
        """GPU layers for the pair, "auto" resolved from the memory figures
        (core/placement/offload.py)."""
        s = self._settings()
        try:
            decision = resolve_offload(
                target, draft, s.n_ctx, s.target_gpu_layers, s.draft_gpu_layers
            )
        except Exception:  # an unreadable file or no llama.cpp: the load itself says what
            log.info("no offload decision for %s", target, exc_info=True)
            return None
        log.info("GPU offload: %s", decision.summary())
        self.offload = decision
        self.offloadDecided.emit(decision)
        return decision

    def open_target(self, path: str | Path) -> None:
        """Load `path` as the target, keeping the current draft."""
        self.load(Path(path), self.draft_path)

    def open_draft(self, path: str | Path) -> None:
        if self.models.target is None:
            self.message.emit("Load a target model first, then its draft.", "error")
            return
        self._update_settings(use_draft=True)
        self.load(self.models.target.path, Path(path))

    def unload_draft(self) -> None:
        self._update_settings(use_draft=False, draft_path="")
        self.engine.unload_draft()

    def use_default_pair(self) -> None:
        if not default_pair_installed():
            self.message.emit(NO_MODELS_TEXT, "info")
            return
        target, draft = default_pair_paths()
        self._update_settings(use_draft=True)
        self.load(target, draft)

    def use_pair(self, target: str, draft: str) -> None:
        """From the model manager: a target and (optionally, "" for none) its draft."""
        self.load(Path(target), Path(draft) if draft else None)

    def settings_changed(self, old: Settings, new: Settings) -> None:
        """Reload the loaded models when a setting they were loaded with changed; the lookup
        history setting applies at once."""
        if old.needs_reload(new) and self.models.target is not None:
            self.load(self.models.target.path, self.draft_path)
        elif old.lookup_history != new.lookup_history:  # (a load takes it with it)
            self.engine.set_history(self._history_db() if new.lookup_history else None)

    # -- reports from the inference thread ------------------------------------------------------
    @Slot(str)
    def _on_loading(self, text: str) -> None:
        self.loading.emit(text)
        self.status.emit(text)

    @Slot(object)
    def _on_loaded(self, info: ModelsInfo) -> None:
        self.models = info
        self.loading.emit("")
        if info.target is not None:
            draft = f" + {info.draft.name}" if info.draft is not None else ""
            self.status.emit(f"Ready: {info.target.name}{draft}")
            changes: dict[str, Any] = {"target_path": str(info.target.path)}
            if info.draft is not None:
                changes["draft_path"] = str(info.draft.path)
            self._update_settings(**changes)
        else:
            self.status.emit(NO_MODEL_STATUS)
        self.loaded.emit(info)

    @Slot(str, str)
    def _on_failed(self, which: str, message: str) -> None:
        self.message.emit(f"<b>Could not load the {which} model.</b> {escape(message)}", "error")
        self.status.emit(f"Loading the {which} model failed")
