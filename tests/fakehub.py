"""A fake Hugging Face Hub on 127.0.0.1 for tests, driven through the real huggingface_hub client.

It speaks the endpoints huggingface_hub uses for what SpecChat does:

    GET  /api/models?search=&filter=&sort=&limit=           model search
    GET  /api/models/{repo}[/revision/{rev}][?blobs=true]   model info (siblings, sizes, LFS)
    GET  /api/models/{repo}/tree/{rev}[/{path}]             tree listing
    HEAD /{repo}/resolve/{rev}/{file}                       metadata: ETag, X-Repo-Commit,
    GET  /{repo}/resolve/{rev}/{file}                       X-Linked-Size, X-Linked-Etag; Range

Files are served from disk in chunks (a model file is never loaded into memory), errors carry
the Hub's ``X-Error-Code`` headers, and faults can be injected per file: an HTTP status, a
connection cut after N bytes, corrupted bytes, or a pause after N bytes until ``release()``.
``GGUF`` test files come from :func:`write_tiny_gguf` (the ``gguf`` package's GGUFWriter).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

# Best effort: only effective when huggingface_hub has not been imported yet.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")

import gguf  # noqa: E402
import numpy as np  # noqa: E402

SERVE_CHUNK = 64 << 10
_RANGE_RE = re.compile(r"bytes=(\d*)-(\d*)$")


# ---------------------------------------------------------------------------------------------
# Test models


def make_vocab(n_words: int = 400, word: str = "Ġword") -> tuple[list[str], list[int]]:
    """256 byte tokens, ``n_words`` ordinary words, then three control tokens."""
    tokens = [f"<0x{i:02X}>" for i in range(256)] + [f"{word}{i}" for i in range(n_words)]
    types = [int(gguf.TokenType.BYTE)] * 256 + [int(gguf.TokenType.NORMAL)] * n_words
    tokens += ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types += [int(gguf.TokenType.CONTROL)] * 3
    return tokens, types


def write_tiny_gguf(
    path: Path,
    *,
    n_words: int = 400,
    word: str = "Ġword",
    vocab_type: str = "gpt2",
    n_layers: int = 2,
    weight_bytes: int = 1 << 20,
    seed: int = 0,
    name: str = "Tiny Test Model",
    file_type: gguf.LlamaFileType = gguf.LlamaFileType.ALL_F32,
    split: tuple[int, int] | None = None,
) -> Path:
    """A small but complete GGUF model (tokenizer, BOS/EOS, a few f32 tensors).

    ``weight_bytes`` sets the size of one extra tensor, to make downloads take several chunks.
    ``split=(index, count)`` writes one part of a split model (index 1 holds the tokenizer).
    """
    n_embd = 16
    w = gguf.GGUFWriter(str(path), "qwen2")
    tokens, types = make_vocab(n_words, word)
    if split is None or split[0] == 1:
        w.add_name(name)
        w.add_context_length(4096)
        w.add_block_count(n_layers)
        w.add_embedding_length(n_embd)
        w.add_feed_forward_length(4 * n_embd)
        w.add_head_count(4)
        w.add_head_count_kv(2)
        w.add_file_type(file_type)
        w.add_tokenizer_model(vocab_type)
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_bos_token_id(len(tokens) - 3)
        w.add_eos_token_id(len(tokens) - 1)
        w.add_add_bos_token(False)
    if split is not None:
        w.add_uint16("split.no", split[0] - 1)
        w.add_uint16("split.count", split[1])
        w.add_int32("split.tensors.count", 2 * split[1])
    rng = np.random.default_rng(seed)
    prefix = f"p{split[0]}." if split else ""
    w.add_tensor(f"{prefix}token_embd.weight", rng.random((len(tokens), n_embd), np.float32))
    n = max(16, weight_bytes // 4 // 16 * 16)
    w.add_tensor(f"{prefix}blk.0.ffn_up.weight", rng.random((n // 16, 16), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# The Hub's content


@dataclass
class HubFile:
    path: str
    source: Path
    sha256: str | None = None  # computed on first use unless given
    lfs: bool = True

    @property
    def size(self) -> int:
        return self.source.stat().st_size

    def checksum(self) -> str:
        if self.sha256 is None:
            self.sha256 = sha256_of(self.source)
        return self.sha256

    def git_oid(self) -> str:
        h = hashlib.sha1(f"blob {self.size}\0".encode(), usedforsecurity=False)
        with open(self.source, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        return h.hexdigest()


@dataclass
class Repo:
    repo_id: str
    downloads: int = 0
    likes: int = 0
    tags: list[str] = field(default_factory=lambda: ["gguf"])
    files: dict[str, HubFile] = field(default_factory=dict)
    blobs_in_info: bool = True  # like huggingface.co; False: a mirror without blob info

    @property
    def sha(self) -> str:
        return hashlib.sha1(self.repo_id.encode(), usedforsecurity=False).hexdigest()


@dataclass
class Fault:
    kind: str  # "status", "cut", "corrupt", "hold"
    status: int = 500
    after: int = 0  # "cut"/"hold": absolute file offset at which to act
    times: int | None = 1  # None: every time
    methods: tuple[str, ...] = ("GET",)
    skip: int = 0  # let this many matching requests pass first


@dataclass
class Request:
    method: str
    path: str
    query: str
    range: str | None
    status: int = 0
    sent: int = 0  # body bytes


# ---------------------------------------------------------------------------------------------
# Server


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (a cancelled download) is normal here; anything else not."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeHub:
    """Start with ``with FakeHub() as hub:`` (or ``start()``/``stop()``); ``hub.endpoint``."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.faults: dict[tuple[str, str], list[Fault]] = {}
        self.log: list[Request] = []
        self.lock = threading.Lock()
        self._release = threading.Event()
        self.holding = threading.Event()  # set while a response is paused by a "hold" fault
        self.chunk_delay = 0.0  # seconds between body chunks (makes progress visible)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> FakeHub:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.hub = self  # type: ignore[attr-defined]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.05,), name="fakehub", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # -- content --------------------------------------------------------------------------------
    def add_repo(self, repo_id: str, **kwargs: Any) -> Repo:
        repo = self.repos.get(repo_id) or Repo(repo_id, **kwargs)
        self.repos[repo_id] = repo
        return repo

    def add_file(
        self,
        repo_id: str,
        path: str,
        source: Path,
        *,
        sha256: str | None = None,
        lfs: bool = True,
    ) -> HubFile:
        f = HubFile(path, Path(source), sha256, lfs)
        self.add_repo(repo_id).files[path] = f
        return f

    # -- faults ---------------------------------------------------------------------------------
    def _fault(self, repo_id: str, path: str, fault: Fault) -> None:
        with self.lock:
            self.faults.setdefault((repo_id, path), []).append(fault)

    def fail(
        self,
        repo_id: str,
        path: str,
        status: int = 500,
        *,
        times: int | None = 1,
        methods: Sequence[str] = ("GET",),
        skip: int = 0,
    ) -> None:
        """Answer ``times`` requests for the file with ``status`` (None: all), after letting
        ``skip`` requests pass."""
        fault = Fault("status", status, times=times, methods=tuple(methods), skip=skip)
        self._fault(repo_id, path, fault)

    def cut_after(self, repo_id: str, path: str, offset: int, *, times: int | None = 1) -> None:
        """Close the connection once the file's bytes up to ``offset`` have been sent."""
        self._fault(repo_id, path, Fault("cut", after=offset, times=times))

    def corrupt(self, repo_id: str, path: str, *, times: int | None = None) -> None:
        """Flip bits in the middle of the file (headers still announce the right checksum)."""
        self._fault(repo_id, path, Fault("corrupt", times=times))

    def hold_after(self, repo_id: str, path: str, offset: int, *, times: int | None = 1) -> None:
        """Pause the response after ``offset`` bytes of the file until :meth:`release`."""
        self._release.clear()
        self._fault(repo_id, path, Fault("hold", after=offset, times=times))

    def release(self) -> None:
        self._release.set()

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()

    def _take_faults(self, repo_id: str, path: str, method: str) -> list[Fault]:
        with self.lock:
            faults = self.faults.get((repo_id, path), [])
            taken = []
            for f in faults:
                if method not in f.methods:
                    continue
                if f.skip > 0:
                    f.skip -= 1
                    continue
                taken.append(f)
            for f in taken:
                if f.times is not None:
                    f.times -= 1
            self.faults[(repo_id, path)] = [f for f in faults if f.times is None or f.times > 0]
            return taken

    # -- inspection -----------------------------------------------------------------------------
    def requests(self, method: str | None = None, contains: str = "") -> list[Request]:
        with self.lock:
            return [
                r
                for r in self.log
                if (method is None or r.method == method) and contains in unquote(r.path)
            ]

    def bytes_sent(self, repo_id: str, path: str) -> int:
        return sum(
            r.sent for r in self.requests("GET", f"/{repo_id}/resolve/") if r.path.endswith(path)
        )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeHub/1.0"

    @property
    def hub(self) -> FakeHub:
        return self.server.hub  # type: ignore[attr-defined, no-any-return]

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_GET(self) -> None:
        self._dispatch("GET")

    # -- plumbing -------------------------------------------------------------------------------
    def _dispatch(self, method: str) -> None:
        url = urlparse(self.path)
        self.request_log = Request(method, url.path, url.query, self.headers.get("Range"))
        with self.hub.lock:
            self.hub.log.append(self.request_log)
        query = parse_qs(url.query)
        path = unquote(url.path)
        try:
            if path in ("", "/"):
                self._send_json({"ok": True}, method=method)
            elif path == "/api/models":
                self._search(query, method)
            elif path.startswith("/api/models/"):
                self._api_model(path.removeprefix("/api/models/"), query, method)
            elif "/resolve/" in path:
                self._resolve(path.lstrip("/"), method)
            else:
                self._error(404, "Not found", method=method)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send_json(
        self,
        data: Any,
        status: int = 200,
        headers: dict[str, str] | None = None,
        method: str = "GET",
    ) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.request_log.status = status
        if method != "HEAD":
            self.wfile.write(body)
            self.request_log.sent = len(body)

    def _error(
        self, status: int, message: str, code: str | None = None, method: str = "GET", **extra: str
    ) -> None:
        headers = {"X-Error-Message": message, **extra}
        if code:
            headers["X-Error-Code"] = code
        self._send_json({"error": message}, status, headers, method)

    def _repo(self, repo_id: str, method: str) -> Repo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "Repository not found", "RepoNotFound", method)
        return repo

    # -- API --------------------------------------------------------------------------------------
    def _search(self, query: dict[str, list[str]], method: str) -> None:
        search = (query.get("search") or [""])[0].lower()
        filters = query.get("filter") or []
        limit = int((query.get("limit") or ["1000"])[0])
        found = [
            r
            for r in self.hub.repos.values()
            if search in r.repo_id.lower() and all(f in r.tags for f in filters)
        ]
        found.sort(key=lambda r: -r.downloads)
        self._send_json(
            [
                {
                    "_id": r.sha[:24],
                    "id": r.repo_id,
                    "modelId": r.repo_id,
                    "likes": r.likes,
                    "downloads": r.downloads,
                    "private": False,
                    "tags": r.tags,
                    "library_name": "gguf",
                    "createdAt": "2024-09-19T00:00:00.000Z",
                }
                for r in found[:limit]
            ],
            method=method,
        )

    def _api_model(self, rest: str, query: dict[str, list[str]], method: str) -> None:
        parts = rest.split("/")
        repo = self._repo("/".join(parts[:2]), method)
        if repo is None:
            return
        tail = parts[2:]
        if tail and tail[0] == "tree" and len(tail) >= 2:
            if not self._revision_ok(repo, tail[1], method):
                return
            self._tree(repo, "/".join(tail[2:]), method)
            return
        if tail and (tail[0] != "revision" or len(tail) < 2):
            self._error(404, "Not found", method=method)
            return
        if tail and not self._revision_ok(repo, tail[1], method):
            return
        blobs = (query.get("blobs") or ["false"])[0].lower() == "true" and repo.blobs_in_info
        siblings = []
        for f in repo.files.values():
            entry: dict[str, Any] = {"rfilename": f.path}
            if blobs:
                entry["size"] = f.size
                entry["blobId"] = f.git_oid() if not f.lfs else f.checksum()[:40]
                if f.lfs:
                    entry["lfs"] = {"sha256": f.checksum(), "size": f.size, "pointerSize": 134}
            siblings.append(entry)
        self._send_json(
            {
                "_id": repo.sha[:24],
                "id": repo.repo_id,
                "modelId": repo.repo_id,
                "sha": repo.sha,
                "private": False,
                "gated": False,
                "disabled": False,
                "downloads": repo.downloads,
                "likes": repo.likes,
                "tags": repo.tags,
                "library_name": "gguf",
                "lastModified": "2024-09-19T00:00:00.000Z",
                "siblings": siblings,
            },
            method=method,
        )

    def _tree(self, repo: Repo, folder: str, method: str) -> None:
        entries: list[dict[str, Any]] = []
        folders: set[str] = set()
        for f in repo.files.values():
            if folder and not f.path.startswith(folder + "/"):
                continue
            parent = f.path.rsplit("/", 1)[0] if "/" in f.path else ""
            if parent and parent not in folders:
                folders.add(parent)
                entries.append({"type": "directory", "oid": repo.sha, "size": 0, "path": parent})
            entry: dict[str, Any] = {
                "type": "file",
                "oid": f.git_oid() if not f.lfs else f.checksum()[:40],
                "size": f.size,
                "path": f.path,
            }
            if f.lfs:
                entry["lfs"] = {"oid": f.checksum(), "size": f.size, "pointerSize": 134}
            entries.append(entry)
        self._send_json(entries, method=method)

    def _revision_ok(self, repo: Repo, revision: str, method: str) -> bool:
        if unquote(revision) in ("main", repo.sha):
            return True
        self._error(404, "Invalid rev id", "RevisionNotFound", method)
        return False

    # -- files ------------------------------------------------------------------------------------
    def _resolve(self, path: str, method: str) -> None:
        repo_part, _, rest = path.partition("/resolve/")
        repo = self._repo(repo_part, method)
        if repo is None:
            return
        revision, _, file_path = rest.partition("/")
        if not self._revision_ok(repo, revision, method):
            return
        f = repo.files.get(file_path)
        if f is None:
            self._error(
                404, "Entry not found", "EntryNotFound", method, **{"X-Repo-Commit": repo.sha}
            )
            return
        faults = self.hub._take_faults(repo.repo_id, file_path, method)
        for fault in faults:
            if fault.kind == "status":
                self._error(fault.status, f"injected HTTP {fault.status}", method=method)
                return
        size = f.size
        start, end = 0, size - 1
        status = 200
        want = self.headers.get("Range")
        if want:
            m = _RANGE_RE.match(want.strip())
            if m is None or (not m[1] and not m[2]):
                self._error(416, "Bad range", method=method, **{"Content-Range": f"bytes */{size}"})
                return
            if m[1]:
                start = int(m[1])
                end = min(int(m[2]), size - 1) if m[2] else size - 1
            else:  # suffix range: the last N bytes
                start = max(0, size - int(m[2]))
            if start >= size or start > end:
                self._error(
                    416,
                    "Range not satisfiable",
                    method=method,
                    **{"Content-Range": f"bytes */{size}"},
                )
                return
            status = 206
        etag = f.checksum() if f.lfs else f.git_oid()
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{etag}"')
        self.send_header("X-Repo-Commit", repo.sha)
        if f.lfs:
            self.send_header("X-Linked-Etag", f'"{etag}"')
            self.send_header("X-Linked-Size", str(size))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        self.request_log.status = status
        if method == "HEAD":
            return
        self._send_body(f, start, end + 1, faults)

    def _send_body(self, f: HubFile, start: int, stop: int, faults: list[Fault]) -> None:
        cut = min((x.after for x in faults if x.kind == "cut"), default=None)
        hold = min((x.after for x in faults if x.kind == "hold"), default=None)
        corrupt = any(x.kind == "corrupt" for x in faults)
        flip_at = f.size // 2
        pos = start
        with open(f.source, "rb") as src:
            src.seek(start)
            for limit in _boundaries(start, stop, (cut, hold)):
                while pos < limit:
                    chunk = src.read(min(SERVE_CHUNK, limit - pos))
                    if not chunk:
                        return
                    if corrupt and pos <= flip_at < pos + len(chunk):
                        buf = bytearray(chunk)
                        buf[flip_at - pos] ^= 0xFF
                        chunk = bytes(buf)
                    self.wfile.write(chunk)
                    pos += len(chunk)
                    self.request_log.sent += len(chunk)
                    if self.hub.chunk_delay:
                        time.sleep(self.hub.chunk_delay)
                if pos == cut:
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if pos == hold:
                    self.wfile.flush()
                    self.hub.holding.set()
                    self.hub._release.wait(30)
                    self.hub.holding.clear()


