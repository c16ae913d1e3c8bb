"""The stylesheet and the icon from the top-level `resources/` folder (also when frozen)."""

from __future__ import annotations

from PySide6.QtGui import QIcon

from specchat.core.resources_path import resources_dir


def stylesheet() -> str:
    try:
        return (resources_dir() / "style.qss").read_text(encoding="utf-8")
    except OSError:
        return ""


def app_icon() -> QIcon:
    path = resources_dir() / "specchat.svg"
    return QIcon(str(path)) if path.is_file() else QIcon()
