"""What SpecChat knows about things on the Hugging Face Hub, as values: search hits, files,
models (a single file or all parts of a split one), a file's metadata and a fetched header,
plus the errors of :mod:`specchat.core.hub.client` (:class:`HubError` and its subclasses,
messages for users)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from specchat.core.gguf.drafters import DrafterKind, drafter_kind_from_name
from specchat.core.gguf.info import GGUFInfo
from specchat.core.gguf.split_names import split_part

__all__ = [
    "HubError",
    "HubNotFound",
    "HubOffline",
    "RemoteFile",
    "RemoteFileMeta",
    "RemoteHeader",
    "RemoteModel",
    "RepoSummary",
    "group_gguf_files",
    "parse_quant",
    "quant_bits",
]

# Quantisation labels as llama.cpp and the common quantisers write them in file names.
_QUANT_RE = re.compile(
    r"(?<![A-Za-z0-9])("
    r"I?Q\d(?:_[A-Z0-9]+)*"  # Q4_K_M, Q8_0, IQ4_XS, IQ2_XXS, Q4_0_4_4
    r"|TQ\d_\d"  # ternary
    r"|MXFP4(?:_MOE)?"
    r"|BF16|F16|F32|FP16|FP32"
    r")(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_SHA1_RE = re.compile(r"[0-9a-f]{40}")


class HubError(RuntimeError):
    """The Hub could not do what was asked; the message is meant for the user."""


class HubOffline(HubError):
    """Offline mode is on, or the Hub cannot be reached at all."""


class HubNotFound(HubError):
    """The repository, revision or file does not exist (or is private)."""


# ---------------------------------------------------------------------------------------------
# File names


def parse_quant(filename: str) -> str | None:
    """The quantisation label in a GGUF file name (``Q4_K_M``, ``IQ4_XS``, ``F16``…), or None."""
    stem = PurePosixPath(filename).name
    parts = split_part(stem)
    stem = parts[0] if parts else stem.removesuffix(".gguf").removesuffix(".GGUF")
    found = _QUANT_RE.findall(stem.replace(".", "-"))
    if not found:
        return None
    label = found[-1].upper()  # the last match: "Q4_K_M" in "model-Q8-Q4_K_M"
    return {"FP16": "F16", "FP32": "F32"}.get(label, label)


def quant_bits(filename: str) -> int:
    """Bits a weight of the file's quantisation (4 for Q4_K_M, 16 for F16; 0: unknown)."""
    label = parse_quant(filename) or ""
    m = re.search(r"(\d+)", label.replace("MXFP4", "Q4"))
    return int(m[1]) if m else 0


# ---------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class RepoSummary:
    """One search hit."""

    repo_id: str
    downloads: int | None = None
    likes: int | None = None
    gated: bool = False

    @property
    def author(self) -> str:
        return self.repo_id.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.repo_id.split("/", 1)[-1]


@dataclass(frozen=True)
class RemoteFile:
    """One file in a repo; ``sha256`` is the LFS checksum where the Hub gives one."""

    path: str
    size: int | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class RemoteModel:
    """One GGUF model in a repo: a single file, or all parts of a split model in order."""

    repo_id: str
    files: tuple[RemoteFile, ...]
    revision: str | None = None  # the commit the listing came from
    # a drafter file found with this target (an mtp-*.gguf, an assistant, a DFlash file…)
    drafter: RemoteModel | None = None
    # what this file is when it is a drafter file by its name (None: a model)
    kind: DrafterKind | None = None

    @property
    def first(self) -> RemoteFile:
        return self.files[0]

    @property
    def name(self) -> str:
        """File name shown to users (a split model by its first part)."""
        return PurePosixPath(self.first.path).name

    @property
    def display_name(self) -> str:
        parts = split_part(self.name)
        if parts is None:
            return self.name
        return f"{parts[0]}.gguf ({parts[2]} parts)"

    @property
    def ref(self) -> str:
        """``owner/repo/path/in/repo.gguf``: accepted by the CLI and :func:`parse_model_ref`."""
        return f"{self.repo_id}/{self.first.path}"

    @property
    def size(self) -> int | None:
        sizes = [f.size for f in self.files]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)

    @property
    def split_count(self) -> int:
        return len(self.files)

    @property
    def quant(self) -> str | None:
        return parse_quant(self.name)

    @property
    def is_drafter(self) -> bool:
        return self.kind is not None

    @property
    def with_size(self) -> int | None:
        """Bytes of the model and its drafter together (None if a size is unknown)."""
        if self.drafter is None:
            return self.size
        d = self.drafter.size
        return None if self.size is None or d is None else self.size + d


