"""The Hugging Face Hub as seen by SpecChat: find GGUF repos, list their model files, look up
a file's size and checksum, and read its GGUF header with HTTP range requests (a few megabytes
instead of the whole model; :mod:`specchat.core.hub.header`). The values and errors are in
:mod:`specchat.core.hub.values`.

Everything goes through `huggingface_hub` (its `HfApi`, its HTTP session and error types), so
``HF_ENDPOINT``, ``HF_TOKEN``, proxies and ``HF_HUB_OFFLINE`` behave as in every other HF tool.
Errors reach callers as :class:`HubError` (or its subclasses) with a message meant for users.

The endpoint is read when a :class:`HubClient` is made (``HF_ENDPOINT``, else the library's
default), and offline mode is checked on every call, so both can change while the app runs.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
from huggingface_hub.utils import build_hf_headers

from specchat.core.gguf.split_names import split_part
from specchat.core.hub import header as hub_header
from specchat.core.hub.header import HEADER_MAX_BYTES
from specchat.core.hub.values import (
    HubError,
    HubNotFound,
    HubOffline,
    RemoteFile,
    RemoteFileMeta,
    RemoteHeader,
    RemoteModel,
    RepoSummary,
    group_gguf_files,
    parse_quant,
)

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
    def translate_errors(
        self, action: str, repo_id: str = "", filename: str = ""
    ) -> Iterator[None]:
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
        with self.translate_errors(action):
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
        with self.translate_errors(f"listing the files of {repo_id}", repo_id):
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
        with self.translate_errors(f"looking up {filename}", repo_id, filename):
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
        return hub_header.read_range(self, meta, start, end)

    def read_header(
        self,
        repo_id: str,
        filename: str,
        revision: str | None = None,
        *,
        max_bytes: int = HEADER_MAX_BYTES,
    ) -> RemoteHeader:
        """Parse a remote GGUF file's header from its first bytes (range requests, growing)."""
        return hub_header.read_header(self, repo_id, filename, revision, max_bytes=max_bytes)


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
