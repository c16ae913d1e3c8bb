"""The live speculation gauge, drawn with QPainter.

While a reply streams the gauge polls the latest stats from a QTimer (5 times a second), never
per token, so drawing costs nothing to the stream. It shows the acceptance rate as a dial ("off"
when speculation is off), the mean accepted length, tokens/s, time to first token, a bar per
draft position and the engine's note.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QRectF, QSize, Qt, QTimer
from PySide6.QtGui import QColor, QFont, QPainter, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from specchat.core.types import GenerationStats, Mode
from specchat.gui.stats.stats_text import (
    NONE,
    acceptance_text,
    mean_accepted_text,
    mode_label,
    ttft_text,
)

POLL_MS = 200

StatsSource = Callable[[], GenerationStats | None]


def _mix(a: QColor, b: QColor, t: float) -> QColor:
    return QColor(
        round(a.red() + (b.red() - a.red()) * t),
        round(a.green() + (b.green() - a.green()) * t),
        round(a.blue() + (b.blue() - a.blue()) * t),
    )


def rate_colour(rate: float) -> QColor:
    """Red (0 %) through amber to green (100 %)."""
    red, amber, green = QColor(214, 69, 65), QColor(230, 160, 40), QColor(46, 160, 67)
    return _mix(red, amber, rate * 2) if rate < 0.5 else _mix(amber, green, (rate - 0.5) * 2)


PAD = 10.0  # margin around the gauge's parts


@dataclass(frozen=True)
class _Ink:
    """Colours, the small font and the line height one paint uses."""

    fg: QColor
    dim: QColor
    track: QColor
    small: QFont
    line: float


def _faded(colour: QColor, alpha: float) -> QColor:
    out = QColor(colour)
    out.setAlphaF(alpha)
    return out


class SpecGauge(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("specGauge")
        self.setMinimumSize(220, 300)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.stats: GenerationStats | None = None
        self.notices: tuple[str, ...] = ()  # from the loaded engine: settings it changed, warnings
        self.live = False
        self.updates = 0  # how many times new figures were shown (tests read it)
        self._source: StatsSource | None = None
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._poll)

    def sizeHint(self) -> QSize:
        return QSize(260, 340)

    # -- data -------------------------------------------------------------------------------
    def follow(self, source: StatsSource) -> None:
        """Poll `source` until `stop_following()`; the stream itself never calls the gauge."""
        self._source = source
        self.live = True
        self._timer.start()
        self._poll()

    def stop_following(self, final: GenerationStats | None = None) -> None:
        self._timer.stop()
        if self._source is not None and final is None:
            final = self._source()
        self._source = None
        self.live = False
        self.set_stats(final)

    def _poll(self) -> None:
        if self._source is not None:
            st = self._source()
            if st is not None and (self.stats is None or st is not self.stats):
                self.set_stats(st)

    def set_notices(self, notices: Sequence[str]) -> None:
        """What the engine changed at load time or warns about (Engine.notices), shown under
        the figures until the next load."""
        self.notices = tuple(notices)
        self.setToolTip("\n".join(f"⚠ {n}" for n in self.notices))
        self.update()

    def set_stats(self, stats: GenerationStats | None) -> None:
        self.stats = stats
        self.updates += 1
        self.update()

    def figures(self) -> dict[str, Any]:
        """What the gauge shows now, as text (for tests and accessibility)."""
        st = self.stats
        if st is None:
            return {"acceptance": NONE, "mode": "", "notices": list(self.notices)}
        return {
            "mode": mode_label(st.mode),
            "acceptance": acceptance_text(st),
            "accepted": f"{st.accepted}/{st.drafted}",
            "mean_accepted_length": mean_accepted_text(st),
            "tokens_per_s": f"{st.tokens_per_s:.1f}",
            "ttft": ttft_text(st),
            "tokens": str(st.tokens),
            "positions": [round(x, 3) for x in st.per_position_acceptance],
            "note": st.note,
            "notices": list(self.notices),
        }

    # -- drawing ----------------------------------------------------------------------------
    def paintEvent(self, _event: Any) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        fg = self.palette().color(QPalette.ColorRole.WindowText)
        small = QFont(self.font())
        small.setPointSizeF(self.font().pointSizeF() * 0.9)
        ink = _Ink(fg, _faded(fg, 0.55), _faded(fg, 0.12), small, self.fontMetrics().height() + 3)
        f = self.figures()
        y = self._draw_dial(p, ink, f)
        y = self._draw_figures(p, ink, f, y)
        y = self._draw_positions(p, ink, f.get("positions", []), y)
        self._draw_notes(p, ink, f.get("note") or "", y)
        p.end()

    def _draw_dial(self, p: QPainter, ink: _Ink, f: dict[str, Any]) -> float:
        """The acceptance dial (a 240° arc), its figure, label and mode; returns its bottom."""
        st, w = self.stats, self.width()
        size = min(w - 2 * PAD, 170.0)
        dial = QRectF((w - size) / 2, PAD, size, size)
        pen_w = max(8.0, size / 12)
        arc = dial.adjusted(pen_w / 2, pen_w / 2, -pen_w / 2, -pen_w / 2)
        pen = QPen(ink.track, pen_w, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap)
        p.setPen(pen)
        p.drawArc(arc, 210 * 16, -240 * 16)
        speculating = st is not None and st.mode != Mode.OFF.value
        rate = st.acceptance_rate if st is not None else None
        if rate is not None and speculating:
            pen.setColor(rate_colour(rate))
            p.setPen(pen)
            p.drawArc(arc, 210 * 16, -round(240 * 16 * max(rate, 0.004)))
        big = QFont(self.font())
        big.setPointSizeF(self.font().pointSizeF() * 2.3)
        big.setBold(True)
        p.setFont(big)
        p.setPen(ink.fg if f["acceptance"] not in ("off", NONE) else ink.dim)
        center = QRectF(dial.left(), dial.top() + size * 0.28, size, size * 0.32)
        p.drawText(center, Qt.AlignmentFlag.AlignCenter, f["acceptance"])
        p.setFont(ink.small)
        p.setPen(ink.dim)
        label = f"acceptance  {f['accepted']}" if speculating else "acceptance"
        below = QRectF(dial.left(), center.bottom(), size, size * 0.14)
        p.drawText(below, Qt.AlignmentFlag.AlignCenter, label)
        p.setPen(ink.fg)
        bottom = QRectF(dial.left(), dial.bottom() - size * 0.16, size, size * 0.16)
        p.drawText(bottom, Qt.AlignmentFlag.AlignCenter, f["mode"] or "idle")
        return dial.bottom()

    def _draw_figures(self, p: QPainter, ink: _Ink, f: dict[str, Any], y: float) -> float:
        """Name/value rows under the dial; returns where the next part starts."""
        y += 6
        rows = [
            ("Mean accepted length", f.get("mean_accepted_length", NONE)),
            ("Tokens/s", f.get("tokens_per_s", NONE)),
            ("Time to first token", f.get("ttft", NONE)),
        ]
        width = self.width() - 2 * PAD
        p.setFont(self.font())
        for name, value in rows:
            p.setPen(ink.dim)
            p.drawText(QRectF(PAD, y, width, ink.line), Qt.AlignmentFlag.AlignLeft, name)
            p.setPen(ink.fg)
            p.drawText(QRectF(PAD, y, width, ink.line), Qt.AlignmentFlag.AlignRight, value)
            y += ink.line
        return y

    def _draw_positions(self, p: QPainter, ink: _Ink, positions: list[float], y: float) -> float:
        """Acceptance per draft position as bars; returns where the next part starts."""
        y += 6
        width = self.width() - 2 * PAD
        p.setPen(ink.dim)
        p.setFont(ink.small)
        title = QRectF(PAD, y, width, ink.line)
        p.drawText(title, Qt.AlignmentFlag.AlignLeft, "Accepted by position")
        chart = QRectF(PAD, y + ink.line, width, 56.0)
        p.setPen(QPen(ink.track, 1))
        p.drawLine(chart.bottomLeft(), chart.bottomRight())
        if not positions:
            p.setPen(ink.dim)
            p.drawText(chart, Qt.AlignmentFlag.AlignCenter, "nothing drafted")
        n = len(positions)
        slot = chart.width() / max(n, 1)
        bar_w = max(2.0, min(22.0, slot * 0.7))
        for i, r in enumerate(positions):
            x = chart.left() + i * slot + (slot - bar_w) / 2
            h = max(1.0, r * (chart.height() - 2))
            p.fillRect(QRectF(x, chart.bottom() - h, bar_w, h), rate_colour(r))
            if n <= 16 or i % 2 == 0:
                p.setPen(ink.dim)
                number = QRectF(x - 4, chart.bottom() + 1, bar_w + 8, ink.line)
                p.drawText(number, Qt.AlignmentFlag.AlignHCenter, str(i + 1))
        return chart.bottom() + ink.line + 4

    def _draw_notes(self, p: QPainter, ink: _Ink, note: str, y: float) -> None:
        """Why speculation did (not) run, then the settings the engine changed."""
        flags = int(Qt.AlignmentFlag.AlignLeft | Qt.TextFlag.TextWordWrap)
        width = self.width() - 2 * PAD
        if note:
            p.setPen(ink.dim)
            box = QRectF(PAD, y, width, max(0.0, self.height() - y))
            p.drawText(box, flags, note)
            y += p.boundingRect(box, flags, note).height() + 4
        if self.notices:  # settings the engine changed, warnings about the pair
            p.setPen(QColor(230, 160, 40))
            text = "\n".join(f"⚠ {n}" for n in self.notices)
            p.drawText(QRectF(PAD, y, width, max(0.0, self.height() - y)), flags, text)
