"""A Hub repository's models with what can speed each up, read before anything downloads.

:func:`inspect_repo` lists the GGUF models of a repo (drafter files attached to their targets
by name: ``mtp-*.gguf``, assistants, EAGLE-3/DFlash files), looks for a Gemma 4 assistant in a
known companion repo when the repo has none, then reads the GGUF headers it needs with range
requests: one target's (every quantisation of a repo shares its architecture) and each drafter
file's. A drafter whose header does not fit the target (another architecture, another hidden
size) is detached and the failing check is kept as a note. Every row gets its
:class:`~specchat.core.gguf.drafters.Support` label.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from specchat.core.gguf.compat import CompatResult
from specchat.core.gguf.drafters import (
    DrafterKind,
    Support,
    drafter_kind,
    speculation_support,
)
from specchat.core.gguf.info import GGUFInfo
from specchat.core.gguf.sidecar import check_sidecar
from specchat.core.hub.client import HubClient
from specchat.core.hub.values import HubError, HubNotFound, RemoteModel, best_drafter
from specchat.core.placement.suggestions import suggest_drafts
from specchat.core.store.catalog import Catalog

__all__ = ["RepoModels", "catalog_draft_for", "companion_repos", "inspect_repo"]

_GEMMA4_RE = re.compile(r"^gemma-4-([A-Za-z0-9.]+)-it", re.IGNORECASE)


def companion_repos(repo_id: str) -> list[str]:
    """Repos that may hold a drafter for the models of ``repo_id``: for a Gemma 4 repo, the
    assistant's GGUF repo of the same size (by the same owner, then Google's)."""
    owner, _, name = repo_id.partition("/")
    m = _GEMMA4_RE.match(name)
    if m is None or "assistant" in name.lower():
        return []
    size = m[1]
    out = [f"{owner}/gemma-4-{size}-it-assistant-GGUF", f"google/gemma-4-{size}-it-assistant-GGUF"]
    return list(dict.fromkeys(r for r in out if r.lower() != repo_id.lower()))


def catalog_draft_for(catalog: Catalog | None, repo_id: str, filename: str = "") -> str:
    """A draft model the catalog offers for this target ("" when none): the draft of its pair,
    else a smaller catalog model of its family."""
    if catalog is None:
        return ""
    for pair in catalog.pairs:
        target = catalog.models[pair.target]
        if target.repo.lower() == repo_id.lower() and (not filename or target.file == filename):
            if pair.drafter == "draft" and pair.draft is not None:
                return catalog.model(pair.draft).label
            return ""
    found = [s for s in suggest_drafts(repo_id, catalog, target_file=filename or None)]
    return f"{found[0].repo_id} ({found[0].params:g}B)" if found and found[0].params else ""


@dataclass
class RepoModels:
    """A repo's models (targets with their drafter attached), each row's label, and notes on
    drafters that were found but do not fit."""

    repo_id: str
    models: list[RemoteModel]
    support: dict[str, Support] = field(default_factory=dict)  # by RemoteModel.ref
    target_info: GGUFInfo | None = None
    drafter_info: dict[str, GGUFInfo] = field(default_factory=dict)  # by drafter ref
    checks: dict[str, CompatResult] = field(default_factory=dict)  # by drafter ref
    notes: list[str] = field(default_factory=list)
    bytes_read: int = 0

    def model(self, filename: str) -> RemoteModel | None:
        """The model whose (first) file is ``filename`` (a path in the repo or a file name)."""
        for m in self.models:
            if filename in (m.first.path, m.name):
                return m
        return None

    def label(self, model: RemoteModel) -> Support | None:
        return self.support.get(model.ref)


def _read(hub: HubClient, model: RemoteModel, out: RepoModels) -> GGUFInfo | None:
    try:
        header = hub.read_header(model.repo_id, model.first.path, model.revision)
    except HubError as e:
        out.notes.append(f"cannot read the header of {model.name}: {e}")
        return None
    out.bytes_read += header.bytes_read
    return header.info


def _companion_drafters(hub: HubClient, repo_id: str, out: RepoModels) -> list[RemoteModel]:
    for companion in companion_repos(repo_id):
        try:
            listed = hub.list_models(companion)
        except HubNotFound:
            continue
        except HubError as e:
            out.notes.append(f"cannot list {companion}: {e}")
            continue
        found = [
            m if m.kind is not None else replace(m, kind=DrafterKind.ASSISTANT) for m in listed
        ]
        if found:
            return found
    return []


def inspect_repo(
    hub: HubClient,
    repo_id: str,
    catalog: Catalog | None = None,
    *,
    revision: str | None = None,
    read_headers: bool = True,
) -> RepoModels:
    """The repo's models with their drafters and labels (see the module's docstring).

    Raises HubError when the repo cannot be listed; a header that cannot be read is a note.
    """
    models = hub.list_models(repo_id, revision)
    out = RepoModels(repo_id, models)
    targets = [m for m in models if not m.is_drafter]
    if targets and all(m.drafter is None for m in targets):
        extra = _companion_drafters(hub, repo_id, out)
        if extra:
            out.models = models = [replace(t, drafter=best_drafter(t, extra)) for t in targets]
            targets = models
    info = _read(hub, targets[0], out) if targets and read_headers else None
    out.target_info = info
    drafters = {m.drafter.ref: m.drafter for m in targets if m.drafter is not None}
    drafters |= {m.ref: m for m in models if m.is_drafter}
    kinds: dict[str, DrafterKind | None] = {}
    for ref, d in drafters.items():
        d_info = _read(hub, d, out) if read_headers else None
        kinds[ref] = d.kind
        if d_info is None:
            continue
        out.drafter_info[ref] = d_info
        kinds[ref] = drafter_kind(d_info)
        if kinds[ref] is None:
            out.notes.append(f"{d.name} is named like a drafter but its header is a whole model")
        elif info is not None and kinds[ref] in (DrafterKind.MTP, DrafterKind.ASSISTANT):
            result = check_sidecar(info, d_info)
            out.checks[ref] = result
            if not result.ok:
                out.notes.append(
                    f"{d.name} does not fit {targets[0].name}: check '{result.check}' failed: "
                    f"{result.message}"
                )
    rows: list[RemoteModel] = []
    for listed in models:
        m = listed
        found = m.drafter
        if found is not None and (
            kinds.get(found.ref) is None
            or (found.ref in out.checks and not out.checks[found.ref].ok)
        ):
            m = replace(m, drafter=None)  # refused: not offered with the target
        if found is not None and m.drafter is not None:
            m = replace(m, drafter=replace(found, kind=kinds.get(found.ref) or found.kind))
        rows.append(m)
        if m.is_drafter:
            d_info = out.drafter_info.get(m.ref)
            whose = targets[0].name if targets else ""
            out.support[m.ref] = speculation_support(d_info, name=m.name, for_target=whose)
            continue
        kind = m.drafter.kind if m.drafter is not None else None
        out.support[m.ref] = speculation_support(
            info,
            name=m.name,
            sidecar=kind,
            sidecar_name=m.drafter.name if m.drafter is not None else "",
            catalog_draft=catalog_draft_for(catalog, repo_id, m.first.path),
        )
    out.models = rows
    return out
