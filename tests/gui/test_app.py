"""The `specchat` entry point: opens the window, loads the default pair, quits cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from specchat.gui.app import build_parser


def test_parser_leaves_qt_options_alone() -> None:
    args, rest = build_parser().parse_known_args(["-v", "-platform", "offscreen"])
    assert args.verbose and rest == ["-platform", "offscreen"]


def test_entry_point_starts_loads_and_quits_on_ctrl_c(tmp_path: Path, model_paths) -> None:
    script = Path(sys.executable).with_name("specchat")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "specchat.gui.app"]
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", SPECCHAT_DATA_DIR=str(tmp_path))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    settings = tmp_path / "settings.json"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if settings.is_file() and json.loads(settings.read_text() or "{}").get("target_path"):
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        saved = json.loads(settings.read_text())
        assert Path(saved["target_path"]) == model_paths[0]
        assert Path(saved["draft_path"]) == model_paths[1]
        assert (tmp_path / "history.sqlite3").is_file()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
