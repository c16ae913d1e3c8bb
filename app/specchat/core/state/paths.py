"""Where SpecChat keeps its own files (conversations, settings): the user data directory."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

ENV_DATA_DIR = "SPECCHAT_DATA_DIR"


def data_dir(create: bool = True) -> Path:
    """``$SPECCHAT_DATA_DIR`` if set, else the platform's user data directory for "specchat"."""
    env = os.environ.get(ENV_DATA_DIR)
    path = (
        Path(env).expanduser()
        if env
        else Path(platformdirs.user_data_dir("specchat", appauthor=False))
    )
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path
