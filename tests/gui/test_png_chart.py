"""The benchmark chart draws headless (offscreen QImage) and writes a PNG."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from specchat.cli.png_chart import chart_rows, save_chart  # noqa: E402


def _report() -> dict:
    def rec(pid: str, mode: str, speedup: float) -> dict:
        return {"id": pid, "kind": "edit", "mode": mode, "speedup_vs_off": speedup}

    return {
        "machine": {"cpu": "Test CPU", "cpu_count_physical": 2},
        "settings": {"prompts": ["a", "b"], "repeats": 3, "temperature": 0.0},
        "records": [
            rec("a", "off", 1.0),
            rec("a", "lookup", 2.5),
            rec("a", "draft", 0.6),
            rec("b", "off", 1.0),
            rec("b", "lookup", 1.1),
            rec("b", "draft", None),  # type: ignore[arg-type]
        ],
        "overall": {
            "off": {"speedup_vs_off_geomean": 1.0},
            "lookup": {"speedup_vs_off_geomean": 1.66},
            "draft": {"speedup_vs_off_geomean": 0.6},
        },
    }


def test_rows_leave_out_the_reference_and_missing_values() -> None:
    labels, groups = chart_rows(_report())
    assert labels == ["lookup", "draft"]
    assert groups == [
        ("a", {"lookup": 2.5, "draft": 0.6}),
        ("b", {"lookup": 1.1}),
        ("overall (geomean)", {"lookup": 1.66, "draft": 0.6}),
    ]


def test_the_chart_is_written_as_png(tmp_path) -> None:
    out = save_chart(_report(), tmp_path / "sub" / "chart.png", width=800)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    from PySide6.QtGui import QImage

    img = QImage(str(out))
    assert img.width() == 800 and img.height() > 100
