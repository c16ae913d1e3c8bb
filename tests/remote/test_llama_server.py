"""The remote engine against a real llama-server (built from the vendored llama.cpp, CPU, the
default pair): streaming, the draft figures reaching the stats, stop, a server killed
mid-reply, wrong key, wrong URL, the n-gram drafter, a comparison across two endpoints and
the CLI. Replies are short (a few dozen tokens, a 1024-token context) to keep CI fast."""

from __future__ import annotations

import json
import threading

import pytest
from llamaserver import API_KEY, free_port

from specchat.cli.main import main
from specchat.core.bench.compare import run_comparison
from specchat.core.engines.remote import RemoteEngine
from specchat.core.engines.remote_connect import check_connection
from specchat.core.engines.remote_pair import RemotePair
from specchat.core.params import GenerationParams
from specchat.core.remote import (
    RemoteAuthError,
    RemoteConfig,
    RemoteConnectError,
    RemoteHTTPError,
    ServerKind,
)
from specchat.core.reply import Reply
from specchat.core.types import FinishReason, Mode

CODE = [{"role": "user", "content": "Write a Python function that returns the sum of a list."}]
REPEAT_TEXT = (
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs. "
    "How vexingly quick daft zebras jump."
)
REPEAT = [{"role": "user", "content": f"Repeat this text exactly, twice:\n\n{REPEAT_TEXT}"}]


def greedy(n: int) -> GenerationParams:
    return GenerationParams(max_tokens=n, temperature=0.0, seed=1)


@pytest.fixture(scope="module")
def engine(draft_server):
    with RemoteEngine(RemoteConfig(draft_server.url, api_key=API_KEY)) as eng:
        yield eng


def test_what_the_server_says_about_itself(engine) -> None:
    info = engine.info
    assert info.kind is ServerKind.LLAMA_CPP
    # a fresh llama-server says that its slot speculates, and names the drafting (in /slots)
    # only once the slot has served a request
    assert info.speculation in ("speculative", "draft-simple") and info.mode is Mode.DRAFT
    # this llama.cpp compiles per-request speculative settings out: the server decides
    assert not info.per_request and engine.speculation_control == "server"
    assert info.metrics and info.n_ctx == 1024 and engine.has_draft


def test_streamed_reply_with_the_servers_draft_figures(engine) -> None:
    events = list(engine.generate(CODE, greedy(32), "draft"))
    reply = Reply.collect(events)
    st = reply.final_stats
    assert reply.text.strip() and reply.finish_reason in (FinishReason.LENGTH, FinishReason.STOP)
    assert len(events) > 3  # streamed token by token, not in one piece
    assert st.tokens == 32 or reply.finish_reason is FinishReason.STOP
    assert st.mode == "draft" and st.figures == "server-live"
    # timings.draft_n / draft_n_accepted reached the stats, while streaming and at the end
    assert st.drafted > 0 and 0 <= st.accepted <= st.drafted
    assert any(ev.stats.drafted > 0 for ev in events[:-1])
    assert st.verify_steps > 0 and st.verify_tokens == st.accepted + st.verify_steps
    assert sum(st.draft_pos_proposed) == st.drafted
    assert sum(st.draft_pos_accepted) == st.accepted
    if st.accepted:
        assert reply.spans, "accepted draft tokens should be marked in the text"
    assert 0 < st.ttft_s <= st.elapsed_s and st.prefill_s > 0
    assert engine.info.speculation == "draft-simple"  # learnt from /slots after the reply


def test_stop_mid_reply_and_the_server_serves_the_next(engine) -> None:
    cancel = threading.Event()
    events = []
    for ev in engine.generate(CODE, greedy(400), "draft", cancel):
        events.append(ev)
        if sum(1 for e in events if e.text) == 3:
            cancel.set()
    assert events[-1].finish_reason is FinishReason.CANCELLED
    assert events[-1].stats.tokens < 400
    after = Reply.collect(engine.generate(CODE, greedy(4), "draft"))
    assert after.finish_reason is FinishReason.LENGTH and after.text


def test_wrong_key_missing_key_and_wrong_urls(draft_server, engine) -> None:
    with pytest.raises(RemoteAuthError, match="refused the API key"):
        check_connection(RemoteConfig(draft_server.url, api_key="not-the-key"))
    with pytest.raises(RemoteAuthError, match="needs an API key"):
        check_connection(RemoteConfig(draft_server.url))
    # the chat endpoint refuses too (the probe is skipped: known server, wrong key)
    wrong = RemoteEngine(RemoteConfig(draft_server.url, api_key="nope"), info=engine.info)
    with wrong, pytest.raises(RemoteAuthError):
        list(wrong.generate(CODE, greedy(4)))
    with pytest.raises(RemoteHTTPError, match="404"):
        check_connection(RemoteConfig(draft_server.url + "/nothing-here", api_key=API_KEY))
    with pytest.raises(RemoteConnectError, match="cannot reach"):
        check_connection(RemoteConfig(f"http://127.0.0.1:{free_port()}", connect_timeout_s=3))


def test_server_killed_mid_reply_keeps_the_partial_text(doomed_server) -> None:
    with RemoteEngine(RemoteConfig(doomed_server.url)) as eng:
        events = []
        for ev in eng.generate(CODE, greedy(400), "draft"):
            events.append(ev)
            if sum(1 for e in events if e.text) == 3:
                doomed_server.proc.kill()
        reply = Reply.collect(events)
    assert reply.finish_reason is FinishReason.ERROR
    assert reply.text and reply.final_stats.tokens >= 3
    assert "partial reply is kept" in reply.final_stats.note


def test_ngram_drafting_server(llama_server_factory) -> None:
    server = llama_server_factory("ngram")
    try:
        with RemoteEngine(RemoteConfig(server.url)) as eng:
            assert eng.info.speculates
            reply = Reply.collect(eng.generate(REPEAT, greedy(48), "lookup"))
            assert eng.info.speculation == "ngram-simple" and eng.info.mode is Mode.LOOKUP
    finally:
        server.stop()
    st = reply.final_stats
    assert st.mode == "lookup" and st.figures == "server-live"
    assert st.drafted > 0 and st.accepted > 0  # the reply repeats the prompt: n-grams match
    assert REPEAT_TEXT[:20] in reply.text


def test_comparison_across_two_endpoints(draft_server, llama_server_factory) -> None:
    plain = llama_server_factory("plain")
    try:
        on = RemoteEngine(RemoteConfig(draft_server.url, api_key=API_KEY))
        off = RemoteEngine(RemoteConfig(plain.url))
        assert off.info.speculation == "none" and not off.has_draft
        with RemotePair(on, off) as pair:
            result = run_comparison(pair, CODE, greedy(16), "draft", rounds=1)
    finally:
        plain.stop()
    assert result.off.stats.mode == "off" and result.off.stats.drafted == 0
    assert result.on.stats.mode == "draft" and result.on.stats.drafted > 0
    assert result.off.text and result.on.text and not result.cancelled


def test_cli_generate_json_reports_the_servers_counts(draft_server, capsys, monkeypatch) -> None:
    monkeypatch.setenv("SPECCHAT_TEST_KEY", API_KEY)
    rc = main(
        ["generate", "--server", draft_server.url, "--api-key-env", "SPECCHAT_TEST_KEY",
         "--prompt", CODE[0]["content"], "--mode", "draft", "--max-tokens", "24", "--json"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    record = json.loads(out.strip().splitlines()[-1])
    assert record["figures"] == "server-live" and record["mode"] == "draft"
    assert record["drafted"] > 0 and record["accepted"] <= record["drafted"]
    assert API_KEY not in out
