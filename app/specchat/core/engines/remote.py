"""The remote engine: the local Engine's surface over an OpenAI-compatible server (no Qt).

`generate(messages, params, mode, cancel)` streams TokenEvents with GenerationStats exactly
like the local engine, so the CLI, the window and the comparison consume both alike. What
differs is who decides speculation (usually the server: see `speculation_control`) and where
the figures come from (`GenerationStats.figures`).

A stop request closes the connection (servers stop generating when the client goes away), so
stopping never waits for the next chunk. A server that fails mid-reply ends the reply with
`FinishReason.ERROR`, the partial text kept and the reason in the stats' note; failures before
the first token raise a `RemoteError`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specchat.core.engines.base import Cancel, OneReplyAtATime, cancel_check
from specchat.core.params import GenerationParams
from specchat.core.remote.assemble import ReplyAssembler
from specchat.core.remote.checks import Inconsistent
from specchat.core.remote.client import RemoteClient
from specchat.core.remote.config import RemoteConfig, ServerKind
from specchat.core.remote.errors import RemoteError
from specchat.core.remote.figures import ReplyCounts, counts_from_metrics
from specchat.core.remote.metrics import SpecCounters
from specchat.core.remote.probe import ServerInfo, probe_server, refresh_llama_cpp
from specchat.core.remote.request import CHAT_PATH, ChatRequest, build_request
from specchat.core.remote.response import reply_body
from specchat.core.types import FinishReason, Mode, TokenEvent
from specchat.core.units import format_count

__all__ = ["RemoteEngine", "RemoteModelInfo"]

log = logging.getLogger(__name__)

METRICS_TRIES = 6  # /metrics polls after a reply until the server has counted it
METRICS_WAIT_S = 0.1


@dataclass(frozen=True)
class RemoteModelInfo:
    """What `describe()` says about a remote model (the local engine's LoadedModelInfo names
    where they apply)."""

    name: str
    url: str
    kind: str
    speculation: str
    n_ctx: int | None
    version: str = ""


class _CancelWatch:
    """Calls `on_cancel` once, from its own thread, as soon as `cancel()` turns true."""

    def __init__(self, cancel: Callable[[], bool], on_cancel: Callable[[], None]) -> None:
        self._cancel, self._on_cancel = cancel, on_cancel
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="remote-cancel", daemon=True)

    def _run(self) -> None:
        while not self._done.wait(0.05):
            if self._cancel():
                self._on_cancel()
                return

    def __enter__(self) -> _CancelWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


class RemoteEngine(OneReplyAtATime):
    """One server and model. Like the local Engine, one generation at a time."""

    def __init__(
        self,
        config: RemoteConfig,
        *,
        info: ServerInfo | None = None,
        client: RemoteClient | None = None,
    ) -> None:
        self.config = config.validate()
        super().__init__()
        self.client = client or RemoteClient(self.config)
        self._cold = False
        try:
            self.info = info if info is not None else probe_server(self.client)
        except BaseException:
            self.client.close()
            raise

    # -- what the front ends ask ------------------------------------------------------------
    @property
    def has_draft(self) -> bool:
        """The server can speculate (or does not say): the Draft choice stays available."""
        return self.info.speculates is not False

    @property
    def speculation_control(self) -> str:
        """Who picks speculation per reply: "request" (the mode switch, per reply) or
        "server" (the server; the switch only labels the reply)."""
        return self.info.control

    @property
    def can_compare(self) -> bool:
        """Off and on can be measured on this one server (per-request control)."""
        return self.info.per_request

    def describe(self) -> dict[str, RemoteModelInfo | None]:
        i = self.info
        target = RemoteModelInfo(
            name=i.model or "(server default)",
            url=self.config.base_url,
            kind=i.kind.value,
            speculation=i.speculation,
            n_ctx=i.n_ctx,
            version=i.version,
        )
        return {"target": target, "draft": None}

    def reset_caches(self) -> None:
        """Ask for the next reply from a cold cache where the server allows it (llama-server's
        `cache_prompt: false`; vLLM and SGLang keep their prefix caches)."""
        self._cold = True

    def close(self) -> None:
        self.client.close()

    # -- generation -------------------------------------------------------------------------
    def generate(
        self,
        messages: Sequence[Mapping[str, Any]],
        params: GenerationParams | None = None,
        mode: Mode | str = Mode.OFF,
        cancel: Cancel = None,
    ) -> Iterator[TokenEvent]:
        """Stream the assistant's reply to `messages`: one TokenEvent per chunk with text, then
        one with the finish reason and the final figures."""
        params, mode = self.checked(messages, params, mode)
        request, stop = list(messages), cancel_check(cancel)

        def run() -> Iterator[TokenEvent]:
            cold, self._cold = self._cold, False
            req = build_request(self.info, self.config, request, params, mode, cold=cold)
            return self._run(req, stop)

        return self.exclusive(run)

    def _run(self, req: ChatRequest, cancel: Callable[[], bool]) -> Iterator[TokenEvent]:
        before, before_note = self._snapshot()
        asm = ReplyAssembler(self.info, req)
        problem = ""
        try:
            with (
                self.client.stream_post(CHAT_PATH, req.body) as handle,
                _CancelWatch(cancel, handle.close),
            ):
                body = reply_body(
                    handle.content_type, handle.chunks(), self.config.label, self.config.stream
                )
                if isinstance(body, Mapping):  # a whole reply (asked for, or sent anyway)
                    ev = asm.whole(body)
                    if ev is not None:
                        yield ev
                else:
                    for obj in body:
                        ev = asm.chunk(obj)
                        if ev is not None:
                            yield ev
                        if asm.cut or cancel():
                            break  # leaving the block closes the stream
        except RemoteError as exc:
            if not asm.started or cancel():
                if cancel():
                    yield asm.finish_event(FinishReason.CANCELLED)
                    return
                raise
            after = format_count(asm.stats.tokens, "token")
            problem = f"{exc}; after {after}: the partial reply is kept"
            log.info("remote reply failed mid-stream: %s", exc)
        if cancel():
            yield asm.finish_event(FinishReason.CANCELLED)
            return
        if not problem and asm.finish is None:
            problem = (
                f"{self.config.label} ended the stream without finishing the reply, after "
                f"{format_count(asm.stats.tokens, 'token')}: the partial reply is kept"
            )
        if problem:
            yield asm.finish_event(FinishReason.ERROR, problem=problem)
            return
        if asm.cut:  # the server may still be generating: its counters are not this reply's
            metrics, note = None, before_note
        else:
            metrics, note = self._after(before, asm)
            note = before_note or note
        yield asm.finish_event(asm.finish or FinishReason.STOP, metrics=metrics, metrics_note=note)
        if self.info.kind is ServerKind.LLAMA_CPP and self.info.speculation == "speculative":
            # a fresh llama-server names its drafting only once a slot has served a request
            self.info = refresh_llama_cpp(self.client, self.info)

    # -- /metrics ---------------------------------------------------------------------------
    def _metrics_prefix(self) -> str | None:
        if not (self.config.use_metrics and self.info.metrics):
            return None
        return {ServerKind.LLAMA_CPP: "llamacpp:", ServerKind.VLLM: "vllm:"}.get(self.info.kind)

    def _snapshot(self) -> tuple[SpecCounters | None, str]:
        """The counters before a reply, or why they are not used."""
        try:
            return self._counters(), ""
        except Inconsistent as exc:
            return None, str(exc)

    def _counters(self) -> SpecCounters | None:
        """The server's counters now (None: none to read). Raises Inconsistent."""
        prefix = self._metrics_prefix()
        if prefix is None:
            return None
        try:
            text = self.client.get_text("/metrics", timeout=min(5.0, self.config.read_timeout_s))
        except RemoteError as exc:
            log.info("no /metrics snapshot: %s", exc)
            return None
        model = self.info.model if self.info.kind is ServerKind.VLLM else None
        return SpecCounters.from_text(text, prefix, model)

    def _after(
        self, before: SpecCounters | None, asm: ReplyAssembler
    ) -> tuple[ReplyCounts | None, str]:
        """This reply's counts from the counters' change, waiting briefly for the server to
        count it (llama-server adds a reply when its slot is released, after the last chunk)."""
        if before is None:
            return None, ""
        expected = asm.stats.drafted if self.info.kind is ServerKind.LLAMA_CPP else None
        delta: SpecCounters | None = None
        for attempt in range(METRICS_TRIES):
            if attempt:
                time.sleep(METRICS_WAIT_S)
            try:
                now = self._counters()
                new = now.minus(before) if now is not None else None
            except Inconsistent as exc:
                return None, str(exc)
            if new is None:
                return None, ""
            if expected is not None and new.draft_tokens >= expected:
                delta = new
                break
            if expected is None and delta is not None and new == delta:
                break
            delta = new
        if delta is None:
            return None, ""
        if expected is not None and delta.draft_tokens != expected:
            return None, "/metrics also counted other requests: not used"
        try:
            return counts_from_metrics(delta), ""
        except Inconsistent as exc:
            return None, str(exc)
