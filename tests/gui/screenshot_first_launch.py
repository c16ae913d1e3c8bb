"""Render a first launch to PNG: a new user's window (fresh data directory, so no cost curve
kept yet) chatting while the target's cost curve is still being measured in the background.

    xvfb-run -a .venv/bin/python tests/gui/screenshot_first_launch.py [OUT.png]

OUT defaults to docs/screenshots/first-launch.png. The window loads the installed default pair
from the model store as at a real start; once the measurement has taken its first steps (a user
typing) it saves the window with Send enabled (OUT's name + "-ready"), sends a message and saves
the window again once the reply has streamed some text (OUT: Send is off while a reply streams,
as always). It checks that Send was enabled and that the curve was still being measured in both
pictures (exit status 1 if not).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

PROMPT = "Write a short Python function that checks whether a string is a palindrome."


def wait_until(app, predicate, timeout: float = 600.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise TimeoutError("timed out")
        app.processEvents()
        time.sleep(0.01)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?", default="docs/screenshots/first-launch.png")
    args = parser.parse_args()
    os.environ["SPECCHAT_DATA_DIR"] = tempfile.mkdtemp(prefix="specchat-first-launch-")

    from specchat.gui.app import create_application
    from specchat.gui.main_window import MainWindow

    app = create_application([sys.argv[0]])
    w = MainWindow(open_manager_on_first_run=False)  # settings from the (empty) data directory
    w.resize(1400, 900)
    w.show()
    wait_until(app, lambda: w.models.target is not None and not w.controller.loading_models)
    worker = w.controller.worker
    wait_until(app, lambda: worker.measuring is None or worker.measuring.done >= 2)
    app.processEvents()
    send_enabled = w.send_button.isEnabled() and worker.measuring is not None
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    w.grab().save(str(out.with_name(f"{out.stem}-ready{out.suffix}")))
    w.input.setPlainText(PROMPT)
    w.send(w.input.toPlainText())
    wait_until(app, lambda: w.session.streaming)
    wait_until(app, lambda: len(w.chat.last("assistant").text) > 120 or not w.session.streaming)
    app.processEvents()
    measuring = worker.measuring is not None and w.models_panel.curve.isVisible()
    streaming = w.session.streaming
    w.grab().save(str(out))
    print(
        f"{out}: Send enabled at load {send_enabled}, streaming {streaming}, "
        f"curve being measured {measuring} ({worker.measuring and worker.measuring.done} steps)"
    )
    w.stop()
    wait_until(app, lambda: not w.session.streaming)
    w.close()
    return 0 if send_enabled and streaming and measuring else 1


if __name__ == "__main__":
    sys.exit(main())
