"""Benchmarking a remote server's modes side by side (`specchat-cli bench --server URL`).

The same interleaved schedule as the local benchmark (`runner.schedule`: per repeat, per
prompt, ``off, A, off, B, …``) and the same report, with remote variants:

- "off" is the server without speculation: the same server with per-request speculation off
  where it honours that, else a second endpoint running the same model without speculation
  (`--server-off`). A server that decides speculation itself and has no such twin cannot be
  compared with anything: `remote_variants` refuses with that reason.
- the speculative variant is the server's own drafting, labelled with the mode closest to it
  (draft for draft models / EAGLE / MTP, lookup for n-gram drafting).

Runs start cold where the server allows it (llama-server: `cache_prompt: false`); vLLM and
SGLang keep their prefix caches, so their times to first token after the first run are warm.
Memory figures are the server's business and stay 0; texts are compared as text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from specchat.core.bench.runner import (
    REFERENCE,
    BenchRun,
    BenchSettings,
    OnRun,
    PreparedPrompt,
    RunResult,
    Suite,
    Variant,
    measure,
    parse_modes,
)
from specchat.core.engines.remote import RemoteEngine
from specchat.core.engines.remote_pair import RemotePair
from specchat.core.params import GenerationParams
from specchat.core.reply import Reply
from specchat.core.types import Mode

__all__ = ["RemoteVariant", "remote_models_info", "remote_variants", "run_remote_bench"]

RUNNER = "remote"


class RemoteVariant:
    """One speculation setting of a remote engine, measured like a local mode."""

    runner = RUNNER
    baseline: str | None = None
    needs_warmup = True

    def __init__(self, engine: RemoteEngine | RemotePair, mode: Mode, label: str) -> None:
        self.engine, self.mode, self.label = engine, mode.value, label

    def run(self, prompt: PreparedPrompt, params: GenerationParams) -> RunResult:
        self.engine.reset_caches()
        reply = Reply.collect(self.engine.generate(prompt.prompt.messages(), params, self.mode))
        st = reply.final_stats
        drafted = st.drafted if st.figures != "none" else None
        return RunResult.of_reply(
            self,
            prompt,
            reply,
            mode=st.mode,
            exact_ids=False,
            drafted=drafted,
            accepted=st.accepted if drafted is not None else None,
            verify_steps=st.verify_steps if drafted and st.verify_steps else None,
            verify_tokens=st.verify_tokens if drafted and st.verify_steps else None,
        )

    def close(self) -> None:
        pass


def remote_variants(
    engine: RemoteEngine | RemotePair, modes: str | Sequence[str] | None = None
) -> list[RemoteVariant]:
    """The reference ("off") and the server's speculative variant. `modes` (default: the
    server's own) must name what the server can do; anything else is refused with the reason."""
    info = engine.info
    own = info.mode if info.speculates else Mode.DRAFT
    wanted = parse_modes(modes) if modes else [REFERENCE, own.value]
    extra = [m for m in wanted if m != REFERENCE]
    if info.speculates is False:
        raise ValueError(f"{engine.config.label} runs without speculation: nothing to compare")
    allowed = {own.value, Mode.AUTO.value}
    bad = [m for m in extra if m not in allowed]
    if bad:
        raise ValueError(
            f"{engine.config.label} drafts with {info.speculation or 'its own method'}: "
            f"it can be measured as {own.value}, not {', '.join(bad)}"
        )
    if not (isinstance(engine, RemotePair) or info.per_request):
        raise ValueError(
            f"{engine.config.label} decides speculation itself ({info.speculation or '?'}), so "
            "it cannot run the same prompt without it: start the same model on a second "
            "endpoint without speculation and give it with --server-off URL"
        )
    out = [RemoteVariant(engine, Mode.OFF, REFERENCE)]
    if extra:
        out.append(RemoteVariant(engine, own, own.value))
    return out


def remote_models_info(engine: RemoteEngine | RemotePair) -> dict[str, Any]:
    info = engine.info
    target = {
        "file": f"{info.model or '?'} @ {engine.config.base_url}",
        "path": engine.config.base_url,
        "size_bytes": 0,
        "name": info.model,
        "server": info.kind.value,
        "speculation": info.speculation,
        "speculation_control": engine.speculation_control,
        "n_ctx": info.n_ctx,
        "version": info.version,
    }
    return {"target": target, "draft": None}


def _prepare(suite: Suite, settings: BenchSettings) -> list[PreparedPrompt]:
    out = []
    for p in suite.prompts:
        limit = settings.max_tokens or p.max_tokens or 256
        out.append(PreparedPrompt(p, p.prompt, (), limit))
    return out


def run_remote_bench(
    variants: Sequence[Variant],
    suite: Suite,
    repeats: int = 3,
    *,
    max_tokens: int | None = None,
    params: GenerationParams | None = None,
    warmup: bool = True,
    on_run: OnRun | None = None,
    cancel: Callable[[], bool] | None = None,
    order: str = "rotate",
) -> BenchRun:
    """`runner.run_bench` for remote variants: the same schedule, the same BenchRun."""
    settings = BenchSettings(repeats, max_tokens, params or GenerationParams(), warmup).validate()
    by_label = {v.label: v for v in variants}
    labels = list(by_label)
    if not labels or labels[0] != REFERENCE:
        raise ValueError("the first variant must be the reference (off)")
    prompts = _prepare(suite, settings)
    return measure(by_label, suite, prompts, settings, on_run=on_run, cancel=cancel, order=order)
