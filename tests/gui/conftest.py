"""GUI test fixtures: offscreen Qt, a throw-away data directory, windows on the shared engine.

The real default pair is loaded once per session (the `engine` fixture of tests/conftest.py);
each window gets its own inference thread that adopts that engine, and every test fails if an
inference thread is still running when it ends.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from collections.abc import Callable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

# how long a wait for the window may take: generous, so a busy machine slows a test, never
# fails it (a passing test waits only as long as the window needs)
WAIT_MS = 120_000

MAX_STREAM_MS = 180_000  # a reply on a busy 2-core machine


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Conversations and settings go to a temporary directory, never the user's."""
    path = tmp_path / "data"
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(path))
    return path


@pytest.fixture(autouse=True)
def no_dangling_threads(qapp: Any) -> Iterator[None]:
    """Fail a test that leaves an inference thread running (and stop it for the next test)."""
    yield
    from specchat.gui.threads.engine import running_threads

    left = running_threads()
    for thread in left:
        thread.quit()
        thread.wait(60_000)
    if left:
        pytest.fail(f"{len(left)} inference thread(s) still running after the test")


SHARED: Any = object()  # make_window's default engine: the session's real default pair
CHAT_SETTINGS: dict[str, Any] = {"n_ctx": 2048, "max_tokens": 24, "mode": "draft"}


@pytest.fixture
def make_window(qtbot: Any, request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """The one way tests build a main window; every window is closed (thread joined) at teardown.

    make_window(**changes): a shown window on the shared engine (`engine` of tests/conftest.py)
    with CHAT_SETTINGS updated by `changes`; it returns once the target is shown.
      engine=  another engine, or None: nothing loaded (the window loads its own; no wait);
               the window never owns a given engine
      base=    the settings to start from instead of CHAT_SETTINGS; None: the window reads the
               data directory's settings file itself, as at a real start (no `changes` then)
      autoload=, open_manager_on_first_run=  as MainWindow takes them (False unless given)
    """
    from specchat.core.state.settings import Settings
    from specchat.gui.main_window import MainWindow
    from specchat.gui.threads.engine import EngineController

    windows: list[Any] = []

    def make(
        *,
        engine: Any = SHARED,
        base: dict[str, Any] | None = CHAT_SETTINGS,
        autoload: bool = False,
        open_manager_on_first_run: bool = False,
        **changes: Any,
    ) -> MainWindow:
        if engine is SHARED:
            engine = request.getfixturevalue("engine")  # loaded only by tests that use it
        assert base is not None or not changes, "settings changes need settings to change"
        w = MainWindow(
            controller=EngineController(engine, owns_engine=False),
            settings=None if base is None else Settings(**{**base, **changes}),
            autoload=autoload,
            open_manager_on_first_run=open_manager_on_first_run,
        )
        qtbot.addWidget(w)
        w.resize(1200, 800)
        w.show()
        if engine is not None:
            qtbot.waitUntil(lambda: w.models.target is not None, timeout=WAIT_MS)
        windows.append(w)
        return w

    yield make
    for w in windows:
        w.close()


@pytest.fixture
def send(qtbot: Any) -> Callable[..., Any]:
    """send(window, text): type `text`, press Enter, wait for the reply to end; returns its
    final GenerationStats."""
    from PySide6.QtCore import Qt

    def send(window: Any, text: str, timeout: int = MAX_STREAM_MS) -> Any:
        with qtbot.waitSignal(window.session.streamFinished, timeout=timeout) as blocker:
            window.input.setPlainText(text)
            qtbot.keyClick(window.input, Qt.Key.Key_Return)
        return blocker.args[0]

    return send
