"""Which installed files belong together: a target and the MTP sidecar or Gemma 4 assistant
next to it in the model store, found from their headers (a lone ``mtp*.gguf`` that fits the
target, as apps have agreed), and each installed model's speed-up label."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from specchat.core.gguf.drafters import DrafterKind, Support, drafter_kind, speculation_support
from specchat.core.gguf.info import GGUFInfo
from specchat.core.gguf.sidecar import check_sidecar
from specchat.core.store.catalog import Catalog
from specchat.core.store.store import InstalledModel

__all__ = ["StoreLink", "link_installed", "store_pairs"]


@dataclass(frozen=True)
class StoreLink:
    """An installed file's label, and the file it is paired with (its drafter, or its
    target for a drafter file)."""

    support: Support
    partner: str | None = None


def _stem(name: str) -> str:
    low = name.lower().removesuffix(".gguf")
    for prefix in ("mtp-", "mtp_"):
        low = low.removeprefix(prefix)
    return low


def _likeness(a: str, b: str) -> int:
    return len(os.path.commonprefix([_stem(a), _stem(b)]))


def link_installed(
    models: Iterable[tuple[str, GGUFInfo]], catalog: Catalog | None = None
) -> dict[str, StoreLink]:
    """Labels and pairs for (file name, header) of installed models."""
    items = list(models)
    drafters = [(f, i) for f, i in items if drafter_kind(i) is not None]
    drafts_in_catalog: dict[str, str] = {}
    for pair in catalog.pairs if catalog is not None else ():
        if catalog is not None and pair.drafter == "draft" and pair.draft is not None:
            drafts_in_catalog[catalog.model(pair.target).file] = catalog.model(pair.draft).label
    out: dict[str, StoreLink] = {}
    owner: dict[str, str] = {}
    for file, info in items:
        if drafter_kind(info) is not None:
            continue
        fitting = [
            (_likeness(file, d_file), d_file, d_info)
            for d_file, d_info in drafters
            if drafter_kind(d_info) in (DrafterKind.MTP, DrafterKind.ASSISTANT)
            and check_sidecar(info, d_info).ok
        ]
        best = max(fitting, key=lambda t: (t[0], t[1]), default=None)
        kind = drafter_kind(best[2]) if best is not None else None
        support = speculation_support(
            info,
            name=file,
            sidecar=kind,
            sidecar_name=best[1] if best is not None else "",
            catalog_draft=drafts_in_catalog.get(file, ""),
        )
        out[file] = StoreLink(support, best[1] if best is not None else None)
        if best is not None:
            owner.setdefault(best[1], file)
    for d_file, d_info in drafters:
        target = owner.get(d_file)
        support = speculation_support(d_info, name=d_file, for_target=target or "")
        out[d_file] = StoreLink(support, target)
    return out


def store_pairs(
    models: Iterable[InstalledModel], catalog: Catalog | None = None
) -> dict[str, StoreLink]:
    """:func:`link_installed` over the store's models (unusable files are left out)."""
    return link_installed(((m.file, m.info) for m in models if m.info is not None), catalog)