def best_drafter(target: RemoteModel, drafters: Iterable[RemoteModel]) -> RemoteModel | None:
    """The drafter file to take with ``target``: in the target's folder (or one above it),
    the deepest such folder first, then the quantisation closest to the target's (as
    llama.cpp's downloader picks an ``mtp-*.gguf``), then the smaller file."""
    folder = PurePosixPath(target.first.path).parent.parts
    bits = quant_bits(target.name)
    found: list[tuple[int, int, int, str, RemoteModel]] = []
    for d in drafters:
        d_folder = PurePosixPath(d.first.path).parent.parts
        if d.repo_id == target.repo_id and folder[: len(d_folder)] != d_folder:
            continue  # in a sibling folder: another model's
        depth = len(d_folder) if d.repo_id == target.repo_id else -1
        diff = abs(quant_bits(d.name) - bits)
        found.append((-depth, diff, d.size or 0, d.name, d))
    return min(found, key=lambda t: t[:4])[4] if found else None


def group_gguf_files(
    repo_id: str, files: Iterable[RemoteFile], revision: str | None = None
) -> list[RemoteModel]:
    """GGUF files of a repo as models: split parts joined, incomplete splits dropped, smallest
    first. ``mmproj`` (vision projector) files are not models on their own and are left out.
    Drafter files (``mtp-*.gguf``, assistants, EAGLE-3/DFlash/DSpark files, by name) are
    attached to the targets they serve (:attr:`RemoteModel.drafter`); a repo that holds only
    drafters lists them as they are (:attr:`RemoteModel.kind` says what each is)."""
    models = _group(repo_id, files, revision)
    drafters = [replace(m, kind=drafter_kind_from_name(m.name)) for m in models]
    drafters = [m for m in drafters if m.kind is not None]
    targets = [m for m in models if drafter_kind_from_name(m.name) is None]
    if not targets:
        return drafters
    return [replace(t, drafter=best_drafter(t, drafters)) for t in targets]


def _group(
    repo_id: str, files: Iterable[RemoteFile], revision: str | None = None
) -> list[RemoteModel]:
    singles: list[RemoteModel] = []
    splits: dict[tuple[str, str, int], dict[int, RemoteFile]] = {}
    for f in files:
        name = PurePosixPath(f.path).name
        if not name.lower().endswith(".gguf") or name.lower().startswith("mmproj"):
            continue
        parts = split_part(name)
        if parts is None:
            singles.append(RemoteModel(repo_id, (f,), revision))
            continue
        base, index, count = parts
        folder = str(PurePosixPath(f.path).parent)
        splits.setdefault((folder, base, count), {})[index] = f
    for (_, _, count), found in splits.items():
        if len(found) == count:
            singles.append(
                RemoteModel(repo_id, tuple(found[i] for i in range(1, count + 1)), revision)
            )
    return sorted(singles, key=lambda m: (m.size is None, m.size or 0, m.name))


@dataclass(frozen=True)
class RemoteFileMeta:
    """What a HEAD request on the file's resolve URL says."""

    repo_id: str
    filename: str
    url: str  # where to GET the bytes (the CDN location when the Hub redirects)
    size: int | None
    etag: str | None
    commit: str | None

    @property
    def sha256(self) -> str | None:
        """The LFS SHA-256 (the Hub's linked ETag of an LFS file)."""
        etag = (self.etag or "").lower()
        return etag if _SHA256_RE.fullmatch(etag) else None

    @property
    def git_sha1(self) -> str | None:
        """The git blob id, for files stored in git itself (not LFS)."""
        etag = (self.etag or "").lower()
        return etag if _SHA1_RE.fullmatch(etag) else None


@dataclass(frozen=True)
class RemoteHeader:
    info: GGUFInfo
    bytes_read: int
    meta: RemoteFileMeta
