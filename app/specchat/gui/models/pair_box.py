"""The manager's pair chooser: a target and a draft (installed, or on the Hub), suggested drafts
for the target, the context size, and the compatibility verdict and memory plan, all shown
before anything is downloaded. Emits `pairChosen` for an installed, compatible pair."""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from specchat.core.gguf.drafters import drafter_kind
from specchat.core.hub.client import HubClient, RemoteModel
from specchat.core.placement.memory_plan import MachineMemory
from specchat.core.placement.pairing import (
    DraftSuggestion,
    PairReport,
    catalog_remote,
    inspect_pair,
    pick_model,
    repo_hint,
    suggest_drafts,
)
from specchat.core.store.catalog import Catalog, CatalogModel
from specchat.core.store.store import ModelStore
from specchat.gui.models.common import (
    BAD,
    FIT_TEXT,
    GOOD,
    WARN,
    Choice,
    colored,
    find_data,
    model_ref,
)
from specchat.gui.models.list_model import ModelListModel
from specchat.gui.threads.tasks import TaskRunner
from specchat.gui.widgets import button_row, selectable_label


class PairBox(QGroupBox):
    pairChosen = Signal(str, str)  # target path, draft path or ""
    downloadRequested = Signal(object)  # a RemoteModel of the pair that is not installed

    def __init__(
        self,
        models: ModelListModel,
        store: ModelStore,
        hub: HubClient,
        catalog: Catalog,
        tasks: TaskRunner,
        machine: Callable[[], MachineMemory],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__("Pair to load", parent)
        self.models, self.store, self.hub, self.catalog = models, store, hub, catalog
        self.tasks, self._machine = tasks, machine
        self._check: PairReport | None = None
        self._checked_pair: tuple[Choice | None, Choice | None] | None = None
        self._load_confirmed = False

        self.target_combo = QComboBox()
        self.draft_combo = QComboBox()
        for combo in (self.target_combo, self.draft_combo):
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
            combo.currentIndexChanged.connect(self._pair_changed)
        self.target_combo.currentIndexChanged.connect(self._suggest)
        self.ctx_spin = QSpinBox()
        self.ctx_spin.setRange(512, 131072)
        self.ctx_spin.setSingleStep(1024)
        self.ctx_spin.setValue(4096)
        self.ctx_spin.setSuffix(" tokens")
        self.ctx_spin.valueChanged.connect(self.show_check)
        self.suggestions = QComboBox()
        self.suggestions.setPlaceholderText("choose a target first")
        self.suggest_button = QPushButton("Use as draft")
        self.suggest_button.clicked.connect(self._use_suggestion)
        suggest_row = QHBoxLayout()
        suggest_row.addWidget(self.suggestions, 1)
        suggest_row.addWidget(self.suggest_button)
        self.verdict_label = selectable_label("Choose a target and a draft.")
        self.memory_label = selectable_label()
        self.download_pair_button = QPushButton("Download missing")
        self.download_pair_button.clicked.connect(self.download_pair)
        self.load_button = QPushButton("Load pair")
        self.load_button.setDefault(True)
        self.load_button.clicked.connect(self.load_pair)
        form = QFormLayout()
        form.addRow("Target:", self.target_combo)
        form.addRow("Draft:", self.draft_combo)
        form.addRow("Suggested drafts:", suggest_row)
        form.addRow("Context:", self.ctx_spin)
        form.addRow("Compatibility:", self.verdict_label)
        form.addRow("Memory:", self.memory_label)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addLayout(
            button_row(self.download_pair_button, self.load_button, stretch_first=True)
        )

    # -- choosing -------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Rebuild the target/draft lists from the model list, keeping Hub picks (a Hub pick
        that has been downloaded meanwhile becomes the installed file)."""
        installed = [e.path for e in self.models.installed() if e.path is not None]
        # a drafter file (MTP sidecar, assistant) is never a target; a target with one
        # installed next to it gets it as its draft
        drafter_files = {
            e.path for e in self.models.installed() if e.info is not None and drafter_kind(e.info)
        }
        partners = {
            e.path: self.store.path_for(e.partner)
            for e in self.models.installed()
            if e.partner and e.path not in drafter_files and e.support and e.support.speculates
        }
        old_target = self.target_combo.currentData()
        first_fill = old_target is None
        default = [self.store.path_for(m.file) for m in self._default_pair_models()]
        for combo, none_text in ((self.target_combo, None), (self.draft_combo, "(no draft)")):
            current = combo.currentData()
            if first_fill and len(default) == 2 and all(p in installed for p in default):
                current = default[0] if combo is self.target_combo else default[1]
            hub_items = [
                combo.itemData(i)
                for i in range(combo.count())
                if isinstance(combo.itemData(i), RemoteModel)
                and self.store.path_for(combo.itemData(i).name) not in installed
            ]
            combo.blockSignals(True)
            combo.clear()
            if none_text:
                combo.addItem(none_text, None)
            for path in installed:
                if combo is self.target_combo and path in drafter_files:
                    continue
                combo.addItem(f"{path.name} (installed)", path)
            for m in hub_items:
                combo.addItem(f"{m.name} — {m.repo_id} (Hub)", m)
            if isinstance(current, RemoteModel) and current not in hub_items:
                current = self.store.path_for(current.name)  # it has been downloaded
            combo.setCurrentIndex(max(0, find_data(combo, current)))
            combo.blockSignals(False)
        target = self.target_combo.currentData()
        if target != old_target:
            if target in partners and self.draft_combo.currentData() is None:
                self._choose(self.draft_combo, partners[target])
            self._suggest()
        self._pair_changed()

    def _default_pair_models(self) -> list[CatalogModel]:
        try:
            return list(self.catalog.pair_models(self.catalog.default_pair()))
        except (KeyError, StopIteration):
            return []

    def _choose(self, combo: QComboBox, choice: Choice | None) -> None:
        if isinstance(choice, RemoteModel) and self.store.path_for(choice.name).is_file():
            choice = self.store.path_for(choice.name)
        index = find_data(combo, choice)
        if index < 0 and isinstance(choice, RemoteModel):
            combo.addItem(f"{choice.name} — {choice.repo_id} (Hub)", choice)
            index = combo.count() - 1
        combo.blockSignals(True)
        combo.setCurrentIndex(max(0, index))
        combo.blockSignals(False)

    def set_target(self, choice: Choice, *, check: bool = True) -> None:
        """Make ``choice`` the target (an installed file or a Hub model)."""
        self._choose(self.target_combo, choice)
        self._suggest()
        if check:
            self._pair_changed()

    def set_draft(self, choice: Choice | None) -> None:
        """Make ``choice`` the draft (None: no draft) and check the pair."""
        self._choose(self.draft_combo, choice)
        self._pair_changed()

    def set_pair(self, target: Choice, draft: Choice | None) -> None:
        self.set_target(target, check=False)
        self.set_draft(draft)

    def current_pair(self) -> tuple[Choice | None, Choice | None]:
        return self.target_combo.currentData(), self.draft_combo.currentData()

    # -- the verdict ----------------------------------------------------------------------------
    def _pair_changed(self, *_: object) -> None:
        """Check the chosen pair again, unless it is the pair checked last."""
        target, draft = self.current_pair()
        if (target, draft) == self._checked_pair:
            self._update_buttons()
            return
        self._checked_pair = (target, draft)
        self._check = None
        self._load_confirmed = False
        self.memory_label.clear()
        if target is None:
            self.verdict_label.setText("Choose a target (install one, or pick one on the Hub).")
            self._update_buttons()
            return
        self.verdict_label.setText("Reading the model headers…")
        sizes = (self._size_of(target), self._size_of(draft) if draft is not None else None)
        t_ref, d_ref = model_ref(target), (model_ref(draft) if draft is not None else None)
        hub, n_ctx, machine = self.hub, self.ctx_spin.value(), self._machine()

        def check() -> PairReport:
            return inspect_pair(t_ref, d_ref, n_ctx=n_ctx, sizes=sizes, machine=machine, hub=hub)

        def checked(report: PairReport) -> None:
            self._check = report
            self.show_check()

        def failed(message: str) -> None:
            self._checked_pair = None  # try again next time
            self.verdict_label.setText(colored(f"Cannot check: {message}", BAD))
            self._update_buttons()

        self.tasks.run("verdict", check, checked, failed)
        self._update_buttons()

    def _size_of(self, choice: Choice) -> int | None:
        if isinstance(choice, RemoteModel):
            return choice.size
        entry = self.models.entry(choice.name)
        return entry.total if entry else None

    def show_check(self, *_: object) -> None:
        """Show the last verdict, with the memory plan for the context size and machine now."""
        c = self._check
        if c is None:
            return
        if c.verdict is None:
            self.verdict_label.setText("No draft: plain decoding, no speed-up.")
        else:
            color, mark = (GOOD, "✓ ") if c.verdict.ok else (BAD, "✗ ")
            text = colored(c.verdict.message, color, mark)
            for warning in c.verdict.warnings:  # a draft larger than its target, ...
                text += "<br>" + colored(warning, WARN, "⚠ ")
            self.verdict_label.setText(text)
        c = self._check = c.replan(self.ctx_spin.value(), self._machine())
        fit_text, color = FIT_TEXT[c.plan.fit]
        self.memory_label.setText(colored(f"{fit_text}: {c.plan.summary()}", color))
        self._update_buttons()

    def _update_buttons(self) -> None:
        target, draft = self.current_pair()
        missing = [c for c in (target, draft) if isinstance(c, RemoteModel)]
        self.download_pair_button.setEnabled(bool(missing))
        c = self._check
        local = isinstance(target, Path) and (draft is None or isinstance(draft, Path))
        self.load_button.setEnabled(local and c is not None and c.ok)
        too_big = c is not None and not c.plan.fits
        self.load_button.setText("Load anyway" if too_big and self._load_confirmed else "Load pair")

    # -- actions --------------------------------------------------------------------------------
    def download_pair(self) -> None:
        for choice in self.current_pair():
            if isinstance(choice, RemoteModel):
                self.downloadRequested.emit(choice)

    def load_pair(self) -> None:
        """Emit ``pairChosen`` for an installed, compatible pair (warn once if it won't fit)."""
        target, draft = self.current_pair()
        c = self._check
        if (
            not isinstance(target, Path)
            or c is None
            or (c.verdict is not None and not c.verdict.ok)
        ):
            return
        if not c.plan.fits and not self._load_confirmed:
            self._load_confirmed = True
            self.memory_label.setText(
                colored("This pair will probably not fit: " + " ".join(c.plan.warnings), BAD)
                + "<br>Press “Load anyway” to try regardless."
            )
            self._update_buttons()
            return
        self.pairChosen.emit(str(target), str(draft) if isinstance(draft, Path) else "")

    # -- draft suggestions ----------------------------------------------------------------------
    def _suggest(self, *_: object) -> None:
        """Fill the suggested drafts for the current target (catalog first, then the Hub)."""
        target = self.target_combo.currentData()
        self.suggestions.clear()
        if target is None:
            return
        catalog, hub, store = self.catalog, self.hub, self.store

        def find() -> list[DraftSuggestion]:
            if isinstance(target, RemoteModel):
                repo = target.repo_id
            else:
                repo = repo_hint(target, catalog, store)
            return suggest_drafts(repo, catalog, hub, target_file=target.name)

        def shown(found: list[DraftSuggestion]) -> None:
            self.suggestions.clear()
            for s in found:
                self.suggestions.addItem(s.label, s)
            self.suggestions.setPlaceholderText("none found")
            self.suggestions.setCurrentIndex(0 if found else -1)

        self.tasks.run("suggest", find, shown)

    def _use_suggestion(self) -> None:
        s: DraftSuggestion | None = self.suggestions.currentData()
        if s is None:
            return
        if s.filename is not None:
            path = self.store.path_for(s.filename)
            cat = self.catalog.models.get(s.catalog_id or "")
            self.set_draft(catalog_remote(cat) if cat else path)
            return
        self.verdict_label.setText(f"Listing the files of {escape(s.repo_id)}…")

        def listed(models: list[RemoteModel]) -> None:
            chosen = pick_model(models)
            if chosen is None:
                self.verdict_label.setText(colored(f"{s.repo_id} has no GGUF model", BAD))
            else:
                self.set_draft(chosen)

        def failed(message: str) -> None:
            self.verdict_label.setText(colored(message, BAD))

        self.tasks.run("verdict", lambda: self.hub.list_models(s.repo_id), listed, failed)
