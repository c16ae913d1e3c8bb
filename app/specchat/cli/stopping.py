"""How a command stops: Ctrl+C, and SIGTERM taken as Ctrl+C (`specchat-cli` runs every command
inside `sigterm_as_ctrl_c`)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """SIGTERM, taken as Ctrl+C: every command's stop path runs (a bench writes the report of
    what it measured and stops its llama-server peers, a download keeps its partial file)."""


@contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """While the command runs, SIGTERM (`kill PID`, a service manager, a job's time limit)
    raises `Terminated` in the main thread, where Ctrl+C would raise KeyboardInterrupt; a
    second SIGTERM while that stop is under way ends the process at once, as it would have
    without this. The earlier handler comes back afterwards."""

    def stop(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Terminated

    try:
        earlier = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, stop)
        installed = True
    except ValueError:  # not the main thread (an embedding caller): signals are left alone
        installed = False
    try:
        yield
    finally:
        if installed:
            signal.signal(signal.SIGTERM, earlier if earlier is not None else signal.SIG_DFL)
