"""The main window's menu bar, its toolbar action and its shortcuts.

`build_menus(window)` creates them, each action connected to the window (or to the object that
does the work), and returns the actions whose state the window changes later.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import QMenu

from ..core.models.local_models import installed_models
from .models.loader import ModelLoader

if TYPE_CHECKING:
    from .main_window import MainWindow


@dataclass(frozen=True)
class WindowActions:
    new_chat: QAction
    unload_draft: QAction
    stop: QAction
    regenerate: QAction
    edit: QAction
    compare: QAction
    highlight: QAction
    conversations: QAction
    installed_menu: QMenu


def build_menus(w: MainWindow) -> WindowActions:
    def action(
        menu: QMenu, text: str, slot: Callable[..., Any], shortcut: Any = None, tip: str = ""
    ) -> QAction:
        act = QAction(text, w)
        if shortcut is not None:
            act.setShortcut(QKeySequence(shortcut))
        if tip:
            act.setStatusTip(tip)
        act.triggered.connect(slot)
        menu.addAction(act)
        return act

    bar = w.menuBar()
    file = bar.addMenu("&File")
    new_chat = action(file, "&New chat", w.new_chat, QKeySequence.StandardKey.New)
    file.addSeparator()
    action(file, "Open &target…", w.open_target_dialog, "Ctrl+O")
    action(file, "Open &draft…", w.open_draft_dialog)
    unload_draft = action(file, "&Unload draft", w.loader.unload_draft)
    file.addSeparator()
    action(file, "&Settings…", w.open_settings, QKeySequence.StandardKey.Preferences)
    file.addSeparator()
    action(file, "&Quit", w.close, QKeySequence.StandardKey.Quit)

    chat = bar.addMenu("&Chat")
    stop = action(chat, "&Stop", w.stop)
    regenerate = action(chat, "&Regenerate", w.session_regenerate, "Ctrl+R")
    edit = action(chat, "&Edit last message", w.edit_last, "Ctrl+E")
    action(chat, "&Copy last reply", w.copy_last_reply, "Ctrl+Shift+C")
    chat.addSeparator()
    compare = action(
        chat,
        "Co&mpare off vs on…",
        w.open_compare,
        "Ctrl+K",
        "Run the same prompt with speculation off, then on, and compare",
    )
    w.toolbar.addAction(compare)

    view = bar.addMenu("&View")
    highlight = action(
        view,
        "&Highlight draft tokens",
        w.set_highlight,
        "Ctrl+Shift+H",
        "Shade the text that the draft proposed and the target accepted",
    )
    highlight.setCheckable(True)
    highlight.setChecked(w.settings.highlight_draft)
    view.addSeparator()
    conversations = action(view, "&Conversations", w.conversations.setVisible)
    conversations.setCheckable(True)
    conversations.setChecked(True)

    models = bar.addMenu("&Models")
    action(models, "Use &default pair", w.loader.use_default_pair)
    installed_menu = models.addMenu("&Installed models")
    installed_menu.aboutToShow.connect(lambda: fill_installed_menu(installed_menu, w.loader))
    models.addSeparator()
    action(models, "&Manage models…", w.open_model_manager)

    help_ = bar.addMenu("&Help")
    action(help_, "Getting &models", w.show_first_run_help)
    action(help_, "&System information…", lambda: _system_info(w))

    esc = QShortcut(QKeySequence(Qt.Key.Key_Escape), w)
    esc.setContext(Qt.ShortcutContext.WindowShortcut)
    esc.activated.connect(w.escape)
    return WindowActions(
        new_chat,
        unload_draft,
        stop,
        regenerate,
        edit,
        compare,
        highlight,
        conversations,
        installed_menu,
    )


def _system_info(w: MainWindow) -> None:
    """Help → System information (what `specchat-cli doctor` prints)."""
    from .system_info import show_system_info

    show_system_info(w)  # a child of the window, which keeps it


def fill_installed_menu(menu: QMenu, loader: ModelLoader) -> None:
    """Models → Installed models: each installed file, to use as target or as draft."""
    menu.clear()
    files = installed_models()
    if not files:
        menu.addAction("(none — see Help → Getting models)").setEnabled(False)
    for path in files:
        sub = menu.addMenu(path.name)
        sub.addAction("Use as target").triggered.connect(
            lambda _=False, p=path: loader.open_target(p)
        )
        sub.addAction("Use as draft").triggered.connect(
            lambda _=False, p=path: loader.open_draft(p)
        )
