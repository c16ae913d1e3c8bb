"""A PNG chart of a benchmark report (speedup vs off per prompt and mode), drawn with QPainter
on a QImage, so it works headless (``QT_QPA_PLATFORM=offscreen``) and needs no QtCharts.

This module needs Qt (PySide6): `specchat-cli bench --png` imports it only then, and
`check_available()` says what to install when PySide6 is missing. Nothing else in the CLI
imports Qt.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

PALETTE = [
    (66, 133, 244),
    (46, 160, 67),
    (230, 140, 30),
    (170, 80, 200),
    (214, 69, 65),
    (0, 150, 160),
    (120, 120, 120),
    (150, 110, 60),
]
ROW_H = 18  # height of one bar
GAP = 10  # space between prompt groups
LEFT = 190  # room for prompt ids
RIGHT = 80
TOP = 86


def check_available() -> None:
    """Raise a readable error when Qt (PySide6) cannot be imported."""
    try:
        from PySide6 import QtGui  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(f"--png needs PySide6 (pip install PySide6-Essentials): {exc}") from exc


def _app() -> Any:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    return QGuiApplication.instance() or QGuiApplication([])


def chart_rows(report: dict[str, Any]) -> tuple[list[str], list[tuple[str, dict[str, float]]]]:
    """(variant labels, [(group name, {label: speedup})]): one group per prompt, then overall.
    The reference (off, always 1.0) is left out; it is the line at 1×."""
    labels = [lab for lab in report["overall"] if lab != "off"]
    groups: list[tuple[str, dict[str, float]]] = []
    for pid in report["settings"]["prompts"]:
        vals = {
            r["mode"]: r["speedup_vs_off"]
            for r in report["records"]
            if r["id"] == pid and r["mode"] in labels and r["speedup_vs_off"]
        }
        if vals:
            groups.append((pid, vals))
    overall = {
        lab: o["speedup_vs_off_geomean"]
        for lab, o in report["overall"].items()
        if lab in labels and o["speedup_vs_off_geomean"]
    }
    if overall:
        groups.append(("overall (geomean)", overall))
    return labels, groups


def render_chart(report: dict[str, Any], width: int = 1000) -> Any:
    """The chart as a QImage (horizontal bars, one group per prompt)."""
    app = _app()  # noqa: F841 - fonts need a QGuiApplication while painting
    from PySide6.QtCore import QPointF, QRectF, Qt
    from PySide6.QtGui import QColor, QFont, QImage, QPainter, QPen

    labels, groups = chart_rows(report)
    colours = {lab: QColor(*PALETTE[i % len(PALETTE)]) for i, lab in enumerate(labels)}
    group_h = max(1, len(labels)) * ROW_H + GAP
    height = TOP + len(groups) * group_h + 40
    img = QImage(width, height, QImage.Format.Format_ARGB32)
    img.fill(QColor(255, 255, 255))
    p = QPainter(img)
    try:
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        font = QFont()
        font.setPixelSize(12)
        p.setFont(font)
        top_value = max([1.0] + [v for _, vals in groups for v in vals.values()])
        x_max = max(2.0, math.ceil(top_value * 1.1 * 2) / 2)
        plot_w = width - LEFT - RIGHT

        def x_of(v: float) -> float:
            return LEFT + plot_w * min(v, x_max) / x_max

        title = QFont(font)
        title.setPixelSize(16)
        title.setBold(True)
        p.setFont(title)
        p.setPen(QColor(30, 30, 30))
        p.drawText(QPointF(12, 24), "Speedup vs speculation off (decode tokens/s)")
        p.setFont(font)
        m, s = report["machine"], report["settings"]
        sub = (
            f"{m.get('cpu')}, {m.get('cpu_count_physical')} cores · {s['repeats']} repeat(s) · "
            f"temperature {s['temperature']} · median of paired ratios"
        )
        p.drawText(QPointF(12, 44), sub)
        # legend
        x = 12.0
        for lab in labels:
            p.fillRect(QRectF(x, 56, 12, 12), colours[lab])
            p.setPen(QColor(30, 30, 30))
            p.drawText(QPointF(x + 16, 66), lab)
            x += 28 + p.fontMetrics().horizontalAdvance(lab)
        # grid
        bottom = TOP + len(groups) * group_h
        step = 0.5 if x_max <= 4 else 1.0 if x_max <= 10 else 2.0
        v = 0.0
        while v <= x_max + 1e-9:
            gx = x_of(v)
            p.setPen(QPen(QColor(225, 225, 225), 1))
            p.drawLine(QPointF(gx, TOP - 6), QPointF(gx, bottom))
            p.setPen(QColor(90, 90, 90))
            p.drawText(QRectF(gx - 30, bottom + 4, 60, 16), Qt.AlignmentFlag.AlignCenter, f"{v:g}×")
            v += step
        # bars
        for gi, (name, vals) in enumerate(groups):
            y0 = TOP + gi * group_h
            p.setPen(QColor(30, 30, 30))
            p.drawText(
                QRectF(8, y0, LEFT - 16, len(labels) * ROW_H),
                Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                name,
            )
            for li, lab in enumerate(labels):
                val = vals.get(lab)
                if val is None:
                    continue
                y = y0 + li * ROW_H
                p.fillRect(QRectF(LEFT, y + 2, x_of(val) - LEFT, ROW_H - 4), colours[lab])
                p.setPen(QColor(30, 30, 30))
                p.drawText(QPointF(x_of(val) + 4, y + ROW_H - 5), f"{val:.2f}×")
        # the 1x line: speculation off
        p.setPen(QPen(QColor(200, 40, 40), 1.5, Qt.PenStyle.DashLine))
        p.drawLine(QPointF(x_of(1.0), TOP - 6), QPointF(x_of(1.0), bottom))
    finally:
        p.end()
    return img


def save_chart(report: dict[str, Any], path: str | os.PathLike[str], width: int = 1000) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    img = render_chart(report, width)
    if not img.save(str(out), "PNG"):
        raise OSError(f"could not write the chart to {out}")
    return out
