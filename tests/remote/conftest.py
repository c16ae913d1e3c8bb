"""A real llama-server for the remote tests, built once from the llama.cpp vendored in the pinned
llama-cpp-python sdist (packaging/build-llama-server.sh caches the binary under pip's cache
directory, so only the first test run of a machine compiles it) and started on 127.0.0.1 with
the default model pair.

SPECCHAT_LLAMA_SERVER=/path/to/llama-server skips the build (any build of the same version).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeserver import FakeServer
from llamaserver import API_KEY, LlamaServer, ServerBuild, start_llama_server

_build: ServerBuild | None = None


def _can_build() -> bool:
    return sys.platform != "win32" and shutil.which("bash") is not None


@pytest.hookimpl(trylast=True)  # after -k / -m deselection
def pytest_collection_modifyitems(session, config, items) -> None:
    """Start building llama-server as soon as the session knows it will need it, so the
    compile overlaps the tests that run before the remote ones."""
    global _build
    wanted = any("llama_server_bin" in getattr(item, "fixturenames", ()) for item in items)
    if wanted and _build is None and not os.environ.get("SPECCHAT_LLAMA_SERVER") and _can_build():
        _build = ServerBuild()


def pytest_unconfigure(config) -> None:
    if _build is not None:
        _build.stop()


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    global _build
    given = os.environ.get("SPECCHAT_LLAMA_SERVER")
    if given:
        return Path(given)
    if not _can_build():
        pytest.skip("building llama-server needs bash (POSIX)")
    if _build is None:
        _build = ServerBuild()
    return _build.result()


@pytest.fixture(scope="session")
def llama_server_factory(llama_server_bin: Path, model_paths, tmp_path_factory):
    """start(kind, api_key=None): a llama-server with the default pair drafting ("draft") or
    the target alone with n-gram drafting ("ngram"); stopped at the end of the session."""
    target, draft = model_paths
    started: list[LlamaServer] = []

    def start(kind: str, api_key: str | None = None) -> LlamaServer:
        if kind == "draft":
            args = ["-m", str(target), "-md", str(draft), "--spec-type", "draft-simple",
                    "--spec-draft-n-max", "8"]  # fmt: skip
        elif kind == "ngram":
            args = ["-m", str(target), "--spec-type", "ngram-simple"]
        else:
            args = ["-m", str(target)]
        log = tmp_path_factory.mktemp(f"llama-server-{kind}") / "server.log"
        server = start_llama_server(llama_server_bin, args, log, api_key)
        started.append(server)
        return server

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="session")
def draft_server(llama_server_factory) -> LlamaServer:
    """The default pair, draft-simple, behind an API key (shared by the session)."""
    return llama_server_factory("draft", API_KEY)


@pytest.fixture
def doomed_server(llama_server_factory) -> Iterator[LlamaServer]:
    """A server of its own, for a test that kills it."""
    server = llama_server_factory("draft")
    yield server
    server.stop()


@pytest.fixture
def fake() -> Iterator:
    """Local fake OpenAI-compatible servers (loopback), each stopped after the test."""
    servers: list[FakeServer] = []

    def make(routes: dict) -> FakeServer:
        s = FakeServer(routes=routes).start()
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()
