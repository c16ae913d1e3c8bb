"""The comparison window on the real engine: both passes stream, the table holds measurements."""

from __future__ import annotations

import json

from specchat.core.types import Mode

RUN_MS = 300_000
PROMPT = "Write a Python function that sums the squares of a list of numbers."


def number(text: str) -> float:
    return float(text.split()[0].rstrip("%"))


def test_comparison_runs_both_passes_and_fills_the_table(qtbot, make_window, tmp_path) -> None:
    w = make_window(max_tokens=24)
    w.mode_selector.buttons[Mode.DRAFT].click()
    w.input.setPlainText(PROMPT)
    w.menus.compare.trigger()
    dlg = w.compare_dialog
    assert dlg.prompt.toPlainText() == PROMPT and dlg.mode() is Mode.DRAFT
    assert not dlg.copy_button.isEnabled()
    order: list[str] = []
    w.controller.compareEvent.connect(lambda _rid, name, _ev: order.append(name))
    with qtbot.waitSignal(w.controller.compareFinished, timeout=RUN_MS):
        dlg.run_button.click()
        assert dlg.running and not dlg.run_button.isEnabled()
    # the dialog's own slot for the same queued signal may run just after the wait returns
    qtbot.waitUntil(lambda: dlg.compare_result is not None, timeout=10_000)
    r = dlg.compare_result
    assert r is not None and not r.cancelled
    # one pass after the other, each streamed into its pane
    assert order == ["off"] * order.count("off") + ["on"] * order.count("on")
    assert dlg.off_pane.text.toPlainText() == r.off.text
    assert dlg.on_pane.text.toPlainText() == r.on.text
    # the table shows what was measured
    cell = {
        (dlg.table.verticalHeaderItem(row).text(), col): dlg.table.item(row, col).text()
        for row in range(dlg.table.rowCount())
        for col in range(2)
    }
    assert number(cell["Tokens/s", 0]) == round(r.off.tokens_per_s, 2) > 0
    assert number(cell["Tokens/s", 1]) == round(r.on.tokens_per_s, 2) > 0
    assert (
        cell["Time to first token", 0].endswith(" ms")
        and number(cell["Time to first token", 1]) > 0
    )
    assert number(cell["Total time", 0]) > 0 and number(cell["Total time", 1]) > 0
    assert cell["Tokens", 0] == cell["Tokens", 1] == "24"
    assert cell["Acceptance rate", 0] == "off" and cell["Acceptance rate", 1].endswith("%")
    summary = dlg.summary.text()
    assert f"×{r.speedup:.2f}" in summary
    assert ("identical" in summary) if r.identical else ("differ from token" in summary)
    # copy and save as JSON
    dlg.copy_button.click()
    from PySide6.QtGui import QGuiApplication

    copied = json.loads(QGuiApplication.clipboard().text())
    assert copied["off"]["tokens"] == 24 and copied["mode"] == "draft"
    dlg.save_json(tmp_path / "cmp.json")
    saved = json.loads((tmp_path / "cmp.json").read_text())
    assert saved["identical"] == r.identical and saved["seed"] == dlg.seed
    assert saved["on"]["acceptance_rate"] is not None
    dlg.close()


def test_comparison_can_be_stopped(qtbot, make_window) -> None:
    w = make_window(max_tokens=300)
    w.input.setPlainText(PROMPT)
    w.menus.compare.trigger()
    dlg = w.compare_dialog
    with qtbot.waitSignal(w.controller.compareFinished, timeout=RUN_MS):
        dlg.run()
        qtbot.waitUntil(lambda: len(dlg.off_pane.text.toPlainText()) > 10, timeout=RUN_MS)
        dlg.stop_button.click()
    qtbot.waitUntil(lambda: dlg.compare_result is not None, timeout=10_000)
    assert dlg.compare_result.cancelled and "Stopped" in dlg.summary.text()
    assert dlg.run_button.isEnabled() and not w.controller.busy
