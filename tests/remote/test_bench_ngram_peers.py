"""The benchmark's llama.cpp n-gram peers: a real llama-server per spec type (built by
packaging/build-llama-server.sh), fed the same token ids as SpecChat."""

from __future__ import annotations

from pathlib import Path

from specchat.core.bench.runner import PreparedPrompt
from specchat.core.bench.server_peers import LlamaServerPeer, draft_length_args
from specchat.core.bench.suite import BenchPrompt
from specchat.core.types import GenerationParams

TEXT = (
    "Repeat this text exactly, twice:\n\nThe quick brown fox jumps over the lazy dog. Pack my "
    "box with five dozen liquor jugs. How vexingly quick daft zebras jump."
)


def test_an_ngram_peer_reports_its_drafts(llama_server_bin: Path, engine) -> None:
    prompt = BenchPrompt("p", "quote", TEXT)
    tokens = tuple(engine.prompt_tokens(prompt.messages()))
    prepared = PreparedPrompt(prompt, engine.template.render(prompt.messages()), tokens, 64)
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
