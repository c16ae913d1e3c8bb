"""The comparison window on a real engine (the 0.5B model drafting for itself): the first
round streams, the table holds the measurements, and the headline is the median speedup over
the rounds with its spread, or no figure and why.

Each pass's CPU meter (the real busy.CpuMeter) reads the real clock and this process's CPU time
with the other programs' load set by the test (tests/busyload.SetLoad): quiet, or another
program busy during the first off run. What the shared test machine is doing never decides
which of the two the window shows."""

from __future__ import annotations

import json
import re
import statistics

import pytest
from busyload import SetLoad

from specchat.core.bench import compare, rounds
from specchat.core.machine.busy import CpuMeter
from specchat.core.types import Mode
from specchat.gui.stats.compare_parts import CPU_ROW, MEDIAN_ROW, ROUNDS_ROW

# how long a wait for the window may take: generous, so a busy machine slows a test, never
# fails it (a passing test waits only as long as the window needs)
WAIT_MS = 120_000

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


def _machine(monkeypatch: pytest.MonkeyPatch, others: float = 0.0) -> SetLoad:
    """The comparisons' CPU meters read `SetLoad` counters from now on (the window's worker
    calls run_comparison with the default meter)."""
    load = SetLoad(cpus=2, others=others)
    monkeypatch.setattr(compare, "CpuMeter", lambda: CpuMeter(counters=load))
    return load


def test_comparison_runs_both_passes_and_fills_the_table(
    qtbot, make_window, small_engine, tmp_path, monkeypatch
) -> None:
    _machine(monkeypatch, others=0.0)  # a quiet machine
    # how far rounds may disagree is judge_rounds' rule (tests/core/test_compare_rounds.py);
    # here every spread is agreement, so the window shows the figure on any machine
    monkeypatch.setattr(rounds, "SPREAD_LIMIT", float("inf"))
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
    qtbot.waitUntil(lambda: dlg.compare_result is not None, timeout=WAIT_MS)
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
    assert v.reliable and all(not p.cpu.busy for x in r.rounds for p in (x.off, x.on))
    head = HEADLINE.search(summary)
    assert head is not None, summary  # a quiet machine: the median with its spread
    speedups = [x.on.tokens_per_s / x.off.tokens_per_s for x in r.rounds]
    assert head.groups() == (
        f"{statistics.median_low(speedups):.2f}",
        f"{min(speedups):.2f}",
        f"{max(speedups):.2f}",
        "3",
    )
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
    qtbot.waitUntil(lambda: dlg.compare_result is not None, timeout=WAIT_MS)
    assert dlg.compare_result.cancelled and "Stopped" in dlg.summary.text()
    assert dlg.run_button.isEnabled() and not w.controller.busy


def test_a_busy_machine_during_the_off_run_gives_no_figure(
    qtbot, make_window, small_engine, monkeypatch
) -> None:
    """The issue's case: another program takes a CPU while speculation is off, which made one
    run's figure say ×15.83. It keeps one of two CPUs busy from the start until the first "on"
    token."""
    load = _machine(monkeypatch, others=1.0)
    w = make_window(engine=small_engine, max_tokens=8)
    w.mode_selector.buttons[Mode.LOOKUP].click()
    w.input.setPlainText(PROMPT)
    w.menus.compare.trigger()
    dlg = w.compare_dialog

    def on_event(_rid, name, _ev) -> None:
        if name == "on":
            load.others = 0.0

    w.controller.compareEvent.connect(on_event)
    with qtbot.waitSignal(w.controller.compareFinished, timeout=RUN_MS):
        dlg.run_button.click()
    qtbot.waitUntil(lambda: dlg.compare_result is not None, timeout=WAIT_MS)
    r = dlg.compare_result
    assert r is not None and not r.cancelled and len(r.rounds) == 3
    off_run = r.rounds[0].off.cpu
    assert off_run is not None and off_run.busy  # the meter saw the load
    assert off_run.others_share == pytest.approx(0.5)  # one CPU of two, the whole pass
    assert all(not p.cpu.busy for x in r.rounds[1:] for p in (x.off, x.on))
    summary = dlg.summary.text()
    assert HEADLINE.search(summary) is None and "×" not in summary.splitlines()[0]
    assert summary.startswith("No speedup figure: the machine was busy during the runs")
    assert "this figure is unreliable" in summary and "run again" in summary
    assert ("identical" in summary) if r.identical else ("differ from token" in summary)
    assert json.loads(dlg.result_json())["speedup"] is None
    dlg.close()
