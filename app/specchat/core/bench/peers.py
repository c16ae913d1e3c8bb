"""Peer implementations measured by the benchmark beside SpecChat's own modes (no Qt).

- ``llama-cpp-python``: the stock ``Llama`` high-level API on the same target file, streaming
  ``create_completion`` on the same templated prompt tokens. ``lcpp-py:off`` is a plain ``Llama``
  (its own baseline); ``lcpp-py:draft`` and ``lcpp-py:lookup`` share one ``Llama(draft_model=…)``
  (which forces ``logits_all``): the draft is SpecChat's ``ModelDrafter`` over the draft GGUF,
  the lookup is the stock ``LlamaPromptLookupDecoding``. That path reports no acceptance figures;
  ours are estimated from how often it asked for a draft (see `CountingDraft`).

The native llama.cpp binaries are in ``native_peers.py``; llama-server's n-gram modes in
``server_peers.py``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from llama_cpp.llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding

from specchat.core.bench.runner import PreparedPrompt, RssSampler, RunResult
from specchat.core.decoding.drafters.base import DraftSettings
from specchat.core.decoding.drafters.draft_model import ModelDrafter
from specchat.core.decoding.runtime import ModelRuntime
from specchat.core.engines.local import Engine
from specchat.core.params import GenerationParams

PEERS = ("llama-cpp-python", "llama.cpp")


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
        draft = self.drafter.propose(ctx, k, DraftSettings(p_min=self.p_min))
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
    metered = True  # in this process: others' CPU use during its runs is measured

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
        result = RunResult.of(
            self,
            prompt,
            text=text,
            token_ids=ids,
            exact_ids=False,
            tokens=n,
            finish_reason=finish,
            peak_rss_bytes=rss.peak,
            start_rss_bytes=rss.start_rss,
        ).timed(t0, t_first, t_last)
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
