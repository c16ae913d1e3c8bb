"""Checking a target/draft pair: the compatibility verdict and the memory plan for two models,
local or on the Hub, before anything is downloaded. (Recommended pairs and draft suggestions
are in :mod:`.suggestions`; their names are importable from here too.)

A model is named by a :data:`ModelRef`: a local file, or a file on the Hub. The verdict runs
exactly the checks the engine runs when it loads a draft (:func:`check_draft_compat`); for Hub
files only the GGUF headers are read, with HTTP range requests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from specchat.core.gguf.compat import CompatResult, draft_size_warning
from specchat.core.gguf.drafters import DrafterKind, drafter_kind, target_note
from specchat.core.gguf.header import GGUFInfo, read_gguf_info
from specchat.core.gguf.sidecar import check_drafter, pairing_name
from specchat.core.gguf.split_names import model_part_names
from specchat.core.hub.client import HubClient
from specchat.core.placement.footprint import ModelFootprint
from specchat.core.placement.memory_plan import MachineMemory, MemoryPlan, plan_memory
from specchat.core.placement.suggestions import (
    DraftSuggestion,
    RecommendedPair,
    catalog_remote,
    model_family,
    pick_model,
    recommended_pairs,
    repo_hint,
    suggest_drafts,
)
from specchat.core.store.store import ModelStore

__all__ = [
    "DraftSuggestion",
    "HubRef",
    "LocalRef",
    "ModelRef",
    "PairReport",
    "PairVerdict",
    "RecommendedPair",
    "catalog_remote",
    "check_pair",
    "inspect_pair",
    "load_header",
    "model_family",
    "parse_model_ref",
    "pick_model",
    "recommended_pairs",
    "repo_hint",
    "suggest_drafts",
]


@dataclass(frozen=True)
class LocalRef:
    path: Path

    def __str__(self) -> str:
        return str(self.path)

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class HubRef:
    repo_id: str
    filename: str
    revision: str | None = None

    def __str__(self) -> str:
        return f"{self.repo_id}/{self.filename}"

    @property
    def name(self) -> str:
        return PurePosixPath(self.filename).name


ModelRef = LocalRef | HubRef

_HUB_URL_RE = re.compile(
    r"^https?://[^/]+/(?P<repo>[^/]+/[^/]+)/(?:resolve|blob)/(?P<rev>[^/]+)/(?P<file>.+)$"
)


def parse_model_ref(text: str, store: ModelStore | None = None) -> ModelRef:
    """A local path, a file name in the store, a Hub ``owner/repo/file.gguf`` name (optionally
    ``hf://``-prefixed), or a Hub file URL (``…/owner/repo/resolve/main/file.gguf``)."""
    text = text.strip()
    m = _HUB_URL_RE.match(text)
    if m:
        return HubRef(m["repo"], m["file"], m["rev"])
    path = Path(text).expanduser()
    if path.exists():
        return LocalRef(path)
    if store is not None and "/" not in text and "\\" not in text and text:
        in_store = store.root / text
        if in_store.is_file():
            return LocalRef(in_store)
    name = text.removeprefix("hf://")
    parts = name.split("/")
    if (
        len(parts) >= 3
        and all(parts)
        and not text.startswith(("/", ".", "~"))
        and parts[-1].lower().endswith(".gguf")
    ):
        return HubRef("/".join(parts[:2]), "/".join(parts[2:]))
    raise ValueError(f"{text}: no such file, and not a Hub file name like owner/repo/model.gguf")


def load_header(ref: ModelRef, hub: HubClient | None = None) -> tuple[GGUFInfo, int]:
    """The model's GGUF header and how many bytes of it were read over the network (0: local).

    Raises GGUFError for a bad local file, HubError for anything on the Hub side.
    """
    if isinstance(ref, LocalRef):
        return read_gguf_info(ref.path), 0
    client = hub or HubClient()
    header = client.read_header(ref.repo_id, ref.filename, ref.revision)
    return header.info, header.bytes_read


@dataclass(frozen=True)
class PairVerdict:
    """The outcome of :func:`check_pair`; ``result.check`` names the failing check."""

    target: GGUFInfo
    draft: GGUFInfo
    result: CompatResult
    bytes_read: int = 0  # over the network, both headers together

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def pairing(self) -> str:
        """What the draft is to the target: "draft model", "MTP head (sidecar)", "assistant"."""
        return pairing_name(self.draft)

    @property
    def sidecar(self) -> bool:
        return drafter_kind(self.draft) in (DrafterKind.MTP, DrafterKind.ASSISTANT)

    @property
    def warnings(self) -> tuple[str, ...]:
        """Reasons the pair, though compatible, will not pay (a draft larger than its target),
        and what else the target offers (built-in MTP layers)."""
        found = [
            draft_size_warning(self.target, self.draft)
            if self.result.ok and not self.sidecar
            else None,
            target_note(self.target),
        ]
        return tuple(w for w in found if w)

    @property
    def message(self) -> str:
        if self.sidecar:
            what = f"the {self.pairing}"
            if self.result.ok:
                return f"{what} fits the target: pairing: {self.result.message}"
            return f"{what} does not fit the target: check '{self.result.check}' failed: " + (
                self.result.message
            )
        if self.result.ok:
            return f"the draft fits the target: {self.result.message}"
        return f"the draft does not fit the target: check '{self.result.check}' failed: " + (
            self.result.message
        )


def check_pair(target: ModelRef, draft: ModelRef, hub: HubClient | None = None) -> PairVerdict:
    """Read both headers (local or range reads) and run the engine's compatibility checks.

    Raises GGUFError / HubError when a header cannot be read at all.
    """
    t_info, t_read = load_header(target, hub)
    d_info, d_read = load_header(draft, hub)
    return PairVerdict(t_info, d_info, check_drafter(t_info, d_info), t_read + d_read)


@dataclass(frozen=True)
class PairReport:
    """Everything shown before loading a pair: both headers, the compatibility verdict (None
    without a draft) and the memory plan."""

    target: GGUFInfo
    draft: GGUFInfo | None
    verdict: PairVerdict | None
    plan: MemoryPlan

    @property
    def ok(self) -> bool:
        return self.verdict is None or self.verdict.ok

    def replan(self, n_ctx: int, machine: MachineMemory | None = None) -> PairReport:
        """The same pair at another context size (or against fresh memory figures)."""
        target = ModelFootprint.from_info(self.target, self.plan.target_weights)
        draft = (
            ModelFootprint.from_info(self.draft, self.plan.draft_weights) if self.draft else None
        )
        plan = plan_memory(target, draft, n_ctx, machine=machine or self.plan.machine)
        return PairReport(self.target, self.draft, self.verdict, plan)


def local_model_size(path: Path) -> int | None:
    """Bytes of a local model, all parts of a split one together (None if a part is missing)."""
    try:
        return sum(path.with_name(n).stat().st_size for n in model_part_names(path.name))
    except OSError:
        return None


def inspect_pair(
    target: ModelRef,
    draft: ModelRef | None,
    *,
    n_ctx: int = 4096,
    sizes: tuple[int | None, int | None] = (None, None),
    machine: MachineMemory | None = None,
    hub: HubClient | None = None,
) -> PairReport:
    """Read the headers, check compatibility and plan memory. ``sizes``: the models' total
    bytes where known (split models on the Hub); otherwise taken from the files.

    Raises GGUFError / HubError when a header cannot be read.
    """
    t_info, t_read = load_header(target, hub)
    d_info: GGUFInfo | None = None
    verdict: PairVerdict | None = None
    if draft is not None:
        d_info, d_read = load_header(draft, hub)
        verdict = PairVerdict(t_info, d_info, check_drafter(t_info, d_info), t_read + d_read)

    def weights(ref: ModelRef, info: GGUFInfo, size: int | None) -> int | None:
        if size is None and isinstance(ref, LocalRef):
            size = local_model_size(ref.path)
        return size if size is not None else info.file_size

    t_fp = ModelFootprint.from_info(t_info, weights(target, t_info, sizes[0]))
    d_fp = None
    if draft is not None and d_info is not None:
        d_fp = ModelFootprint.from_info(d_info, weights(draft, d_info, sizes[1]))
    return PairReport(t_info, d_info, verdict, plan_memory(t_fp, d_fp, n_ctx, machine=machine))
