"""`specchat-cli generate|bench --server` against recorded vLLM responses on a fake server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakeserver import FakeServer, Route, fixture, sse_chunks

from specchat.cli.main import main

NO_SPEC_METRICS = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n"


def _vllm(speculative: bool) -> FakeServer:
    metrics = (
        [
            Route(body=fixture("vllm_metrics_before.txt")),
            Route(body=fixture("vllm_metrics_before.txt")),
            Route(body=fixture("vllm_metrics_after.txt")),
        ]
        if speculative
        else Route(body=NO_SPEC_METRICS)
    )
    return FakeServer(
        routes={
            ("GET", "/v1/models"): Route(body=fixture("vllm_models.json")),
            ("GET", "/metrics"): metrics,
            ("POST", "/v1/chat/completions"): lambda body: Route(
                chunks=sse_chunks(fixture("vllm_stream.sse"))
            ),
        }
    ).start()


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def test_generate_json_reports_the_servers_figures(data_dir, capsys, monkeypatch) -> None:
    server = _vllm(speculative=True)
    monkeypatch.setenv("MY_KEY", "sk-test")
    try:
        argv = ["generate", "--server", server.url, "--api-key-env", "MY_KEY", "--prompt", "hi"]
        rc = main(argv + ["--mode", "draft", "--max-tokens", "16", "--json"])
    finally:
        server.stop()
    out = capsys.readouterr().out
    assert rc == 0
    record = json.loads(out.strip().splitlines()[-1])
    assert (record["drafted"], record["accepted"], record["verify_steps"]) == (21, 9, 7)
    assert record["figures"] == "server-metrics" and record["mode"] == "draft"
    assert record["finish_reason"] == "length" and record["tokens"] == 16
    chat = next(h for m, p, b, h in server.requests if p == "/v1/chat/completions")
    assert chat["Authorization"] == "Bearer sk-test"
    assert "sk-test" not in out


def test_missing_key_variable_is_one_readable_line(data_dir, capsys) -> None:
    rc = main(
        ["generate", "--server", "http://127.0.0.1:9", "--api-key-env", "NOPE_X", "--prompt", "x"]
    )
    assert rc == 1
    assert "NOPE_X is not set" in capsys.readouterr().err


def test_bench_pairs_the_server_with_its_no_speculation_twin(data_dir, tmp_path, capsys) -> None:
    suite = tmp_path / "suite.toml"
    suite.write_text('[[prompts]]\nid = "p1"\nkind = "code"\nprompt = "Write add."\n')
    on, off = _vllm(speculative=True), _vllm(speculative=False)
    out_json = tmp_path / "bench.json"
    try:
        rc = main(
            ["bench", "--server", on.url, "--server-off", off.url, "--suite", str(suite),
             "--repeats", "1", "--no-warmup", "--max-tokens", "16", "--json", str(out_json)]
        )  # fmt: skip
    finally:
        on.stop()
        off.stop()
    assert rc == 0, capsys.readouterr().err
    report = json.loads(out_json.read_text())
    assert report["settings"]["modes"] == ["off", "draft"]
    assert report["models"]["target"]["server"] == "vllm"
    runs = {r["mode"]: r for r in report["runs"]}
    assert runs["off"]["drafted"] is None and runs["off"]["speculation"] == "off"
    assert runs["draft"]["drafted"] == 21 and runs["draft"]["accepted"] == 9
    assert report["records"][1]["identical_to_off"] is True  # same recorded text
    on_chat = [p for m, p, b, h in on.requests if p == "/v1/chat/completions"]
    off_chat = [p for m, p, b, h in off.requests if p == "/v1/chat/completions"]
    assert len(on_chat) == 1 and len(off_chat) == 1


def test_bench_refuses_a_server_that_cannot_run_without_speculation(data_dir, capsys) -> None:
    server = _vllm(speculative=True)
    try:
        rc = main(["bench", "--server", server.url, "--repeats", "1", "--no-warmup"])
    finally:
        server.stop()
    assert rc == 1
    assert "--server-off" in capsys.readouterr().err
