"""Start-up work of the desktop app that comes before (or instead of) the window.

- `handle_early_flags`: ``--version``, ``--install-desktop-entry`` and ``--self-test``, which must
  work without a window — the last one proves that a frozen (PyInstaller) build can load Qt, its
  platform plugins and llama.cpp, and generate with the default model pair;
- `setup_logging`: a rotating log file in the user log directory;
- `install_crash_handler`: an unhandled exception is logged and, in the GUI, shown in a dialog
  that says where the log file is (`show_crash_dialog`).

Qt is imported only inside the functions that need it, so the flags that need no Qt stay fast.
"""

from __future__ import annotations

import contextlib
import io
import logging
import logging.handlers
import os
import sys
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import platformdirs

from specchat import __version__

log = logging.getLogger(__name__)

LOG_FILE = "specchat.log"
LOG_MAX_BYTES = 1024 * 1024
LOG_BACKUPS = 3
ENV_LOG_DIR = "SPECCHAT_LOG_DIR"
_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s]: %(message)s"

ShowDialog = Callable[[str, Path], None]

_log_path: Path | None = None  # the file setup_logging() writes to, once it ran


# -- early flags ------------------------------------------------------------------------------
def handle_early_flags(argv: Sequence[str]) -> int | None:
    """Handle the flags that run without the window; their exit code, or None to start the GUI."""
    args = list(argv)
    if "--version" in args:
        print(f"specchat {__version__}", flush=True)
        return 0
    if "--install-desktop-entry" in args:
        return _install_desktop_entry()
    if "--self-test" in args:
        return _self_test()
    return None


def _install_desktop_entry() -> int:
    if not sys.platform.startswith("linux"):
        print(
            "--install-desktop-entry is for Linux desktops (freedesktop.org launchers); "
            "on Windows and macOS use the installed SpecChat app instead.",
            file=sys.stderr,
        )
        return 1
    from specchat.startup.desktop_entry import install_desktop_entry

    try:
        path = install_desktop_entry()
    except OSError as exc:
        print(f"could not install the desktop entry: {exc}", file=sys.stderr)
        return 1
    print(path, flush=True)
    return 0


def needs_offscreen(environ: Mapping[str, str], platform: str) -> bool:
    """True on a Linux machine without a display server to talk to."""
    return platform.startswith("linux") and not (
        environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY")
    )


def qt_check() -> dict[str, object]:
    """Create (or reuse) the QApplication and render the app icon: proves that Qt, the platform
    plugin and the SVG icon engine load (in a frozen build: that they were bundled)."""
    from PySide6 import __version__ as pyside_version
    from PySide6.QtGui import QGuiApplication, QIcon
    from PySide6.QtWidgets import QApplication

    from specchat.core.resources_path import resources_dir
    from specchat.startup.qt_startup import (
        create_guarded,  # Qt's platform failure: one line, not an abort
    )

    app = QApplication.instance() or create_guarded(
        lambda: QApplication([sys.argv[0] if sys.argv else "specchat"])
    )
    icon = QIcon(str(resources_dir() / "specchat.svg"))
    if icon.pixmap(64, 64).isNull():
        raise RuntimeError("the SVG app icon did not render (are Qt's SVG plugins there?)")
    info: dict[str, object] = {
        "pyside6": pyside_version,
        "platform": QGuiApplication.platformName(),
    }
    del app  # a QApplication made here lives on as the process's one instance
    return info


def _self_test() -> int:
    if needs_offscreen(os.environ, sys.platform):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    log_path = setup_logging()
    extra: dict[str, object] = {}
    try:
        extra["qt"] = qt_check()
    except Exception as exc:  # the verdict goes into the one line, as for the model test
        extra["qt_error"] = f"{type(exc).__name__}: {exc}"
    from specchat.startup.selftest import run_self_test

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run_self_test(extra=extra)
    line = out.getvalue()
    if sys.stdout is not None:  # None in a windowed Windows build: the log has the line
        sys.stdout.write(line)
        sys.stdout.flush()
    log.info("%s (log: %s)", line.strip(), log_path)
    return code


# -- logging ----------------------------------------------------------------------------------
def log_dir() -> Path:
    """``$SPECCHAT_LOG_DIR`` if set, else the platform's user log directory for "specchat"."""
    env = os.environ.get(ENV_LOG_DIR)
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_log_dir("specchat", appauthor=False))


def log_file_path() -> Path:
    """The file the log goes to (the one setup_logging() opened, once it ran)."""
    return _log_path or log_dir() / LOG_FILE


def setup_logging(verbose: bool = False, directory: Path | None = None) -> Path:
    """Log INFO and above to a rotating file (1 MiB × 3 backups) and WARNING (INFO with
    `verbose`) to stderr. Calling it again replaces the handlers it added. Returns the file."""
    global _log_path
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_specchat", False):
            root.removeHandler(handler)
            handler.close()
    directory = directory or log_dir()
    path = directory / LOG_FILE
    formatter = logging.Formatter(_LOG_FORMAT)
    handlers: list[logging.Handler] = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        file_handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=LOG_MAX_BYTES, backupCount=LOG_BACKUPS, encoding="utf-8"
        )
        file_handler.setLevel(logging.INFO)
        handlers.append(file_handler)
    except OSError as exc:  # a read-only home must not stop the app
        print(f"specchat: cannot write the log file {path}: {exc}", file=sys.stderr)
    if sys.stderr is not None:  # None in a windowed Windows build
        console = logging.StreamHandler(sys.stderr)
        console.setLevel(logging.INFO if verbose else logging.WARNING)
        handlers.append(console)
    for handler in handlers:
        handler.setFormatter(formatter)
        handler._specchat = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    _log_path = path
    return path


# -- crash reporting --------------------------------------------------------------------------
def install_crash_handler(show_dialog: ShowDialog | None = None) -> None:
    """Route unhandled exceptions (main thread, Qt slots, Python threads) to the log; with
    `show_dialog` (the GUI), the main thread's ones are also shown to the user."""

    def excepthook(
        exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            sys.__excepthook__(exc_type, exc, tb)
            return
        text = "".join(traceback.format_exception(exc_type, exc, tb))
        log.critical("unhandled exception\n%s", text.rstrip())
        if show_dialog is None:
            return
        try:
            show_dialog(f"{exc_type.__name__}: {exc}", log_file_path())
        except Exception:  # the dialog must never become a second crash
            log.exception("could not show the crash dialog")

    def thread_excepthook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit:
            return
        text = "".join(
            traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback)
        )
        name = args.thread.name if args.thread is not None else "?"
        log.critical("unhandled exception in thread %s\n%s", name, text.rstrip())

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook


def crash_message(message: str, log_path: Path) -> str:
    return (
        "SpecChat ran into an unexpected error and may not work correctly until it is "
        f"restarted.\n\n{message}\n\nThe details are in the log file:\n{log_path}"
    )


def show_crash_dialog(message: str, log_path: Path) -> None:
    """A modal error box with the message and the log file's location (Qt's GUI thread only;
    from another thread it is queued to the GUI thread). Nothing happens without a QApplication."""
    from PySide6.QtCore import Qt, QThread, QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    app = QApplication.instance()
    if app is None:
        return

    def show() -> None:
        box = QMessageBox(QMessageBox.Icon.Critical, "SpecChat — unexpected error", "")
        box.setText(crash_message(message, log_path))
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        box.exec()

    if QThread.currentThread() == app.thread():
        show()
    else:
        QTimer.singleShot(0, app, show)
