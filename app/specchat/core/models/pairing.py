"""Choosing a target/draft pair: recommended pairs, draft suggestions, and the compatibility
verdict for two models, local or on the Hub, before anything is downloaded.

A model is named by a :data:`ModelRef`: a local file, or a file on the Hub. The verdict runs
exactly the checks the engine runs when it loads a draft (:func:`check_draft_compat`); for Hub
files only the GGUF headers are read, with HTTP range requests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .catalog import Catalog, CatalogModel, CatalogPair
from .compat import CompatResult, check_draft_compat
from .gguf import GGUFInfo, read_gguf_info
from .hub import HubClient, HubError, RemoteFile, RemoteModel, RepoSummary, parse_quant
from .memory_plan import MachineMemory, MemoryPlan, ModelFootprint, plan_memory
from .store import ModelStore, model_part_names, split_part

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
    def message(self) -> str:
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
    return PairVerdict(t_info, d_info, check_draft_compat(t_info, d_info), t_read + d_read)


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
        verdict = PairVerdict(t_info, d_info, check_draft_compat(t_info, d_info), t_read + d_read)

    def weights(ref: ModelRef, info: GGUFInfo, size: int | None) -> int | None:
        if size is None and isinstance(ref, LocalRef):
            size = local_model_size(ref.path)
        return size if size is not None else info.file_size

    t_fp = ModelFootprint.from_info(t_info, weights(target, t_info, sizes[0]))
    d_fp = None
    if draft is not None and d_info is not None:
        d_fp = ModelFootprint.from_info(d_info, weights(draft, d_info, sizes[1]))
    return PairReport(t_info, d_info, verdict, plan_memory(t_fp, d_fp, n_ctx, machine=machine))


# ---------------------------------------------------------------------------------------------
# Recommendations


@dataclass(frozen=True)
class RecommendedPair:
    pair: CatalogPair
    target: CatalogModel
    draft: CatalogModel
    target_installed: bool
    draft_installed: bool

    @property
    def installed(self) -> bool:
        return self.target_installed and self.draft_installed

    @property
    def label(self) -> str:
        """ "Qwen2.5-Coder-1.5B-Instruct Q4_K_M + 0.5B draft (default)"."""
        name = re.sub(r"[-_.]gguf$", "", self.target.repo.rsplit("/", 1)[-1], flags=re.I)
        mark = " (default)" if self.pair.default else ""
        return f"{name} {self.target.quant} + {self.draft.params} draft{mark}"


def catalog_remote(model: CatalogModel) -> RemoteModel:
    """A catalog entry as a Hub model (with the catalog's pinned size and checksum)."""
    return RemoteModel(model.repo, (RemoteFile(model.file, model.size, model.sha256),))


def repo_hint(path: Path, catalog: Catalog | None, store: ModelStore | None) -> str:
    """What a local model would be called on the Hub, to find drafts for it: its catalog repo,
    else a name from its GGUF metadata ("Qwen2.5-Coder-1.5B-Instruct"), else its file name."""
    for m in catalog.models.values() if catalog else ():
        if m.file == path.name:
            return m.repo
    source = store.source_of(path) if store is not None else None
    if source:
        return "/".join(source.split("/")[:2])
    model = store.model(path.name) if store is not None else None
    md = model.info.metadata if model is not None and model.info is not None else {}
    words = [md.get(k) for k in ("general.basename", "general.size_label", "general.finetune")]
    hint = "-".join(w for w in words if isinstance(w, str) and w)
    return hint or path.stem


def recommended_pairs(catalog: Catalog, store: ModelStore | None = None) -> list[RecommendedPair]:
    """The catalog's pairs, the default first, with what is already in the store."""
    out: list[RecommendedPair] = []
    for pair in catalog.pairs:
        target, draft = catalog.pair_models(pair)
        out.append(
            RecommendedPair(
                pair,
                target,
                draft,
                store is not None and store.has(target),
                store is not None and store.has(draft),
            )
        )
    return sorted(out, key=lambda p: not p.pair.default)


_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)([bBmM])$")


