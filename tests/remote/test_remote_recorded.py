"""The remote engine against recorded vLLM and SGLang responses (they need GPUs, so CI cannot run
them), replayed by a local fake server: parsing, figures, request bodies."""

from __future__ import annotations

import json

import pytest
from fakeserver import FakeServer, Route, fixture, sse_chunks

from specchat.core.engines.remote import RemoteEngine
from specchat.core.params import GenerationParams
from specchat.core.remote import RemoteConfig, ServerKind
from specchat.core.remote.figures import counts_from_sglang
from specchat.core.remote.metrics import SglangGauges, SpecCounters, parse_prometheus
from specchat.core.remote.sse import iter_events, iter_sse_data
from specchat.core.reply import Reply
from specchat.core.types import FinishReason, Mode

MODEL = "Qwen/Qwen2.5-Coder-7B-Instruct"
MESSAGES = [{"role": "user", "content": "Write add(a, b) in Python."}]


def test_sse_frames_comments_multiline_and_done() -> None:
    lines = [": keep-alive", "event: message", 'data: {"a":', "data: 1}", "", "data:[DONE]", ""]
    assert list(iter_sse_data(lines)) == ['{"a":\n1}', "[DONE]"]
    assert list(iter_events(['data: {"x": 2}', "", "data: [DONE]", "", "data: {}", ""])) == [
        {"x": 2}
    ]


def test_an_error_object_in_the_stream_raises_with_the_servers_message() -> None:
    from specchat.core.remote import RemoteHTTPError

    lines = ['data: {"error": {"code": 500, "message": "KV cache full"}}', ""]
    with pytest.raises(RemoteHTTPError, match="KV cache full"):
        list(iter_events(lines))


def test_vllm_counters_and_their_change() -> None:
    before = SpecCounters.from_text(fixture("vllm_metrics_before.txt"), "vllm:", MODEL)
    after = SpecCounters.from_text(fixture("vllm_metrics_after.txt"), "vllm:", MODEL)
    assert before == SpecCounters(120, 360, 201, (98, 62, 41))
    assert after is not None
    assert after.minus(before) == SpecCounters(7, 21, 9, (5, 3, 1))
    # another model's samples are not ours; a server without speculation has no counters
    assert SpecCounters.from_text(fixture("vllm_metrics_after.txt"), "vllm:", "other") is None
    assert SpecCounters.from_text("vllm:num_requests_running 0.0\n", "vllm:") is None
    # a counter that went down: the server restarted, the new counts are the change
    assert before.minus(after) == before


def test_prometheus_labels_with_escapes() -> None:
    (s,) = parse_prometheus('m{a="x\\"y",b="2"} 3.5e+00\n# HELP m x\n')
    assert s.labels == {"a": 'x"y', "b": "2"} and s.value == 3.5


def test_sglang_meta_info_in_either_vocabulary() -> None:
    meta = json.loads(fixture("sglang_chat_meta.json"))["choices"][0]["meta_info"]
    c = counts_from_sglang(meta, 32)
    assert c is not None and (c.drafted, c.accepted, c.verify_steps) == (36, 20, 12)
    assert c.verify_tokens == 32  # spec_accept_length * steps: every token came from a step
    newer = {"spec_verify_ct": 5, "spec_num_correct_drafts": 6, "spec_num_proposed_drafts": 15}
    c = counts_from_sglang(newer, 11)
    assert c is not None and (c.drafted, c.accepted, c.verify_steps) == (15, 6, 5)
    only_rates = {"spec_verify_ct": 4, "spec_accept_rate": 0.5, "spec_accept_length": 2.5}
    c = counts_from_sglang(only_rates, 10)
    assert c is not None and (c.drafted, c.accepted) == (12, 6)
    assert counts_from_sglang({"spec_verify_ct": 0}, 10) is None  # no speculation
    gauges = SglangGauges.from_text(fixture("sglang_metrics.txt"))
    assert gauges == SglangGauges(0.57, 2.71)


def _vllm(fake) -> FakeServer:
    return fake(
        {
            ("GET", "/v1/models"): Route(body=fixture("vllm_models.json")),
            ("GET", "/version"): Route(body=fixture("vllm_version.json")),
            ("GET", "/metrics"): [
                Route(body=fixture("vllm_metrics_before.txt"), content_type="text/plain"),
                Route(body=fixture("vllm_metrics_before.txt"), content_type="text/plain"),
                Route(body=fixture("vllm_metrics_after.txt"), content_type="text/plain"),
            ],
            ("POST", "/v1/chat/completions"): Route(chunks=sse_chunks(fixture("vllm_stream.sse"))),
        }
    )


