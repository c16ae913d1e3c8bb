"""`specchat`: the desktop app's entry point."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from specchat.gui.resources import app_icon, stylesheet
from specchat.startup.launch import (
    handle_early_flags,
    install_crash_handler,
    setup_logging,
    show_crash_dialog,
)
from specchat.startup.qt_startup import create_guarded

APP_NAME = "SpecChat"


def build_parser() -> argparse.ArgumentParser:
    """Options of the desktop app; Qt's own options (-platform, …) pass through untouched."""
    parser = argparse.ArgumentParser(
        prog="specchat", description="Desktop chat for local GGUF models with speculative decoding."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log details to stderr")
    # Handled before the window starts (see specchat.startup.launch); listed here for --help.
    parser.add_argument("--self-test", action="store_true", help="headless check, then exit")
    parser.add_argument(
        "--install-desktop-entry", action="store_true", help="add a Linux desktop launcher"
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    return parser


def create_application(qt_argv: Sequence[str] | None = None) -> QApplication:
    """The QApplication (or the existing one), with SpecChat's name, icon and stylesheet."""
    app = QApplication.instance()
    if app is None:
        app = QApplication(list(qt_argv) if qt_argv is not None else [sys.argv[0]])
    assert isinstance(app, QApplication)
    app.setApplicationName(APP_NAME)
    app.setApplicationDisplayName(APP_NAME)
    app.setOrganizationName("SpecChat")
    app.setDesktopFileName("specchat")
    app.setWindowIcon(app_icon())
    app.setStyleSheet(stylesheet())
    return app


def run_window(args: argparse.Namespace, app: QApplication) -> int:
    from specchat.gui.main_window import MainWindow

    window = MainWindow()
    app.aboutToQuit.connect(window.shutdown)  # quit without a close event: still join the thread
    _quit_on_signals(app)
    window.show()
    return int(app.exec())


def _quit_on_signals(app: QApplication) -> None:
    """Ctrl+C or SIGTERM in a terminal quits cleanly (the reply so far is saved)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: app.quit())
    wake = QTimer(app)  # lets Python run its signal handlers while Qt's loop waits
    wake.timeout.connect(lambda: None)
    wake.start(250)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    code = handle_early_flags(argv)  # --self-test, --install-desktop-entry, --version
    if code is not None:
        return code
    args, qt_args = build_parser().parse_known_args(argv)
    setup_logging(verbose=args.verbose)
    install_crash_handler(show_crash_dialog)
    # Qt aborts when it cannot load its platform plugin: say what to install instead.
    app = create_guarded(lambda: create_application([sys.argv[0], *qt_args]))
    return run_window(args, app)


if __name__ == "__main__":
    sys.exit(main())
