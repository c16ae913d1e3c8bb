"""Side-by-side comparison window: the same prompt with speculation off, then on.

The passes alternate off and on in several short rounds on the inference thread
(`core.bench.compare.run_comparison`); the first round streams into two panes, the later ones
only measure. Then a table shows what was measured, and the summary gives the median speedup
with its spread, or no figure and why (another process took the CPU, the rounds disagree), and
whether the texts match. The widgets and texts are in `compare_parts`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from specchat.core.bench.compare import DEFAULT_ROUNDS, CompareResult
from specchat.core.engines.local import Message
from specchat.core.state.settings import Settings
from specchat.core.types import Mode, TokenEvent
from specchat.gui.stats.compare_parts import Pane, fill_table, make_table, summary_text
from specchat.gui.stats.stats_text import mode_label
from specchat.gui.threads.engine import EngineController

ROUND_TOKENS = 128  # each pass of a round stops here, even when replies may be longer


class CompareDialog(QDialog):
    def __init__(
        self,
        engine: EngineController,
        *,
        prompt: str,
        system_prompt: str,
        settings: Settings,
        mode: Mode,
        has_draft: bool,
        head: str | None = None,
        parent: QWidget | None = None,
    ) -> None:
        """`head`: the name of the target's MTP head or assistant (None: MTP is not offered)."""
        super().__init__(parent)
        self.setWindowTitle("Compare: speculation off vs on")
        self.setObjectName("compareDialog")
        self.resize(1000, 760)
        self.engine = engine
        self.settings = settings
        self.system_prompt = system_prompt
        self.compare_result: CompareResult | None = None
        self.rid: int | None = None
        self.seed: int | None = None
        self._build_controls(prompt, mode, has_draft, head)
        self._build_layout()
        self._timer = QTimer(self)
        self._timer.setInterval(250)
        self._timer.timeout.connect(self._show_live)
        engine.compareEvent.connect(self._on_event)
        engine.compareFinished.connect(self._on_finished)
        engine.failed.connect(self._on_failed)
        self._update_buttons()

    def _build_controls(self, prompt: str, mode: Mode, has_draft: bool, head: str | None) -> None:
        self.prompt = QPlainTextEdit(prompt)
        self.prompt.setPlaceholderText("Prompt to compare")
        self.prompt.setMaximumHeight(80)
        self.mode_box = QComboBox()
        missing: dict[Mode, str] = {}  # modes not offered, and why
        if not has_draft:
            missing[Mode.DRAFT] = "No draft model is loaded"
        if not head:
            missing[Mode.MTP] = "The target has no MTP head"
        for m in Mode:
            if m is Mode.OFF:
                continue
            self.mode_box.addItem(head if m is Mode.MTP and head else mode_label(m), m)
            if m in missing:
                item = self.mode_box.model().item(self.mode_box.count() - 1)  # type: ignore[attr-defined]
                item.setEnabled(False)
                item.setToolTip(missing[m])
        if mode is Mode.OFF or mode in missing:
            mode = Mode.DRAFT if has_draft else Mode.LOOKUP
        self.mode_box.setCurrentIndex(max(0, self.mode_box.findData(mode)))
        self.run_button = QPushButton("Run comparison")
        self.run_button.setDefault(True)
        self.run_button.clicked.connect(self.run)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        self.stop_button.setEnabled(False)
        self.copy_button = QPushButton("Copy JSON")
        self.copy_button.clicked.connect(self.copy_json)
        self.save_button = QPushButton("Save JSON…")
        self.save_button.clicked.connect(self.save_json_dialog)
        self.close_button = QPushButton("Close")
        self.close_button.clicked.connect(self.close)
        self.off_pane = Pane("Speculation off")
        self.on_pane = Pane(mode_label(mode))
        self.table = make_table()
        self.summary = QLabel(
            f"Runs the prompt {DEFAULT_ROUNDS} times each way with the same seed and settings, "
            "speculation off and then on in turn, each from a cold cache."
        )
        self.summary.setObjectName("compareSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

    def _build_layout(self) -> None:
        panes = QSplitter(Qt.Orientation.Horizontal)
        panes.addWidget(self.off_pane)
        panes.addWidget(self.on_pane)
        top = QGridLayout()
        top.addWidget(QLabel("Prompt"), 0, 0, Qt.AlignmentFlag.AlignTop)
        top.addWidget(self.prompt, 0, 1, 1, 3)
        top.addWidget(QLabel("Compare off with"), 1, 0)
        top.addWidget(self.mode_box, 1, 1)
        top.addWidget(self.run_button, 1, 2)
        top.addWidget(self.stop_button, 1, 3)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        for b in (self.copy_button, self.save_button, self.close_button):
            buttons.addWidget(b)
        lay = QVBoxLayout(self)
        lay.addLayout(top)
        lay.addWidget(panes, 3)
        lay.addWidget(self.table, 2)
        lay.addWidget(self.summary)
        lay.addLayout(buttons)

    # -- running ----------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.rid is not None

    def mode(self) -> Mode:
        return Mode(self.mode_box.currentData())

    def messages(self) -> list[Message]:
        out: list[Message] = []
        if self.system_prompt.strip():
            out.append({"role": "system", "content": self.system_prompt})
        out.append({"role": "user", "content": self.prompt.toPlainText().strip()})
        return out

    def run(self) -> None:
        if self.running or not self.prompt.toPlainText().strip():
            return
        if self.engine.busy:
            self.summary.setText("Wait for the reply in progress to finish, then run again.")
            return
        params = self.settings.generation_params()
        self.seed = params.seed if params.seed is not None else random.randrange(2**31)
        params = params.with_(
            seed=self.seed, record_top2=True, max_tokens=min(params.max_tokens, ROUND_TOKENS)
        )
        mode = self.mode()
        self.compare_result = None
        self.off_pane.clear("Speculation off")
        self.on_pane.clear(mode_label(mode))
        self.table.setHorizontalHeaderLabels(["Speculation off", mode_label(mode)])
        self.table.clearContents()
        self.summary.setText(
            f"Running round 1 of {DEFAULT_ROUNDS}: speculation off first, then "
            f"{mode_label(mode)} (seed {self.seed})…"
        )
        self.rid = self.engine.compare(self.messages(), params, mode)
        self._timer.start()
        self._update_buttons()

    def stop(self) -> None:
        if self.running:
            self.engine.stop()

    @Slot(int, str, object)
    def _on_event(self, rid: int, name: str, ev: TokenEvent) -> None:
        if rid != self.rid:
            return
        (self.off_pane if name == "off" else self.on_pane).append(ev, name == "on")
        if name == "on" and ev.finish_reason is not None and DEFAULT_ROUNDS > 1:
            self.summary.setText(
                f"Round 1 is shown; measuring rounds 2 to {DEFAULT_ROUNDS} (not shown)…"
            )

    def _show_live(self) -> None:
        self.off_pane.show_live()
        self.on_pane.show_live()

    @Slot(int, object)
    def _on_finished(self, rid: int, result: CompareResult) -> None:
        if rid != self.rid:
            return
        self.rid = None
        self._timer.stop()
        self._show_live()
        self.compare_result = result
        self._fill(result)
        self._update_buttons()

    @Slot(int, str)
    def _on_failed(self, rid: int, message: str) -> None:
        if rid != self.rid:
            return
        self.rid = None
        self._timer.stop()
        self.summary.setText(f"The comparison failed: {message}")
        self._update_buttons()

    def _fill(self, r: CompareResult) -> None:
        fill_table(self.table, r)
        self.summary.setText(self.summary_text(r))

    def summary_text(self, r: CompareResult) -> str:
        return summary_text(r, self.seed)

    # -- export -----------------------------------------------------------------------------
    def result_json(self) -> str:
        if self.compare_result is None:
            return ""
        data = self.compare_result.as_dict()
        data["seed"] = self.seed
        data["prompt"] = self.messages()
        return json.dumps(data, indent=2, ensure_ascii=False)

    def copy_json(self) -> None:
        if self.compare_result is not None:
            QGuiApplication.clipboard().setText(self.result_json())

    def save_json(self, path: str | Path) -> None:
        Path(path).write_text(self.result_json() + "\n", encoding="utf-8")

    def save_json_dialog(self) -> None:
        if self.compare_result is None:
            return
        path, _ = QFileDialog.getSaveFileName(
            self, "Save comparison", "comparison.json", "JSON (*.json)"
        )
        if path:
            self.save_json(path)

    def _update_buttons(self) -> None:
        self.run_button.setEnabled(not self.running)
        self.stop_button.setEnabled(self.running)
        self.prompt.setReadOnly(self.running)
        self.mode_box.setEnabled(not self.running)
        has = self.compare_result is not None
        self.copy_button.setEnabled(has)
        self.save_button.setEnabled(has)

    def closeEvent(self, event: object) -> None:
        self.stop()
        super().closeEvent(event)  # type: ignore[arg-type]
