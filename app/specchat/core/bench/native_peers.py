"""llama.cpp's own native speculative binaries as benchmark peers (`llama-speculative-simple`
with a draft model or n-gram lookup, and `llama-completion` as their baseline), run as
subprocesses on the same prompt text; their figures are parsed from what they print."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from specchat.core.bench.peers import Vocab
from specchat.core.bench.runner import PreparedPrompt, RssSampler, RunResult
from specchat.core.engines.local import Engine
from specchat.core.params import GenerationParams

SPEC_BIN = "llama-speculative-simple"
PLAIN_BIN = "llama-completion"

_DECODED = re.compile(r"decoded\s+(\d+)\s+tokens in\s+([\d.]+)\s+seconds")
_ENCODED = re.compile(r"encoded\s+(\d+)\s+tokens in\s+([\d.]+)\s+seconds")
_COUNT = re.compile(r"\b(n_drafted|n_accept|n_predict)\s*=\s*(\d+)")
_PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_EVAL = re.compile(r"(?<!prompt )eval time =\s*([\d.]+) ms /\s*(\d+) runs")


def parse_speculative_output(stderr: str) -> dict[str, float]:
    """Figures printed by llama-speculative-simple: decoded tokens and seconds, the prompt's
    encode time, and n_drafted / n_accept / n_predict."""
    out: dict[str, float] = {}
    m = _DECODED.search(stderr)
    if m:
        out["decoded"], out["decode_s"] = float(m.group(1)), float(m.group(2))
    m = _ENCODED.search(stderr)
    if m:
        out["encoded"], out["encode_s"] = float(m.group(1)), float(m.group(2))
    for key, value in _COUNT.findall(stderr):
        out[key] = float(value)
    if "decoded" not in out:
        raise ValueError("no 'decoded N tokens in S seconds' line in the output")
    return out


def parse_perf_output(stderr: str) -> dict[str, float]:
    """llama.cpp's perf lines (llama-completion): prompt eval and eval times in ms."""
    out: dict[str, float] = {}
    m = _PROMPT_EVAL.search(stderr)
    if m:
        out["prompt_ms"], out["prompt_tokens"] = float(m.group(1)), float(m.group(2))
    evals = _EVAL.findall(stderr)
    if evals:
        ms, runs = evals[-1]  # the target context's line comes last
        out["eval_ms"], out["eval_runs"] = float(ms), float(runs)
    if "eval_ms" not in out:
        raise ValueError("no 'eval time = X ms / N runs' line in the output")
    return out


