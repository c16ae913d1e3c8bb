"""The benchmark's llama.cpp n-gram peers: a real llama-server per spec type (built by
packaging/build-llama-server.sh), fed the same token ids as SpecChat."""

from __future__ import annotations

from pathlib import Path

from specchat.core.bench.runner import PreparedPrompt
from specchat.core.bench.server_peers import LlamaServerPeer, draft_length_args, ngram_peers
from specchat.core.bench.suite import BenchPrompt
from specchat.core.types import GenerationParams

TEXT = (
    "Repeat this text exactly, twice:\n\nThe quick brown fox jumps over the lazy dog. Pack my "
    "box with five dozen liquor jugs. How vexingly quick daft zebras jump."
)


def _prepared(engine, max_tokens: int) -> PreparedPrompt:
    prompt = BenchPrompt("p", "quote", TEXT)
    tokens = tuple(engine.prompt_tokens(prompt.messages()))
    return PreparedPrompt(prompt, engine.template.render(prompt.messages()), tokens, max_tokens)


def test_an_ngram_peer_reports_its_drafts(llama_server_bin: Path, engine) -> None:
    prepared = _prepared(engine, 64)
    tokens = prepared.tokens
    peer = LlamaServerPeer(
        llama_server_bin,
        engine.target.path,
        label="llama.cpp:ngram-simple@k16",
        spec_args=["--spec-type", "ngram-simple", *draft_length_args("ngram-simple", 16)],
        baseline=None,
        mode="lookup",
        threads=engine.target.n_threads,
        ctx=1024,
        retokenize=lambda text: engine.target.tokenize(text, add_special=False),
    )
    try:
        r = peer.run(prepared, GenerationParams(max_tokens=64))
    finally:
        peer.close()
    assert 1 <= r.tokens <= 64 and r.text.strip()
    assert r.prompt_tokens == len(tokens)
    assert r.tokens_per_s > 0 and r.ttft_s is not None
    assert r.drafted is not None, "llama-server reported no drafting figures for ngram-simple"
    assert 0 <= (r.accepted or 0) <= r.drafted
    assert "liquor jugs" in r.text


def test_an_ngram_mod_peer_starts_every_run_with_an_empty_pool(
    llama_server_bin: Path, engine
) -> None:
    """ngram-mod keeps its pool for the server's lifetime: without a fresh server a second
    run drafts the first run's reply. The bench gives it one before every run, so the same
    prompt twice drafts the same way twice."""
    prepared = _prepared(engine, 48)
    peers = ngram_peers(
        llama_server_bin,
        engine.target.path,
        k=16,
        threads=engine.target.n_threads,
        ctx=1024,
        retokenize=lambda text: engine.target.tokenize(text, add_special=False),
        types=("ngram-mod",),
        settings=("defaults",),
    )
    assert [p.label for p in peers] == ["llama.cpp:server-off", "llama.cpp:ngram-mod"]
    off, peer = peers
    off.close()
    assert not off.fresh_each_run
    try:
        assert peer.fresh_each_run
        first = peer.run(prepared, GenerationParams(max_tokens=48))
        pid = peer.proc.pid
        second = peer.run(prepared, GenerationParams(max_tokens=48))
        assert peer.proc.pid != pid  # a new server: nothing learned from the first run
    finally:
        peer.close()
    assert second.text == first.text
    assert (second.drafted, second.accepted) == (first.drafted, first.accepted)
