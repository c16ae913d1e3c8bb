"""What is loaded: target and draft with size, quantization and offload; load progress; the
target's cost curve while it is measured in the background (the chat works meanwhile)."""

from __future__ import annotations

from html import escape

from PySide6.QtWidgets import QGroupBox, QLabel, QProgressBar, QVBoxLayout, QWidget

from specchat.core.engines.curve_policy import how_long
from specchat.core.engines.local import LoadedModelInfo
from specchat.core.placement.offload import OffloadDecision, Placement
from specchat.core.units import format_bytes
from specchat.gui.threads.requests import ModelsInfo


def offload_text(n_gpu_layers: int) -> str:
    if n_gpu_layers == 0:
        return "CPU"
    if n_gpu_layers < 0:
        return "GPU, all layers"
    return f"GPU, {n_gpu_layers} layers"


def model_line(
    role: str,
    info: LoadedModelInfo | None,
    placement: Placement | None = None,
    loading: bool = False,
) -> str:
    """One model's line; with ``placement`` (the offload decision it was loaded with), where it
    runs and why. No model: "loading…" while a load runs, else "none"."""
    if info is None:
        return f"<b>{role}:</b> <i>{'loading…' if loading else 'none'}</i>"
    where = offload_text(info.n_gpu_layers)
    if placement is not None and placement.layers == info.n_gpu_layers:
        where = f"{placement.where()} ({placement.reason})"
    if info.where and info.where != "CPU":  # llama.cpp's own count, on its device
        reason = f" ({placement.reason})" if placement is not None else ""
        where = f"{info.where}{reason}"
    details = [
        info.quantization or "?",
        format_bytes(info.size_bytes),
        where,
        f"ctx {info.n_ctx}",
        f"{info.n_threads} threads",
    ]
    return (
        f"<b>{role}:</b> {escape(info.name)}<br>"
        f"<span style='font-size:small'>{escape(' · '.join(details))}</span>"
    )


class ModelsPanel(QGroupBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Models", parent)
        self.info = ModelsInfo()
        self.offload: OffloadDecision | None = None
        self.label = QLabel()
        self.label.setObjectName("modelsInfo")
        self.label.setWordWrap(True)
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.curve = QLabel()  # the cost curve measured in the background
        self.curve.setObjectName("costCurveStatus")
        self.curve.setWordWrap(True)
        self.curve.setToolTip(
            "Auto sizes its drafts by what verifying n tokens costs on this machine. It is "
            f"measured once per model file and machine ({how_long()}), in short steps "
            "between replies: chat meanwhile."
        )
        self.curve.setVisible(False)
        self._loading = False
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)  # llama.cpp reports no progress: a busy bar
        self.progress.setMaximumHeight(10)
        self.progress.setTextVisible(False)
        lay = QVBoxLayout(self)
        lay.addWidget(self.label)
        lay.addWidget(self.status)
        lay.addWidget(self.progress)
        lay.addWidget(self.curve)
        self.set_loading(None)
        self.set_info(ModelsInfo())

    def set_info(self, info: ModelsInfo) -> None:
        self.info = info
        d = self.offload
        text = model_line("Target", info.target, d.target if d else None, self._loading)
        if info.head and info.target is not None:  # drafts for it in MTP mode
            text += f"<br><span style='font-size:small'>MTP head: {escape(info.head)}</span>"
        text += "<br>" + model_line("Draft", info.draft, d.draft if d else None)
        if d is not None and d.advice and info.target is not None:
            text += f"<br><span style='font-size:small'><i>{escape(d.advice)}</i></span>"
        self.label.setText(text)
        self.label.setToolTip(
            "\n".join(str(i.path) for i in (info.target, info.draft) if i is not None)
        )

    def set_offload(self, decision: OffloadDecision | None) -> None:
        """Where the models being loaded will run, and why (shown once they are loaded)."""
        self.offload = decision
        self.set_info(self.info)

    def set_loading(self, text: str | None) -> None:
        self.status.setText(text or "")
        self.status.setVisible(bool(text))
        self.progress.setVisible(bool(text))
        if self._loading != bool(text):
            self._loading = bool(text)
            self.set_info(self.info)

    def set_curve_status(self, text: str) -> None:
        """The cost curve's measurement, as the inference thread reports it ("" once done)."""
        self.curve.setText(f"<span style='font-size:small'><i>{escape(text)}</i></span>")
        self.curve.setVisible(bool(text))
