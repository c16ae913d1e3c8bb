"""A new user's first window (a fresh SPECCHAT_DATA_DIR): Auto speculation, GPU layers "auto"
and where the models run; an explicit mode is remembered; Help → System information.

Every window is `make_window(base=None)`: it reads its settings from the data directory itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt

from specchat.core.state.settings import load_settings
from specchat.core.types import Mode

SHOTS = os.environ.get("SPECCHAT_SHOTS")  # a folder: save PNGs of the windows to look at


def _shot(widget: Any, name: str) -> None:
    if SHOTS:
        from PySide6.QtWidgets import QApplication

        QApplication.processEvents()  # let the layouts catch up with new texts
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        widget.grab().save(str(Path(SHOTS) / name))


def test_first_window_is_auto_with_gpu_layers_auto(
    make_window: Callable[..., Any], data_dir: Path, model_paths: tuple[Path, Path]
) -> None:
    assert not (data_dir / "settings.json").exists()  # a new user
    w = make_window(base=None)
    assert w.mode_selector.mode() is Mode.AUTO
    assert w.settings.mode == "auto"
    assert (w.settings.target_gpu_layers, w.settings.draft_gpu_layers) == ("auto", "auto")

    decision = w.loader.decide_offload(*model_paths)  # what a load from the settings does
    from specchat.core.machine.backend_info import gpu_offload_supported

    if not gpu_offload_supported():
        assert decision is not None and decision.target.layers == 0
        text = w.models_panel.label.text()
        assert text.count("CPU (CPU-only build)") == 2  # target and draft: where, and why
    _shot(w, "first-window.png")

    from specchat.gui.settings_dialog import SettingsDialog

    dlg = SettingsDialog(w.settings, w)
    assert dlg.target_gpu.text() == dlg.draft_gpu.text() == "auto"
    assert dlg.settings().target_gpu_layers == "auto" and not dlg.current_problems()
    dlg.target_gpu.setValue(12)
    assert dlg.settings().target_gpu_layers == 12
    dlg.buttons.button(dlg.buttons.StandardButton.RestoreDefaults).click()
    assert dlg.settings().target_gpu_layers == "auto"
    _shot(dlg, "settings-dialog.png")
    dlg.close()


def test_an_explicit_mode_is_remembered(make_window: Callable[..., Any], qtbot: Any) -> None:
    w = make_window(base=None)
    qtbot.mouseClick(w.mode_selector.buttons[Mode.LOOKUP], Qt.MouseButton.LeftButton)
    assert load_settings().mode == "lookup"
    w.close()
    again = make_window(base=None)
    assert again.mode_selector.mode() is Mode.LOOKUP


def test_help_shows_system_information(make_window: Callable[..., Any], qtbot: Any) -> None:
    from PySide6.QtWidgets import QDialog, QPlainTextEdit

    w = make_window(base=None)
    help_menu = next(a.menu() for a in w.menuBar().actions() if a.text() == "&Help")
    action = next(a for a in help_menu.actions() if a.text().startswith("&System information"))
    action.trigger()
    dlg = w.findChild(QDialog, "systemInfoDialog")
    assert dlg is not None and dlg.isVisible()
    text = dlg.findChild(QPlainTextEdit, "systemInfo").toPlainText()
    for label in ("llama-cpp-python", "Backends", "GPU offload", "Model store", "What to do"):
        assert label in text
    _shot(dlg, "system-information.png")
    dlg.close()
