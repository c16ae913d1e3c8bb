"""Where the files in the top-level `resources/` folder are: next to the code in a checkout,
or inside the bundle of a frozen (PyInstaller) build."""

from __future__ import annotations

import sys
from pathlib import Path


def resources_dir() -> Path:
    frozen = getattr(sys, "_MEIPASS", None)
    if frozen:
        return Path(frozen) / "resources"
    return Path(__file__).resolve().parents[3] / "resources"
