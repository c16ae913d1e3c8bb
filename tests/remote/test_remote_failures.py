"""What the remote engine does when things go wrong, on a local fake server (fast): a stream
that stops, a stop request during a silent server, refused keys, wrong URLs, TLS."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from fakeserver import FakeServer, Route, fixture, self_signed_context, sse_chunks

from specchat.core.engines.remote import RemoteEngine
from specchat.core.engines.remote_connect import check_connection
from specchat.core.params import GenerationParams
from specchat.core.remote import (
    RemoteAuthError,
    RemoteConfig,
    RemoteConnectError,
    RemoteHTTPError,
    RemoteTLSError,
    normalize_base_url,
)
from specchat.core.reply import Reply
from specchat.core.types import EngineBusyError, FinishReason

MESSAGES = [{"role": "user", "content": "hi"}]
PARAMS = GenerationParams(max_tokens=16)


def _server(chat: Route, **extra: Route) -> FakeServer:
    routes: dict = {
        ("GET", "/v1/models"): Route(body=fixture("vllm_models.json")),
        ("POST", "/v1/chat/completions"): chat,
    }
    routes.update({("GET", path): r for path, r in extra.items()})
    return FakeServer(routes=routes).start()


@pytest.fixture
def servers():
    made: list[FakeServer] = []
    yield made
    for s in made:
        s.stop()


def test_urls_are_normalised_and_credentials_refused() -> None:
    assert normalize_base_url(" localhost:8080/v1/ ") == "http://localhost:8080"
    assert (
        normalize_base_url("HTTPS://h.example/llm/v1/chat/completions") == "https://h.example/llm"
    )
    for bad in ("ftp://h", "http://user:pw@h", "http://h:99999", "", "http://h/?q=1"):
        with pytest.raises(ValueError):
            normalize_base_url(bad)
    assert "secret" not in repr(RemoteConfig("http://h", api_key="secret"))


def test_a_stream_that_stops_keeps_the_partial_reply(servers) -> None:
    chunks = sse_chunks(fixture("vllm_stream.sse"))
    s = _server(Route(chunks=chunks, drop_after=4))
    servers.append(s)
    with RemoteEngine(RemoteConfig(s.url, use_metrics=False)) as engine:
        reply = Reply.collect(engine.generate(MESSAGES, PARAMS))
    assert reply.text == "def add(a, b):\n"
    assert reply.finish_reason is FinishReason.ERROR
    note = reply.final_stats.note
    assert "partial reply is kept" in note and "after 6 tokens" in note


def test_stop_while_the_server_is_silent_returns_at_once(servers) -> None:
    chunks = sse_chunks(fixture("vllm_stream.sse"))
    s = _server(Route(chunks=chunks, delay_s=2.0))
    servers.append(s)
    cancel = threading.Event()
    with RemoteEngine(RemoteConfig(s.url, use_metrics=False)) as engine:
        events = []
        for ev in engine.generate(MESSAGES, PARAMS, cancel=cancel):
            events.append(ev)
            if ev.text:
                threading.Timer(0.1, cancel.set).start()
        assert events[-1].finish_reason is FinishReason.CANCELLED
        # the next request is not blocked by the stopped one
        assert not engine._lock.locked()
    assert Reply.collect(events).text == "def"
    # the stop closed the connection: the server's next write failed instead of waiting
    # for the whole 2 s-per-chunk reply to be read


def test_one_reply_at_a_time(servers) -> None:
    s = _server(Route(chunks=sse_chunks(fixture("vllm_stream.sse")), delay_s=0.05))
    servers.append(s)
    with RemoteEngine(RemoteConfig(s.url, use_metrics=False)) as engine:
        first = engine.generate(MESSAGES, PARAMS)
        next(first)
        with pytest.raises(EngineBusyError):
            next(engine.generate(MESSAGES, PARAMS))
        first.close()
        assert Reply.collect(engine.generate(MESSAGES, PARAMS)).text.endswith("a + b")


def test_refused_key_and_missing_key_say_so(servers) -> None:
    denied = Route(401, '{"error": {"message": "Invalid API Key", "code": 401}}')
    s = FakeServer(routes={("GET", "/v1/models"): denied}).start()
    servers.append(s)
    with pytest.raises(RemoteAuthError, match="refused the API key .*Invalid API Key"):
        check_connection(RemoteConfig(s.url, api_key="wrong"))
    with pytest.raises(RemoteAuthError, match="needs an API key"):
        check_connection(RemoteConfig(s.url))
    _, _, _, headers = s.requests[0]
    assert headers.get("Authorization") == "Bearer wrong"


def test_wrong_urls(servers) -> None:
    s = FakeServer(routes={}).start()
    servers.append(s)
    with pytest.raises(RemoteHTTPError, match="not found"):
        check_connection(RemoteConfig(s.url + "/nothing"))
    port = s.url.rsplit(":", 1)[1]
    s.stop()
    servers.remove(s)
    with pytest.raises(RemoteConnectError, match="cannot reach"):
        check_connection(RemoteConfig(f"http://127.0.0.1:{port}", connect_timeout_s=2))


def test_tls_to_a_self_signed_server_is_refused(servers, tmp_path: Path) -> None:
    ctx = self_signed_context(tmp_path)
    if ctx is None:
        pytest.skip("neither the openssl command nor the cryptography package is available")
    s = FakeServer(routes={("GET", "/v1/models"): Route(body=fixture("vllm_models.json"))})
    s.tls = ctx
    servers.append(s.start())
    assert s.url.startswith("https://")
    with pytest.raises(RemoteTLSError, match="not trusted"):
        check_connection(RemoteConfig(s.url, connect_timeout_s=5))
    assert s.requests == []  # nothing was sent before the certificate was checked
    # trusting that certificate explicitly works: verification stays on, with one more CA
    info = check_connection(RemoteConfig(s.url, ca_file=str(tmp_path / "cert.pem")))
    assert info.model == "Qwen/Qwen2.5-Coder-7B-Instruct"
