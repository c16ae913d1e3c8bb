"""The comparison window on a real engine (the 0.5B model drafting for itself): the first
round streams, the table holds the measurements, and the headline is the median speedup over
the rounds with its spread, or no figure and why (a real busy-loop process stands in for a
busy machine)."""

from __future__ import annotations

import json
import re
import statistics

from busyload import BusyLoop, loops_over

from specchat.core.machine.busy import BUSY_SHARE
from specchat.core.types import Mode
from specchat.gui.stats.compare_parts import CPU_ROW, MEDIAN_ROW, ROUNDS_ROW

RUN_MS = 300_000
PROMPT = "Write a Python function that sums the squares of a list of numbers."


def number(text: str) -> float:
    return float(text.split()[0].rstrip("%"))


def cells(dlg) -> dict[tuple[str, int], str]:
    return {
        (dlg.table.verticalHeaderItem(row).text(), col): dlg.table.item(row, col).text()
        for row in range(dlg.table.rowCount())
        for col in range(2)
    }


HEADLINE = re.compile(r"Speedup ×(\d+\.\d\d) \((\d+\.\d\d)–(\d+\.\d\d) over (\d+) rounds\)")


def test_comparison_runs_both_passes_and_fills_the_table(
    qtbot, make_window, small_engine, tmp_path
) -> None:
    w = make_window(engine=small_engine, max_tokens=16)
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
    # the table shows what was measured: over the rounds, then the first round's figures
    cell = cells(dlg)
    assert len(r.rounds) == 3
    for col, side in enumerate(("off", "on")):
        speeds = [getattr(x, side).tokens_per_s for x in r.rounds]
        assert number(cell[MEDIAN_ROW, col]) == round(statistics.median_low(speeds), 2) > 0
        assert cell[ROUNDS_ROW, col] == " · ".join(f"{s:.1f}" for s in speeds)
        shares = [getattr(x, side).cpu.others_share for x in r.rounds]
        assert cell[CPU_ROW, col] == " · ".join(f"{s:.0%}" for s in shares)
    assert (
        cell["Time to first token", 0].endswith(" ms")
        and number(cell["Time to first token", 1]) > 0
    )
    assert number(cell["Total time", 0]) > 0 and number(cell["Total time", 1]) > 0
    assert cell["Tokens", 0] == cell["Tokens", 1] == "16"
    assert cell["Acceptance rate", 0] == "off" and cell["Acceptance rate", 1].endswith("%")
    summary = dlg.summary.text()
    v = r.verdict
    head = HEADLINE.search(summary)
    if v.reliable:  # a quiet machine: the median with its spread
        assert head is not None, summary
        median, low, high, n = head.groups()
        assert (median, low, high, n) == (
            f"{statistics.median_low(v.speedups):.2f}",
            f"{min(v.speedups):.2f}",
            f"{max(v.speedups):.2f}",
            "3",
        )
        assert all(not p.cpu.busy for x in r.rounds for p in (x.off, x.on))
    else:  # the shared test machine was busy: no figure, and the reason
        assert head is None and "No speedup figure" in summary and "unreliable" in summary
        worst = max(p.cpu.others_share for x in r.rounds for p in (x.off, x.on))
        assert worst > BUSY_SHARE or "disagree" in summary
    assert ("identical" in summary) if r.identical else ("differ from token" in summary)
    # copy and save as JSON
    dlg.copy_button.click()
    from PySide6.QtGui import QGuiApplication

    copied = json.loads(QGuiApplication.clipboard().text())
    assert copied["off"]["tokens"] == 16 and copied["mode"] == "draft"
    dlg.save_json(tmp_path / "cmp.json")
    saved = json.loads((tmp_path / "cmp.json").read_text())
    assert saved["identical"] == r.identical and saved["seed"] == dlg.seed
    assert len(saved["rounds"]) == 3 and saved["verdict"]["reliable"] is v.reliable
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


def test_a_busy_machine_during_the_off_run_gives_no_figure(
    qtbot, make_window, small_engine
) -> None:
    """The issue's case: another program takes a CPU while speculation is off, which made one
    run's figure say ×15.83. A real busy loop runs from the start until the first "on" token."""
    w = make_window(engine=small_engine, max_tokens=8)
    w.mode_selector.buttons[Mode.LOOKUP].click()
    w.input.setPlainText(PROMPT)
    w.menus.compare.trigger()
    dlg = w.compare_dialog
    load = BusyLoop(loops_over(BUSY_SHARE), seconds=120)
    w.controller.compareEvent.connect(lambda _rid, name, _ev: name == "on" and load.stop())
    try:
        with qtbot.waitSignal(w.controller.compareFinished, timeout=RUN_MS):
            load.start()
            dlg.run_button.click()
        qtbot.waitUntil(lambda: dlg.compare_result is not None, timeout=10_000)
    finally:
        load.stop()
    r = dlg.compare_result
    assert r is not None and not r.cancelled and len(r.rounds) == 3
    off_run = r.rounds[0].off.cpu
    assert off_run is not None and off_run.busy  # the meter saw the load
    summary = dlg.summary.text()
    assert HEADLINE.search(summary) is None and "×" not in summary.splitlines()[0]
    assert summary.startswith("No speedup figure: the machine was busy during the runs")
    assert "this figure is unreliable" in summary and "run again" in summary
    assert ("identical" in summary) if r.identical else ("differ from token" in summary)
    assert json.loads(dlg.result_json())["speedup"] is None
    dlg.close()
