"""Peer implementations measured by the benchmark beside SpecChat's own modes (no Qt).

- ``llama-cpp-python``: the stock ``Llama`` high-level API on the same target file, streaming
  ``create_completion`` on the same templated prompt tokens. ``lcpp-py:off`` is a plain ``Llama``
  (its own baseline); ``lcpp-py:draft`` and ``lcpp-py:lookup`` share one ``Llama(draft_model=…)``
  (which forces ``logits_all``): the draft is SpecChat's ``ModelDrafter`` over the draft GGUF,
  the lookup is the stock ``LlamaPromptLookupDecoding``. That path reports no acceptance figures;
  ours are estimated from how often it asked for a draft (see `CountingDraft`).
- ``llama.cpp``: the native binaries of a llama.cpp build, run as subprocesses on the templated
  prompt text: ``llama-speculative-simple`` (draft model, or n-gram lookup) and
  ``llama-completion`` as the native baseline. Their printed timing lines are parsed.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from llama_cpp.llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding

from ..decoding.draft_model import ModelDrafter
from ..decoding.runtime import ModelRuntime
from ..engine import Engine
from ..types import GenerationParams
from .runner import PreparedPrompt, RssSampler, RunResult

PEERS = ("llama-cpp-python", "llama.cpp")
SPEC_BIN = "llama-speculative-simple"
PLAIN_BIN = "llama-completion"


class Vocab:
    """The target's tokenizer, to compare a peer's text with SpecChat's token by token."""

    def __init__(self, rt: ModelRuntime) -> None:
        self.rt = rt

    def tokenize(self, text: str) -> list[int]:
        return self.rt.tokenize(text, add_special=False, parse_special=False)

    def text(self, ids: Sequence[int]) -> str:
        return b"".join(self.rt.piece(t) for t in ids).decode("utf-8", "replace")

    def clip(self, text: str, limit: int) -> tuple[str, list[int]]:
        """(text, ids) of at most `limit` tokens: llama.cpp may overshoot -n by a draft."""
        ids = self.tokenize(text)
        if len(ids) <= limit:
            return text, ids
        return self.text(ids[:limit]), ids[:limit]


# -- llama-cpp-python -----------------------------------------------------------------------
class SpecChatDraft(LlamaDraftModel):
    """LlamaDraftModel for the stock Llama loop: SpecChat's ModelDrafter over a draft runtime,
    greedy, `k` tokens per call (fewer when the draft's confidence drops below `p_min`)."""

    def __init__(self, runtime: ModelRuntime, k: int, p_min: float = 0.0) -> None:
        self.drafter = ModelDrafter(runtime, k_init=k, k_max=k)
        self.k, self.p_min = k, p_min

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        k = int(kwargs.get("num_pred_tokens", self.k))
        ctx = [int(t) for t in input_ids]
        draft = self.drafter.propose(ctx, k, warp=None, p_min=self.p_min)
        return np.asarray(draft.tokens, dtype=np.intc)

    def reset(self) -> None:
        self.drafter.rt.reset()


class CountingDraft(LlamaDraftModel):
    """Wraps a draft model and counts its calls and proposed tokens.

    The stock loop calls the draft once before each target pass after the first token, and each
    such pass emits (accepted + 1) tokens, so accepted ≈ tokens - 1 - calls: exact unless the
    reply ends in the middle of a pass (then it is an underestimate)."""

    def __init__(self, inner: LlamaDraftModel) -> None:
        self.inner = inner
        self.calls = self.drafted = self.nonempty = 0

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        out = self.inner(input_ids, **kwargs)
        self.calls += 1
        self.drafted += len(out)
        self.nonempty += 1 if len(out) else 0
        return out

    def reset(self) -> None:
        self.calls = self.drafted = self.nonempty = 0
        reset = getattr(self.inner, "reset", None)
        if callable(reset):
            reset()