class NativeVariant:
    """A llama.cpp binary run once per measurement (model loading is not timed: the figures
    come from the binary's own timing lines)."""

    runner = "llama.cpp"
    needs_warmup = False
    metered = True  # the binary is a child process: counted as the bench's own CPU use

    def __init__(
        self,
        bin_dir: Path,
        mode: str,
        *,
        target: Path,
        draft: Path | None,
        k: int,
        n_ctx: int,
        threads: int,
        vocab: Vocab,
        timeout_s: float = 900.0,
    ) -> None:
        self.mode = mode
        self.label = f"llama.cpp:{mode}"
        self.baseline = None if mode == "off" else "llama.cpp:off"
        exe = bin_dir / (PLAIN_BIN if mode == "off" else SPEC_BIN)
        if not exe.is_file():
            raise FileNotFoundError(f"{exe} not found (see docs/benchmarks.md to build it)")
        self.exe, self.target, self.draft = exe, target, draft
        self.k, self.n_ctx, self.threads = k, n_ctx, threads
        self._vocab, self.timeout_s = vocab, timeout_s

    def command(self, prompt_file: str, params: GenerationParams) -> list[str]:
        greedy = params.temperature <= 0.0
        cmd = [str(self.exe), "-m", str(self.target), "-f", prompt_file]
        cmd += ["-n", str(params.max_tokens), "-c", str(self.n_ctx), "-t", str(self.threads)]
        cmd += ["--temp", str(params.temperature), "--top-k", "1" if greedy else str(params.top_k)]
        if params.seed is not None:
            cmd += ["--seed", str(params.seed)]
        if self.mode == "off":
            cmd += ["-no-cnv", "--no-display-prompt", "--no-warmup"]
        elif self.mode == "draft":
            assert self.draft is not None
            cmd += ["-md", str(self.draft), "--spec-type", "draft-simple"]
            cmd += ["--spec-draft-n-max", str(self.k)]
        else:
            cmd += ["--spec-type", "ngram-simple", "--spec-draft-n-max", str(self.k)]
        return cmd

    def run(self, prompt: PreparedPrompt, params: GenerationParams) -> RunResult:
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, newline="") as f:
            # llama.cpp drops one trailing newline from a prompt file: add one to keep ours.
            f.write(prompt.text + "\n" if prompt.text.endswith("\n") else prompt.text)
            prompt_file = f.name
        try:
            cmd = self.command(prompt_file, params)
            proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "LLAMA_LOG_COLORS": "0"},
            )
            try:
                with RssSampler(proc.pid) as rss:
                    out_b, err_b = proc.communicate(timeout=self.timeout_s)
            except BaseException:  # its time limit, Ctrl+C or SIGTERM: it stops with the run
                proc.kill()
                proc.wait()
                raise
        finally:
            os.unlink(prompt_file)
        out = out_b.decode("utf-8", "replace")
        err = err_b.decode("utf-8", "replace")
        if proc.returncode != 0:
            tail = "\n".join(err.strip().splitlines()[-5:])
            raise RuntimeError(f"{self.exe.name} exited with {proc.returncode}:\n{tail}")
        return self._result(prompt, params, out, err, rss)

    def _result(
        self,
        prompt: PreparedPrompt,
        params: GenerationParams,
        out: str,
        err: str,
        rss: RssSampler,
    ) -> RunResult:
        text, ids = self._vocab.clip(generated_text(out, prompt.text), params.max_tokens)
        r = RunResult.of(
            self,
            prompt,
            text=text,
            token_ids=ids,
            exact_ids=False,
            peak_rss_bytes=rss.peak,
            start_rss_bytes=0,  # a fresh process: all of its resident set is growth
        )
        if self.mode == "off":
            perf = parse_perf_output(err)
            n = int(perf["eval_runs"]) + 1  # the first token comes from the prompt pass
            r.tokens = n
            r.tokens_per_s = perf["eval_runs"] / (perf["eval_ms"] / 1000) if perf["eval_ms"] else 0
            total_s = (perf.get("prompt_ms", 0.0) + perf["eval_ms"]) / 1000
            r.note = f"prefill {perf.get('prompt_ms', 0.0):.0f} ms (llama.cpp perf lines)"
        else:
            spec = parse_speculative_output(err)
            n = int(spec.get("n_predict", spec["decoded"]))
            r.tokens = n
            r.tokens_per_s = spec["decoded"] / spec["decode_s"] if spec["decode_s"] else 0.0
            total_s = spec.get("encode_s", 0.0) + spec["decode_s"]
            r.drafted = int(spec.get("n_drafted", 0))
            r.accepted = int(spec.get("n_accept", 0))
            r.note = f"prefill {spec.get('encode_s', 0.0) * 1000:.0f} ms (printed by llama.cpp)"
        r.elapsed_s = total_s
        r.e2e_tokens_per_s = n / total_s if total_s > 0 else 0.0
        r.finish_reason = "length" if n >= params.max_tokens else "stop"
        return r

    def close(self) -> None:
        pass


def generated_text(stdout: str, prompt_text: str) -> str:
    """The reply in a llama.cpp binary's stdout: it may echo the prompt first."""
    body = stdout.lstrip("\n")
    if body.startswith(prompt_text):
        body = body[len(prompt_text) :]
    return body.rstrip("\n")


def native_peers(
    engine: Engine,
    bin_dir: str | os.PathLike[str],
    *,
    k: int,
    modes: Sequence[str] = ("off", "draft", "lookup"),
) -> list[NativeVariant]:
    d = Path(bin_dir)
    t = engine.target

    vocab = Vocab(t)
    out = []
    for mode in modes:
        if mode == "draft" and engine.draft is None:
            continue
        draft = engine.draft.path if engine.draft is not None else None
        out.append(
            NativeVariant(
                d,
                mode,
                target=t.path,
                draft=draft,
                k=k,
                n_ctx=t.n_ctx,
                threads=t.n_threads,
                vocab=vocab,
            )
        )
    return out
