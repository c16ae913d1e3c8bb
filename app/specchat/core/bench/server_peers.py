"""llama.cpp's n-gram drafters as benchmark peers, through its own `llama-server`.

Each variant is one llama-server process on 127.0.0.1 with the target model and one
`--spec-type` (ngram-simple, ngram-map-k, ngram-mod), at llama.cpp's defaults and at the draft
length SpecChat uses; `llama.cpp:server-off` (no speculation) is their own baseline. Every run
sends the prompt as the same token ids SpecChat decodes (`/completion` with a token list), with
prompt caching off so each run starts cold (a spec type whose n-gram pool outlives a request,
ngram-mod, gets a fresh server before every run), and streams the reply: the first and last streamed
token give decode speed the way SpecChat measures its own (tokens after the first, per second
since the first; the end-of-generation token, which streams no text, counted by neither);
drafted/accepted come from the server's `timings`.

The server binary is built from the llama.cpp vendored in the pinned llama-cpp-python sdist by
`packaging/build-llama-server.sh` (which the test suite also uses).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from specchat.core.bench.results import SERVER_OFF
from specchat.core.bench.runner import PreparedPrompt, RssSampler, RunResult
from specchat.core.params import GenerationParams

START_TIMEOUT_S = 180.0
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-mod")
# spec types whose pool outlives a request (one per server): their server is started afresh
# before every run, or a second run drafts the first run's reply (ngram-mod's τ on a 300-token
# edit went 5.1 -> 50 from one repeat to the next)
STATEFUL_TYPES = ("ngram-mod",)


def draft_length_args(spec_type: str, k: int) -> list[str]:
    """llama-server flags that set a spec type's draft length to k."""
    if spec_type == "ngram-simple":
        return ["--spec-ngram-simple-size-m", str(k)]
    if spec_type == "ngram-map-k":
        return ["--spec-ngram-map-k-size-m", str(k)]
    if spec_type == "ngram-mod":
        return ["--spec-ngram-mod-n-max", str(k), "--spec-ngram-mod-n-min", str(max(1, k // 2))]
    raise ValueError(f"unknown n-gram spec type {spec_type!r}")


def reply_tokens(timings: dict[str, Any], stop_type: str | None) -> int:
    """The reply's tokens as SpecChat counts its own: the server's `predicted_n` counts the
    end-of-generation token of a reply that ended by itself, which streams no text (SpecChat's
    count and its clock stop at the last token with text); 0 where the server gave no count."""
    n = int(timings.get("predicted_n") or 0)
    return max(n - 1, 0) if n and stop_type == "eos" else n


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServerPeer:
    """One llama-server with one speculation setting, measured like a SpecChat mode."""

    runner = "llama.cpp"
    needs_warmup = True
    metered = True  # its server is a child process: counted as the bench's own CPU use

    def __init__(
        self,
        binary: Path,
        target: Path,
        *,
        label: str,
        spec_args: Sequence[str],
        baseline: str | None,
        mode: str,
        threads: int,
        ctx: int,
        retokenize: Callable[[str], list[int]],
        fresh_each_run: bool = False,
    ) -> None:
        self.label, self.mode, self.baseline = label, mode, baseline
        self._retokenize = retokenize
        self.fresh_each_run = fresh_each_run  # restart before every run but the first
        self._used = False
        self.port = _free_port()
        self._log = Path(tempfile.mkstemp(prefix="specchat-peer-", suffix=".log")[1])
        self._cmd = [
            str(binary), "-m", str(target), "--host", "127.0.0.1", "--port", str(self.port),
            "-c", str(ctx), "-t", str(threads), "-tb", str(threads), "-np", "1",
            "--no-webui", "--no-cache-prompt", *spec_args,
        ]  # fmt: skip
        try:
            self._start()
        except BaseException:  # Ctrl+C or SIGTERM while it starts: no server left behind
            self.close()
            raise

    def _start(self) -> None:
        with self._log.open("w") as log:
            self.proc = subprocess.Popen(self._cmd, stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _stop(self) -> None:
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def _request(self, method: str, path: str, body: Any = None) -> http.client.HTTPResponse:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=data, headers=headers)
        return conn.getresponse()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self._log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"llama-server for {self.label} exited:\n{tail}")
            try:
                r = self._request("GET", "/health")
                if r.status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.25)
        self.close()
        raise RuntimeError(f"llama-server for {self.label} did not start in time")

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """One `/completion` request without streaming: the server's JSON answer."""
        resp = self._request("POST", "/completion", {**body, "stream": False})
        raw = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"llama-server answered {resp.status}: {raw[:300]!r}")
        out: dict[str, Any] = json.loads(raw)
        return out

    def run(self, prompt: PreparedPrompt, params: GenerationParams) -> RunResult:
        if self.fresh_each_run and self._used:  # a cold pool, as every SpecChat run starts
            self._stop()
            self._start()
        self._used = True
        body = {
            "prompt": list(prompt.tokens),
            "n_predict": params.max_tokens,
            "temperature": params.temperature,
            "top_k": params.top_k,
            "top_p": params.top_p,
            "min_p": params.min_p,
            "seed": params.seed if params.seed is not None else 0,
            "stream": True,
            "cache_prompt": False,
        }
        pieces: list[str] = []
        t_first = t_last = None
        final: dict[str, Any] = {}
        with RssSampler(self.proc.pid) as rss:
            t0 = time.perf_counter()
            resp = self._request("POST", "/completion", body)
            if resp.status != 200:
                raise RuntimeError(f"llama-server answered {resp.status}: {resp.read()[:300]!r}")
            for raw in resp:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                event = json.loads(line[5:])
                now = time.perf_counter()
                if event.get("content"):
                    pieces.append(event["content"])
                    if t_first is None:
                        t_first = now
                    t_last = now
                if event.get("stop"):
                    final = event
                    break
        timings = final.get("timings", {})
        text = "".join(pieces)
        n = reply_tokens(timings, final.get("stop_type")) or len(self._retokenize(text))
        result = RunResult.of(
            self,
            prompt,
            text=text,
            token_ids=self._retokenize(text),
            exact_ids=False,
            tokens=n,
            peak_rss_bytes=rss.peak,
            start_rss_bytes=rss.start_rss,
            finish_reason="length" if final.get("stop_type") == "limit" else "stop",
        ).timed(t0, t_first, t_last)
        if "draft_n" in timings:  # absent: the server drafted nothing
            result.drafted = int(timings["draft_n"])
            result.accepted = int(timings.get("draft_n_accepted", 0))
        return result

    def close(self) -> None:
        self._stop()
        self._log.unlink(missing_ok=True)


