"""Render the model manager with the fake Hub's Qwen3.8-shaped repo (target + MTP sidecar) to
PNG files: the Hub tab listing the target with its sidecar, and the installed list with the
pair after one click on "Download with its drafter".

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/gui/screenshots_mtp.py [OUT_DIR]

(or under Xvfb without QT_QPA_PLATFORM). OUT_DIR defaults to docs/screenshots.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: fakehub


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshots")
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="specchat-mtp-shots-"))
    os.environ.setdefault("SPECCHAT_DATA_DIR", str(work / "data"))
    os.environ["HF_HOME"] = str(work / "hf-home")
    os.environ.pop("HF_HUB_OFFLINE", None)

    from fakehub import QWEN38, QWEN38_MTP, QWEN38_TARGET, FakeHub, add_2026_repos, write_2026_files
    from PySide6.QtWidgets import QApplication

    from specchat.core.fetch.hub_download import Downloader
    from specchat.core.hub.client import HubClient
    from specchat.core.store.catalog import load_catalog
    from specchat.core.store.store import ModelStore
    from specchat.gui.models.list_model import INSTALLED
    from specchat.gui.models.manager import ModelManagerDialog

    app = QApplication.instance() or QApplication([sys.argv[0]])
    QApplication.setStyle("Fusion")

    def wait(predicate, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
        end = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > end:
                raise TimeoutError("timed out")
            app.processEvents()
            time.sleep(0.01)

    files = write_2026_files(work / "hub-files")
    with FakeHub() as hub:
        add_2026_repos(hub, files)
        store = ModelStore(work / "store")
        client = HubClient(hub.endpoint, token=False)
        catalog = load_catalog()
        dlg = ModelManagerDialog(
            None,
            store=store,
            hub=client,
            catalog=catalog,
            downloader=Downloader(store, client, catalog=catalog),
        )
        dlg.resize(1400, 820)
        dlg.show()
        tab = dlg.hub_tab
        dlg.tabs.setCurrentIndex(1)
        tab.search("Qwen3.8")
        wait(lambda: tab.results.count() > 0)
        row = next(
            i for i in range(tab.results.count()) if tab.results.item(i).text().startswith(QWEN38)
        )
        tab.results.setCurrentRow(row)
        wait(lambda: tab.files.rowCount() > 0 and not dlg.tasks.threads())
        tab.files.selectRow(0)
        tab.files.resizeColumnsToContents()
        app.processEvents()
        shots = [out / "manager-mtp-hub.png"]
        dlg.grab().save(str(shots[-1]))

        tab.download_button.click()

        def both() -> bool:
            entries = [dlg.models.entry(k) for k in (QWEN38_TARGET, QWEN38_MTP)]
            return all(e is not None and e.state == INSTALLED for e in entries)

        wait(both)
        wait(lambda: not dlg.downloads.threads() and not dlg.tasks.threads())
        dlg.installed.view.resizeColumnsToContents()
        dlg.installed.view.selectRow(dlg.models.row_of(QWEN38_TARGET) or 0)
        app.processEvents()
        shots.append(out / "manager-mtp-installed.png")
        dlg.grab().save(str(shots[-1]))
        dlg.close()
        dlg.shutdown()
    for s in shots:
        print(s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
