"""The model manager dialog against the local fake Hub (tests/fakehub.py), offscreen: search,
the pair verdict before any download, a download with its progress bar, cancel and resume,
offline, import and delete, loading a pair. Each test ends by checking that no QThread is left
running (`no_qthreads_left`, requested explicitly: not autouse)."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakehub import FakeHub, write_tiny_gguf
from PySide6.QtCore import QModelIndex, Qt, QThread

from specchat.core.fetch.hub_download import Downloader, RetryPolicy
from specchat.core.hub.client import HubClient
from specchat.core.placement.memory_plan import MachineMemory
from specchat.core.store.catalog import load_catalog
from specchat.core.store.store import ModelStore
from specchat.gui.models.list_model import DOWNLOADING, INSTALLED, PAUSED, ModelListModel
from specchat.gui.models.manager import ModelManagerDialog

BIG = "test/Tiny-Coder-1.5B-Instruct-GGUF"
SMALL = "test/Tiny-Coder-0.5B-Instruct-GGUF"
TARGET = "tiny-coder-1.5b-instruct-Q4_K_M.gguf"
DRAFT = "tiny-coder-0.5b-instruct-Q4_K_M.gguf"
ODD = "tiny-coder-0.5b-instruct-Q2_K.gguf"  # another vocabulary
WAIT_MS = 15_000


def running_qthreads() -> list[QThread]:
    """Every QThread object alive and running, except the main thread."""
    main = QThread.currentThread()
    found = []
    for obj in gc.get_objects():
        try:
            if isinstance(obj, QThread) and obj is not main and obj.isRunning():
                found.append(obj)
        except RuntimeError:  # a wrapper whose C++ object is gone
            continue
    return found


@pytest.fixture
def no_qthreads_left() -> Iterator[None]:
    """Fail the test if a QThread is still running when it ends. Not autouse: each test here
    asks for it first (and `make_dialog` depends on it), so that it is set up before and torn
    down after the dialogs, whose teardown is what must leave no thread behind."""
    yield
    left = running_qthreads()
    for thread in left:
        thread.wait(30_000)
    assert not left, f"QThreads still running after the test: {left}"


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hub-files")
    return {
        TARGET: write_tiny_gguf(d / TARGET, weight_bytes=2 << 20),
        DRAFT: write_tiny_gguf(d / DRAFT, seed=1),
        ODD: write_tiny_gguf(d / ODD, n_words=100),
    }


@pytest.fixture
def hub(model_files: dict[str, Path]) -> Iterator[FakeHub]:
    with FakeHub() as fake:
        fake.add_repo(BIG, downloads=900)
        fake.add_repo(SMALL, downloads=400)
        fake.add_file(BIG, TARGET, model_files[TARGET])
        fake.add_file(SMALL, DRAFT, model_files[DRAFT])
        fake.add_file(SMALL, ODD, model_files[ODD])
        yield fake


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    return ModelStore(tmp_path / "store")


@pytest.fixture
def make_dialog(
    no_qthreads_left: None,
    qtbot: Any,
    hub: FakeHub,
    store: ModelStore,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[Callable[[], ModelManagerDialog]]:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    dialogs: list[ModelManagerDialog] = []

    def make() -> ModelManagerDialog:
        client = HubClient(hub.endpoint, token=False)
        catalog = load_catalog()
        retry = RetryPolicy(attempts=3, base_delay_s=0.01)
        downloader = Downloader(store, client, catalog=catalog, retry=retry, progress_interval=0)
        dlg = ModelManagerDialog(
            None, store=store, hub=client, catalog=catalog, downloader=downloader
        )
        qtbot.addWidget(dlg)
        dlg.show()
        dialogs.append(dlg)
        return dlg

    yield make
    hub.release()
    for dlg in dialogs:
        dlg.close()
        dlg.shutdown()  # what the application does when it quits
        assert dlg.running_threads() == []


def wait_idle(qtbot: Any, dlg: ModelManagerDialog) -> None:
    qtbot.waitUntil(lambda: not dlg.tasks.threads(), timeout=WAIT_MS)


def search_and_pick(qtbot: Any, dlg: ModelManagerDialog, query: str, repo: str, file: str) -> None:
    tab = dlg.hub_tab
    dlg.tabs.setCurrentIndex(1)
    tab.search_edit.setText(query)
    qtbot.mouseClick(tab.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: tab.results.count() > 0, timeout=WAIT_MS)
    row = next(i for i in range(tab.results.count()) if tab.results.item(i).text().startswith(repo))
    tab.results.setCurrentRow(row)
    qtbot.waitUntil(lambda: tab.files.rowCount() > 0, timeout=WAIT_MS)
    names = [tab.files.item(r, 0).text() for r in range(tab.files.rowCount())]
    tab.files.selectRow(names.index(file))


def entry_state(dlg: ModelManagerDialog, key: str) -> str | None:
    e = dlg.models.entry(key)
    return e.state if e else None


def done_bytes(dlg: ModelManagerDialog, key: str) -> int:
    e = dlg.models.entry(key)
    return e.done if e else 0


# ---------------------------------------------------------------------------------------------


def test_search_shows_repos_and_files(no_qthreads_left: None, qtbot: Any, make_dialog: Any) -> None:
    dlg = make_dialog()
    tab = dlg.hub_tab
    search_and_pick(qtbot, dlg, "tiny-coder", BIG, TARGET)
    texts = [tab.results.item(i).text() for i in range(tab.results.count())]
    assert texts == [f"{BIG}\n900 downloads", f"{SMALL}\n400 downloads"]
    assert tab.status.text() == f"{BIG}: 1 GGUF model(s)"
    cells = [tab.files.item(0, c).text() for c in range(4)]
    assert cells == [TARGET, "Q4_K_M", "2.2 MB", "fits"]
    assert "RAM available" in tab.files.item(0, 3).toolTip()
    assert tab.download_button.isEnabled() and tab.use_target_button.isEnabled()
    wait_idle(qtbot, dlg)


def test_pair_verdict_is_shown_before_anything_downloads(
    no_qthreads_left: None, qtbot: Any, make_dialog: Any, hub: FakeHub, store: ModelStore
) -> None:
    dlg = make_dialog()
    pair = dlg.pair_box
    search_and_pick(qtbot, dlg, "tiny-coder", BIG, TARGET)
    qtbot.mouseClick(dlg.hub_tab.use_target_button, Qt.MouseButton.LeftButton)
    # the Hub suggests the smaller model of the same family as a draft
    qtbot.waitUntil(lambda: pair.suggestions.count() > 0, timeout=WAIT_MS)
    assert pair.suggestions.currentText() == f"{SMALL} (0.5B, Hub)"

    search_and_pick(qtbot, dlg, "tiny-coder", SMALL, ODD)
    qtbot.mouseClick(dlg.hub_tab.use_draft_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "✗" in pair.verdict_label.text(), timeout=WAIT_MS)
    assert "check &#x27;vocab_size&#x27; failed: vocab sizes differ" in pair.verdict_label.text()
    assert not pair.load_button.isEnabled()

    qtbot.mouseClick(pair.suggest_button, Qt.MouseButton.LeftButton)  # the suggested draft
    qtbot.waitUntil(lambda: "✓" in pair.verdict_label.text(), timeout=WAIT_MS)
    assert pair.draft_combo.currentText() == f"{DRAFT} — {SMALL} (Hub)"
    assert "the draft fits the target: compatible" in pair.verdict_label.text()
    assert "fits: needs about" in pair.memory_label.text()
    assert pair.download_pair_button.isEnabled() and not pair.load_button.isEnabled()
    # only headers were read: ranged GETs, nothing in the store
    gets = hub.requests("GET", "/resolve/")
    assert gets and all(g.range for g in gets)
    assert list(store.root.iterdir()) == []
    wait_idle(qtbot, dlg)


def test_download_shows_progress_and_updates_the_installed_list(
    no_qthreads_left: None, qtbot: Any, make_dialog: Any, hub: FakeHub, store: ModelStore
) -> None:
    dlg = make_dialog()
    hub.chunk_delay = 0.01  # ~6 MB/s, so that progress shows in several steps
    seen: list[float] = []

    def record(top: QModelIndex, _bottom: QModelIndex, _roles: object = None) -> None:
        fraction = top.siblingAtColumn(0).data(ModelListModel.ProgressRole)
        if top.data(ModelListModel.StateRole) == DOWNLOADING and fraction is not None:
            seen.append(fraction)

    dlg.models.dataChanged.connect(record)
    search_and_pick(qtbot, dlg, "tiny-coder", BIG, TARGET)
    qtbot.mouseClick(dlg.hub_tab.download_button, Qt.MouseButton.LeftButton)
    assert dlg.tabs.currentIndex() == 0  # the installed list, with the download in it
    assert entry_state(dlg, TARGET) == DOWNLOADING
    view = dlg.installed.view
    assert view.model() is dlg.models
    qtbot.waitUntil(lambda: entry_state(dlg, TARGET) == INSTALLED, timeout=WAIT_MS)
    assert any(0 < f < 1 for f in seen), seen
    assert seen == sorted(seen)
    assert dlg.installed.status.text() == f"{TARGET} downloaded and verified"
    row = dlg.models.row_of(TARGET)
    assert row is not None
    index = dlg.models.index(row, ModelListModel.STATUS_COLUMN)
    assert index.data() == "qwen2 · ctx 4,096"
    assert dlg.models.index(row, 1).data() == "F32"  # the header's quantisation
    assert (store.root / TARGET).is_file()
    # the pair chooser now offers the installed file; with no draft it can be loaded
    qtbot.waitUntil(lambda: dlg.pair_box.load_button.isEnabled(), timeout=WAIT_MS)
    assert dlg.pair_box.target_combo.currentText() == f"{TARGET} (installed)"
    with qtbot.waitSignal(dlg.pairChosen, timeout=WAIT_MS) as signal:
        qtbot.mouseClick(dlg.pair_box.load_button, Qt.MouseButton.LeftButton)
    assert signal.args == [str(store.root / TARGET), ""]


def test_cancel_then_resume(
    no_qthreads_left: None, qtbot: Any, make_dialog: Any, hub: FakeHub, store: ModelStore
) -> None:
    dlg = make_dialog()
    search_and_pick(qtbot, dlg, "tiny-coder", BIG, TARGET)
    wait_idle(qtbot, dlg)  # the listing read the GGUF header (a ranged GET) before this fault
    hub.hold_after(BIG, TARGET, 1 << 20)
    qtbot.mouseClick(dlg.hub_tab.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: done_bytes(dlg, TARGET) >= 1 << 20, timeout=WAIT_MS)
    assert dlg.installed.selected_key() == TARGET and dlg.installed.cancel_button.isEnabled()
    qtbot.mouseClick(dlg.installed.cancel_button, Qt.MouseButton.LeftButton)
    hub.release()
    qtbot.waitUntil(lambda: entry_state(dlg, TARGET) == PAUSED, timeout=WAIT_MS)
    e = dlg.models.entry(TARGET)
    assert e is not None and e.status_text.startswith("paused at ")
    assert "cancelled" in e.message and store.part_path_for(TARGET).is_file()
    assert not (store.root / TARGET).exists()
    qtbot.waitUntil(lambda: not dlg.downloads.threads(), timeout=WAIT_MS)

    dlg.installed.view.selectRow(dlg.models.row_of(TARGET) or 0)
    assert dlg.installed.resume_button.isEnabled()
    qtbot.mouseClick(dlg.installed.resume_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: entry_state(dlg, TARGET) == INSTALLED, timeout=WAIT_MS)
    last = hub.requests("GET", f"/{BIG}/resolve/")[-1]
    assert last.range is not None and last.range.startswith("bytes=") and last.range != "bytes=0-"
    assert not store.part_path_for(TARGET).exists()


def test_partial_download_survives_a_restart(
    no_qthreads_left: None, qtbot: Any, make_dialog: Any, hub: FakeHub, store: ModelStore
) -> None:
    first = make_dialog()
    search_and_pick(qtbot, first, "tiny-coder", BIG, TARGET)
    wait_idle(qtbot, first)  # the listing read the GGUF header (a ranged GET) before this fault
    hub.hold_after(BIG, TARGET, 1 << 20)
    first.download(first.hub_tab.selected_remote())  # type: ignore[arg-type]
    qtbot.waitUntil(lambda: done_bytes(first, TARGET) >= 1 << 20, timeout=WAIT_MS)
    first.shutdown()  # the application quits: the download is cancelled, its bytes kept
    hub.release()
    assert store.part_path_for(TARGET).is_file()

    second = make_dialog()  # the next start: the partial download is listed, resumable
    qtbot.waitUntil(lambda: entry_state(second, TARGET) == PAUSED, timeout=WAIT_MS)
    second.installed.view.selectRow(second.models.row_of(TARGET) or 0)
    qtbot.mouseClick(second.installed.resume_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: entry_state(second, TARGET) == INSTALLED, timeout=WAIT_MS)


def test_offline_search_message_and_store_still_works(
    no_qthreads_left: None,
    qtbot: Any,
    make_dialog: Any,
    model_files: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    dlg = make_dialog()
    tab = dlg.hub_tab
    dlg.installed.import_file(model_files[DRAFT])
    qtbot.waitUntil(lambda: entry_state(dlg, DRAFT) == INSTALLED, timeout=WAIT_MS)
    tab.search("tiny")
    qtbot.waitUntil(lambda: "Offline mode" in tab.status.text(), timeout=WAIT_MS)
    assert "Installed models and local files still work" in tab.status.text()
    assert tab.search_button.isEnabled()
    local_pair_loads = dlg.pair_box.load_button.isEnabled
    qtbot.waitUntil(local_pair_loads, timeout=WAIT_MS)  # a local pair: fine offline
    wait_idle(qtbot, dlg)


def test_import_delete_and_memory_warning(
    no_qthreads_left: None,
    qtbot: Any,
    make_dialog: Any,
    model_files: dict[str, Path],
    store: ModelStore,
    tmp_path: Path,
) -> None:
    dlg = make_dialog()
    pair = dlg.pair_box
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"lmgg" + bytes(64))  # the old GGML format
    dlg.installed.import_file(bad)
    qtbot.waitUntil(
        lambda: "cannot import bad.gguf" in dlg.installed.status.text(), timeout=WAIT_MS
    )
    assert "old GGML format" in dlg.installed.status.text()
    for name in (TARGET, DRAFT):
        dlg.installed.import_file(model_files[name])
        qtbot.waitUntil(lambda n=name: entry_state(dlg, n) == INSTALLED, timeout=WAIT_MS)
    pair.set_target(store.root / TARGET)
    pair.set_draft(store.root / DRAFT)
    qtbot.waitUntil(lambda: "✓" in pair.verdict_label.text(), timeout=WAIT_MS)
    assert pair.load_button.isEnabled()

    dlg.machine = MachineMemory(ram_available=100 << 20, ram_total=200 << 20)  # a tiny machine
    pair.ctx_spin.setValue(8192)  # re-plans
    assert "too big" in pair.memory_label.text()
    with qtbot.assertNotEmitted(dlg.pairChosen):
        qtbot.mouseClick(pair.load_button, Qt.MouseButton.LeftButton)
    assert "will probably not fit" in pair.memory_label.text()
    assert pair.load_button.text() == "Load anyway"
    with qtbot.waitSignal(dlg.pairChosen, timeout=WAIT_MS) as signal:
        qtbot.mouseClick(pair.load_button, Qt.MouseButton.LeftButton)
    assert signal.args == [str(store.root / TARGET), str(store.root / DRAFT)]

    dlg.installed.delete_model(DRAFT)
    assert dlg.models.entry(DRAFT) is None and not (store.root / DRAFT).exists()
    assert pair.draft_combo.findText(f"{DRAFT} (installed)") == -1
    wait_idle(qtbot, dlg)


def test_installed_default_pair_is_preselected_and_loads(
    no_qthreads_left: None,
    qtbot: Any,
    make_dialog: Any,
    store: ModelStore,
    model_paths: tuple[Path, Path],
) -> None:
    for path in model_paths:  # the real default pair, linked into the test store
        (store.root / path.name).symlink_to(path)
    dlg = make_dialog()
    pair = dlg.pair_box
    qtbot.waitUntil(lambda: "✓" in pair.verdict_label.text(), timeout=WAIT_MS)
    assert pair.target_combo.currentText() == f"{model_paths[0].name} (installed)"
    assert pair.draft_combo.currentText() == f"{model_paths[1].name} (installed)"
    assert "151936 tokens, identical texts" in pair.verdict_label.text()
    qtbot.waitUntil(lambda: pair.suggestions.count() > 0, timeout=WAIT_MS)  # from the catalog
    assert pair.suggestions.currentText() == "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF (0.5B, catalog)"
    with qtbot.waitSignal(dlg.pairChosen, timeout=WAIT_MS) as signal:
        qtbot.mouseClick(pair.load_button, Qt.MouseButton.LeftButton)
    assert signal.args == [
        str(store.root / model_paths[0].name),
        str(store.root / model_paths[1].name),
    ]
    wait_idle(qtbot, dlg)
