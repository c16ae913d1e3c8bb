"""Entry script of the PyInstaller build (packaging/specchat.spec).

The flags that run without a window (--self-test, --version, --install-desktop-entry) come
first, so the frozen binary's self-test works whatever the GUI's own entry point does; then the
log file and the crash dialog are set up and the desktop app starts.
"""

from __future__ import annotations

import sys


def main() -> int:
    from specchat.startup.launch import (
        handle_early_flags,
        install_crash_handler,
        setup_logging,
        show_crash_dialog,
    )

    code = handle_early_flags(sys.argv[1:])
    if code is not None:
        return code
    setup_logging(verbose=any(arg in ("-v", "--verbose") for arg in sys.argv[1:]))
    install_crash_handler(show_crash_dialog)

    from specchat.gui.app import main as gui_main

    return gui_main()


if __name__ == "__main__":
    sys.exit(main())
