"""The model manager with the fake Hub's Qwen3.8-shaped repo: the target is listed with its
MTP sidecar and what speeds it up, one click fetches both, and the installed list shows the
pair (pytest-qt, offscreen)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakehub import (
    QWEN38,
    QWEN38_MTP,
    QWEN38_TARGET,
    FakeHub,
    add_2026_repos,
    write_2026_files,
)
from PySide6.QtCore import Qt

from specchat.core.fetch.hub_download import Downloader, RetryPolicy
from specchat.core.hub.client import HubClient
from specchat.core.store.catalog import load_catalog
from specchat.core.store.store import ModelStore
from specchat.gui.models.hub_tab import DRAFTER_COLUMN, SUPPORT_COLUMN
from specchat.gui.models.list_model import INSTALLED, ModelListModel
from specchat.gui.models.manager import ModelManagerDialog

WAIT_MS = 15_000


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_2026_files(tmp_path_factory.mktemp("2026"))


@pytest.fixture
def dialog(
    qtbot: Any, files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[ModelManagerDialog, FakeHub, ModelStore]]:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    with FakeHub() as hub:
        add_2026_repos(hub, files)
        store = ModelStore(tmp_path / "store")
        client = HubClient(hub.endpoint, token=False)
        catalog = load_catalog()
        retry = RetryPolicy(attempts=2, base_delay_s=0.01)
        downloader = Downloader(store, client, catalog=catalog, retry=retry, progress_interval=0)
        dlg = ModelManagerDialog(
            None, store=store, hub=client, catalog=catalog, downloader=downloader
        )
        qtbot.addWidget(dlg)
        dlg.resize(1300, 760)
        dlg.show()
        yield dlg, hub, store
        hub.release()
        dlg.close()
        dlg.shutdown()
        assert dlg.running_threads() == []


def show_qwen38(qtbot: Any, dlg: ModelManagerDialog) -> None:
    tab = dlg.hub_tab
    dlg.tabs.setCurrentIndex(1)
    tab.search_edit.setText("Qwen3.8")
    qtbot.mouseClick(tab.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: tab.results.count() > 0, timeout=WAIT_MS)
    row = next(
        i for i in range(tab.results.count()) if tab.results.item(i).text().startswith(QWEN38)
    )
    tab.results.setCurrentRow(row)
    qtbot.waitUntil(lambda: tab.files.rowCount() > 0, timeout=WAIT_MS)
    tab.files.selectRow(0)


def test_the_target_shows_its_sidecar_one_click_fetches_both_and_the_pair_is_listed(
    qtbot: Any, dialog: tuple[ModelManagerDialog, FakeHub, ModelStore]
) -> None:
    dlg, hub, store = dialog
    tab = dlg.hub_tab
    show_qwen38(qtbot, dlg)
    assert tab.files.rowCount() == 1  # the sidecar is the target's drafter, not a model row
    assert tab.files.item(0, 0).text() == QWEN38_TARGET
    assert tab.files.item(0, SUPPORT_COLUMN).text() == "MTP head (sidecar) · hybrid, rollback"
    assert QWEN38_MTP in tab.files.item(0, SUPPORT_COLUMN).toolTip()
    assert tab.files.item(0, DRAFTER_COLUMN).text().startswith(QWEN38_MTP)
    assert tab.download_button.text() == "Download with its drafter"
    assert not any(store.root.iterdir())  # nothing downloaded to show all this

    qtbot.mouseClick(tab.download_button, Qt.MouseButton.LeftButton)
    assert dlg.tabs.currentIndex() == 0

    def both_installed() -> bool:
        states = [dlg.models.entry(k) for k in (QWEN38_TARGET, QWEN38_MTP)]
        return all(e is not None and e.state == INSTALLED for e in states)

    qtbot.waitUntil(both_installed, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not dlg.downloads.threads(), timeout=WAIT_MS)
    for name in (QWEN38_TARGET, QWEN38_MTP):
        assert (store.root / name).is_file()
    target_row = dlg.models.row_of(QWEN38_TARGET)
    mtp_row = dlg.models.row_of(QWEN38_MTP)
    assert target_row is not None and mtp_row is not None
    column = ModelListModel.SUPPORT_COLUMN
    assert dlg.models.index(target_row, column).data() == (
        f"MTP head (sidecar) · hybrid, rollback: {QWEN38_MTP}"
    )
    assert dlg.models.index(mtp_row, column).data() == f"MTP head of {QWEN38_TARGET}"
    tip = dlg.models.index(target_row, column).data(Qt.ItemDataRole.ToolTipRole)
    assert "rollback" in tip


def test_a_failed_sidecar_leaves_the_target_unfetched(
    qtbot: Any, dialog: tuple[ModelManagerDialog, FakeHub, ModelStore]
) -> None:
    dlg, hub, store = dialog
    show_qwen38(qtbot, dlg)
    qtbot.waitUntil(lambda: dlg.hub_tab.download_button.isEnabled(), timeout=WAIT_MS)
    hub.corrupt(QWEN38, QWEN38_MTP)
    qtbot.mouseClick(dlg.hub_tab.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(
        lambda: "was not downloaded: its drafter" in dlg.installed.status.text(), timeout=WAIT_MS
    )
    qtbot.waitUntil(lambda: not dlg.downloads.threads(), timeout=WAIT_MS)
    assert dlg.models.entry(QWEN38_TARGET) is None
    assert [p.name for p in store.root.iterdir() if p.suffix == ".gguf"] == []
