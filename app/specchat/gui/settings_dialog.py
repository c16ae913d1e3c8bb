"""The settings form. Values are checked with the engine's own rules as they are typed; OK stays
disabled while any is refused, and the reasons are listed under the form."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from specchat.core.placement.offload import AUTO, GpuLayers
from specchat.core.state.settings import Settings

GPU_AUTO = -101  # the spin box's lowest value, shown as "auto"
GPU_TIP = (
    "auto: every layer on the GPU when both models fit its free memory, else the draft first "
    "and as much of the target as fits (CPU-only builds: none); -1 = all layers, 0 = CPU only "
    "(reloads)"
)


def _int(lo: int, hi: int, tip: str = "") -> QSpinBox:
    w = QSpinBox()
    w.setRange(lo, hi)
    w.setToolTip(tip)
    return w


def _gpu() -> QSpinBox:
    w = _int(GPU_AUTO, 100_000, GPU_TIP)
    w.setSpecialValueText(AUTO)
    return w


def _gpu_value(w: QSpinBox) -> GpuLayers:
    return AUTO if w.value() == GPU_AUTO else w.value()


def _float(lo: float, hi: float, step: float, decimals: int = 2, tip: str = "") -> QDoubleSpinBox:
    w = QDoubleSpinBox()
    w.setRange(lo, hi)
    w.setSingleStep(step)
    w.setDecimals(decimals)
    w.setToolTip(tip)
    return w


class SettingsDialog(QDialog):
    def __init__(self, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self._base = settings
        # Wide ranges on purpose: the engine's rules decide, and say why.
        self.temperature = _float(-1, 100, 0.05, tip="0 = greedy (always the most likely token)")
        self.top_k = _int(-1, 10_000_000, "0 = off")
        self.top_p = _float(0, 10, 0.05, 3, "1 = off")
        self.min_p = _float(0, 10, 0.01, 3, "0 = off")
        self.max_tokens = _int(0, 100_000_000, "longest reply, in tokens")
        self.seed = QLineEdit()
        self.seed.setPlaceholderText("random")
        self.seed.setToolTip("Empty: a new random seed each time")
        self.k_max = _int(0, 10_000, "most tokens drafted per verification step (K)")
        self.p_min = _float(0, 10, 0.05, 2, "the draft model stops drafting below this confidence")
        self.lookup_history = QCheckBox("Lookup drafts from earlier conversations too")
        self.lookup_history.setToolTip(
            "Text you pasted or the model wrote in other conversations (kept on this computer) "
            "also supplies Lookup drafts. Applies at once: off, the index is dropped; on, the "
            "saved conversations are indexed again."
        )
        self.n_ctx = _int(0, 100_000_000, "context window in tokens (reloads the models)")
        self.target_gpu = _gpu()
        self.draft_gpu = _gpu()
        self.threads = _int(-100, 100_000, "0 = one per physical core (reloads)")

        sampling = QFormLayout()
        sampling.addRow("Temperature", self.temperature)
        sampling.addRow("Top-k", self.top_k)
        sampling.addRow("Top-p", self.top_p)
        sampling.addRow("Min-p", self.min_p)
        sampling.addRow("Max tokens", self.max_tokens)
        sampling.addRow("Seed", self.seed)
        spec = QFormLayout()
        spec.addRow("K (most drafted tokens)", self.k_max)
        spec.addRow("p_min (draft confidence)", self.p_min)
        spec.addRow("", self.lookup_history)
        models = QFormLayout()
        models.addRow("Context size", self.n_ctx)
        models.addRow("GPU layers, target", self.target_gpu)
        models.addRow("GPU layers, draft", self.draft_gpu)
        models.addRow("Threads", self.threads)

        self.problems = QLabel()
        self.problems.setObjectName("settingsProblems")
        self.problems.setWordWrap(True)
        self.problems.setStyleSheet("color: #d04040;")
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok
            | QDialogButtonBox.StandardButton.Cancel
            | QDialogButtonBox.StandardButton.RestoreDefaults
        )
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        restore = self.buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults)
        restore.clicked.connect(lambda: self.set_values(Settings()))

        lay = QVBoxLayout(self)
        for title, form in (("Sampling", sampling), ("Speculation", spec), ("Models", models)):
            box = QGroupBox(title)
            box.setLayout(form)
            lay.addWidget(box)
        note = QLabel("Changing context size, GPU layers or threads reloads the models.")
        note.setWordWrap(True)
        lay.addWidget(note)
        lay.addWidget(self.problems)
        lay.addWidget(self.buttons)

        self.set_values(settings)
        for w in (
            self.temperature, self.top_k, self.top_p, self.min_p, self.max_tokens, self.k_max,
            self.p_min, self.n_ctx, self.target_gpu, self.draft_gpu, self.threads,
        ):  # fmt: skip
            w.valueChanged.connect(self._check)
        self.seed.textChanged.connect(self._check)
        self._check()

    def set_values(self, s: Settings) -> None:
        self.temperature.setValue(s.temperature)
        self.top_k.setValue(s.top_k)
        self.top_p.setValue(s.top_p)
        self.min_p.setValue(s.min_p)
        self.max_tokens.setValue(s.max_tokens)
        self.seed.setText("" if s.seed is None else str(s.seed))
        self.k_max.setValue(s.k_max)
        self.p_min.setValue(s.p_min)
        self.lookup_history.setChecked(s.lookup_history)
        self.n_ctx.setValue(s.n_ctx)
        for spin, value in (
            (self.target_gpu, s.target_gpu_layers),
            (self.draft_gpu, s.draft_gpu_layers),
        ):
            spin.setValue(value if isinstance(value, int) else GPU_AUTO)
        self.threads.setValue(s.n_threads)

    def _seed(self) -> tuple[int | None, str | None]:
        text = self.seed.text().strip()
        if not text:
            return None, None
        try:
            return int(text), None
        except ValueError:
            return None, "seed must be a non-negative integer"

    def settings(self) -> Settings:
        seed, _ = self._seed()
        return self._base.with_(
            temperature=self.temperature.value(),
            top_k=self.top_k.value(),
            top_p=self.top_p.value(),
            min_p=self.min_p.value(),
            max_tokens=self.max_tokens.value(),
            seed=seed,
            k_max=self.k_max.value(),
            p_min=self.p_min.value(),
            lookup_history=self.lookup_history.isChecked(),
            n_ctx=self.n_ctx.value(),
            target_gpu_layers=_gpu_value(self.target_gpu),
            draft_gpu_layers=_gpu_value(self.draft_gpu),
            n_threads=self.threads.value(),
        )

    def current_problems(self) -> list[str]:
        problems = self.settings().problems()
        _, seed_problem = self._seed()
        if seed_problem and seed_problem not in problems:
            problems.insert(0, seed_problem)
        return problems

    def _check(self) -> None:
        problems = self.current_problems()
        self.problems.setText("\n".join(f"• {p}" for p in problems))
        self.problems.setVisible(bool(problems))
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(not problems)

    def accept(self) -> None:
        if self.current_problems():
            return
        super().accept()
