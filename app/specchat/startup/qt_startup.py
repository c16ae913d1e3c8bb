"""Creating the QApplication without dying silently when Qt cannot open a window.

When Qt's platform plugin does not load (on Linux: the xcb plugin without ``libxcb-cursor0`` and
friends), Qt prints a few lines on stderr and aborts the process: someone who double-clicked the
launcher sees nothing. `create_guarded` holds Qt's messages while the QApplication is made; on
that failure it prints one line naming what to install, shows the same line through the
desktop's notifications (``notify-send``), a zenity box or a Tk box, logs Qt's own messages and
exits with status 1. Anything else Qt said is passed on to stderr afterwards, as Qt would have.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from specchat.core.machine.desktop_libs import (
    distro_family,
    install_hint,
    missing_xcb_libs,
    read_os_release,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
EXIT_CODE = 1
TITLE = "SpecChat cannot start"
_FAILURE_MARKS = ("no Qt platform plugin could be initialized", "Could not load the Qt platform")


def is_platform_failure(message: str) -> bool:
    return any(mark in message for mark in _FAILURE_MARKS)


def diagnose(
    messages: Sequence[str],
    missing: Sequence[str],
    environ: Mapping[str, str],
    family: str | None,
    platform: str = sys.platform,
) -> str:
    """The one line to show: what is missing and how to install it, else the likeliest cause."""
    head = "specchat: cannot open a window: "
    if platform.startswith("linux") and missing:
        libs = ", ".join(missing)
        verb = "is" if len(missing) == 1 else "are"
        hint = install_hint(missing, family)
        return f"{head}Qt's xcb plugin needs {libs}, which {verb} not installed; {hint}"
    text = "\n".join(messages)
    display = environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY")
    if platform.startswith("linux") and not display:
        return f"{head}no display (DISPLAY and WAYLAND_DISPLAY are unset); start it from a desktop"
    if "could not connect to display" in text:
        return f"{head}cannot connect to the display {display!r}"
    return f"{head}Qt could not load its platform plugin (details in the log file)"


def notify(line: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Show ``line`` on the desktop; returns how ("notify-send", "zenity", "tk") or None."""
    env = os.environ if environ is None else environ
    tool = shutil.which("notify-send", path=env.get("PATH"))
    if tool:
        try:
            done = subprocess.run(
                [tool, "--app-name=SpecChat", "--urgency=critical", TITLE, line],
                timeout=5,
                capture_output=True,
            )
            if done.returncode == 0:
                return "notify-send"
        except (OSError, subprocess.SubprocessError):
            pass
    if not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
        return None
    zenity = shutil.which("zenity", path=env.get("PATH"))
    if zenity:
        try:  # detached: the box stays while this process exits
            subprocess.Popen(
                [zenity, "--error", f"--title={TITLE}", f"--text={line}"],
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            return "zenity"
        except OSError:
            pass
    if sys.stderr is not None and sys.stderr.isatty():
        return None  # in a terminal the printed line is enough; no box to click away
    try:
        import tkinter
        from tkinter import messagebox

        root = tkinter.Tk()
        root.withdraw()
        messagebox.showerror(TITLE, line)
        root.destroy()
        return "tk"
    except Exception:  # no Tk, or no display it can use
        return None


def report_failure(messages: Sequence[str]) -> str:
    """Diagnose, print the line, log Qt's messages, show the line on the desktop."""
    family = distro_family(read_os_release())
    line = diagnose(messages, missing_xcb_libs(), os.environ, family)
    if sys.stderr is not None:
        print(line, file=sys.stderr, flush=True)
    log.info("Qt could not start: %s\nQt said:\n%s", line, "\n".join(messages))
    how = notify(line)
    log.info("shown via %s", how or "stderr only")
    return line


def create_guarded(factory: Callable[[], T], exit: Callable[[int], Any] = os._exit) -> T:
    """``factory()`` (which creates the QApplication), with Qt's platform failure turned into
    one readable line and exit status 1 instead of an abort."""
    from PySide6.QtCore import QtMsgType, qInstallMessageHandler

    held: list[tuple[Any, str]] = []

    def handler(kind: Any, context: Any, message: str) -> None:
        category = getattr(context, "category", None) or ""
        text = f"{category}: {message}" if category and category != "default" else message
        held.append((kind, text))
        if kind == QtMsgType.QtFatalMsg and is_platform_failure(message):
            report_failure([t for _, t in held])
            for h in logging.getLogger().handlers:
                h.flush()
            exit(EXIT_CODE)  # Qt would abort() right after this handler returns

    previous = qInstallMessageHandler(handler)
    try:
        result = factory()
    finally:
        qInstallMessageHandler(previous)
    if held and sys.stderr is not None:
        for _, text in held:
            print(text, file=sys.stderr)
    return result
