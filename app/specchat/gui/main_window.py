"""The main window: conversations, the chat, the speculation toggle, models and the gauge.

It builds the widgets and menus and wires them to the objects that do the work: the chat's
`ChatSession`, the `ModelLoader` and the inference thread's `EngineController`.
"""

from __future__ import annotations

import logging
from html import escape
from typing import Any

from PySide6.QtCore import QCoreApplication, QEvent, Qt, QTimer
from PySide6.QtGui import QCloseEvent, QGuiApplication
from PySide6.QtWidgets import (
    QFileDialog,
    QLabel,
    QMainWindow,
    QSizePolicy,
    QSplitter,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from specchat.core.state.history import History
from specchat.core.state.settings import Settings, load_settings, save_settings
from specchat.core.types import GenerationStats, Mode
from specchat.gui.chat.column import ChatColumn
from specchat.gui.chat.conversations import ConversationList
from specchat.gui.chat.dialogue import ChatSession
from specchat.gui.chat.mode_selector import ModeSelector
from specchat.gui.menus import build_menus
from specchat.gui.models.loader import NO_MODELS_TEXT, ModelLoader
from specchat.gui.models.panel import ModelsPanel
from specchat.gui.resources import app_icon, stylesheet
from specchat.gui.stats.gauge import SpecGauge
from specchat.gui.threads.engine import EngineController
from specchat.gui.threads.requests import ModelsInfo

log = logging.getLogger(__name__)

MANAGER_MISSING = "The model manager is not available in this build."
READY_TEXT = (
    "<p><b>Ask anything.</b></p><p>Enter sends, Shift+Enter adds a line, Esc stops.<br>"
    "Pick how to speculate with the toggle above; the gauge on the right shows how much "
    "it pays.</p>"
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
        self.loader = ModelLoader(
            self.controller,
            settings=lambda: self.settings,
            update_settings=lambda **changes: self._save_settings(self.settings.with_(**changes)),
            history_db=lambda: self.history.path,
            parent=self,
        )
        self.compare_dialog: Any = None
        self.manager_dialog: Any = None
        self._closed = False

        self._build_widgets()
        self.menus = build_menus(self)
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
        self.mode_selector.set_head(None)
        self.mode_selector.set_mode(Mode.LOOKUP)  # kept when the saved mode is Draft or MTP
        self.mode_selector.set_mode(self._saved_mode())
        self.chat.set_highlight(self.settings.highlight_draft)
        self.chat.set_placeholder(READY_TEXT)
        self._update_busy(False)
        if self.history.recovery is not None:  # a damaged database was replaced (history.py)
            self.show_banner(escape(self.history.recovery.message), "error")

        if not self.loader.start(autoload):  # the first run: nothing to load
            self.chat.set_placeholder(NO_MODELS_TEXT)
            if open_manager_on_first_run:
                QTimer.singleShot(0, lambda: self.open_model_manager(quiet=True))

    @property
    def models(self) -> ModelsInfo:
        """What is loaded now."""
        return self.loader.models

    # -- construction -----------------------------------------------------------------------
    def _build_widgets(self) -> None:
        self.conversations = ConversationList(self.history)
        center = ChatColumn()
        self.chat, self.banner, self.input = center.chat, center.banner, center.input
        self.system_prompt = center.system_prompt
        self.send_button, self.stop_button = center.send_button, center.stop_button

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
        # what the lookup history holds stays in view at the right (status lines come and go)
        self.history_label = QLabel()
        self.history_label.setObjectName("historyLabel")
        self.history_label.setToolTip(
            "What Prompt lookup and Auto draft from besides this conversation: the saved"
            " conversations, indexed when the models loaded, and every reply since, added as it"
            " finishes (Settings: 'Lookup drafts from earlier conversations too')."
        )
        self.statusBar().addPermanentWidget(self.history_label)
        self.statusBar().showMessage("Starting…")

    def _connect(self) -> None:
        self.controller.busyChanged.connect(self._update_busy)
        m = self.loader
        m.loading.connect(self.models_panel.set_loading)
        m.loaded.connect(self._models_loaded)
        m.status.connect(self.statusBar().showMessage)
        m.historyIndexed.connect(self.history_label.setText)
        m.message.connect(self.show_banner)
        m.offloadDecided.connect(self.models_panel.set_offload)
        m.curveStatus.connect(self.models_panel.set_curve_status)
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
        s.notice.connect(self._session_notice)
        s.conversationChanged.connect(self._conversation_changed)
        s.historyChanged.connect(self.conversations.refresh)
        self.conversations.chosen.connect(self.open_conversation)
        self.conversations.newRequested.connect(self.new_chat)
        self.conversations.deleted.connect(self._conversation_deleted)

    # -- chat -------------------------------------------------------------------------------
    def send(self, text: str) -> None:
        if self.session.send(text):  # refuses an empty message, with a word in the status bar
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
        return GenerationStats.from_dict(w.stats) if w is not None and w.stats else None

    def _stream_finished(self, stats: GenerationStats | None) -> None:
        self.gauge.stop_following(stats)

    def _update_busy(self, busy: bool) -> None:
        has_model = self.models.target is not None
        self.send_button.setEnabled(not busy and has_model)
        self.stop_button.setEnabled(busy)
        self.menus.stop.setEnabled(busy)
        self.menus.regenerate.setEnabled(not busy and has_model)
        self.menus.edit.setEnabled(not busy)
        self.menus.compare.setEnabled(not busy and has_model)
        self.chat.set_busy(busy)

    def _saved_mode(self) -> Mode:
        """The user's last explicit choice (Auto for a new user)."""
        try:
            return Mode.parse(self.settings.mode)
        except ValueError:
            return Mode.AUTO

    def _mode_chosen(self, mode: Mode) -> None:
        self._save_settings(self.settings.with_(mode=mode.value))

    def set_highlight(self, on: bool) -> None:
        self.chat.set_highlight(on)
        self._save_settings(self.settings.with_(highlight_draft=on))

    def _session_notice(self, text: str, kind: str) -> None:
        if kind == "status":
            self.statusBar().showMessage(text, 10_000)
        else:
            self.show_banner(escape(text), kind)

    def show_banner(self, html: str, kind: str = "info") -> None:
        self.banner.show_message(html, kind)

    # -- models -----------------------------------------------------------------------------
    def _models_loaded(self, info: ModelsInfo) -> None:
        self.models_panel.set_info(info)
        self.gauge.set_notices(info.notices)  # settings the engine changed, pair warnings
        if info.notices:
            ready = self.statusBar().currentMessage()
            self.statusBar().showMessage(f"{ready} — note: " + "; ".join(info.notices))
        self.mode_selector.set_draft_available(info.has_draft)
        self.mode_selector.set_head(info.head)
        self.menus.unload_draft.setEnabled(info.has_draft)
        self.mode_selector.set_mode(self._saved_mode())
        self.chat.set_placeholder(READY_TEXT if info.target is not None else NO_MODELS_TEXT)
        self._update_busy(self.controller.busy)

    def open_target_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open target model", "", "GGUF (*.gguf)")
        if path:
            self.loader.open_target(path)

    def open_draft_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open draft model", "", "GGUF (*.gguf)")
        if path:
            self.loader.open_draft(path)

    def open_model_manager(self, quiet: bool = False) -> None:
        try:
            from specchat.gui.models.manager import ModelManagerDialog
        except Exception:  # missing from this build, or broken: the rest of the app works
            log.info("model manager unavailable", exc_info=True)
            if quiet:
                self.show_banner(NO_MODELS_TEXT, "info")
            else:
                self.show_banner(MANAGER_MISSING, "info")
            return
        if self.manager_dialog is None:
            self.manager_dialog = ModelManagerDialog(self)
            self.manager_dialog.pairChosen.connect(self.loader.use_pair)
        self.manager_dialog.show()
        self.manager_dialog.raise_()

    def show_first_run_help(self) -> None:
        self.show_banner(NO_MODELS_TEXT, "info")

    # -- dialogs ----------------------------------------------------------------------------
    def open_settings(self) -> None:
        from specchat.gui.settings_dialog import SettingsDialog

        dlg = SettingsDialog(self.settings, self)
        dlg.accepted.connect(lambda: self.apply_settings(dlg.settings()))
        dlg.open()

    def apply_settings(self, new: Settings) -> None:
        old = self.settings
        self._save_settings(new)
        self.loader.settings_changed(old, new)

    def _save_settings(self, new: Settings) -> None:
        self.settings = new
        try:
            save_settings(new)
        except OSError as exc:
            self.statusBar().showMessage(f"Could not save settings: {exc}")

    def open_compare(self) -> None:
        from specchat.gui.stats.compare_view import CompareDialog

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
            head=self.models.head,
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
