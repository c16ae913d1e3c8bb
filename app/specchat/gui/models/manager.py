"""The model manager dialog: find models on the Hub, download them, manage the installed ones,
and choose a target/draft pair with its compatibility verdict and memory plan shown before
anything is downloaded.

The main window opens it with ``ModelManagerDialog(parent)`` and listens to
``pairChosen(target_path, draft_path_or_empty)``. The dialog owns what its parts share (the
store, the Hub client, the machine's memory, one `ModelListModel` of what is installed or
downloading, the download and task threads) and wires the parts: the tabs (`installed_tab`,
`hub_tab`, `pairs_tab`) and the pair chooser (`pair_box`).
"""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QThread, Signal, Slot
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QTabWidget, QVBoxLayout, QWidget

from specchat.core.fetch.catalog_refresh import catalog_with_refresh
from specchat.core.fetch.hub_download import Downloader
from specchat.core.hub.client import HubClient, RemoteModel
from specchat.core.placement.memory_plan import MachineMemory, machine_memory
from specchat.core.store.catalog import Catalog, load_catalog
from specchat.core.store.store import ModelStore
from specchat.gui.models.hub_tab import HubTab
from specchat.gui.models.installed_tab import InstalledTab
from specchat.gui.models.list_model import DOWNLOADING, INSTALLED, ModelListModel
from specchat.gui.models.pair_box import PairBox
from specchat.gui.models.pairs_tab import RecommendedPairsTab
from specchat.gui.threads.downloads import DownloadManager
from specchat.gui.threads.tasks import TaskRunner

INSTALLED_TAB = 0


class ModelManagerDialog(QDialog):
    """Search, download, import and delete models; choose the pair to load."""

    pairChosen = Signal(str, str)  # target path, draft path or ""

    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        store: ModelStore | None = None,
        hub: HubClient | None = None,
        catalog: Catalog | None = None,
        downloader: Downloader | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.resize(980, 720)
        self.store = store or ModelStore()
        self.hub = hub or HubClient()
        self.catalog = catalog or catalog_with_refresh(self.store, load_catalog())
        self.machine: MachineMemory = machine_memory(probe_gpu=False)
        self.models = ModelListModel(self)
        downloader = downloader or Downloader(self.store, self.hub, catalog=self.catalog)
        self.downloads = DownloadManager(self.models, self.store, downloader, self)
        self.tasks = TaskRunner(self)

        def machine() -> MachineMemory:
            return self.machine

        self.installed = InstalledTab(self.models, self.downloads, self.store, self.tasks)
        self.hub_tab = HubTab(self.hub, self.tasks, machine, catalog=self.catalog)
        self._after_drafter: dict[str, RemoteModel] = {}  # drafter key -> target to fetch next
        self.recommended = RecommendedPairsTab(self.catalog, self.store)
        self.pair_box = PairBox(
            self.models, self.store, self.hub, self.catalog, self.tasks, machine
        )
        self.tabs = QTabWidget()
        self.tabs.addTab(self.installed, "Installed")
        self.tabs.addTab(self.hub_tab, "Find on the Hub")
        self.tabs.addTab(self.recommended, "Recommended pairs")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(self.pair_box)
        layout.addWidget(buttons)

        self.installed.listingChanged.connect(self._refresh_choosers)
        self.downloads.changed.connect(self._refresh_choosers)
        self.hub_tab.targetChosen.connect(self.pair_box.set_target)
        self.hub_tab.draftChosen.connect(self.pair_box.set_draft)
        self.hub_tab.downloadRequested.connect(self.download)
        self.hub_tab.pairDownloadRequested.connect(self.download_pair)
        self.downloads.changed.connect(self._drafter_done)
        self.recommended.chosen.connect(self.pair_box.set_pair)
        self.pair_box.downloadRequested.connect(self.download)
        self.pair_box.pairChosen.connect(self.pairChosen)
        self.pair_box.pairChosen.connect(lambda *_: self.accept())
        self.installed.reload()
        self.tasks.run("machine", lambda: machine_memory(probe_gpu=True), self._machine_known)
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.shutdown)

    # -- threads --------------------------------------------------------------------------------
    def running_threads(self) -> list[QThread]:
        """Task and download threads still running (for shutdown and tests)."""
        threads: list[QThread] = [*self.tasks.threads(), *self.downloads.threads()]
        return [t for t in threads if t.isRunning()]

    def shutdown(self) -> None:
        """Cancel downloads (their partial files stay, to resume) and wait for every thread.

        Closing the dialog does not stop downloads: they go on (the main window keeps the
        dialog and shows it again). This runs when the application quits.
        """
        self.downloads.shutdown()
        self.tasks.wait_all()

    def showEvent(self, event: QShowEvent) -> None:
        self.installed.reload()  # the store may have changed while the dialog was hidden
        super().showEvent(event)

    @Slot(object)
    def _machine_known(self, machine: MachineMemory) -> None:
        self.machine = machine
        self.pair_box.show_check()
        self.recommended.set_machine(machine)

    # -- wiring ---------------------------------------------------------------------------------
    def _refresh_choosers(self) -> None:
        self.recommended.fill()
        self.pair_box.refresh()

    def download_pair(self, target: RemoteModel, drafter: RemoteModel) -> str | None:
        """Fetch a target with its drafter file: the drafter first (small; checked against the
        target's header when the repo was listed), then the target once the drafter is
        installed and verified. If the drafter fails, the target is not fetched."""
        key = self.download(drafter)
        if key is None:  # already installed (or shutting down): the target alone
            return self.download(target)
        self._after_drafter[key] = target
        self.installed.status.setText(
            f"Fetching {drafter.name} first, then {target.name} (one pair)"
        )
        return key

    def _drafter_done(self) -> None:
        for key, target in list(self._after_drafter.items()):
            entry = self.models.entry(key)
            if entry is not None and entry.state == DOWNLOADING:
                continue
            del self._after_drafter[key]
            if entry is not None and entry.state == INSTALLED:
                self.download(target)
            else:
                why = entry.message if entry is not None else "it was not installed"
                self.installed.status.setText(
                    f"{target.name} was not downloaded: its drafter {key} failed ({why})"
                )

    def download(self, model: RemoteModel) -> str | None:
        """Start downloading ``model`` and show it in the installed list; returns its key."""
        key = self.downloads.start(model)
        if key is not None:
            self.tabs.setCurrentIndex(INSTALLED_TAB)
            self.installed.select(key)
        return key