def _boundaries(start: int, stop: int, marks: tuple[int | None, ...]) -> Iterator[int]:
    """Offsets where serving pauses to act on a fault, then the end."""
    yield from sorted(m for m in marks if m is not None and start < m < stop)
    yield stop


# ---------------------------------------------------------------------------------------------
# Repos shaped like 2026's: a target with an mtp-*.gguf sidecar, a Gemma 4 target with an
# assistant repo, NextN layers inside a model, a repo holding only a DFlash drafter


def write_arch_gguf(
    path: Path,
    arch: str,
    *,
    n_embd: int = 16,
    n_layers: int = 2,
    nextn: int = 0,
    trunk: bool = True,
    embd_out: int | None = None,
    n_words: int = 400,
    tokenizer: bool = True,
    weight_bytes: int = 64 << 10,
    seed: int = 0,
    name: str = "",
) -> Path:
    """A small GGUF whose header looks like one of ``arch``: ``nextn`` NextN layers (the last
    ``nextn`` blocks, with ``blk.N.nextn.*`` tensors), ``trunk=False`` for a sidecar holding
    only them, ``embd_out`` for a Gemma 4 assistant's ``embedding_length_out``."""
    w = gguf.GGUFWriter(str(path), arch)
    tokens, types = make_vocab(n_words)
    w.add_name(name or path.stem)
    w.add_uint32(f"{arch}.context_length", 4096)
    w.add_uint32(f"{arch}.block_count", n_layers + nextn)
    w.add_uint32(f"{arch}.embedding_length", n_embd)
    w.add_uint32(f"{arch}.feed_forward_length", 4 * n_embd)
    w.add_uint32(f"{arch}.attention.head_count", 4)
    w.add_uint32(f"{arch}.attention.head_count_kv", 2)
    if nextn:
        w.add_uint32(f"{arch}.nextn_predict_layers", nextn)
    if embd_out is not None:
        w.add_uint32(f"{arch}.embedding_length_out", embd_out)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if tokenizer:
        w.add_tokenizer_model("gpt2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_bos_token_id(len(tokens) - 3)
        w.add_eos_token_id(len(tokens) - 1)
    rng = np.random.default_rng(seed)
    if trunk:
        w.add_tensor("token_embd.weight", rng.random((len(tokens), n_embd), np.float32))
        for i in range(n_layers):
            w.add_tensor(f"blk.{i}.attn_norm.weight", rng.random((n_embd,), np.float32))
        n = max(16, weight_bytes // 4 // 16 * 16)
        w.add_tensor("blk.0.ffn_up.weight", rng.random((n // 16, 16), np.float32))
    for i in range(n_layers, n_layers + nextn):
        w.add_tensor(f"blk.{i}.nextn.eh_proj.weight", rng.random((n_embd, 2 * n_embd), np.float32))
        w.add_tensor(
            f"blk.{i}.nextn.embed_tokens.weight", rng.random((len(tokens), n_embd), np.float32)
        )
    if embd_out is not None:
        w.add_tensor("token_embd.weight", rng.random((len(tokens), n_embd), np.float32))
        w.add_tensor("nextn.post_projection.weight", rng.random((embd_out, n_embd), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


QWEN38 = "test/Qwen3.8-27B-GGUF"
QWEN38_TARGET = "Qwen3.8-27B-Q4_K_M.gguf"
QWEN38_MTP = "mtp-Qwen3.8-27B-Q4_0.gguf"
QWEN36 = "test/Qwen3.6-27B-MTP-GGUF"
QWEN36_TARGET = "Qwen3.6-27B-Q4_K_M.gguf"
GEMMA4 = "test/gemma-4-E4B-it-qat-GGUF"
GEMMA4_TARGET = "gemma-4-E4B-it-qat-Q4_K_M.gguf"
GEMMA4_ASSISTANT_REPO = "test/gemma-4-E4B-it-assistant-GGUF"
GEMMA4_ASSISTANT = "gemma-4-E4B-it-assistant-Q8_0.gguf"
DFLASH = "test/Qwen3.8-27B-DFlash-GGUF"
DFLASH_FILE = "dflash-Qwen3.8-27B.gguf"
WRONG = "test/Qwen3.8-27B-Wrong-MTP-GGUF"  # its mtp-*.gguf is for another architecture
WRONG_MTP = "mtp-Qwen3.8-27B-Q8_0.gguf"


def write_2026_files(folder: Path) -> dict[str, Path]:
    """The files of :func:`add_2026_repos`, written once (by file name)."""
    folder.mkdir(parents=True, exist_ok=True)
    return {
        QWEN38_TARGET: write_arch_gguf(folder / QWEN38_TARGET, "qwen35", weight_bytes=2 << 20),
        QWEN38_MTP: write_arch_gguf(folder / QWEN38_MTP, "qwen35", nextn=1, trunk=False),
        QWEN36_TARGET: write_arch_gguf(folder / QWEN36_TARGET, "qwen35", nextn=1, seed=2),
        GEMMA4_TARGET: write_arch_gguf(folder / GEMMA4_TARGET, "gemma4", n_embd=32, seed=3),
        GEMMA4_ASSISTANT: write_arch_gguf(
            folder / GEMMA4_ASSISTANT,
            "gemma4-assistant",
            n_layers=0,
            nextn=1,
            trunk=False,
            embd_out=32,
        ),
        DFLASH_FILE: write_arch_gguf(folder / DFLASH_FILE, "dflash", tokenizer=False, seed=4),
        WRONG_MTP: write_arch_gguf(folder / WRONG_MTP, "glm4moe", nextn=1, trunk=False),
    }


def add_2026_repos(hub: FakeHub, files: dict[str, Path]) -> None:
    """Serve repos shaped like the real ones (see the constants above)."""
    hub.add_repo(QWEN38, downloads=5000)
    hub.add_file(QWEN38, QWEN38_TARGET, files[QWEN38_TARGET])
    hub.add_file(QWEN38, QWEN38_MTP, files[QWEN38_MTP])
    hub.add_repo(QWEN36, downloads=3000)
    hub.add_file(QWEN36, QWEN36_TARGET, files[QWEN36_TARGET])
    hub.add_repo(GEMMA4, downloads=4000)
    hub.add_file(GEMMA4, GEMMA4_TARGET, files[GEMMA4_TARGET])
    hub.add_repo(GEMMA4_ASSISTANT_REPO, downloads=100)
    hub.add_file(GEMMA4_ASSISTANT_REPO, GEMMA4_ASSISTANT, files[GEMMA4_ASSISTANT])
    hub.add_repo(DFLASH, downloads=50)
    hub.add_file(DFLASH, DFLASH_FILE, files[DFLASH_FILE])
    hub.add_repo(WRONG, downloads=10)
    hub.add_file(WRONG, QWEN38_TARGET, files[QWEN38_TARGET])
    hub.add_file(WRONG, WRONG_MTP, files[WRONG_MTP])
