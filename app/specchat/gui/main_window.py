"""The main window: conversations, the chat, the speculation toggle, models and the gauge."""

from __future__ import annotations

import logging
from html import escape
from pathlib import Path
from typing import Any

from PySide6.QtCore import QCoreApplication, QEvent, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLineEdit,
    QMainWindow,
    QMenu,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from ..core.models.local_models import (
    FETCH_DEFAULT_COMMAND,
    default_pair_installed,
    default_pair_paths,
    installed_models,
)
from ..core.state.history import History
from ..core.state.settings import Settings, load_settings, save_settings
from ..core.types import GenerationStats, Mode
from .chat_session import ChatSession
from .chat_view import ChatView
from .conversations import ConversationList
from .gauge import SpecGauge
from .mode_selector import ModeSelector
from .models_panel import ModelsPanel
from .resources import app_icon, stylesheet
from .widgets import Banner, InputBox
from .workers import EngineController, LoadRequest, ModelsInfo

log = logging.getLogger(__name__)

MANAGER_MISSING = "The model manager is not available in this build."
READY_TEXT = (
    "<p><b>Ask anything.</b></p><p>Enter sends, Shift+Enter adds a line, Esc stops.<br>"
    "Pick how to speculate with the toggle above; the gauge on the right shows how much "
    "it pays.</p>"
)
NO_MODELS_TEXT = (
    "<p><b>No model is loaded yet.</b></p>"
    "<p>To get the default pair (Qwen2.5-Coder 1.5B with a 0.5B draft, about 1.4 GB), run this "
    f"in a terminal:</p><p><code>{FETCH_DEFAULT_COMMAND}</code></p>"
    "<p>then choose <b>Models → Use default pair</b>. Or open a local GGUF file with "
    "<b>File → Open target…</b></p>"
)


