"""The body of one `/v1/chat/completions` request, per server kind (no Qt, no network).

Every server gets the OpenAI fields (model, messages, max_tokens, temperature, top_p, seed,
stop, stream). On top:

- llama-server: `top_k`, `min_p`, `repeat_penalty`, `repeat_last_n`, `timings_per_token`
  (the draft counts in every streamed chunk), `cache_prompt: false` for a cold run, and, on
  builds that honour them, `speculative.n_max` (0 turns drafting off) / `speculative.p_min`.
  The llama.cpp vendored in llama-cpp-python 0.3.36 compiles those per-request fields out
  (`server-schema.cpp`, `#if 0`): there the server decides.
- vLLM: `top_k`, `min_p`, `repetition_penalty`; usage in the stream.
- SGLang: the same, plus `return_meta_info` (its per-reply speculation figures, sent only
  with non-streamed replies).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specchat.core.params import GenerationParams
from specchat.core.remote.config import RemoteConfig, ServerKind
from specchat.core.remote.probe import ServerInfo
from specchat.core.types import Mode

__all__ = ["ChatRequest", "build_request"]

CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class ChatRequest:
    body: dict[str, Any]
    mode: Mode  # the speculation this reply should show (what the server will do)
    note: str  # who decided it, for GenerationStats.note


def build_request(
    info: ServerInfo,
    config: RemoteConfig,
    messages: Sequence[Any],
    params: GenerationParams,
    mode: Mode,
    *,
    cold: bool = False,
) -> ChatRequest:
    stream = config.stream
    body: dict[str, Any] = {
        "model": info.model or config.model or "default",
        "messages": [dict(m) for m in messages],
        "stream": stream,
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
    }
    if params.seed is not None:
        body["seed"] = params.seed
    if params.stop:
        body["stop"] = list(params.stop)
    if stream:
        body["stream_options"] = {"include_usage": True}
    kind = info.kind
    if kind is ServerKind.LLAMA_CPP:
        body.update(
            top_k=params.top_k,
            min_p=params.min_p,
            repeat_penalty=params.repeat_penalty,
            repeat_last_n=params.repeat_last_n,
            timings_per_token=True,
        )
        if cold:
            body["cache_prompt"] = False
    elif kind in (ServerKind.VLLM, ServerKind.SGLANG):
        if params.top_k > 0:
            body["top_k"] = params.top_k
        if params.min_p > 0:
            body["min_p"] = params.min_p
        if params.repeat_penalty != 1.0:
            body["repetition_penalty"] = params.repeat_penalty
        if kind is ServerKind.VLLM and stream:
            body["stream_options"]["continuous_usage_stats"] = True
        if kind is ServerKind.SGLANG and not stream:
            body["return_meta_info"] = True
    shown, note = _speculation(info, mode, body, params)
    return ChatRequest(body, shown, note)


def _speculation(
    info: ServerInfo, mode: Mode, body: dict[str, Any], params: GenerationParams
) -> tuple[Mode, str]:
    """Apply the requested mode where the server honours it; say who decides."""
    server = info.speculation or "unknown"
    if server == "speculative":  # it drafts; llama-server names how after its first reply
        server = "it drafts"
    if info.per_request:
        if mode is Mode.OFF:
            body["speculative.n_max"] = 0
            return Mode.OFF, "speculation off for this request"
        body["speculative.n_max"] = params.k_max
        body["speculative.p_min"] = params.p_min
        shown = info.mode if info.speculates else Mode.DRAFT
        return shown, f"drafting per request ({server}, at most {params.k_max} tokens)"
    if info.speculates is None:
        return mode, f"{info.kind.label} does not say whether it speculates"
    if info.speculates is False:
        moot = "" if mode is Mode.OFF else f": the {mode.value} choice has no effect"
        return Mode.OFF, "the server runs without speculation" + moot
    shown = info.mode
    if info.speculation == "speculative" and mode is not Mode.OFF:
        shown = Mode.DRAFT if mode is Mode.AUTO else mode  # drafts, with what is not known yet
    if mode is not shown and not (mode is Mode.AUTO and shown is not Mode.OFF):
        ignored = f"the {mode.value} choice has no effect"
        return shown, f"the server decides speculation ({server}): {ignored}"
    return shown, f"the server decides speculation ({server})"
