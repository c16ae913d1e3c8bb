"""The main window's menu bar, its toolbar action and its shortcuts.

`build_menus(window)` creates them, each action connected to the window (or to the object that
does the work), and returns the actions whose state the window changes later.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import QMenu, QMenuBar, QToolBar, QWidget

from specchat.core.state.settings import Settings
from specchat.core.store.local_models import installed_models
from specchat.gui.models.loader import ModelLoader
from specchat.gui.system_info import show_system_info


class MenuHost(Protocol):
    """What the menus need of the window they sit in (the main window has all of it)."""

    settings: Settings
    loader: ModelLoader
    toolbar: QToolBar

    @property
    def conversations(self) -> QWidget: ...

    def menuBar(self) -> QMenuBar: ...
    def close(self) -> bool: ...
    def new_chat(self) -> None: ...
    def open_target_dialog(self) -> None: ...
    def open_draft_dialog(self) -> None: ...
    def open_settings(self) -> None: ...
    def open_model_manager(self, quiet: bool = False) -> None: ...
    def open_compare(self) -> None: ...
    def show_first_run_help(self) -> None: ...
    def stop(self) -> None: ...
    def escape(self) -> None: ...
    def session_regenerate(self) -> None: ...
    def edit_last(self) -> None: ...
    def copy_last_reply(self) -> None: ...
    def set_highlight(self, on: bool) -> None: ...


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


def build_menus(w: MenuHost) -> WindowActions:
    def action(
        menu: QMenu, text: str, slot: Callable[..., Any], shortcut: Any = None, tip: str = ""
    ) -> QAction:
        act = QAction(text, bar)
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

    esc = QShortcut(QKeySequence(Qt.Key.Key_Escape), bar.window())
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


def _system_info(w: MenuHost) -> None:
    """Help → System information (what `specchat-cli doctor` prints)."""
    show_system_info(w.menuBar().window())  # a child of the window, which keeps it


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
