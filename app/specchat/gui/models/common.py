"""What the parts of the model manager share: a model choice (installed file or Hub listing),
verdict colours and the fit texts."""

from __future__ import annotations

from html import escape
from pathlib import Path

from PySide6.QtWidgets import QComboBox

from specchat.core.hub.client import RemoteModel
from specchat.core.placement.memory_plan import Fit
from specchat.core.placement.pairing import HubRef, LocalRef, ModelRef

GOOD, BAD, WARN = "#1a7f37", "#cf222e", "#9a6700"
FIT_TEXT = {Fit.FITS: ("fits", GOOD), Fit.TIGHT: ("tight", WARN), Fit.TOO_BIG: ("too big", BAD)}
Choice = Path | RemoteModel  # an installed file, or a model on the Hub


def model_ref(choice: Choice) -> ModelRef:
    if isinstance(choice, Path):
        return LocalRef(choice)
    return HubRef(choice.repo_id, choice.first.path, choice.revision)


def colored(text: str, color: str, mark: str = "") -> str:
    return f"<span style='color:{color}'>{mark}{escape(text)}</span>"


def find_data(combo: QComboBox, data: object) -> int:
    """Index of the item whose data equals ``data`` (findData compares Python objects by
    identity), or -1."""
    return next((i for i in range(combo.count()) if combo.itemData(i) == data), -1)