def model_family(repo_or_name: str) -> tuple[str, float | None]:
    """``("qwen2.5-coder-instruct", 7.0)`` for ``Qwen/Qwen2.5-Coder-7B-Instruct-GGUF``: the name
    without its size label and GGUF suffix, lower case, and the size in billions (or None)."""
    name = repo_or_name.rsplit("/", 1)[-1]
    parts = split_part(name)
    name = re.sub(r"[-_.]gguf$", "", parts[0] if parts else name, flags=re.IGNORECASE)
    quant = parse_quant(name + ".gguf")
    if quant:  # a file name: "model-7B-Instruct-Q4_K_M" -> "model-7B-Instruct"
        name = re.sub(rf"[-_.]{re.escape(quant)}$", "", name, flags=re.IGNORECASE)
    words = re.split(r"[-_]", name)
    size: float | None = None
    kept: list[str] = []
    for word in words:
        m = _SIZE_RE.match(word)
        if m and size is None:
            size = float(m[1]) / (1000 if m[2] in "mM" else 1)
            continue
        kept.append(word.lower())
    return "-".join(w for w in kept if w), size


def _params_billions(text: str) -> float | None:
    m = _SIZE_RE.match(text.strip())
    return None if m is None else float(m[1]) / (1000 if m[2] in "mM" else 1)


@dataclass(frozen=True)
class DraftSuggestion:
    """A smaller model of the target's family that may serve as its draft."""

    source: str  # "catalog" or "hub"
    repo_id: str
    params: float | None  # billions
    filename: str | None = None  # known for catalog entries; Hub repos: pick a file
    catalog_id: str | None = None

    @property
    def label(self) -> str:
        size = f"{self.params:g}B" if self.params is not None else "?"
        where = "catalog" if self.source == "catalog" else "Hub"
        return f"{self.repo_id} ({size}, {where})"


def suggest_drafts(
    target_repo: str,
    catalog: Catalog | None = None,
    hub: HubClient | None = None,
    *,
    target_file: str | None = None,
    limit: int = 6,
) -> list[DraftSuggestion]:
    """Drafts for a target: smaller models of the same family, from the catalog first, then
    (when ``hub`` is given) repos found on the Hub. Hub lookups that fail are skipped."""
    family, size = model_family(target_repo)
    out: list[DraftSuggestion] = []
    seen: set[str] = set()
    if catalog is not None:
        target_model = next(
            (
                m
                for m in catalog.models.values()
                if m.repo == target_repo and (target_file is None or m.file == target_file)
            ),
            None,
        )
        cat_family = target_model.family if target_model else None
        cat_size = _params_billions(target_model.params) if target_model else size
        for m in catalog.models.values():
            m_size = _params_billions(m.params)
            same = (cat_family is not None and m.family == cat_family) or (
                model_family(m.repo)[0] == family
            )
            if same and m_size is not None and (cat_size is None or m_size < cat_size):
                out.append(DraftSuggestion("catalog", m.repo, m_size, m.file, m.id))
                seen.add(m.repo.lower())
    out.sort(key=lambda s: (model_family(s.repo_id)[0] != family, s.params or 0.0))
    if hub is not None and family:
        out += _hub_drafts(hub, target_repo, family, size, seen)
    return out[:limit]


PREFERRED_QUANTS = ("Q4_K_M", "Q4_K_S", "Q5_K_M", "Q4_0", "Q8_0", "IQ4_XS", "Q6_K")


def pick_model(models: list[RemoteModel], quant: str | None = None) -> RemoteModel | None:
    """The file to use from a repo's listing: the asked-for quantisation, else a common
    4-bit one, else the smallest."""
    wanted = (quant.upper(),) if quant else PREFERRED_QUANTS
    for label in wanted:
        for m in models:
            if (m.quant or "").upper() == label:
                return m
    if quant:
        return None
    return models[0] if models else None


def _hub_drafts(
    hub: HubClient, target_repo: str, family: str, size: float | None, seen: set[str]
) -> list[DraftSuggestion]:
    name = target_repo.rsplit("/", 1)[-1]
    # search for the name up to its size label: "Qwen2.5-Coder" for "Qwen2.5-Coder-7B-…"
    words = re.split(r"[-_]", name)
    prefix: list[str] = []
    for word in words:
        if _SIZE_RE.match(word):
            break
        prefix.append(word)
    query = "-".join(prefix) or family
    try:
        found: list[RepoSummary] = hub.search(query, limit=100)
    except HubError:
        return []
    author = target_repo.split("/", 1)[0].lower()
    out = []
    for repo in found:
        r_family, r_size = model_family(repo.repo_id)
        if r_family != family or r_size is None or repo.repo_id.lower() in seen:
            continue
        if size is not None and r_size >= size:
            continue
        if repo.repo_id.lower() == target_repo.lower():
            continue
        seen.add(repo.repo_id.lower())
        out.append((repo.author.lower() != author, DraftSuggestion("hub", repo.repo_id, r_size)))
    out.sort(key=lambda t: (t[0], t[1].params or 0.0))
    return [s for _, s in out]
