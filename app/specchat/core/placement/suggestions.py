"""What to pair: the catalog's recommended pairs, draft suggestions for a target (smaller
models of its family, from the catalog and the Hub), and which file of a repo to take."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from specchat.core.gguf.drafters import DrafterKind, Support, speculation_support
from specchat.core.gguf.split_names import split_part
from specchat.core.hub.client import HubClient
from specchat.core.hub.values import HubError, RemoteFile, RemoteModel, RepoSummary, parse_quant
from specchat.core.store.catalog import Catalog, CatalogModel, CatalogPair
from specchat.core.store.store import ModelStore

__all__ = [
    "PREFERRED_QUANTS",
    "DraftSuggestion",
    "PairForDevice",
    "RecommendedPair",
    "catalog_remote",
    "model_family",
    "pick_model",
    "recommended_pairs",
    "pair_for_device",
    "pair_need_gb",
    "repo_hint",
    "suggest_drafts",
]


@dataclass(frozen=True)
class RecommendedPair:
    pair: CatalogPair
    target: CatalogModel
    draft: CatalogModel | None  # None: the target carries its drafter (built-in MTP)
    target_installed: bool
    draft_installed: bool

    @property
    def installed(self) -> bool:
        return self.target_installed and self.draft_installed

    @property
    def label(self) -> str:
        """ "Qwen2.5-Coder-1.5B-Instruct Q4_K_M + 0.5B draft (default)", "… + MTP head
        (sidecar)", "… + assistant"."""
        name = re.sub(r"[-_.]gguf$", "", self.target.repo.rsplit("/", 1)[-1], flags=re.I)
        mark = " (default)" if self.pair.default else ""
        if self.pair.drafter == "draft" and self.draft is not None:
            return f"{name} {self.target.quant} + {self.draft.params} draft{mark}"
        return f"{name} {self.target.quant} + {self.pair.drafter_label}{mark}"

    @property
    def support(self) -> Support:
        """The catalog row's speed-up label (with the hybrid note where it applies)."""
        kinds = {"mtp": DrafterKind.MTP, "assistant": DrafterKind.ASSISTANT}
        draft = self.draft
        return speculation_support(
            None,
            name=self.target.file,
            architecture=self.target.architecture or "",
            sidecar=kinds.get(self.pair.drafter),
            sidecar_name=draft.file if draft is not None else "",
            catalog_draft=draft.label if draft is not None and self.pair.drafter == "draft" else "",
            builtin_mtp=self.pair.drafter == "mtp-builtin",
        )


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
        target, draft = catalog.pair_files(pair)
        out.append(
            RecommendedPair(
                pair,
                target,
                draft,
                store is not None and store.has(target),
                draft is None or (store is not None and store.has(draft)),
            )
        )
    return sorted(out, key=lambda p: not p.pair.default)


@dataclass(frozen=True)
class PairForDevice:
    """The catalog pair suggested for this machine, and why."""

    pair: CatalogPair
    reason: str


KV_ALLOWANCE_GB = 1.5  # KV cache at 4,096 tokens and compute buffers, where not measured
CPU_RAM_SHARE = 0.25  # a CPU pair's files may fill this share of the available memory


def pair_need_gb(catalog: Catalog, pair: CatalogPair) -> float | None:
    """GPU memory the pair needs whole at 4,096 tokens: its ``vram_gb``, else its files' size
    plus :data:`KV_ALLOWANCE_GB` once the sizes are known (catalog.toml's header), else None."""
    if pair.vram_gb is not None:
        return pair.vram_gb
    size = catalog.pair_bytes(pair)
    if size is None:
        return None
    return math.ceil((size / 1e9 + KV_ALLOWANCE_GB) * 10) / 10


def _cpu_pair(catalog: Catalog, ram_available: int | None) -> PairForDevice:
    default = catalog.default_pair()
    if ram_available is None:
        return PairForDevice(default, "no GPU llama.cpp can use here: the small default pair")
    fitting = []
    for i, p in enumerate(catalog.pairs):
        size = catalog.pair_bytes(p)
        if (p.cpu or p.default) and size is not None and size <= CPU_RAM_SHARE * ram_available:
            fitting.append((size, -i, p))
    ram = f"{ram_available / 1e9:.1f} GB of memory available"
    size, _, best = max(fitting, key=lambda t: (t[0], t[1]))
    if best.default:
        return PairForDevice(best, f"no GPU llama.cpp can use here, {ram}: the small default pair")
    return PairForDevice(
        best,
        f"no GPU llama.cpp can use here: the largest pair that runs well on a CPU "
        f"({size / 1e9:.1f} GB of files, {ram})",
    )


def pair_for_device(
    catalog: Catalog,
    *,
    offload: bool,
    vram_free: int | None,
    ram_available: int | None = None,
) -> PairForDevice:
    """The largest catalog pair whose GPU memory need (:func:`pair_need_gb`) fits the GPU's
    free memory (bytes, as llama.cpp reports it); the default pair when nothing fits. Without
    a usable GPU: the largest pair marked ``cpu`` whose files fill at most a quarter of
    ``ram_available`` (the default pair when that is unknown)."""
    default = catalog.default_pair()
    if not offload:
        return _cpu_pair(catalog, ram_available)
    if vram_free is None:
        return PairForDevice(default, "the GPU reports no free memory: the default pair")
    fitting = []
    for i, p in enumerate(catalog.pairs):
        need = pair_need_gb(catalog, p)
        if need is not None and need * 1e9 <= vram_free:
            fitting.append((need, -i, p))
    free = f"{vram_free / 1e9:.1f} GB free on the GPU"
    if not fitting:
        return PairForDevice(default, f"no pair fits whole ({free}): the default pair")
    vram, _, best = max(fitting, key=lambda t: (t[0], t[1]))
    return PairForDevice(best, f"the largest pair that fits: needs {vram:g} GB, {free}")


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