def find_llama_server(explicit: Path | None = None) -> Path:
    """The llama-server binary: given, $SPECCHAT_LLAMA_SERVER, or the cached build of
    packaging/build-llama-server.sh (built now if missing)."""
    for cand in (explicit, os.environ.get("SPECCHAT_LLAMA_SERVER")):
        if cand:
            p = Path(cand)
            if not p.is_file():
                raise FileNotFoundError(f"llama-server not found: {p}")
            return p
    script = Path(__file__).resolve().parents[4] / "packaging" / "build-llama-server.sh"
    if not script.is_file():
        raise FileNotFoundError("no llama-server: pass --llama-server PATH")
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"building llama-server failed:\n{out.stderr[-2000:]}")
    return Path(lines[-1])


def ngram_peers(
    binary: Path,
    target: Path,
    *,
    k: int,
    threads: int,
    ctx: int,
    retokenize: Callable[[str], list[int]],
    types: Sequence[str] = NGRAM_TYPES,
    settings: Sequence[str] = ("defaults", "k"),
) -> list[LlamaServerPeer]:
    """llama.cpp:server-off, then each n-gram type at its defaults and/or at draft length k."""
    peers: list[LlamaServerPeer] = []
    base = SERVER_OFF

    def add(label: str, spec_args: list[str], mode: str, baseline: str | None) -> None:
        fresh = any(t in spec_args for t in STATEFUL_TYPES)
        peers.append(
            LlamaServerPeer(
                binary, target, label=label, spec_args=spec_args, baseline=baseline,
                mode=mode, threads=threads, ctx=ctx, retokenize=retokenize,
                fresh_each_run=fresh,
            )
        )  # fmt: skip

    try:
        add(base, [], "off", None)
        for t in types:
            if "defaults" in settings:
                add(f"llama.cpp:{t}", ["--spec-type", t], "lookup", base)
            if "k" in settings:
                args = ["--spec-type", t, *draft_length_args(t, k)]
                add(f"llama.cpp:{t}@k{k}", args, "lookup", base)
    except BaseException:
        for p in peers:
            p.close()
        raise
    return peers