def test_vllm_reply_with_figures_from_metrics(fake) -> None:
    server = _vllm(fake)
    with RemoteEngine(RemoteConfig(server.url + "/v1/")) as engine:
        assert engine.info.kind is ServerKind.VLLM
        assert engine.info.model == MODEL and engine.info.version == "0.10.1.1"
        assert engine.info.speculates and engine.speculation_control == "server"
        reply = Reply.collect(engine.generate(MESSAGES, GenerationParams(max_tokens=16), "off"))
    st = reply.final_stats
    assert reply.text == "def add(a, b):\n    return a + b"
    assert reply.finish_reason is FinishReason.LENGTH
    assert (st.tokens, st.prompt_tokens) == (16, 31)
    assert (st.drafted, st.accepted, st.verify_steps, st.verify_tokens) == (21, 9, 7, 16)
    assert st.figures == "server-metrics" and "/metrics" in st.note
    assert st.draft_pos_proposed == [7, 7, 7] and st.draft_pos_accepted == [5, 3, 1]
    assert st.mode == "draft" and "server decides" in st.note  # asked for off: moot here
    body = next(b for m, p, b, _ in server.requests if p == "/v1/chat/completions")
    assert body["model"] == MODEL and body["stream"] is True and body["max_tokens"] == 16
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert "timings_per_token" not in body and "top_k" not in body


def _sglang(fake, chat: Route) -> FakeServer:
    return fake(
        {
            ("GET", "/v1/models"): Route(body=fixture("sglang_models.json")),
            ("GET", "/get_server_info"): Route(body=fixture("sglang_server_info.json")),
            ("GET", "/metrics"): Route(
                body=fixture("sglang_metrics.txt"), content_type="text/plain"
            ),
            ("POST", "/v1/chat/completions"): chat,
        }
    )


def test_sglang_whole_reply_carries_its_figures(fake) -> None:
    server = _sglang(fake, Route(body=fixture("sglang_chat_meta.json")))
    cfg = RemoteConfig(server.url, stream=False)
    with RemoteEngine(cfg) as engine:
        assert engine.info.kind is ServerKind.SGLANG and engine.info.speculation == "EAGLE"
        assert engine.info.mode is Mode.DRAFT and engine.info.version == "0.4.10.post2"
        events = list(engine.generate(MESSAGES, GenerationParams(max_tokens=32), "draft"))
    reply = Reply.collect(events)
    st = reply.final_stats
    assert len(events) == 2 and reply.text.startswith("def add(a, b):")
    assert (st.tokens, st.drafted, st.accepted, st.verify_steps) == (32, 36, 20, 12)
    assert st.figures == "server-final" and st.mean_accepted_length == pytest.approx(32 / 12)
    body = server.requests[-1][2]
    assert body["return_meta_info"] is True and body["stream"] is False


def test_sglang_streamed_reply_says_why_it_has_no_figures(fake) -> None:
    server = _sglang(fake, Route(chunks=sse_chunks(fixture("sglang_stream.sse"))))
    with RemoteEngine(RemoteConfig(server.url)) as engine:
        reply = Reply.collect(engine.generate(MESSAGES, GenerationParams(max_tokens=32), "draft"))
    st = reply.final_stats
    assert reply.text.endswith("return a + b\n") and st.tokens == 32
    assert st.figures == "none" and st.drafted == 0 and st.acceptance_rate is None
    assert "only without streaming" in st.note


def test_generic_server_and_model_choice(fake) -> None:
    listing = {"object": "list", "data": [{"id": "a", "owned_by": "me"}, {"id": "b"}]}
    server = fake({("GET", "/v1/models"): Route(body=json.dumps(listing))})
    from specchat.core.engines.remote_connect import check_connection

    info = check_connection(RemoteConfig(server.url, model="b"))
    assert info.kind is ServerKind.OPENAI and info.model == "b" and info.models == ("a", "b")
    assert info.speculates is None
    with pytest.raises(ValueError, match="no model 'c'"):
        check_connection(RemoteConfig(server.url, model="c"))


