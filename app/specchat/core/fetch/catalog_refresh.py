"""``specchat-cli models catalog --refresh``: the catalog's sizes from the Hub's file metadata.

Entries whose size the catalog does not state are looked up on the Hub (a HEAD of each file,
all parts of a split one) and kept in ``catalog-hub.json`` in the model store; the model manager
and the CLI read that file next to ``models/catalog.toml`` (:func:`catalog_with_refresh`), so
pairs whose sizes were unknown get a GPU memory estimate and can be suggested. Only ever run
on request (never at start-up). Files a repo no longer has are reported.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from specchat.core.gguf.split_names import model_part_names
from specchat.core.hub.client import HubClient
from specchat.core.hub.values import HubError, HubOffline
from specchat.core.store.catalog import Catalog, load_catalog
from specchat.core.store.store import ModelStore

__all__ = [
    "HUB_FIGURES_FILE",
    "RefreshReport",
    "apply_hub_figures",
    "catalog_with_refresh",
    "read_hub_figures",
    "refresh_catalog",
]

HUB_FIGURES_FILE = "catalog-hub.json"


@dataclass
class RefreshReport:
    sizes: dict[str, int] = field(default_factory=dict)  # "repo/file" -> bytes (all parts)
    sha256: dict[str, str] = field(default_factory=dict)  # "repo/file" -> LFS SHA-256
    missing: dict[str, str] = field(default_factory=dict)  # "repo/file" -> why
    path: Path | None = None


def _key(repo: str, file: str) -> str:
    return f"{repo}/{file}"


def read_hub_figures(path: Path) -> dict[str, int]:
    """Sizes saved by a refresh ({} when there is no file or it is unreadable)."""
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(path.read_text(encoding="utf-8"))
        sizes = data.get("sizes", {}) if isinstance(data, dict) else {}
        return {k: v for k, v in sizes.items() if isinstance(v, int) and v > 0}
    return {}


def apply_hub_figures(catalog: Catalog, sizes: dict[str, int]) -> Catalog:
    """The catalog with sizes filled in where it states none (stated figures win)."""
    models = dict(catalog.models)
    for mid, m in models.items():
        size = sizes.get(_key(m.repo, m.file))
        if size is not None and m.size is None and m.size_gb is None:
            models[mid] = replace(m, size_gb=round(size / 1e9, 3))
    return replace(catalog, models=models)


def catalog_with_refresh(
    store: ModelStore | None = None, catalog: Catalog | None = None
) -> Catalog:
    """The app's catalog with the sizes of the last refresh (if any)."""
    store = store or ModelStore()
    catalog = catalog or load_catalog()
    return apply_hub_figures(catalog, read_hub_figures(store.root / HUB_FIGURES_FILE))


def refresh_catalog(
    catalog: Catalog, store: ModelStore, hub: HubClient, *, everything: bool = False
) -> RefreshReport:
    """Look up the sizes (and LFS SHA-256) the catalog lacks (``everything``: all entries) and
    save them. Raises HubOffline when the Hub cannot be reached; a missing file is reported."""
    hub.ensure_online(force=True)
    report = RefreshReport()
    for m in catalog.models.values():
        if not everything and (m.size is not None or m.size_gb is not None):
            continue
        folder = str(PurePosixPath(m.file).parent)
        total = 0
        try:
            for name in model_part_names(PurePosixPath(m.file).name):
                in_repo = name if folder == "." else f"{folder}/{name}"
                meta = hub.file_metadata(m.repo, in_repo)
                if meta.size is None:
                    raise HubError(f"the Hub gives no size for {in_repo}")
                total += meta.size
                if in_repo == m.file and meta.sha256:
                    report.sha256[_key(m.repo, m.file)] = meta.sha256
        except HubOffline:
            raise
        except HubError as e:
            report.missing[_key(m.repo, m.file)] = str(e)
            continue
        report.sizes[_key(m.repo, m.file)] = total
    path = store.root / HUB_FIGURES_FILE
    old = read_hub_figures(path)
    data = {"endpoint": hub.endpoint, "sizes": old | report.sizes, "sha256": report.sha256}
    store.root.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    tmp.replace(path)
    report.path = path
    return report
