"""The launcher when Qt cannot load its xcb platform plugin: one line naming the package to
install (and a desktop notification), exit status 1, no abort.

The failure is real: the launcher runs in a child process with QT_QPA_PLATFORM=xcb and
LD_LIBRARY_PATH pointing at a folder whose ``libxcb-cursor.so.0`` is an empty file, which the
dynamic loader finds first and cannot load ("file too short"), exactly as on a desktop without
``libxcb-cursor0``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.core.machine.desktop_libs import distro_family, read_os_release
from specchat.startup.qt_startup import diagnose, is_platform_failure

BIN = Path(sys.executable).parent
QT_FATAL = (
    "This application failed to start because no Qt platform plugin could be initialized. "
    "Reinstalling the application may fix this problem."
)


def _launcher() -> list[str]:
    script = BIN / "specchat"
    return [str(script)] if script.exists() else [sys.executable, "-m", "specchat.gui.app"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the xcb plugin is Linux's")
def test_launcher_names_the_missing_package(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "libxcb-cursor.so.0").write_bytes(b"")  # found first, cannot be loaded
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    notified = tmp_path / "notified.txt"
    notify = fake_bin / "notify-send"  # records what the desktop would have shown
    notify.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{notified}"\n')
    notify.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env.update(
        QT_QPA_PLATFORM="xcb",
        DISPLAY=":97",  # never reached: the plugin fails to load first
        LD_LIBRARY_PATH=str(shadow),
        PATH=f"{fake_bin}{os.pathsep}{env.get('PATH', '')}",
        SPECCHAT_LOG_DIR=str(tmp_path / "log"),
        SPECCHAT_DATA_DIR=str(tmp_path / "data"),
    )
    proc = subprocess.run(_launcher(), capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)  # not 134 (SIGABRT)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr  # Qt's own lines go to the log, not the terminal
    line = lines[0]
    assert line.startswith("specchat: cannot open a window: Qt's xcb plugin needs ")
    assert "libxcb-cursor.so.0" in line
    family = distro_family(read_os_release())
    if family == "debian":
        assert "sudo apt install libxcb-cursor0" in line
    elif family in ("fedora", "arch"):
        assert "xcb-util-cursor" in line
    else:
        assert "libxcb-cursor0 " in line and "xcb-util-cursor" in line
    assert notified.read_text().splitlines()[-1] == line  # the same line, on the desktop
    log = (tmp_path / "log" / "specchat.log").read_text()
    assert "no Qt platform plugin could be initialized" in log  # Qt's words are kept


def test_diagnosis_lines() -> None:
    assert is_platform_failure(QT_FATAL)
    assert not is_platform_failure("qt.qpa.xcb: QXcbConnection: XCB error")
    both = diagnose([QT_FATAL], ["libxcb-cursor.so.0"], {"DISPLAY": ":0"}, "fedora", "linux")
    assert both.endswith("needs libxcb-cursor.so.0, which is not installed; sudo dnf install "
                         "xcb-util-cursor")  # fmt: skip
    assert "no display" in diagnose([QT_FATAL], [], {}, "debian", "linux")
    unreachable = diagnose(
        ["qt.qpa.xcb: could not connect to display :97", QT_FATAL], [], {"DISPLAY": ":97"}, None
    )
    assert "cannot connect to the display ':97'" in unreachable
    assert "platform plugin" in diagnose([QT_FATAL], [], {}, None, "win32")
    for text in (both, unreachable):
        assert "\n" not in text
