"""A new user's first window (a fresh SPECCHAT_DATA_DIR): Auto speculation, GPU layers "auto"
and where the models run; chat at once while the cost curve is measured; an explicit mode is
remembered; Help → System information.

Every window is `make_window(base=None)`: it reads its settings from the data directory itself.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt

from specchat.core.state.settings import load_settings
from specchat.core.types import Mode

# the whole cost curve on a busy 2-core machine (a plain reply of some 700 tokens at most)
MEASURE_MS = 600_000
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


def test_chat_at_once_while_the_cost_curve_is_measured(
    make_window: Callable[..., Any],
    qtbot: Any,
    send: Callable[..., Any],
    data_dir: Path,
    model_paths: tuple[Path, Path],
) -> None:
    """First launch (no kept cost curve): as soon as the pair has loaded the panel names the
    target, Send works and a reply streams, while the target's cost curve is still being
    measured in the background; Auto's note says what it priced with meanwhile. The curve
    policy's pace hook holds the real measurement after its warm-up and two timed steps, so the
    test sees it in progress however fast the machine is; let go, it finishes, is used and is
    kept in the data directory."""
    from specchat.core.engines.curve_policy import MEASURING, UNMEASURED_NOTE
    from specchat.core.engines.curve_store import STORE_FILE

    target = draft = model_paths[1]  # the 0.5B pair: what it measures, not the model, counts
    assert not (data_dir / STORE_FILE).exists()  # a new user: nothing measured yet
    w = make_window(engine=None, mode="auto")
    held = threading.Event()
    held.set()
    worker = w.controller.worker
    worker.curves.pace = lambda done: done < 3 or not held.is_set()
    streamed: list[Any] = []
    w.controller.token.connect(lambda _rid, ev: streamed.append(ev))

    w.loader.load(target, draft)
    qtbot.waitUntil(lambda: not w.controller.loading_models, timeout=120_000)
    # the measurement is under way, and held after its third step (a real one)
    qtbot.waitUntil(
        lambda: worker.measuring is not None and worker.measuring.done >= 3, timeout=MEASURE_MS
    )
    m = worker.measuring
    assert m.done == 3 and not m.finished and w.controller.engine.cost_curve is None
    assert w.models.target is not None and w.send_button.isEnabled()
    label = w.models_panel.label.text()
    assert f"<b>Target:</b> {w.models.target.name}<br>" in label, label
    assert "Target:</b> <i>" not in label  # neither "none" nor "loading…"
    curve_line = w.models_panel.curve
    assert curve_line.isVisible() and MEASURING in curve_line.text()
    _shot(w, "first-launch-measuring.png")

    stats = send(w, "Say hi in three words.")
    assert len(streamed) >= 2 and stats.tokens >= 1  # streamed, step by step
    assert UNMEASURED_NOTE in stats.note, stats.note
    assert worker.measuring is m and m.done == 3 and not m.finished  # still held: the reply
    assert w.controller.engine.cost_curve is None  # ran while the curve was being measured

    held.clear()  # let it finish: then it prices Auto's drafts and is kept for the next start
    qtbot.waitUntil(lambda: worker.measuring is None, timeout=MEASURE_MS)
    curve = w.controller.engine.cost_curve
    assert curve is not None and curve.source == "measured" and len(curve.points) == 8
    # (the worker's last status reaches the panel as a queued event on the GUI thread)
    qtbot.waitUntil(lambda: not curve_line.isVisible(), timeout=10_000)
    assert not curve_line.isVisible()
    assert len(json.loads((data_dir / STORE_FILE).read_text())["curves"]) == 1
    stats = send(w, "Say bye in three words.")
    assert UNMEASURED_NOTE not in stats.note, stats.note
