"""Help → System information: what `specchat-cli doctor` prints, in a dialog with a Copy button."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from specchat.core.doctor import SystemFacts, gather, render


class SystemInfoDialog(QDialog):
    def __init__(self, facts: SystemFacts | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("System information")
        self.setObjectName("systemInfoDialog")
        self.resize(900, 560)
        self.facts = facts if facts is not None else gather()
        self.text = QPlainTextEdit(render(self.facts))
        self.text.setObjectName("systemInfo")
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        note = QLabel("The same report, in a terminal: <code>specchat-cli doctor</code>")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        copy = QPushButton("Copy")
        copy.clicked.connect(self.copy)
        buttons.addButton(copy, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(self.text, 1)
        lay.addWidget(note)
        lay.addWidget(buttons)

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.text.toPlainText())


def show_system_info(parent: QWidget) -> SystemInfoDialog:
    dlg = SystemInfoDialog(parent=parent)
    dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dlg.show()
    return dlg
