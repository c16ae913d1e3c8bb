"""Loading models in the window: progress, readable errors, draft availability, first run."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import gguf
import numpy as np
from PySide6.QtCore import QTimer, Signal

from specchat.core.types import Mode
from specchat.gui.chat.mode_selector import NO_DRAFT_TIP
from specchat.gui.main_window import MANAGER_MISSING, MainWindow

LOAD_MS = 120_000
# how long a wait for the window may take: generous, so a busy machine slows a test, never
# fails it (a passing test waits only as long as the window needs)
WAIT_MS = 120_000
MEASURE_MS = 600_000  # the whole cost curve, in steps between requests, on a busy machine


def tiny_gguf(path: Path) -> Path:
    """A valid GGUF whose 300-token vocabulary matches no real target."""
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_name("Tiny Other Vocabulary")
    w.add_context_length(256)
    w.add_block_count(1)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"tok{i}" for i in range(300)])
    w.add_token_types([int(gguf.TokenType.NORMAL)] * 300)
    w.add_tensor("token_embd.weight", np.zeros((300, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def wait_loaded(qtbot, window: MainWindow) -> None:
    qtbot.waitUntil(lambda: not window.controller.loading_models, timeout=LOAD_MS)


def test_loading_errors_and_draft_availability(
    qtbot, make_window, model_paths, tmp_path, send
) -> None:
    # the 0.5B model as target and as draft: the loading, not the model, is what this tests
    target = draft = model_paths[1]
    w = make_window(engine=None, base={"n_ctx": 512, "max_tokens": 6})  # it loads its own models
    # target alone, loaded on the inference thread while the window's event loop turns:
    # a zero-interval timer runs whenever the loop is free, so it must run while the
    # controller is still loading (a load on the GUI thread would let it run only after)
    # (it stops at the first sight of the load, so that it does not spin beside the load)
    during: list[bool] = []
    timer = QTimer()

    def tick() -> None:
        during.append(w.controller.loading_models)
        if during[-1]:
            timer.stop()

    timer.timeout.connect(tick)
    timer.start(0)
    w.loader.load(target, None)
    assert w.controller.loading_models, "the load finished before load() returned"
    wait_loaded(qtbot, w)
    timer.stop()
    assert any(during), "the event loop did not run while the model loaded"
    # what the lookup history holds stays in view when status lines come and go
    qtbot.waitUntil(lambda: w.history_label.text().startswith("lookup history:"), timeout=WAIT_MS)
    w.statusBar().showMessage("a passing status line")
    assert w.history_label.text().startswith("lookup history: 0 conversations")
    # a finished reply joins the index, and the label says so with the index's new figures
    send(w, "Say hi.")
    qtbot.waitUntil(lambda: "+ 1 reply since" in w.history_label.text(), timeout=WAIT_MS)
    line = w.history_label.text()
    assert line.startswith("lookup history: 0 conversations + 1 reply since, "), line
    assert int(line.split(", ")[1].split()[0].replace(",", "")) > 0, line  # its tokens
    # the setting applies at once: off drops the index, on indexes the saved conversations again
    w.apply_settings(w.settings.with_(lookup_history=False))
    qtbot.waitUntil(lambda: w.history_label.text() == "lookup history: off", timeout=WAIT_MS)
    assert w.controller.engine.history.n_tokens == 0
    w.apply_settings(w.settings.with_(lookup_history=True))
    qtbot.waitUntil(lambda: "built in" in w.history_label.text(), timeout=WAIT_MS)
    assert w.history_label.text().startswith("lookup history: 1 conversation, ")
    assert w.controller.engine.history.n_tokens > 0  # the exchange above, from the database
    # measured in the background after the load, between requests, on the worker
    qtbot.waitUntil(lambda: w.controller.worker.measuring is None, timeout=MEASURE_MS)
    curve = w.controller.engine.cost_curve
    assert curve is not None and curve.source == "measured"
    qtbot.waitUntil(lambda: not w.models_panel.progress.isVisible(), timeout=WAIT_MS)
    assert w.models.target is not None and w.models.draft is None
    assert "Draft:</b> <i>none" in w.models_panel.label.text()
    assert "CPU" in w.models_panel.label.text() and " MB" in w.models_panel.label.text()
    draft_button = w.mode_selector.buttons[Mode.DRAFT]
    assert not draft_button.isEnabled() and draft_button.toolTip() == NO_DRAFT_TIP
    assert w.mode_selector.mode() is not Mode.DRAFT

    # not a model at all: a readable message, the target stays, the app works
    notes = tmp_path / "notes.gguf"
    notes.write_text("hello, I am not a model\n")
    with qtbot.waitSignal(w.controller.loadFailed, timeout=LOAD_MS) as failed:
        w.loader.open_draft(notes)
    wait_loaded(qtbot, w)
    assert failed.args[0] == "draft" and "not a usable GGUF" in failed.args[1]
    assert w.banner.isVisible() and w.banner.kind == "error"
    assert "Traceback" not in w.banner.text()
    assert w.models.target is not None

    # a GGUF with another vocabulary: refused as a draft, with the reason
    other = tiny_gguf(tmp_path / "other-vocab.gguf")
    with qtbot.waitSignal(w.controller.loadFailed, timeout=LOAD_MS) as failed:
        w.loader.open_draft(other)
    wait_loaded(qtbot, w)
    assert "cannot be used as a draft" in failed.args[1]
    assert w.models.draft is None

    with qtbot.waitSignal(w.session.streamFinished, timeout=LOAD_MS) as done:
        w.input.setPlainText("Say hi.")
        w.send(w.input.toPlainText())
    assert done.args[0].tokens >= 1

    # a broken target leaves the loaded one in place
    engine_before = w.controller.engine
    with qtbot.waitSignal(w.controller.loadFailed, timeout=LOAD_MS) as failed:
        w.loader.open_target(notes)
    wait_loaded(qtbot, w)
    assert failed.args[0] == "target" and w.controller.engine is engine_before

    # the real draft: the Draft option comes alive
    w.loader.open_draft(draft)
    wait_loaded(qtbot, w)
    assert w.models.draft is not None and draft_button.isEnabled()
    label = w.models_panel.label.text()
    assert "Draft:</b> <i>none" not in label and label.count("0.5B") == 2

    # settings that need a reload reload on the worker; sampling settings do not
    w.apply_settings(w.settings.with_(temperature=0.5))
    assert not w.controller.loading_models
    w.apply_settings(w.settings.with_(n_ctx=1024))
    wait_loaded(qtbot, w)
    assert w.models.target is not None and w.models.target.n_ctx == 1024
    assert w.models.draft is not None and w.models.draft.n_ctx == 1024
    assert w.controller.engine is not engine_before
    # the same file, threads and batch: the curve measured at the first load, not timed again
    assert w.controller.engine.cost_curve is curve
    w.close()
    assert not w.controller.thread_.isRunning()


def test_first_run_without_models_explains_how_to_get_them(
    qtbot, tmp_path, monkeypatch, make_window
) -> None:
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path / "empty-store"))
    monkeypatch.setitem(sys.modules, "specchat.gui.models.manager", None)  # not in this build
    # as a real start: settings from the data directory, load what is there, else the manager
    w = make_window(engine=None, base=None, autoload=True, open_manager_on_first_run=True)
    qtbot.waitUntil(w.banner.isVisible, timeout=WAIT_MS)
    assert "specchat-cli models fetch-default" in w.banner.text()
    assert not w.send_button.isEnabled() and not w.menus.compare.isEnabled()
    assert w.models.target is None
    w.open_model_manager()
    assert w.banner.text() == MANAGER_MISSING
    w.loader.use_default_pair()  # not installed: explains instead of failing
    assert "fetch-default" in w.banner.text()


def test_model_manager_is_opened_lazily_and_its_choice_loads(
    qtbot, tmp_path, monkeypatch, make_window
) -> None:
    from PySide6.QtWidgets import QDialog

    class FakeManager(QDialog):  # stands in for the dialog another module provides
        pairChosen = Signal(str, str)

    module = types.ModuleType("specchat.gui.models.manager")
    module.ModelManagerDialog = FakeManager  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "specchat.gui.models.manager", module)
    w = make_window(engine=None, base=None)
    w.open_model_manager()
    assert isinstance(w.manager_dialog, FakeManager) and w.manager_dialog.isVisible()
    missing = str(tmp_path / "missing.gguf")
    with qtbot.waitSignal(w.controller.loadFailed, timeout=LOAD_MS) as failed:
        w.manager_dialog.pairChosen.emit(missing, "")
    assert failed.args[0] == "target" and "does not exist" in failed.args[1]