def test_llama_server_recording_live_figures_and_draft_spans(fake) -> None:
    """A reply recorded from the real llama-server the tests build (default pair,
    draft-simple, 24 tokens): three verification steps drafting 8, 8 and 4 tokens, all
    accepted."""
    server = fake(
        {
            ("GET", "/v1/models"): Route(body=fixture("llama_models.json")),
            ("GET", "/props"): Route(body=fixture("llama_props.json")),
            ("GET", "/slots"): Route(body=fixture("llama_slots.json")),
            ("GET", "/metrics"): [
                Route(body=fixture("llama_metrics_before.txt"), content_type="text/plain"),
                Route(body=fixture("llama_metrics_after.txt"), content_type="text/plain"),
            ],
            ("POST", "/v1/chat/completions"): Route(
                chunks=sse_chunks(fixture("llama_stream_draft.sse"))
            ),
        }
    )
    with RemoteEngine(RemoteConfig(server.url)) as engine:
        assert engine.info.kind is ServerKind.LLAMA_CPP
        assert engine.info.speculation == "draft-simple" and engine.info.metrics
        events = list(engine.generate(MESSAGES, GenerationParams(max_tokens=24), "draft"))
    reply = Reply.collect(events)
    st = reply.final_stats
    assert reply.text.startswith("```python\ndef sum_list(numbers):\n")
    assert (st.tokens, st.prompt_tokens, st.drafted, st.accepted) == (24, 41, 20, 20)
    assert (st.verify_steps, st.verify_tokens) == (3, 23)
    assert st.figures == "server-live" and st.mode == "draft"
    assert st.draft_pos_proposed == [3, 3, 3, 3, 2, 2, 2, 2] == st.draft_pos_accepted
    # live: the counts were there while the reply streamed, not only at the end
    assert [ev.stats.drafted for ev in events[:4]] == [0, 8, 8, 8]
    # tokens 2-9, 11-18 and 20-23 came from the drafter
    drafted_text = "".join(reply.text[a:b] for a, b in reply.spans)
    assert drafted_text.startswith("python\ndef sum_list(numbers):\n   ")
    assert reply.text[reply.spans[0][0] - 3 : reply.spans[0][0]] == "```"
    body = server.requests[-2][2]  # the chat request (the last one is /metrics)
    assert body["timings_per_token"] is True and body["top_k"] == 0
    assert "speculative.n_max" not in body  # this build ignores per-request settings


def test_llama_server_speculation_from_slots_and_props() -> None:
    from specchat.core.remote.probe import llama_cpp_speculation

    slots = json.loads(fixture("llama_slots.json"))
    assert llama_cpp_speculation(slots, {"speculative.types": "none"}) == "draft-simple"
    fresh = [{"id": 0, "speculative": True}]  # before any request: no task params yet
    assert llama_cpp_speculation(fresh, {"speculative.types": "none"}) == "speculative"
    assert llama_cpp_speculation([{"id": 0, "speculative": False}], {}) == "none"
    assert llama_cpp_speculation(None, {"speculative.types": "none,ngram-simple"}) == "ngram-simple"
    assert llama_cpp_speculation(None, {}) == ""


def test_llama_server_whole_reply_takes_its_final_timings(fake) -> None:
    """`--no-stream`: one response (recorded from the real server) with `timings` at the end."""
    server = fake(
        {
            ("GET", "/v1/models"): Route(body=fixture("llama_models.json")),
            ("GET", "/props"): Route(body=fixture("llama_props.json")),
            ("GET", "/slots"): Route(body=fixture("llama_slots.json")),
            ("POST", "/v1/chat/completions"): Route(body=fixture("llama_chat_whole.json")),
        }
    )
    with RemoteEngine(RemoteConfig(server.url, stream=False, use_metrics=False)) as engine:
        reply = Reply.collect(engine.generate(MESSAGES, GenerationParams(max_tokens=4), "draft"))
    st = reply.final_stats
    assert reply.text == "Hello! How can" and reply.finish_reason is FinishReason.LENGTH
    assert (st.tokens, st.prompt_tokens, st.drafted, st.accepted) == (4, 30, 2, 2)
    assert st.figures == "server-final" and st.verify_steps == 0  # no /metrics: unknown
    assert server.requests[-1][2]["stream"] is False
