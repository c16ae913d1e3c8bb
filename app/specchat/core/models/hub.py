"""The Hugging Face Hub as seen by SpecChat: find GGUF repos, list their model files, and read
a file's GGUF header with HTTP range requests (a few megabytes instead of the whole model).

Everything goes through `huggingface_hub` (its `HfApi`, its HTTP session and error types), so
``HF_ENDPOINT``, ``HF_TOKEN``, proxies and ``HF_HUB_OFFLINE`` behave as in every other HF tool.
Errors reach callers as :class:`HubError` (or its subclasses) with a message meant for users.

The endpoint is read when a :class:`HubClient` is made (``HF_ENDPOINT``, else the library's
default), and offline mode is checked on every call, so both can change while the app runs.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import urlparse

import httpx2
from huggingface_hub import HfApi, constants, get_hf_file_metadata, get_session, hf_hub_url
from huggingface_hub.errors import (
    FileMetadataError,
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status, http_stream_backoff

from .gguf import GGUFError, GGUFInfo, NeedMoreData, parse_gguf_prefix
from .store import split_part

__all__ = [
    "HubClient",
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
    "split_part",
]

ENV_ENDPOINT = "HF_ENDPOINT"
ENV_OFFLINE = "HF_HUB_OFFLINE"
PROBE_TIMEOUT_S = 3.0
REQUEST_TIMEOUT_S = 15.0
PROBE_CACHE_S = 60.0
HEADER_FIRST_READ = 3 << 20  # a 150k-token vocabulary makes a ~6 MB header: two reads
HEADER_GROWTH = 2.0
HEADER_MAX_BYTES = 64 << 20
_STREAM_CHUNK = 256 << 10

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


def group_gguf_files(
    repo_id: str, files: Iterable[RemoteFile], revision: str | None = None
) -> list[RemoteModel]:
    """GGUF files of a repo as models: split parts joined, incomplete splits dropped, smallest
    first. ``mmproj`` (vision projector) files are not models on their own and are left out."""
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


# ---------------------------------------------------------------------------------------------
# Client


def offline_env() -> bool:
    value = os.environ.get(ENV_OFFLINE) or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().lower() in ("1", "true", "yes", "on")


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class HubClient:
    """Search, list and range-read on one Hub endpoint. Thread-safe; share one per app."""

    def __init__(
        self,
        endpoint: str | None = None,
        token: str | bool | None = None,
        *,
        timeout: float = REQUEST_TIMEOUT_S,
    ) -> None:
        chosen = endpoint or os.environ.get(ENV_ENDPOINT) or constants.ENDPOINT
        self.endpoint = chosen.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.api = HfApi(endpoint=self.endpoint, token=token)
        self._lock = threading.Lock()
        self._last_ok = 0.0

    def __repr__(self) -> str:
        return f"HubClient({self.endpoint!r})"

    # -- reachability --------------------------------------------------------------------------
    def offline_message(self) -> str:
        return (
            f"Offline mode: {ENV_OFFLINE} is set, so SpecChat does not contact the Hugging Face "
            f"Hub. Installed models and local files still work; unset {ENV_OFFLINE} to search "
            "and download."
        )

    def unreachable_message(self, reason: str) -> str:
        return (
            f"Cannot reach the Hugging Face Hub at {self.endpoint} ({reason}). Check your "
            "internet connection; installed models and local files still work."
        )

    def ensure_online(self, *, force: bool = False) -> None:
        """Raise :class:`HubOffline` unless the Hub answers (a quick HEAD, cached for a minute).

        Without this probe, huggingface_hub would retry an unreachable endpoint with back-off
        for about 20 seconds before giving up.
        """
        if offline_env() or constants.is_offline_mode():
            raise HubOffline(self.offline_message())
        with self._lock:
            if not force and time.monotonic() - self._last_ok < PROBE_CACHE_S:
                return
        try:
            get_session().head(self.endpoint, timeout=PROBE_TIMEOUT_S, follow_redirects=False)
        except OfflineModeIsEnabled:
            raise HubOffline(self.offline_message()) from None
        except (httpx2.TransportError, OSError) as e:
            raise HubOffline(self.unreachable_message(_connect_reason(e))) from None
        with self._lock:
            self._last_ok = time.monotonic()

    @contextmanager
    def _errors(self, action: str, repo_id: str = "", filename: str = "") -> Iterator[None]:
        """Turn huggingface_hub/httpx2 exceptions into HubErrors that say what went wrong."""
        try:
            yield
        except HubError:
            raise
        except Exception as e:
            error = self.describe_error(e, action, repo_id, filename)
            if error is None:
                raise
            raise error from e

    def describe_error(
        self, exc: BaseException, action: str, repo_id: str = "", filename: str = ""
    ) -> HubError | None:
        """A HubError for an exception from huggingface_hub or httpx2 (None: not one of those)."""
        what = f"{filename} in {repo_id}" if filename else repo_id
        if isinstance(exc, OfflineModeIsEnabled):
            return HubOffline(self.offline_message())
        if isinstance(exc, (httpx2.ConnectError, httpx2.ProxyError)):
            with self._lock:
                self._last_ok = 0.0
            return HubOffline(self.unreachable_message(_connect_reason(exc)))
        if isinstance(exc, httpx2.TimeoutException):
            return HubError(f"the Hugging Face Hub did not answer in time while {action}")
        if isinstance(exc, httpx2.TransportError):
            return HubError(f"the connection to the Hub broke while {action} ({_short(exc)})")
        if isinstance(exc, GatedRepoError):
            return HubError(
                f"{repo_id} is gated: accept its terms on the Hub's web page, then log in "
                "with `hf auth login`"
            )
        if isinstance(exc, RepositoryNotFoundError):
            return HubNotFound(f"repository {repo_id} was not found on the Hub (or it is private)")
        if isinstance(exc, RevisionNotFoundError):
            return HubNotFound(f"{repo_id} has no such revision")
        if isinstance(exc, RemoteEntryNotFoundError):
            return HubNotFound(f"{filename or 'the file'} was not found in {repo_id}")
        if isinstance(exc, HfHubHTTPError) and exc.response is not None:
            status = exc.response.status_code
            phrase = exc.response.reason_phrase or ""
            if status == 404:
                return HubNotFound(f"{what} was not found on the Hub (HTTP 404)")
            later = "; try again later" if status >= 500 or status == 429 else ""
            return HubError(f"the Hub answered HTTP {status} {phrase} while {action}{later}")
        if isinstance(exc, FileMetadataError):
            return HubError(f"{self.endpoint} does not behave like the Hugging Face Hub: {exc}")
        return None

    def request_headers(self, url: str) -> dict[str, str]:
        """Headers for a GET: the user agent always, the token only for the Hub's own host."""
        headers = build_hf_headers(token=self.token)
        if urlparse(url).netloc != urlparse(self.endpoint).netloc:
            headers.pop("authorization", None)  # never send the token to a CDN
        return headers

    # -- search and listing --------------------------------------------------------------------
    def search(self, query: str, *, limit: int = 30) -> list[RepoSummary]:
        """GGUF repos whose name contains ``query``, most downloaded first."""
        self.ensure_online()
        action = f"searching for {query!r}"
        with self._errors(action):
            found = self.api.list_models(
                search=query.strip() or None, filter="gguf", sort="downloads", limit=limit
            )
            return [
                RepoSummary(m.id, m.downloads, m.likes, bool(m.gated))
                for m in found
                if isinstance(m.id, str)
            ]

    def list_models(self, repo_id: str, revision: str | None = None) -> list[RemoteModel]:
        """The GGUF models in a repo (with sizes and LFS checksums), smallest first."""
        self.ensure_online()
        with self._errors(f"listing the files of {repo_id}", repo_id):
            info = self.api.model_info(
                repo_id, revision=revision, files_metadata=True, timeout=self.timeout
            )
            commit = info.sha or revision
            files = [
                RemoteFile(s.rfilename, s.size, s.lfs.sha256 if s.lfs else None)
                for s in info.siblings or []
            ]
            if any(f.size is None for f in files if f.path.lower().endswith(".gguf")):
                files = self._tree_files(repo_id, commit)
        return group_gguf_files(repo_id, files, commit)

    def _tree_files(self, repo_id: str, revision: str | None) -> list[RemoteFile]:
        """File sizes and checksums from the tree listing (for mirrors without blob info)."""
        out: list[RemoteFile] = []
        for entry in self.api.list_repo_tree(repo_id, recursive=True, revision=revision):
            size = getattr(entry, "size", None)
            if size is None:
                continue  # a folder
            lfs = getattr(entry, "lfs", None)
            out.append(RemoteFile(entry.path, size, lfs.sha256 if lfs else None))
        return out

    # -- single files --------------------------------------------------------------------------
    def file_metadata(
        self, repo_id: str, filename: str, revision: str | None = None
    ) -> RemoteFileMeta:
        """HEAD the file's resolve URL: size, checksum, commit and where to download from."""
        self.ensure_online()
        url = hf_hub_url(repo_id, filename, revision=revision, endpoint=self.endpoint)
        with self._errors(f"looking up {filename}", repo_id, filename):
            meta = get_hf_file_metadata(url, token=self.token, timeout=self.timeout)
        return RemoteFileMeta(
            repo_id=repo_id,
            filename=filename,
            url=meta.location,
            size=meta.size,
            etag=meta.etag,
            commit=meta.commit_hash,
        )

    def read_range(self, meta: RemoteFileMeta, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of a file (also correct when a server ignores Range)."""
        headers = self.request_headers(meta.url)
        headers["Range"] = f"bytes={start}-{end - 1}"
        headers["Accept-Encoding"] = "identity"
        out = bytearray()
        with (
            self._errors(f"reading {meta.filename}", meta.repo_id, meta.filename),
            http_stream_backoff(
                "GET",
                meta.url,
                headers=headers,
                timeout=self.timeout,
                max_retries=2,
                base_wait_time=0.5,
                max_wait_time=2,
                retry_on_status_codes=(429, 500, 502, 503, 504),
            ) as response,
        ):
            hf_raise_for_status(response)
            skip = start if response.status_code == 200 else 0  # Range ignored: whole file
            for chunk in response.iter_bytes(_STREAM_CHUNK):
                if skip:
                    cut = min(skip, len(chunk))
                    chunk, skip = chunk[cut:], skip - cut
                out += chunk
                if len(out) >= end - start:
                    break
        return bytes(out[: end - start])

    def read_header(
        self,
        repo_id: str,
        filename: str,
        revision: str | None = None,
        *,
        max_bytes: int = HEADER_MAX_BYTES,
    ) -> RemoteHeader:
        """Parse a remote GGUF file's header from its first bytes (range requests, growing)."""
        meta = self.file_metadata(repo_id, filename, revision)
        size = meta.size
        name = PurePosixPath(filename).name
        data = bytearray()
        want = HEADER_FIRST_READ if size is None else min(HEADER_FIRST_READ, size)
        while True:
            start = len(data)
            chunk = self.read_range(meta, start, want)
            data += chunk
            if size is None and len(data) < want:
                size = len(data)  # the server had no more: that is the whole file
            try:
                info = parse_gguf_prefix(data, name=name, file_size=size)
            except NeedMoreData as e:
                if len(data) >= max_bytes:
                    raise HubError(
                        f"{name}: the GGUF header is larger than {max_bytes >> 20} MiB; "
                        "not reading further"
                    ) from None
                if not chunk:
                    raise HubError(
                        f"{name}: the Hub sent no more data after {len(data):,} bytes"
                    ) from None
                want = max(e.needed, int(len(data) * HEADER_GROWTH))
                want = min(want, max_bytes) if size is None else min(want, size, max_bytes)
                continue
            except GGUFError as e:
                raise HubError(f"{repo_id}/{filename} is not a usable GGUF file: {e}") from None
            return RemoteHeader(info, len(data), meta)


def _connect_reason(exc: BaseException) -> str:
    text = _short(exc).lower()
    if "refused" in text:
        return "connection refused"
    if "name or service" in text or "nodename" in text or "getaddrinfo" in text:
        return "the host name cannot be resolved"
    if "timed out" in text or isinstance(exc, httpx2.TimeoutException):
        return "no answer"
    if "network is unreachable" in text or "no route" in text:
        return "no network route"
    return _short(exc)
