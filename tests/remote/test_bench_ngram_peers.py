"""The benchmark's llama.cpp n-gram peers: a real llama-server per spec type (built by
packaging/build-llama-server.sh), fed the same token ids as SpecChat."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil

from specchat.core.bench.runner import PreparedPrompt
from specchat.core.bench.server_peers import LlamaServerPeer, draft_length_args, ngram_peers
from specchat.core.bench.suite import BenchPrompt
from specchat.core.params import GenerationParams
from specchat.core.types import FinishReason

TEXT = (
    "Repeat this text exactly, twice:\n\nThe quick brown fox jumps over the lazy dog. Pack my "
    "box with five dozen liquor jugs. How vexingly quick daft zebras jump."
)


def _prepared(engine, max_tokens: int) -> PreparedPrompt:
    prompt = BenchPrompt("p", "quote", TEXT)
    tokens = tuple(engine.prompt_tokens(prompt.messages()))
    return PreparedPrompt(prompt, engine.template.render(prompt.messages()), tokens, max_tokens)


def _server_off(llama_server_bin: Path, engine) -> LlamaServerPeer:
    """llama-server's plain decoding of the engine's target, as the bench runs it."""
    return LlamaServerPeer(
        llama_server_bin,
        engine.target.path,
        label="llama.cpp:server-off",
        spec_args=[],
        baseline=None,
        mode="off",
        threads=engine.target.n_threads,
        ctx=1024,
        retokenize=lambda text: engine.target.tokenize(text, add_special=False),
    )


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


def test_a_peer_counts_a_reply_that_ends_by_itself_as_specchat_does(
    llama_server_bin: Path, engine
) -> None:
    """A reply that ends with the end-of-generation token: llama-server's plain decoding and
    SpecChat's, greedy, say the same words in the same number of tokens, and their speeds are
    comparable only if both count them alike. The server's `predicted_n` counts the end token,
    which streams no text and which SpecChat does not count (nor time): taken as it is, every
    peer run ended by the model read one token more than SpecChat's, its speed (n - 1) / span
    up to 3 % high on a 30-token reply. Fails if the peer counts the end token."""
    prepared = _prepared(engine, 96)
    events = list(engine.generate_tokens(prepared.tokens, GenerationParams(max_tokens=96), "off"))
    own, text = events[-1], "".join(ev.text for ev in events)
    assert own.finish_reason is FinishReason.STOP  # ended by itself, before max_tokens
    peer = _server_off(llama_server_bin, engine)
    try:
        r = peer.run(prepared, GenerationParams(max_tokens=96))
    finally:
        peer.close()
    assert r.finish_reason == "stop" and r.text == text  # the same words, both greedy
    assert r.tokens == own.stats.tokens


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


ONE_PROMPT = """
name = "one"

[[prompts]]
id = "cat"
kind = "quote"
prompt = "Repeat exactly: the cat sat on the mat, the cat sat on the mat."
"""


def test_a_bench_stopped_by_sigterm_reports_and_stops_its_servers(
    llama_server_bin: Path, model_paths, tmp_path: Path
) -> None:
    """`kill PID` stops a bench as Ctrl+C does: the report of the runs measured so far is
    written and every llama-server peer is stopped. Without it the process dies at once, no
    report, and its servers (each with the model loaded) run on."""
    suite = tmp_path / "one.toml"
    suite.write_text(ONE_PROMPT, encoding="utf-8")
    out = tmp_path / "partial.json"
    cmd = [sys.executable, "-m", "specchat.cli.main", "bench", "--suite", str(suite),
           "--target", str(model_paths[1]), "--no-draft", "--modes", "off", "--repeats", "3",
           "--no-warmup", "--ctx", "1024", "--max-tokens", "8", "--peers", "llama.cpp-ngram",
           "--ngram-peer-settings", "defaults", "--llama-server", str(llama_server_bin),
           "--json", str(out)]  # fmt: skip
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    watchdog = threading.Timer(600, proc.kill)  # a hung bench fails the test, not the session
    watchdog.start()
    servers: list[psutil.Process] = []
    try:
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("[1/"):  # the first run is measured: the peers are all up
                break
        servers = [p for p in psutil.Process(proc.pid).children(recursive=True)
                   if "llama-server" in p.name()]  # fmt: skip
        assert len(servers) >= 2, "".join(lines)  # llama.cpp:server-off and the n-gram modes
        proc.send_signal(signal.SIGTERM)
        err = "".join(lines) + proc.stderr.read()
        rc = proc.wait()
    finally:
        watchdog.cancel()
        alive = [p for p in servers if _running(p)]
        for p in alive:
            p.kill()
        if proc.poll() is None:
            proc.kill()
    assert not alive, f"{len(alive)} llama-server peer(s) left running"
    assert rc == 130, err
    assert "interrupted: the report covers the runs measured so far" in err
    assert "Traceback" not in err
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["complete"] is False and len(report["runs"]) >= 1


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_peers_runs_are_metered_with_its_server_counted_as_the_benchs_own(
    llama_server_bin: Path, engine
) -> None:
    """A llama-server peer's runs are metered as SpecChat's are (a pair that other programs
    disturbed during a peer's run is run again), and its server, a child process of the
    bench, is the bench's own: the meter never names it among the other programs, though it
    decoded on one CPU or more throughout its run. Fails if peers are not metered (their
    `others_share` stays None, and a disturbed peer run was kept unseen) or if the meter
    counted the server as another program."""
    from specchat.core.bench.runner import run_bench
    from specchat.core.bench.suite import Suite

    peer = _server_off(llama_server_bin, engine)
    suite = Suite("one", (BenchPrompt("p", "quote", TEXT, max_tokens=48),), "test")
    try:
        bench = run_bench(engine, suite, ["off"], 1, peers=[peer], warmup=False, redo_busy=0)
    finally:
        peer.close()
    (run,) = [r for r in bench.runs if r.label == "llama.cpp:server-off"]
    assert run.tokens > 1 and run.others_share is not None
    assert not any("llama-server" in name for name in run.busiest), run.busiest
