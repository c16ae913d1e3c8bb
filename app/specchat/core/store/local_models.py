"""Which models are on this machine: the default pair's files and the store's GGUFs (no Qt)."""

from __future__ import annotations

from pathlib import Path

from specchat.core.store.catalog import load_catalog
from specchat.core.store.store import ModelStore

FETCH_DEFAULT_COMMAND = "specchat-cli models fetch-default"


def default_pair_paths(store: ModelStore | None = None) -> tuple[Path, Path]:
    """Where the catalog's default target and draft live in the store (present or not)."""
    catalog = load_catalog()
    target, draft = catalog.pair_models(catalog.default_pair())
    store = store or ModelStore()
    return store.path_for(target.file), store.path_for(draft.file)


def default_pair_installed(store: ModelStore | None = None) -> bool:
    try:
        target, draft = default_pair_paths(store)
    except (OSError, ValueError, KeyError):
        return False
    return target.is_file() and draft.is_file()


def installed_models(store: ModelStore | None = None) -> list[Path]:
    try:
        return (store or ModelStore()).installed()
    except OSError:
        return []
