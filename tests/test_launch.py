"""The launcher (specchat.startup.launch): flags that run without a window, the log file, the crash
handler. The self-test runs for real on the default pair, in a child process as the frozen
build would."""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specchat import __version__
from specchat.startup import launch
from specchat.startup.desktop_entry import ICON_SIZES
from specchat.startup.launch import handle_early_flags

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # the dialog test's QApplication

ROOT = Path(__file__).resolve().parents[1]
ICONS = ROOT / "resources" / "icons"


@pytest.fixture
def own_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Undo setup_logging() and install_crash_handler() after the test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    monkeypatch.setattr(launch, "_log_path", None)
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


def _flush_logs() -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()


# -- early flags ------------------------------------------------------------------------------
def test_without_an_early_flag_the_gui_starts() -> None:
    assert handle_early_flags([]) is None
    assert handle_early_flags(["-v", "-platform", "offscreen", "--style", "fusion"]) is None


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert handle_early_flags(["--version"]) == 0
    assert capsys.readouterr().out == f"specchat {__version__}\n"


def test_install_desktop_entry_writes_launcher_and_icons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.setattr(sys, "platform", "linux")
    assert handle_early_flags(["--install-desktop-entry"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path == tmp_path / "applications" / "specchat.desktop"
    assert path.stat().st_mode & 0o100  # some desktops only trust executable launchers

    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "[Desktop Entry]"
    entry = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
    assert entry["Type"] == "Application"
    assert entry["Name"] == "SpecChat"
    assert entry["Icon"] == "specchat"
    assert entry["Terminal"] == "false"
    assert entry["StartupWMClass"] == "specchat"
    command = shlex.split(entry["Exec"])
    assert command[-1] == "%U"
    program = Path(command[0])
    assert program.is_file() and os.access(program, os.X_OK), entry["Exec"]
    if len(command) > 2:  # no `specchat` script next to this Python: `python -m specchat.gui.app`
        assert command[1:3] == ["-m", "specchat.gui.app"]

    for size in ICON_SIZES:
        copied = tmp_path / "icons" / "hicolor" / f"{size}x{size}" / "apps" / "specchat.png"
        assert copied.read_bytes() == (ICONS / f"specchat-{size}.png").read_bytes()
    svg = tmp_path / "icons" / "hicolor" / "scalable" / "apps" / "specchat.svg"
    assert svg.read_bytes() == (ROOT / "resources" / "specchat.svg").read_bytes()


@pytest.mark.parametrize("platform", ["win32", "darwin"])
def test_install_desktop_entry_elsewhere_says_linux_only(
    platform: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.setattr(sys, "platform", platform)
    assert handle_early_flags(["--install-desktop-entry"]) == 1
    assert "Linux" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_offscreen_only_on_linux_without_a_display() -> None:
    assert launch.needs_offscreen({}, "linux")
    assert not launch.needs_offscreen({"DISPLAY": ":0"}, "linux")
    assert not launch.needs_offscreen({"WAYLAND_DISPLAY": "wayland-0"}, "linux")
    assert not launch.needs_offscreen({}, "win32")
    assert not launch.needs_offscreen({}, "darwin")


def test_self_test_runs_qt_and_the_default_pair(
    model_paths: tuple[Path, Path], tmp_path: Path
) -> None:
    hidden = ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    env["SPECCHAT_LOG_DIR"] = str(tmp_path)
    code = "import sys; from specchat.startup.launch import handle_early_flags as h; "
    code += "sys.exit(h(['--self-test']))"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("specchat self-test: ")]
    assert len(lines) == 1, proc.stdout + proc.stderr
    result = json.loads(lines[0].split(": ", 1)[1])
    assert proc.returncode == 0, result
    assert result["ok"] is True
    assert result["qt"]["platform"] == "offscreen"  # set because there is no display
    for mode in ("off", "draft", "lookup"):
        assert result[mode]["tokens"] > 0, mode
    assert result["draft"]["drafted"] > 0
    assert lines[0] in (tmp_path / launch.LOG_FILE).read_text(encoding="utf-8")


# -- logging and crashes ----------------------------------------------------------------------
def _crash_here() -> None:
    raise ValueError("boom in a slot")


def test_crash_handler_logs_the_traceback_and_shows_the_dialog(
    tmp_path: Path, own_logging: None
) -> None:
    log_path = launch.setup_logging(directory=tmp_path)
    shown: list[tuple[str, Path]] = []
    launch.install_crash_handler(lambda message, path: shown.append((message, path)))
    try:
        _crash_here()
    except ValueError:
        sys.excepthook(*sys.exc_info())  # type: ignore[arg-type]
    _flush_logs()
    text = log_path.read_text(encoding="utf-8")
    assert "CRITICAL" in text and "unhandled exception" in text
    assert "Traceback (most recent call last)" in text
    assert "in _crash_here" in text and "ValueError: boom in a slot" in text
    assert shown == [("ValueError: boom in a slot", log_path)]


def test_a_failing_dialog_is_logged_not_raised(tmp_path: Path, own_logging: None) -> None:
    log_path = launch.setup_logging(directory=tmp_path)

    def broken_dialog(message: str, path: Path) -> None:
        raise RuntimeError("no display")

    launch.install_crash_handler(broken_dialog)
    try:
        _crash_here()
    except ValueError:
        sys.excepthook(*sys.exc_info())  # type: ignore[arg-type]
    _flush_logs()
    text = log_path.read_text(encoding="utf-8")
    assert "ValueError: boom in a slot" in text
    assert "could not show the crash dialog" in text and "RuntimeError: no display" in text


def test_thread_crashes_are_logged(tmp_path: Path, own_logging: None) -> None:
    log_path = launch.setup_logging(directory=tmp_path)
    launch.install_crash_handler(None)
    worker = threading.Thread(target=_crash_here, name="worker-7")
    worker.start()
    worker.join()
    _flush_logs()
    text = log_path.read_text(encoding="utf-8")
    assert "unhandled exception in thread worker-7" in text
    assert "ValueError: boom in a slot" in text


def test_log_file_rotates_at_1_mib_keeping_3(tmp_path: Path, own_logging: None) -> None:
    log_path = launch.setup_logging(directory=tmp_path)
    assert log_path == tmp_path / "specchat.log" == launch.log_file_path()
    logger = logging.getLogger("specchat.test")
    for i in range(5000):  # ~5 MB
        logger.info("line %05d %s", i, "x" * 1000)
    _flush_logs()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["specchat.log", "specchat.log.1", "specchat.log.2", "specchat.log.3"]
    assert all(p.stat().st_size <= launch.LOG_MAX_BYTES for p in tmp_path.iterdir())


def test_setup_logging_twice_keeps_one_file_handler(tmp_path: Path, own_logging: None) -> None:
    launch.setup_logging(directory=tmp_path / "a")
    launch.setup_logging(verbose=True, directory=tmp_path / "b")
    ours = [h for h in logging.getLogger().handlers if getattr(h, "_specchat", False)]
    files = [h for h in ours if isinstance(h, logging.FileHandler)]
    assert len(files) == 1 and Path(files[0].baseFilename).parent == tmp_path / "b"


def test_crash_dialog_shows_message_and_log_path(
    qapp: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from PySide6.QtWidgets import QMessageBox

    seen: list[str] = []

    def fake_exec(box: QMessageBox) -> int:
        seen.append(box.text())
        return 0

    monkeypatch.setattr(QMessageBox, "exec", fake_exec)
    launch.show_crash_dialog("ValueError: boom", tmp_path / "specchat.log")
    assert len(seen) == 1
    assert "ValueError: boom" in seen[0] and str(tmp_path / "specchat.log") in seen[0]
