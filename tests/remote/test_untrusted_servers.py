"""Issue 20: servers whose numbers and streams cannot be trusted, on local fake servers.

- impossible figures (llama-server `timings`, SGLang `meta_info`, `/metrics` counters) never
  reach the stats; the reply's text is kept and the note says what was dropped;
- a server that ignores `max_tokens` is cut at the client's own limit;
- a 200 answer that is not an event stream (or not JSON) is named by what it is;
- an endless event line is refused early, without being held in memory.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator

import pytest
from fakeserver import (
    FakeServer,
    Route,
    chat_chunk,
    endless_chunks,
    fixture,
    llama_routes,
    sse_chunks,
)

from specchat.cli.main import main
from specchat.core.engines.remote import RemoteEngine
from specchat.core.params import GenerationParams
from specchat.core.remote import RemoteConfig, RemoteProtocolError
from specchat.core.remote.sse import split_lines
from specchat.core.reply import Reply
from specchat.core.types import FinishReason

MESSAGES = [{"role": "user", "content": "hi"}]
MODEL = "Qwen/Qwen2.5-Coder-7B-Instruct"
WORDS = ["Hello", ",", " world", "!"]


def _llama_stream(timings: list[dict]) -> list[str]:
    """One piece per entry of `timings` (llama-server streams one token a chunk), then the
    finish and the end."""
    chunks = [chat_chunk(WORDS[i % len(WORDS)], timings=t) for i, t in enumerate(timings)]
    return chunks + [chat_chunk(finish="stop"), "data: [DONE]\n\n"]


def _reply(server: FakeServer, max_tokens: int = 32, **config) -> tuple[Reply, list]:
    with RemoteEngine(RemoteConfig(server.url, use_metrics=False, **config)) as engine:
        events = list(engine.generate(MESSAGES, GenerationParams(max_tokens=max_tokens), "draft"))
    return Reply.collect(events), events


# -- 1. impossible figures --------------------------------------------------------------------


def test_the_issues_timings_never_reach_the_stats(fake) -> None:
    """draft_n 3, draft_n_accepted 9999, predicted_n -7: was shown as acceptance 3333.0."""
    bad = {"prompt_n": 5, "prompt_ms": 4.0, "predicted_n": -7, "predicted_ms": 9.0,
           "draft_n": 3, "draft_n_accepted": 9999}  # fmt: skip
    server = fake(llama_routes(Route(chunks=_llama_stream([bad] * 4))))
    reply, events = _reply(server)
    st = reply.final_stats
    assert reply.text == "Hello, world!" and reply.finish_reason is FinishReason.STOP
    assert (st.drafted, st.accepted, st.verify_steps) == (0, 0, 0)
    assert st.acceptance_rate is None and st.figures == "none"
    assert st.draft_pos_proposed == [] and reply.spans == []
    assert st.tokens == 4  # the pieces, not the server's -7
    assert all(ev.stats.acceptance_rate is None for ev in events)  # never shown live either
    assert (
        "the server's draft figures are inconsistent (accepted 9999 of 3 drafted): not shown"
        in st.note
    )
    assert "token counts and times are inconsistent (predicted_n = -7, below zero)" in st.note
    assert "drafted nothing" not in st.note  # dropped is not "no drafting"


GOOD = {"prompt_n": 5, "prompt_ms": 4.0, "predicted_ms": 9.0}


@pytest.mark.parametrize(
    ("second", "said"),
    [
        ({"draft_n": 2, "draft_n_accepted": 1}, "draft_n went from 8 to 2"),
        ({"draft_n": 8, "draft_n_accepted": 3}, "draft_n_accepted went from 4 to 3"),
        ({}, "draft_n vanished"),
        ({"draft_n": "8", "draft_n_accepted": 4}, "draft_n = '8', not a number"),
        ({"draft_n": 8.5, "draft_n_accepted": 4}, "draft_n = 8.5, not a whole number"),
        ({"draft_n": float("nan"), "draft_n_accepted": 4}, "draft_n = nan, not a whole number"),
        ({"draft_n": True, "draft_n_accepted": 4}, "draft_n = True, not a number"),
        ({"draft_n": -8, "draft_n_accepted": 4}, "draft_n = -8, below zero"),
    ],
)
def test_draft_counters_that_go_backwards_or_are_not_numbers_are_dropped(
    fake, second: dict, said: str
) -> None:
    first = {**GOOD, "predicted_n": 1, "draft_n": 8, "draft_n_accepted": 4}
    then = {**GOOD, "predicted_n": 2, **second}
    server = fake(llama_routes(Route(chunks=_llama_stream([first, then, then]))))
    reply, events = _reply(server)
    st = reply.final_stats
    assert events[0].stats.drafted == 8  # plausible figures are shown until they are not
    assert reply.text == "Hello, world" and st.drafted == 0 and st.figures == "none"
    assert f"the server's draft figures are inconsistent ({said}): not shown" in st.note


def test_times_that_cannot_be_are_not_used(fake) -> None:
    first = {"prompt_n": 5, "prompt_ms": 4.0, "predicted_n": 1, "predicted_ms": 9.0}
    then = {"prompt_n": 5, "prompt_ms": -4.0, "predicted_n": 2, "predicted_ms": 1e308 * 10}
    server = fake(llama_routes(Route(chunks=_llama_stream([first, then]))))
    reply, _ = _reply(server)
    st = reply.final_stats
    assert "token counts and times are inconsistent (prompt_ms = -4.0)" in st.note
    assert st.prefill_s == 0.0 and st.llama_s == st.elapsed_s  # no server time believed
    assert st.tokens == 2


def test_usage_that_goes_backwards_is_not_used(fake) -> None:
    chunks = [
        chat_chunk("a", usage={"completion_tokens": 6, "prompt_tokens": 3}),
        chat_chunk("b", usage={"completion_tokens": 2, "prompt_tokens": 3}),
        chat_chunk(finish="stop"),
        "data: [DONE]\n\n",
    ]
    server = fake({
        ("GET", "/v1/models"): Route(body=fixture("vllm_models.json")),
        ("POST", "/v1/chat/completions"): Route(chunks=chunks),
    })  # fmt: skip
    reply, _ = _reply(server)
    st = reply.final_stats
    assert reply.text == "ab" and st.tokens == 2 and st.prompt_tokens == 0
    assert "(completion_tokens went from 6 to 2): not used" in st.note


def _sglang(fake, meta: dict) -> FakeServer:
    whole = json.loads(fixture("sglang_chat_meta.json"))
    whole["choices"][0]["meta_info"].update(meta)
    return fake({
        ("GET", "/v1/models"): Route(body=fixture("sglang_models.json")),
        ("GET", "/get_server_info"): Route(body=fixture("sglang_server_info.json")),
        ("POST", "/v1/chat/completions"): Route(body=json.dumps(whole)),
    })  # fmt: skip


@pytest.mark.parametrize(
    ("meta", "said"),
    [
        ({"spec_accept_token_num": 50, "spec_draft_token_num": 10}, "accepted 50 of 10 drafted"),
        ({"spec_accept_rate": 3.5}, "spec_accept_rate = 3.5, above 1"),
        ({"spec_verify_ct": 99}, "99 verification steps for 32 tokens"),
        ({"spec_verify_ct": -1}, "spec_verify_ct = -1, below zero"),
        ({"spec_num_correct_drafts_by_position": [5, 13]}, "position 1 accepted 13 times"),
    ],
)
def test_sglang_meta_info_that_cannot_be_is_not_shown(fake, meta: dict, said: str) -> None:
    reply, _ = _reply(_sglang(fake, meta), stream=False)
    st = reply.final_stats
    assert reply.text.startswith("def add(a, b):") and st.tokens == 32
    assert (st.drafted, st.accepted, st.figures) == (0, 0, "none")
    assert f"draft figures are inconsistent ({said}" in st.note
    assert "only without streaming" not in st.note


def _vllm_metrics(fake, after: str) -> FakeServer:
    before = fixture("vllm_metrics_before.txt")
    return fake({
        ("GET", "/v1/models"): Route(body=fixture("vllm_models.json")),
        ("GET", "/metrics"): [Route(body=before), Route(body=before), Route(body=after)],
        ("POST", "/v1/chat/completions"): Route(chunks=sse_chunks(fixture("vllm_stream.sse"))),
    })  # fmt: skip


ACCEPTED = f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="{MODEL}"}} '


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("240.0", "accepted 39 of 21 drafted"),  # 201 -> 240 while 21 draft tokens were added
        ("150.0", "accepted tokens fell from 201"),
        ("-5.0", "vllm:spec_decode_num_accepted_tokens_total = -5"),
        ("+Inf", "vllm:spec_decode_num_accepted_tokens_total = inf"),
    ],
)
def test_metrics_counters_that_cannot_be_are_not_used(fake, value: str, said: str) -> None:
    after = fixture("vllm_metrics_after.txt")
    assert ACCEPTED + "210.0" in after
    server = _vllm_metrics(fake, after.replace(ACCEPTED + "210.0", ACCEPTED + value))
    with RemoteEngine(RemoteConfig(server.url)) as engine:
        reply = Reply.collect(engine.generate(MESSAGES, GenerationParams(max_tokens=16)))
    st = reply.final_stats
    assert reply.text == "def add(a, b):\n    return a + b"
    assert (st.drafted, st.figures) == (0, "none")
    assert f"the server's /metrics counters are inconsistent ({said}): not used" in st.note


def test_the_issues_stream_through_the_cli(fake, capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    bad = {"predicted_n": -7, "draft_n": 3, "draft_n_accepted": 9999}
    server = fake(llama_routes(Route(chunks=_llama_stream([bad] * 3))))
    rc = main(["generate", "--server", server.url, "--prompt", "hi", "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    record = json.loads(out.strip().splitlines()[-1])
    assert record["acceptance_rate"] is None and record["drafted"] == 0
    assert "accepted 9999 of 3 drafted" in record["note"]


# -- 2. the client's own max_tokens -----------------------------------------------------------


def test_a_server_that_ignores_max_tokens_is_cut_at_the_limit(fake) -> None:
    route = Route(chunks=endless_chunks(id="x" * 1000))  # 100 MB in all: no buffer holds it
    server = fake({
        ("GET", "/v1/models"): Route(body=fixture("vllm_models.json")),
        ("POST", "/v1/chat/completions"): route,
    })  # fmt: skip
    reply, events = _reply(server, max_tokens=20)
    st = reply.final_stats
    assert reply.text == "".join(f"w{i} " for i in range(20))
    assert st.tokens == 20 and reply.finish_reason is FinishReason.LENGTH
    assert "the server ignored max_tokens (20): SpecChat closed the stream at the limit" in st.note
    assert sum(1 for ev in events if ev.text) == 20
    assert route.done.wait(60)
    assert route.broken  # the client hung up: it did not read the 100,000 pieces


def test_the_servers_own_count_cuts_sooner(fake) -> None:
    """Pieces of two tokens each (the server's usage says so): 10 pieces make 20 tokens."""
    usage = {"usage": lambda i: {"completion_tokens": 2 * (i + 1), "prompt_tokens": 4}}
    server = fake({
        ("GET", "/v1/models"): Route(body=fixture("vllm_models.json")),
        ("POST", "/v1/chat/completions"): Route(chunks=endless_chunks(**usage)),
    })  # fmt: skip
    reply, _ = _reply(server, max_tokens=20)
    assert reply.text == "".join(f"w{i} " for i in range(10))
    assert reply.final_stats.tokens == 20 and reply.finish_reason is FinishReason.LENGTH


def test_a_whole_reply_past_max_tokens_is_noted(fake) -> None:
    whole = {"choices": [{"message": {"content": "x " * 50}, "finish_reason": "stop"}],
             "usage": {"completion_tokens": 50, "prompt_tokens": 3}}  # fmt: skip
    server = fake({
        ("GET", "/v1/models"): Route(body=fixture("vllm_models.json")),
        ("POST", "/v1/chat/completions"): Route(body=json.dumps(whole)),
    })  # fmt: skip
    reply, _ = _reply(server, max_tokens=20, stream=False)
    assert reply.finish_reason is FinishReason.LENGTH
    assert "the server ignored max_tokens (20) and sent 50 tokens" in reply.final_stats.note


# -- 3. answers that are not what was asked for -----------------------------------------------

PORTAL = "<!DOCTYPE html>\n<html><head><title>Hotel Wi-Fi login</title></head><body>" + "x" * 999


def test_a_login_page_instead_of_an_event_stream_is_named(fake) -> None:
    server = fake({
        ("GET", "/v1/models"): Route(body=fixture("vllm_models.json")),
        ("POST", "/v1/chat/completions"): Route(body=PORTAL, content_type="text/html"),
    })  # fmt: skip
    with pytest.raises(RemoteProtocolError) as err:
        _reply(server)
    text = str(err.value)
    assert "answered with text/html ('<!DOCTYPE html> <html><head><title>Hotel Wi-Fi" in text
    assert text.endswith("…'), not an event stream") and len(text) < 200
    with pytest.raises(RemoteProtocolError, match=r"text/html \('<!DOCTYPE.*…'\), not JSON$"):
        _reply(server, stream=False)


def test_a_login_page_on_the_probe_and_through_the_cli(fake, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    server = fake({("GET", "/v1/models"): Route(body=PORTAL, content_type="text/html")})
    rc = main(["generate", "--server", server.url, "--prompt", "hi"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "/v1/models answered with text/html ('<!DOCTYPE html>" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_json_sent_instead_of_a_stream_is_read_as_a_whole_reply(fake) -> None:
    whole = {"choices": [{"message": {"content": "fine"}, "finish_reason": "stop"}]}
    server = fake({
        ("GET", "/v1/models"): Route(body=fixture("vllm_models.json")),
        ("POST", "/v1/chat/completions"): Route(body=json.dumps(whole)),
    })  # fmt: skip
    reply, _ = _reply(server)
    assert reply.text == "fine" and reply.finish_reason is FinishReason.STOP


def test_json_nested_too_deep_is_not_json(fake) -> None:
    chunks = ["data: " + "[" * 100_000 + "\n\n"]
    server = fake({
        ("GET", "/v1/models"): Route(body=fixture("vllm_models.json")),
        ("POST", "/v1/chat/completions"): Route(chunks=chunks),
    })  # fmt: skip
    with pytest.raises(RemoteProtocolError, match="streamed something that is not JSON"):
        _reply(server)


# -- 4. event lines, bounded -----------------------------------------------------------------


def test_lines_from_bytes_cut_anywhere() -> None:
    body = 'data: {"t": "é\u2028x"}\r\n\r\ndata: b\rdata: c\n'.encode()
    whole = list(split_lines([body]))
    assert whole == ['data: {"t": "é\u2028x"}', "", "data: b", "data: c"]
    # every cut: CRLF and the two bytes of é split across chunks read the same
    for cut in range(1, len(body)):
        assert list(split_lines([body[:cut], body[cut:]])) == whole, cut
    assert list(split_lines([b"a\r"])) == ["a"]  # a CR at the very end ends the line
    with pytest.raises(RemoteProtocolError, match="longer than"):
        list(split_lines([b"x" * 600, b"x" * 600], limit=1000))
    with pytest.raises(RemoteProtocolError, match="longer than"):
        list(split_lines([b"x" * 1200 + b"\n"], limit=1000))  # in one piece, ended or not
    assert list(split_lines([b"x" * 1000 + b"\n"], limit=1000)) == ["x" * 1000]


MIB = 1024 * 1024


def _huge_line(total: int) -> Iterator[bytes]:
    piece = b"x" * MIB  # one object, written again and again: the server holds 1 MiB
    yield b'data: {"choices": [{"delta": {"content": "'
    for _ in range(total // MIB):
        yield piece


def test_a_300_mb_event_line_is_refused_early_in_little_memory(fake) -> None:
    route = Route(chunks=_huge_line(300 * MIB))
    server = fake({
        ("GET", "/v1/models"): Route(body=fixture("vllm_models.json")),
        ("POST", "/v1/chat/completions"): route,
    })  # fmt: skip
    with RemoteEngine(RemoteConfig(server.url, use_metrics=False)) as engine:
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            with pytest.raises(RemoteProtocolError, match="event line longer than 2 MiB"):
                list(engine.generate(MESSAGES, GenerationParams(max_tokens=8)))
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
    print(f"peak Python memory while refusing a 300 MiB line: {peak / MIB:.1f} MiB")
    assert peak < 100 * MIB
    assert route.done.wait(60) and route.broken
    assert route.written < 100 * MIB  # refused once past the bound, not read to its end
