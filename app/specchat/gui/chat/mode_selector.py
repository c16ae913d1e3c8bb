"""The speculation toggle: one segmented button per member of the Mode enum."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QButtonGroup, QHBoxLayout, QLabel, QToolButton, QWidget

from specchat.core.types import Mode
from specchat.gui.stats.stats_text import MODE_TIPS, mode_label

NO_DRAFT_TIP = (
    "No draft model is loaded. Load one with File → Open draft… or Models → Use default pair."
)
LABEL_MAX = 28  # a longer head name is cut short on its button (whole in the tooltip)
NO_HEAD_TIP = (
    "The loaded target has no MTP head. A model with built-in MTP layers (NextN) offers it by "
    "itself; a separate head (an mtp-*.gguf) or a Gemma 4 assistant is loaded with "
    "File → Open draft…"
)


class ModeSelector(QWidget):
    """Built from `Mode`, so a new member shows up by itself.

    `modeChanged(Mode)` on any change; `modeChosen(Mode)` only when the user clicked.
    """

    modeChanged = Signal(object)
    modeChosen = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("modeSelector")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        label = QLabel("Speculation:")
        label.setContentsMargins(0, 0, 6, 0)
        lay.addWidget(label)
        self.group = QButtonGroup(self)
        self.group.setExclusive(True)
        self.buttons: dict[Mode, QToolButton] = {}
        members = list(Mode)
        for i, mode in enumerate(members):
            b = QToolButton()
            b.setText(mode_label(mode))
            b.setToolTip(MODE_TIPS.get(mode.value, ""))
            b.setCheckable(True)
            b.setObjectName(f"mode-{mode.value}")
            pos = "first" if i == 0 else "last" if i == len(members) - 1 else "middle"
            b.setProperty("segment", pos)
            self.group.addButton(b)
            self.buttons[mode] = b
            lay.addWidget(b)
            b.toggled.connect(lambda on, m=mode: self._toggled(m, on))
            b.clicked.connect(lambda _=False, m=mode: self.modeChosen.emit(m))
        self.buttons[Mode.OFF].setChecked(True)
        self.head: str | None = None  # the name the MTP button shows (None: no head loaded)

    def _toggled(self, mode: Mode, on: bool) -> None:
        if on:
            self.modeChanged.emit(mode)

    def mode(self) -> Mode:
        for mode, b in self.buttons.items():
            if b.isChecked():
                return mode
        return Mode.OFF

    def set_mode(self, mode: Mode | str) -> None:
        m = Mode.parse(mode)
        b = self.buttons[m]
        if b.isEnabled():
            b.setChecked(True)

    def set_draft_available(self, available: bool) -> None:
        """Disable the draft option (with the reason as tooltip) when no draft is loaded."""
        b = self.buttons.get(Mode.DRAFT)
        if b is None:
            return
        b.setEnabled(available)
        b.setToolTip(MODE_TIPS["draft"] if available else NO_DRAFT_TIP)
        if not available and b.isChecked():
            self._fall_back()

    def set_head(self, name: str | None) -> None:
        """Offer MTP under the name of the loaded target's head ("Built-in MTP", the
        assistant's name), or disable it (with the reason as tooltip) when it has none."""
        b = self.buttons.get(Mode.MTP)
        if b is None:
            return
        self.head = name or None
        text = self.head or mode_label(Mode.MTP)
        b.setText(text if len(text) <= LABEL_MAX else text[: LABEL_MAX - 1] + "…")
        b.setEnabled(self.head is not None)
        if self.head is None:
            b.setToolTip(NO_HEAD_TIP)
        else:
            b.setToolTip(f"{self.head}: {MODE_TIPS['mtp']}")
        if self.head is None and b.isChecked():
            self._fall_back()

    def _fall_back(self) -> None:
        """The chosen drafter went away: Lookup (needs no model) takes over."""
        self.buttons[Mode.LOOKUP if Mode.LOOKUP in self.buttons else Mode.OFF].setChecked(True)
