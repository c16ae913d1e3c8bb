"""The window's middle column: the conversation's system prompt, the banner, the chat and the
input box with Send and Stop."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLineEdit, QPushButton, QVBoxLayout, QWidget

from specchat.gui.chat.input_box import InputBox
from specchat.gui.chat.view import ChatView
from specchat.gui.widgets import Banner


class ChatColumn(QWidget):
    def __init__(self) -> None:
        super().__init__()
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
        col = QVBoxLayout(self)
        col.setContentsMargins(6, 6, 6, 6)
        col.addWidget(self.system_prompt)
        col.addWidget(self.banner)
        col.addWidget(self.chat, 1)
        col.addLayout(input_row)
