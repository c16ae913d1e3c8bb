"""Render the main window (finished reply, gauge) and the comparison window to PNG files.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/gui/screenshots.py [OUT_DIR]

OUT_DIR defaults to $SPECCHAT_SCREENSHOT_DIR, else /tmp/specchat-screenshots. Uses the real default
pair from the model store and a throw-away data directory. `--dark` renders a dark palette too.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

PROMPT = "Write a short Python function that checks whether a string is a palindrome."


def wait_until(app, predicate, timeout: float = 180.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise TimeoutError("timed out")
        app.processEvents()
        time.sleep(0.01)


def dark_palette():
    """What a desktop in dark mode hands Qt (the offscreen platform has no system theme)."""
    from PySide6.QtGui import QColor, QPalette

    R = QPalette.ColorRole
    pal = QPalette()
    for role, colour in {
        R.Window: "#2b2d30",
        R.WindowText: "#dfe1e5",
        R.Base: "#1e1f22",
        R.AlternateBase: "#313338",
        R.Button: "#393b40",
        R.ButtonText: "#dfe1e5",
        R.Text: "#dfe1e5",
        R.BrightText: "#ffffff",
        R.Highlight: "#2f6fd0",
        R.HighlightedText: "#ffffff",
        R.PlaceholderText: "#8c8f94",
        R.ToolTipBase: "#393b40",
        R.ToolTipText: "#dfe1e5",
        R.Light: "#4e5157",
        R.Midlight: "#43454a",
        R.Mid: "#5a5d63",
        R.Dark: "#1b1c1f",
        R.Shadow: "#000000",
        R.Link: "#6aa5ff",
    }.items():
        pal.setColor(role, QColor(colour))
    for role in (R.WindowText, R.Text, R.ButtonText):
        pal.setColor(QPalette.ColorGroup.Disabled, role, QColor("#6f737a"))
    return pal


def shoot(out: Path, dark: bool, max_tokens: int) -> list[Path]:
    from PySide6.QtWidgets import QApplication

    from specchat.core.state.settings import Settings
    from specchat.gui.app import create_application
    from specchat.gui.main_window import MainWindow

    app = create_application([sys.argv[0]])
    QApplication.setStyle("Fusion")
    app.setPalette(dark_palette() if dark else app.style().standardPalette())
    suffix = "-dark" if dark else ""
    settings = Settings(max_tokens=max_tokens, mode="draft", n_ctx=2048)
    w = MainWindow(settings=settings)
    w.resize(1400, 900)
    w.show()
    wait_until(app, lambda: w.models.target is not None and not w.controller.loading_models)
    w.system_prompt.setText("You are a concise coding assistant.")
    w.system_prompt.editingFinished.emit()
    w.input.setPlainText(PROMPT)
    w.send(w.input.toPlainText())
    wait_until(app, lambda: w.session.streaming)
    wait_until(app, lambda: len(w.session._stream.reply.text) > 40 if w.session._stream else True)
    files = [out / f"main-streaming{suffix}.png"]
    w.grab().save(str(files[-1]))
    wait_until(app, lambda: not w.session.streaming)
    app.processEvents()
    files.append(out / f"main-finished{suffix}.png")
    w.grab().save(str(files[-1]))
    files.append(out / f"gauge{suffix}.png")
    w.gauge.grab().save(str(files[-1]))

    w.menus.compare.trigger()
    dlg = w.compare_dialog
    dlg.resize(1200, 820)
    dlg.run()
    wait_until(app, lambda: not dlg.running, timeout=300)
    app.processEvents()
    files.append(out / f"compare{suffix}.png")
    dlg.grab().save(str(files[-1]))
    (out / f"compare{suffix}.json").write_text(dlg.result_json())
    dlg.close()
    w.close()
    return files


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?", default=os.environ.get("SPECCHAT_SCREENSHOT_DIR"))
    parser.add_argument("--dark", action="store_true", help="also render with a dark palette")
    parser.add_argument("--max-tokens", type=int, default=120)
    args = parser.parse_args()
    out = Path(args.out or "/tmp/specchat-screenshots")
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("SPECCHAT_DATA_DIR", tempfile.mkdtemp(prefix="specchat-shots-"))
    files = shoot(out, False, args.max_tokens)
    if args.dark:
        files += shoot(out, True, args.max_tokens)
    for f in files:
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
