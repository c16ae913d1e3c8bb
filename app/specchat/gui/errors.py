"""Turning exceptions from the core into sentences a user can act on."""

from __future__ import annotations

from pathlib import Path

from specchat.core.decoding.runtime import ModelLoadError
from specchat.core.engines.local import DraftUnavailableError, EngineBusyError
from specchat.core.gguf.compat import IncompatibleDraftError
from specchat.core.gguf.header import GGUFError

FETCH_HINT = "specchat-cli models fetch-default"


def readable_error(exc: BaseException, path: Path | None = None) -> str:
    """One or two sentences, no traceback."""
    name = f"“{path.name}”" if path is not None else "the model"
    if isinstance(exc, IncompatibleDraftError):
        return (
            f"{name} cannot be used as a draft for the loaded target: {exc}. "
            "A draft must share the target's vocabulary (pick one from the same model family)."
        )
    if isinstance(exc, GGUFError):
        return f"{name} is not a usable GGUF model: {exc}"
    if isinstance(exc, ModelLoadError):
        return f"{exc}."
    if isinstance(exc, FileNotFoundError):
        return f"File not found: {exc.filename or exc}"
    if isinstance(exc, PermissionError):
        return f"Permission denied: {exc.filename or exc}"
    if isinstance(exc, DraftUnavailableError):
        return "No draft model is loaded: load one or pick another speculation mode."
    if isinstance(exc, EngineBusyError):
        return "A reply is already being generated."
    if isinstance(exc, MemoryError):
        return "Not enough memory."
    if isinstance(exc, ValueError):
        return str(exc)
    return f"Unexpected error ({type(exc).__name__}): {exc}"
