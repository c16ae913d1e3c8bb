"""Parts of the comparison window: the streaming panes, the table of figures, the summary text.

The table's first rows are over all rounds (median tokens per second, each round's tokens per
second and how much CPU other processes took during it); the rest are the first round's, the
one streamed into the panes.
"""

from __future__ import annotations

import statistics

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from specchat.core.bench.compare import CompareResult, PassResult
from specchat.core.reply import Reply
from specchat.core.types import TokenEvent
from specchat.core.units import format_count
from specchat.gui.chat.render import append_text, theme_for
from specchat.gui.stats.stats_text import (
    NONE,
    acceptance_text,
    mean_accepted_text,
    mode_label,
    ttft_text,
)

MEDIAN_ROW = "Tokens/s (median)"
ROUNDS_ROW = "Tokens/s by round"
CPU_ROW = "Others' CPU by round"
ROWS = [
    MEDIAN_ROW,
    ROUNDS_ROW,
    CPU_ROW,
    "Time to first token",
    "Total time",
    "Tokens",
    "Acceptance rate",
    "Mean accepted length",
    "Finish",
]
ROUND_ROWS = (MEDIAN_ROW, ROUNDS_ROW, CPU_ROW)
ROW_TIPS = {
    MEDIAN_ROW: "The middle of the rounds' decode speeds.",
    ROUNDS_ROW: "Decode speed of each round, in order.",
    CPU_ROW: "CPU time other processes used during each run, as a share of the machine's.",
}


def _pass_cell(p: PassResult, row: str) -> str:
    st = p.stats
    if row == "Time to first token":
        return ttft_text(st)
    if row == "Total time":
        return f"{st.elapsed_s:.2f} s"
    if row == "Tokens":
        return str(st.tokens)
    if row == "Acceptance rate":
        return acceptance_text(st, digits=1)
    if row == "Mean accepted length":
        return mean_accepted_text(st)
    return p.finish_reason or NONE


def _rounds_cell(passes: list[PassResult], row: str) -> str:
    speeds = [p.tokens_per_s for p in passes if p.stats.tokens]
    if not speeds:
        return NONE
    if row == MEDIAN_ROW:
        return f"{statistics.median_low(speeds):.2f}"
    if row == ROUNDS_ROW:
        return " · ".join(f"{s:.1f}" for s in speeds)
    shares = [p.cpu.others_share for p in passes if p.cpu is not None]
    return " · ".join(f"{s:.0%}" for s in shares) if shares else "not measured"


def cell_text(r: CompareResult, row: str, col: int) -> str:
    """The table's text for `row`, column 0 (speculation off) or 1 (on)."""
    if row in ROUND_ROWS:
        passes = [x.off if col == 0 else x.on for x in r.rounds]
        return _rounds_cell(passes, row)
    p = r.off if col == 0 else r.on
    return _pass_cell(p, row) if p.stats.tokens or row == "Finish" else NONE


def make_table() -> QTableWidget:
    table = QTableWidget(len(ROWS), 2)
    table.setObjectName("compareTable")
    table.setHorizontalHeaderLabels(["Speculation off", "Speculation on"])
    table.setVerticalHeaderLabels(ROWS)
    for row, name in enumerate(ROWS):
        header = table.verticalHeaderItem(row)
        if header is not None:
            header.setToolTip(ROW_TIPS.get(name, "The first round's."))
    table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
    table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    table.setMinimumHeight(table.verticalHeader().length() + 30)
    return table


def fill_table(table: QTableWidget, r: CompareResult) -> None:
    for row, name in enumerate(ROWS):
        for col in range(2):
            item = QTableWidgetItem(cell_text(r, name, col))
            item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
            table.setItem(row, col, item)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def speedup_line(r: CompareResult) -> str:
    """The headline: the median speedup with its spread, or no figure and why."""
    v = r.verdict
    if r.cancelled:
        return "Stopped before all rounds finished; no speedup figure."
    if v is None:
        return f"Speedup: {NONE}"
    if v.reliable:
        return f"Speedup {v.headline()}."
    return f"No speedup figure: {v.reason}."


def summary_text(r: CompareResult, seed: int | None) -> str:
    lines = [speedup_line(r)]
    if r.verdict is not None and not r.verdict.watched:
        lines.append("The server's machine is not watched: a busy server could slow a round.")
    n = len(r.rounds)
    lines.append(
        f"Seed {seed}, temperature {r.params.temperature:g}; {n} round{'s' * (n != 1)} of up "
        f"to {r.params.max_tokens} tokens, speculation off then on, each from a cold cache. "
        "The texts are the first round's."
    )
    if r.identical:
        lines.append("The two texts are identical.")
    elif r.divergence is not None:
        d = r.divergence
        gap = NONE if d.off_gap is None else f"{d.off_gap:.3f}"
        lines.append(
            f"The texts differ from token {d.index}: off chose {d.off_token!r}, "
            f"{mode_label(r.on.mode)} chose {d.on_token!r} (target's top-2 logit gap {gap})."
        )
        lines.append(_sentence(d.explanation))
    if not r.repeatable:
        lines.append("Later rounds produced other texts than the first.")
    return "\n".join(lines)


class Pane(QWidget):
    """One side of the comparison: the first round's text as it streams, and a live figure."""

    def __init__(self, title: str) -> None:
        super().__init__()
        self.title = QLabel(f"<b>{title}</b>")
        self.live = QLabel("waiting")
        self.live.setObjectName("paneLive")
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.reply = Reply()
        top = QHBoxLayout()
        top.addWidget(self.title)
        top.addStretch(1)
        top.addWidget(self.live)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(top)
        lay.addWidget(self.text)

    def clear(self, title: str) -> None:
        self.title.setText(f"<b>{title}</b>")
        self.text.clear()
        self.reply = Reply()
        self.live.setText("waiting")

    def append(self, ev: TokenEvent, highlight_draft: bool) -> None:
        self.reply.add(ev)
        doc, theme = self.text.document(), theme_for(self.palette())
        for text, from_draft in ev.segments:
            append_text(doc, text, draft=highlight_draft and from_draft, theme=theme)

    def show_live(self) -> None:
        st = self.reply.stats
        if st is not None:
            self.live.setText(f"{format_count(st.tokens, 'token')} · {st.tokens_per_s:.1f} tok/s")