class StockVariant:
    """One configuration of llama-cpp-python's own high-level generation path."""

    runner = "llama-cpp-python"

    def __init__(
        self,
        llm: Any,
        mode: str,
        draft: CountingDraft | None,
        vocab: Vocab,
        *,
        owns: bool,
    ) -> None:
        self.llm, self.mode, self.draft = llm, mode, draft
        self.label = f"lcpp-py:{mode}"
        self.baseline = None if mode == "off" else "lcpp-py:off"
        self._vocab, self._owns = vocab, owns

    def run(self, prompt: PreparedPrompt, params: GenerationParams) -> RunResult:
        llm = self.llm
        llm.draft_model = self.draft  # the draft and lookup variants share one Llama
        llm.reset()  # forget the cached prefix: every run starts cold
        if self.draft is not None:
            self.draft.reset()
        greedy = params.temperature <= 0.0
        pieces: list[str] = []
        finish: str | None = None
        t_first = t_last = None
        with RssSampler() as rss:
            t0 = time.perf_counter()
            stream = llm.create_completion(
                prompt=list(prompt.tokens),
                max_tokens=params.max_tokens,
                temperature=params.temperature,
                top_k=1 if greedy else params.top_k,
                top_p=params.top_p,
                min_p=params.min_p,
                repeat_penalty=params.repeat_penalty,
                seed=params.seed,
                stream=True,
            )
            for chunk in stream:
                choice = chunk["choices"][0]
                now = time.perf_counter()
                if choice["text"]:
                    pieces.append(choice["text"])
                    t_first = t_first or now
                    t_last = now
                finish = choice.get("finish_reason") or finish
        text, ids = self._vocab.clip("".join(pieces), params.max_tokens)
        n = params.max_tokens if finish == "length" else len(ids)
        result = RunResult(
            label=self.label,
            runner=self.runner,
            mode=self.mode,
            prompt_id=prompt.prompt.id,
            kind=prompt.prompt.kind,
            repeat=0,
            pair=0,
            text=text,
            token_ids=ids,
            exact_ids=False,
            tokens=n,
            prompt_tokens=len(prompt.tokens),
            finish_reason=finish,
            peak_rss_bytes=rss.peak,
            start_rss_bytes=rss.start_rss,
        )
        if t_first is not None and t_last is not None:
            result.ttft_s = t_first - t0
            result.elapsed_s = t_last - t0
            result.e2e_tokens_per_s = n / result.elapsed_s if result.elapsed_s > 0 else 0.0
            span = t_last - t_first
            result.tokens_per_s = (n - 1) / span if n >= 2 and span > 0 else 0.0
        if self.draft is not None:
            d = self.draft
            result.drafted = d.drafted
            result.accepted = min(d.drafted, max(0, n - 1 - d.calls))
            result.verify_steps = d.nonempty
            result.verify_tokens = result.accepted + d.nonempty
            result.note = "acceptance estimated from the stock loop's draft calls"
        return result

    def close(self) -> None:
        if self._owns:
            self.llm.close()


def stock_peers(
    engine: Engine,
    *,
    k: int,
    p_min: float,
    lookup_ngram: int = 2,
) -> list[StockVariant]:
    """lcpp-py:off, lcpp-py:draft (when the engine has a draft model) and lcpp-py:lookup."""
    from llama_cpp import Llama

    t = engine.target
    common: dict[str, Any] = dict(
        model_path=str(t.path),
        n_ctx=t.n_ctx,
        n_batch=t.config.n_batch,
        n_threads=t.n_threads,
        n_threads_batch=t.n_threads,
        n_gpu_layers=-1 if t.config.n_gpu_layers < 0 else t.config.n_gpu_layers,
        seed=0,
        verbose=False,
    )

    vocab = Vocab(t)
    lookup = CountingDraft(
        LlamaPromptLookupDecoding(max_ngram_size=lookup_ngram, num_pred_tokens=k)
    )
    plain = Llama(**common)
    spec = Llama(**common, draft_model=lookup)  # draft_model forces logits_all=True
    out = [StockVariant(plain, "off", None, vocab, owns=True)]
    if engine.draft is not None:
        # The engine's draft runtime is reused: same file, and its cache is reset per run.
        ours = CountingDraft(SpecChatDraft(engine.draft, k, p_min))
        out.append(StockVariant(spec, "draft", ours, vocab, owns=False))
    out.append(StockVariant(spec, "lookup", lookup, vocab, owns=True))
    return out


# -- llama.cpp native -----------------------------------------------------------------------
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
            with RssSampler(proc.pid) as rss:
                out_b, err_b = proc.communicate(timeout=self.timeout_s)
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
        r = RunResult(
            label=self.label,
            runner=self.runner,
            mode=self.mode,
            prompt_id=prompt.prompt.id,
            kind=prompt.prompt.kind,
            repeat=0,
            pair=0,
            text=text,
            token_ids=ids,
            exact_ids=False,
            prompt_tokens=len(prompt.tokens),
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
