"""The live speculation gauge, drawn with QPainter.

While a reply streams the gauge polls the latest stats from a QTimer (5 times a second), never
per token, so drawing costs nothing to the stream. It shows the acceptance rate as a dial ("off"
when speculation is off), the mean accepted length, tokens/s, time to first token, a bar per
draft position and the engine's note.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
        pal = self.palette()
        fg = pal.color(QPalette.ColorRole.WindowText)
        dim = QColor(fg)
        dim.setAlphaF(0.55)
        track = QColor(fg)
        track.setAlphaF(0.12)
        f = self.figures()
        st = self.stats
        w = self.width()
        pad = 10.0

        # dial: a 240° arc
        size = min(w - 2 * pad, 170.0)
        dial = QRectF((w - size) / 2, pad, size, size)
        pen_w = max(8.0, size / 12)
        arc = dial.adjusted(pen_w / 2, pen_w / 2, -pen_w / 2, -pen_w / 2)
        pen = QPen(track, pen_w, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap)
        p.setPen(pen)
        p.drawArc(arc, 210 * 16, -240 * 16)
        rate = st.acceptance_rate if st is not None else None
        if rate is not None and st is not None and st.mode != Mode.OFF.value:
            pen.setColor(rate_colour(rate))
            p.setPen(pen)
            p.drawArc(arc, 210 * 16, -round(240 * 16 * max(rate, 0.004)))
        big = QFont(self.font())
        big.setPointSizeF(self.font().pointSizeF() * 2.3)
        big.setBold(True)
        p.setFont(big)
        p.setPen(fg if f["acceptance"] not in ("off", NONE) else dim)
        center = QRectF(dial.left(), dial.top() + size * 0.28, size, size * 0.32)
        p.drawText(center, Qt.AlignmentFlag.AlignCenter, f["acceptance"])
        small = QFont(self.font())
        small.setPointSizeF(self.font().pointSizeF() * 0.9)
        p.setFont(small)
        p.setPen(dim)
        label = "acceptance"
        if st is not None and st.mode != Mode.OFF.value:
            label += f"  {f['accepted']}"
        p.drawText(
            QRectF(dial.left(), center.bottom(), size, size * 0.14),
            Qt.AlignmentFlag.AlignCenter,
            label,
        )
        p.setPen(fg)
        p.drawText(
            QRectF(dial.left(), dial.bottom() - size * 0.16, size, size * 0.16),
            Qt.AlignmentFlag.AlignCenter,
            f["mode"] or "idle",
        )

        # figures
        y = dial.bottom() + 6
        rows = [
            ("Mean accepted length", f.get("mean_accepted_length", NONE)),
            ("Tokens/s", f.get("tokens_per_s", NONE)),
            ("Time to first token", f.get("ttft", NONE)),
        ]
        line = self.fontMetrics().height() + 3
        p.setFont(self.font())
        for name, value in rows:
            p.setPen(dim)
            p.drawText(QRectF(pad, y, w - 2 * pad, line), Qt.AlignmentFlag.AlignLeft, name)
            p.setPen(fg)
            p.drawText(QRectF(pad, y, w - 2 * pad, line), Qt.AlignmentFlag.AlignRight, value)
            y += line

        # per-position acceptance
        y += 6
        p.setPen(dim)
        p.setFont(small)
        p.drawText(
            QRectF(pad, y, w - 2 * pad, line), Qt.AlignmentFlag.AlignLeft, "Accepted by position"
        )
        y += line
        chart = QRectF(pad, y, w - 2 * pad, 56.0)
        positions: list[float] = f.get("positions", [])
        p.setPen(QPen(track, 1))
        p.drawLine(chart.bottomLeft(), chart.bottomRight())
        if positions:
            n = len(positions)
            slot = chart.width() / n
            bar_w = max(2.0, min(22.0, slot * 0.7))
            for i, r in enumerate(positions):
                x = chart.left() + i * slot + (slot - bar_w) / 2
                h = max(1.0, r * (chart.height() - 2))
                p.fillRect(QRectF(x, chart.bottom() - h, bar_w, h), rate_colour(r))
                if n <= 16 or i % 2 == 0:
                    p.setPen(dim)
                    p.drawText(
                        QRectF(x - 4, chart.bottom() + 1, bar_w + 8, line),
                        Qt.AlignmentFlag.AlignHCenter,
                        str(i + 1),
                    )
        else:
            p.setPen(dim)
            p.drawText(chart, Qt.AlignmentFlag.AlignCenter, "nothing drafted")
        y = chart.bottom() + line + 4

        note = f.get("note") or ""
        flags = int(Qt.AlignmentFlag.AlignLeft | Qt.TextFlag.TextWordWrap)
        if note:
            p.setPen(dim)
            box = QRectF(pad, y, w - 2 * pad, max(0.0, self.height() - y))
            p.drawText(box, flags, note)
            y += p.boundingRect(box, flags, note).height() + 4
        if self.notices:  # settings the engine changed, warnings about the pair
            p.setPen(QColor(230, 160, 40))
            text = "\n".join(f"⚠ {n}" for n in self.notices)
            p.drawText(QRectF(pad, y, w - 2 * pad, max(0.0, self.height() - y)), flags, text)
        p.end()