class MainWindow(QMainWindow):
    def __init__(
        self,
        *,
        controller: EngineController | None = None,
        history: History | None = None,
        settings: Settings | None = None,
        autoload: bool = True,
        open_manager_on_first_run: bool = True,
    ) -> None:
        super().__init__()
        self.setWindowTitle("SpecChat")
        self.setWindowIcon(app_icon())
        self.resize(1280, 800)
        self.settings = settings or load_settings()
        self._owns_history = history is None
        self.history = history or History()
        self.controller = controller or EngineController()
        self.models = ModelsInfo()
        self.compare_dialog: Any = None
        self.manager_dialog: Any = None
        self._closed = False

        self._build_widgets()
        self._build_menus()
        self.session = ChatSession(
            self.chat,
            self.history,
            self.controller,
            settings=lambda: self.settings,
            mode=self.mode_selector.mode,
            models=lambda: self.models,
            parent=self,
        )
        self._connect()
        self.mode_selector.set_draft_available(False)
        self.mode_selector.set_mode(Mode.LOOKUP)
        self.chat.set_highlight(self.settings.highlight_draft)
        self.chat.set_placeholder(READY_TEXT)
        self._update_busy(False)

        if self.controller.engine is not None:
            self.controller.describe()
        elif autoload:
            self._load_initial(open_manager_on_first_run)

    # -- construction -----------------------------------------------------------------------
    def _build_widgets(self) -> None:
        self.conversations = ConversationList(self.history)
        self.chat = ChatView()
        self.system_prompt = QLineEdit()
        self.system_prompt.setObjectName("systemPrompt")
        self.system_prompt.setPlaceholderText("System prompt for this conversation (optional)")
        self.banner = Banner()
        self.input = InputBox()
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("sendButton")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("stopButton")
        self.stop_button.setToolTip("Stop the reply (Esc)")
        input_row = QHBoxLayout()
        input_row.addWidget(self.input, 1)
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        input_row.addLayout(buttons)
        center = QWidget()
        col = QVBoxLayout(center)
        col.setContentsMargins(6, 6, 6, 6)
        col.addWidget(self.system_prompt)
        col.addWidget(self.banner)
        col.addWidget(self.chat, 1)
        col.addLayout(input_row)

        self.models_panel = ModelsPanel()
        self.gauge = SpecGauge()
        right = QWidget()
        rcol = QVBoxLayout(right)
        rcol.setContentsMargins(6, 6, 6, 6)
        rcol.addWidget(self.models_panel)
        rcol.addWidget(self.gauge, 1)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.conversations)
        self.splitter.addWidget(center)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([230, 760, 290])
        self.setCentralWidget(self.splitter)

        self.mode_selector = ModeSelector()
        self.toolbar = QToolBar("Speculation")
        self.toolbar.setObjectName("mainToolbar")
        self.toolbar.setMovable(False)
        self.toolbar.addWidget(self.mode_selector)
        spacer = QWidget()
        spacer.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.toolbar.addWidget(spacer)
        self.addToolBar(self.toolbar)
        self.statusBar().showMessage("Starting…")

    def _action(
        self, menu: QMenu, text: str, slot: Any, shortcut: Any = None, tip: str = ""
    ) -> QAction:
        act = QAction(text, self)
        if shortcut is not None:
            act.setShortcut(QKeySequence(shortcut))
        if tip:
            act.setStatusTip(tip)
        act.triggered.connect(slot)
        menu.addAction(act)
        return act

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file = bar.addMenu("&File")
        self.new_action = self._action(
            file, "&New chat", self.new_chat, QKeySequence.StandardKey.New
        )
        file.addSeparator()
        self._action(file, "Open &target…", self.open_target_dialog, "Ctrl+O")
        self._action(file, "Open &draft…", self.open_draft_dialog)
        self.unload_draft_action = self._action(file, "&Unload draft", self.unload_draft)
        file.addSeparator()
        self._action(file, "&Settings…", self.open_settings, QKeySequence.StandardKey.Preferences)
        file.addSeparator()
        self._action(file, "&Quit", self.close, QKeySequence.StandardKey.Quit)

        chat = bar.addMenu("&Chat")
        self.stop_action = self._action(chat, "&Stop", self.stop)
        self.regen_action = self._action(chat, "&Regenerate", self.session_regenerate, "Ctrl+R")
        self.edit_action = self._action(chat, "&Edit last message", self.edit_last, "Ctrl+E")
        self._action(chat, "&Copy last reply", self.copy_last_reply, "Ctrl+Shift+C")
        chat.addSeparator()
        self.compare_action = self._action(
            chat,
            "Co&mpare off vs on…",
            self.open_compare,
            "Ctrl+K",
            "Run the same prompt with speculation off, then on, and compare",
        )
        self.toolbar.addAction(self.compare_action)

        view = bar.addMenu("&View")
        self.highlight_action = self._action(
            view,
            "&Highlight draft tokens",
            self.set_highlight,
            "Ctrl+Shift+H",
            "Shade the text that the draft proposed and the target accepted",
        )
        self.highlight_action.setCheckable(True)
        self.highlight_action.setChecked(self.settings.highlight_draft)
        view.addSeparator()
        self.conv_action = self._action(view, "&Conversations", self.conversations.setVisible)
        self.conv_action.setCheckable(True)
        self.conv_action.setChecked(True)

        models = bar.addMenu("&Models")
        self._action(models, "Use &default pair", self.use_default_pair)
        self.installed_menu = models.addMenu("&Installed models")
        self.installed_menu.aboutToShow.connect(self._fill_installed_menu)
        models.addSeparator()
        self._action(models, "&Manage models…", self.open_model_manager)

        help_ = bar.addMenu("&Help")
        self._action(help_, "Getting &models", self.show_first_run_help)

        esc = QShortcut(QKeySequence(Qt.Key.Key_Escape), self)
        esc.setContext(Qt.ShortcutContext.WindowShortcut)
        esc.activated.connect(self.escape)

    def _connect(self) -> None:
        c = self.controller
        c.loading.connect(self._on_loading)
        c.loaded.connect(self._on_loaded)
        c.loadFailed.connect(self._on_load_failed)
        c.busyChanged.connect(self._update_busy)
        self.input.submitted.connect(self.send)
        self.send_button.clicked.connect(lambda: self.send(self.input.toPlainText()))
        self.stop_button.clicked.connect(self.stop)
        self.system_prompt.editingFinished.connect(
            lambda: self.session.set_system_prompt(self.system_prompt.text())
        )
        self.mode_selector.modeChosen.connect(self._mode_chosen)
        self.chat.editRequested.connect(self.edit_last)
        s = self.session
        s.streamStarted.connect(lambda: self.gauge.follow(lambda: self.session.live_stats))
        s.streamFinished.connect(self._stream_finished)
        s.error.connect(lambda m: self.show_banner(escape(m), "error"))
        s.conversationChanged.connect(self._conversation_changed)
        s.historyChanged.connect(self.conversations.refresh)
        self.conversations.chosen.connect(self.open_conversation)
        self.conversations.newRequested.connect(self.new_chat)
        self.conversations.deleted.connect(self._conversation_deleted)

    # -- chat -------------------------------------------------------------------------------
    def send(self, text: str) -> None:
        if not text.strip():
            return
        if self.session.send(text):
            self.input.clear()
            if self.banner.kind == "edit":
                self.banner.hide()

    def stop(self) -> None:
        self.session.stop()

    def escape(self) -> None:
        if self.session.streaming:
            self.session.stop()
        elif self.session.editing:
            self.session.cancel_edit()
            self.input.clear()
            self.banner.hide()

    def session_regenerate(self) -> None:
        self.session.regenerate()

    def edit_last(self) -> None:
        text = self.session.begin_edit()
        if text is None:
            return
        self.input.setPlainText(text)
        self.input.setFocus()
        self.show_banner(
            "Editing your last message: Enter sends it again (the reply after it is replaced), "
            "Esc cancels.",
            "edit",
        )

    def copy_last_reply(self) -> None:
        w = self.chat.last("assistant")
        if w is not None:
            QGuiApplication.clipboard().setText(w.text)

    def new_chat(self) -> None:
        self.session.new_conversation()
        self.input.setFocus()

    def open_conversation(self, conversation_id: int) -> None:
        self.session.open(conversation_id)

    def _conversation_changed(self, conversation_id: int) -> None:
        self.system_prompt.setText(self.session.system_prompt)
        self.conversations.set_current(conversation_id)
        self.gauge.set_stats(self._last_stats())

    def _conversation_deleted(self, conversation_id: int) -> None:
        if self.session.conversation_id == conversation_id:
            self.session.new_conversation()

    def _last_stats(self) -> GenerationStats | None:
        w = self.chat.last("assistant")
        if w is None or not w.stats:
            return None
        s = w.stats
        st = GenerationStats(mode=str(s.get("mode", "off")))
        for key in ("tokens", "drafted", "accepted", "verify_steps", "prompt_tokens"):
            if isinstance(s.get(key), int):
                setattr(st, key, s[key])
        st.ttft_s = float(s.get("ttft_s") or 0.0)
        st.elapsed_s = float(s.get("total_s") or 0.0)
        tps = s.get("tokens_per_s")
        if isinstance(tps, (int, float)) and tps > 0 and st.tokens > 1:
            st.decode_s = (st.tokens - 1) / tps
        pos = s.get("per_position_acceptance") or []
        st.draft_pos_proposed = [1000] * len(pos)
        st.draft_pos_accepted = [round(float(r) * 1000) for r in pos]
        st.note = str(s.get("note") or "")
        return st

    def _stream_finished(self, stats: GenerationStats | None) -> None:
        self.gauge.stop_following(stats)

    def _update_busy(self, busy: bool) -> None:
        has_model = self.models.target is not None
        self.send_button.setEnabled(not busy and has_model)
        self.stop_button.setEnabled(busy)
        self.stop_action.setEnabled(busy)
        self.regen_action.setEnabled(not busy and has_model)
        self.edit_action.setEnabled(not busy)
        self.compare_action.setEnabled(not busy and has_model)
        self.chat.set_busy(busy)

    def _mode_chosen(self, mode: Mode) -> None:
        self._save_settings(self.settings.with_(mode=mode.value))

    def set_highlight(self, on: bool) -> None:
        self.chat.set_highlight(on)
        self._save_settings(self.settings.with_(highlight_draft=on))

    def show_banner(self, html: str, kind: str = "info") -> None:
        self.banner.show_message(html, kind)

    # -- models -----------------------------------------------------------------------------
    def _load_initial(self, open_manager: bool) -> None:
        s = self.settings
        target = Path(s.target_path) if s.target_path else None
        draft = Path(s.draft_path) if s.draft_path else None
        if target is None or not target.is_file():
            target = draft = None
            if default_pair_installed():
                target, default_draft = default_pair_paths()
                draft = default_draft if s.use_draft else None
        if target is None:
            self.chat.set_placeholder(NO_MODELS_TEXT)
            self.statusBar().showMessage("No model loaded")
            if open_manager:
                QTimer.singleShot(0, lambda: self.open_model_manager(quiet=True))
            return
        if draft is not None and not draft.is_file():
            draft = None
        self.load_models(target, draft)

    def load_models(self, target: Path, draft: Path | None) -> None:
        self.controller.load(
            LoadRequest(target, draft, self.settings.target_config(), self.settings.draft_config())
        )
        self.models_panel.set_loading("Loading…")

    def _on_loading(self, text: str) -> None:
        self.models_panel.set_loading(text)
        self.statusBar().showMessage(text)

    def _on_loaded(self, info: ModelsInfo) -> None:
        self.models = info
        self.models_panel.set_loading(None)
        self.models_panel.set_info(info)
        self.mode_selector.set_draft_available(info.has_draft)
        self.unload_draft_action.setEnabled(info.has_draft)
        preferred = Mode.parse(self.settings.mode) if not self.settings.problems() else Mode.LOOKUP
        if preferred is not Mode.DRAFT or info.has_draft:
            self.mode_selector.set_mode(preferred)
        if info.target is not None:
            self.chat.set_placeholder(READY_TEXT)
            self.statusBar().showMessage(
                f"Ready: {info.target.name}" + (f" + {info.draft.name}" if info.draft else "")
            )
            changes: dict[str, Any] = {"target_path": str(info.target.path)}
            if info.draft is not None:
                changes["draft_path"] = str(info.draft.path)
            self._save_settings(self.settings.with_(**changes))
        else:
            self.chat.set_placeholder(NO_MODELS_TEXT)
            self.statusBar().showMessage("No model loaded")
        self._update_busy(self.controller.busy)

    def _on_load_failed(self, which: str, message: str) -> None:
        self.show_banner(f"<b>Could not load the {which} model.</b> {escape(message)}", "error")
        self.statusBar().showMessage(f"Loading the {which} model failed")

    def _current_draft_path(self) -> Path | None:
        return self.models.draft.path if self.models.draft is not None else None

    def open_target(self, path: str | Path) -> None:
        self.load_models(Path(path), self._current_draft_path())

    def open_draft(self, path: str | Path) -> None:
        if self.models.target is None:
            self.show_banner("Load a target model first, then its draft.", "error")
            return
        self._save_settings(self.settings.with_(use_draft=True))
        self.load_models(self.models.target.path, Path(path))

    def unload_draft(self) -> None:
        self._save_settings(self.settings.with_(use_draft=False, draft_path=""))
        self.controller.unload_draft()

    def open_target_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open target model", "", "GGUF (*.gguf)")
        if path:
            self.open_target(path)

    def open_draft_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open draft model", "", "GGUF (*.gguf)")
        if path:
            self.open_draft(path)

    def use_default_pair(self) -> None:
        if not default_pair_installed():
            self.show_first_run_help()
            return
        target, draft = default_pair_paths()
        self._save_settings(self.settings.with_(use_draft=True))
        self.load_models(target, draft)

    def use_pair(self, target: str, draft: str) -> None:
        """From the model manager: load a target and (optionally) its draft."""
        self.load_models(Path(target), Path(draft) if draft else None)

    def _fill_installed_menu(self) -> None:
        menu = self.installed_menu
        menu.clear()
        files = installed_models()
        if not files:
            menu.addAction("(none — see Help → Getting models)").setEnabled(False)
        for path in files:
            sub = menu.addMenu(path.name)
            sub.addAction("Use as target").triggered.connect(
                lambda _=False, p=path: self.open_target(p)
            )
            sub.addAction("Use as draft").triggered.connect(
                lambda _=False, p=path: self.open_draft(p)
            )

    def open_model_manager(self, quiet: bool = False) -> None:
        try:
            from .model_manager import ModelManagerDialog  # type: ignore[import-not-found]
        except Exception:  # not written yet, or broken: the rest of the app works
            log.info("model manager unavailable", exc_info=True)
            if quiet:
                self.show_banner(NO_MODELS_TEXT, "info")
            else:
                self.show_banner(MANAGER_MISSING, "info")
            return
        if self.manager_dialog is None:
            self.manager_dialog = ModelManagerDialog(self)
            self.manager_dialog.pairChosen.connect(self.use_pair)
        self.manager_dialog.show()
        self.manager_dialog.raise_()

    def show_first_run_help(self) -> None:
        self.show_banner(NO_MODELS_TEXT, "info")

    # -- dialogs ----------------------------------------------------------------------------
    def open_settings(self) -> None:
        from .settings_dialog import SettingsDialog

        dlg = SettingsDialog(self.settings, self)
        dlg.accepted.connect(lambda: self.apply_settings(dlg.settings()))
        dlg.open()

    def apply_settings(self, new: Settings) -> None:
        old = self.settings
        self._save_settings(new)
        if old.needs_reload(new) and self.models.target is not None:
            self.load_models(self.models.target.path, self._current_draft_path())

    def _save_settings(self, new: Settings) -> None:
        self.settings = new
        try:
            save_settings(new)
        except OSError as exc:
            self.statusBar().showMessage(f"Could not save settings: {exc}")

    def open_compare(self) -> None:
        from .compare_view import CompareDialog

        if self.compare_dialog is not None and self.compare_dialog.running:
            self.compare_dialog.show()
            self.compare_dialog.raise_()
            return
        prompt = self.input.toPlainText().strip()
        if not prompt:
            last = self.chat.last("user")
            prompt = last.text if last is not None else ""
        if self.compare_dialog is not None:
            self.compare_dialog.deleteLater()
        self.compare_dialog = CompareDialog(
            self.controller,
            prompt=prompt,
            system_prompt=self.session.system_prompt,
            settings=self.settings,
            mode=self.mode_selector.mode(),
            has_draft=self.models.has_draft,
            parent=self,
        )
        self.compare_dialog.show()

    # -- closing ----------------------------------------------------------------------------
    def closeEvent(self, event: QCloseEvent) -> None:
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        """Stop a reply in progress, join the inference thread, save what streamed."""
        if self._closed:
            return
        self._closed = True
        self.session.stop()
        self.gauge.stop_following()
        if not self.controller.shutdown():
            log.warning("the inference thread did not stop in time")
        # Deliver the tokens and the end signal the thread sent before it stopped.
        QCoreApplication.sendPostedEvents(None, 0)
        self.session.save_partial()
        if self.compare_dialog is not None:
            self.compare_dialog.close()
        stop_manager = getattr(self.manager_dialog, "shutdown", None)
        if callable(stop_manager):
            stop_manager()  # its own download/search threads
        try:
            self.history.purge_deleted()
        finally:
            if self._owns_history:
                self.history.close()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.ApplicationPaletteChange:
            app = QCoreApplication.instance()
            if app is not None and hasattr(app, "setStyleSheet"):
                app.setStyleSheet(stylesheet())  # re-resolve palette() colours
