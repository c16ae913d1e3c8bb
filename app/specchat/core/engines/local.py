"""The engine: a target model, an optional draft model, and `generate()`.

The speculation mode is chosen per call, so a front end can switch between off, draft and lookup
between messages without reloading anything.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from specchat.core.decoding.chat_template import ChatTemplate, Message
from specchat.core.decoding.config import ModelLoadError, RuntimeFacts, adjust_config
from specchat.core.decoding.decoder import Decoder
from specchat.core.decoding.drafters.base import Drafter, DrafterKind
from specchat.core.decoding.drafters.draft_model import ModelDrafter
from specchat.core.decoding.drafters.heads import head_for, is_head_file
from specchat.core.decoding.drafters.history_index import HistoryIndex
from specchat.core.decoding.drafters.mtp import MTPDrafter
from specchat.core.decoding.drafters.ngram import NgramDrafter
from specchat.core.decoding.pricing.cost_curve import (
    GREEDY_CHAIN,
    CostCurve,
    measure_cost_curve,
    measure_host_floor,
)
from specchat.core.decoding.pricing.cost_model import CostModel
from specchat.core.decoding.runtime import ModelRuntime, RuntimeConfig
from specchat.core.engines.base import Cancel, OneReplyAtATime, cancel_check
from specchat.core.engines.curve_policy import note_unmeasured
from specchat.core.gguf.compat import draft_size_warning, require_compatible
from specchat.core.gguf.header import GGUFError, GGUFInfo, read_gguf_info
from specchat.core.machine.backend_info import gpu_offload_supported
from specchat.core.machine.busy import OthersBetween, threads_beside
from specchat.core.machine.cpu import cpu_count
from specchat.core.params import GenerationParams
from specchat.core.types import EngineBusyError, Mode, TokenEvent

T = TypeVar("T")
REFIT_S = 0.5  # how often a reply looks again at other programs' CPU use (Engine._fit_threads)

__all__ = [
    "Cancel",
    "DraftUnavailableError",
    "Engine",
    "EngineBusyError",
    "LoadedModelInfo",
    "Message",
]


class DraftUnavailableError(RuntimeError):
    pass


@dataclass(frozen=True)
class LoadedModelInfo:
    path: Path
    name: str
    quantization: str | None
    size_bytes: int
    n_ctx: int
    n_gpu_layers: int
    n_threads: int
    where: str = ""  # llama.cpp's account: "CPU", "Vulkan0 (llvmpipe): 29/29 layers"


class Engine(OneReplyAtATime):
    """Owns both models. One generation at a time (a second concurrent call raises
    EngineBusyError instead of corrupting the KV caches)."""

    speculation_control = "request"  # SpecChat decides, per reply
    can_compare = True

    def __init__(
        self,
        target_path: str | Path,
        draft_path: str | Path | None = None,
        *,
        target_config: RuntimeConfig | None = None,
        draft_config: RuntimeConfig | None = None,
    ) -> None:
        super().__init__()
        self.target = ModelRuntime(target_path, _loadable(target_config))
        self._target_notices = _notices(target_config, self.target.info)
        self._draft_notices: tuple[str, ...] = ()
        self.template = ChatTemplate(self.target)
        self.draft: ModelRuntime | None = None
        self._model_drafter: ModelDrafter | None = None
        self._head: MTPDrafter | None = None  # the target's MTP head or Gemma 4 assistant
        self._head_notices: tuple[str, ...] = ()
        self.history = HistoryIndex()  # earlier conversations, for Lookup (filled by the caller)
        self._lookup = NgramDrafter(history=self.history)
        self.cost_curve: CostCurve | None = None  # what the planner prices verification with
        self.cost = self._new_cost_model()
        try:
            self._attach_head(None)  # built in, or a sidecar or assistant beside the target
            if draft_path is not None:
                self.load_draft(draft_path, draft_config)
        except BaseException:
            self.close()
            raise
        self.fit_threads = True  # fewer CPU threads beside a busy CPU (False: always as loaded)
        self._others = OthersBetween()  # other programs' CPU use of the last half second
        self._others.mark()

    # -- models -----------------------------------------------------------------------------
    def load_draft(self, path: str | Path, config: RuntimeConfig | None = None) -> None:
        """Load (or replace) the draft model after checking that it fits the target. An MTP
        sidecar or a Gemma 4 assistant becomes the target's head instead (Mode.MTP)."""
        info = read_gguf_info(path)
        if is_head_file(info, Path(path)):
            self._attach_head(path)
            return
        require_compatible(self.target.info, info)
        config = config or self.target.config
        notices = _notices(config, info)
        warning = draft_size_warning(self.target.info, info)
        rt = ModelRuntime(path, _loadable(config), rollback_tokens=0)  # (cut by re-decoding)
        with self._lock:
            self._draft_notices = notices + ((warning,) if warning else ())
            old, self.draft = self.draft, rt
            self._model_drafter = ModelDrafter(rt)
            self.cost = self._new_cost_model()
        if old is not None:
            old.close()

    def unload_draft(self) -> None:
        with self._lock:
            old, self.draft, self._model_drafter = self.draft, None, None
            self._draft_notices = ()
        if old is not None:
            old.close()

    @property
    def target_on_gpu(self) -> bool:
        """Whether the target's layers run on a GPU backend (asked for, and the build offloads)."""
        return self.target.config.n_gpu_layers != 0 and gpu_offload_supported()

    def _new_cost_model(self) -> CostModel:
        """Auto's pricing for this pair; a draft model's cost is guessed from its size until
        it has been timed."""
        prior: dict[str, float] = {}
        if self.draft is not None:
            ratio = min(1.0, self.draft.size_bytes / max(self.target.size_bytes, 1))
            prior[DrafterKind.MODEL] = ratio
        return CostModel(gpu=self.target_on_gpu, draft_cost=prior, curve=self.cost_curve)

    def measure_cost_curve(
        self,
        k_max: int = 8,
        repeats: int = 3,
        ns: Sequence[int] | None = None,
        *,
        rows: str = "all",
    ) -> CostCurve:
        """Time the target's decodes of 1..k_max+1 tokens (or of `ns` tokens) on this machine
        (a few seconds; the cache ends as it began), logits for every row (a verification's
        shape) or the last (`rows="last"`, a prompt's), with the chain a greedy request runs in
        llama.cpp's graph attached (on a GPU that chain's cost grows with the rows, and its
        first use at a size is slow: timing it also warms it up). It does not change what the
        planner uses: `use_cost_curve`."""
        with self._lock:
            return measure_cost_curve(
                self.target, ns, repeats=repeats, k_max=k_max, rows=rows, sampler=GREEDY_CHAIN
            )

    def measure_host_floor(self) -> float:
        """Seconds per token outside llama_decode of the barest greedy loop on the target (see
        cost_curve.measure_host_floor): what no reply's host work can go below here."""
        with self._lock:
            return measure_host_floor(self.target)

    def measure_step(self, step: Callable[[ModelRuntime], T]) -> T:
        """Run `step` on the target while holding the engine as a reply does (one step of a
        cost curve measured between replies: curve_policy.py); EngineBusyError while a reply
        runs."""
        if not self._lock.acquire(blocking=False):
            raise EngineBusyError("a reply is being generated")
        try:
            return step(self.target)
        finally:
            self._lock.release()

    def use_cost_curve(self, curve: CostCurve | None) -> None:
        """Price verifications with `curve` from now on (flat: an idealised GPU; None: the line
        the cost model fits online)."""
        with self._lock:
            self.cost_curve = curve
            self.cost.use_curve(curve)

    @property
    def has_draft(self) -> bool:
        return self.draft is not None

    @property
    def head_name(self) -> str | None:
        """The name of the target's MTP head or assistant ("Built-in MTP"), None without."""
        return self._head.name if self._head is not None else None

    def _attach_head(self, path: str | Path | None) -> None:
        """Draft with the target's head: the file given (a sidecar or an assistant: a file
        that cannot draft for this target raises ValueError with the reason), or the one found
        with the target. A head found but not loadable is a notice, not a failure."""
        try:
            head = head_for(self.target, path)
        except (ValueError, GGUFError, OSError) as exc:
            if path is not None:
                raise
            self._head_notices = (f"the MTP head could not be loaded: {exc}",)
            return
        if head is not None and self._head is not None and self._head.head == head:
            return  # already drafting with it
        with self._lock:  # (one head at a time: each switches the target's hidden states)
            old, self._head = self._head, None
            if old is not None:
                old.close()
            self._head_notices = ()
            if head is None:
                return
            try:
                self._head = MTPDrafter(self.target, head)
            except ModelLoadError as exc:
                if path is not None:
                    raise
                self._head_notices = (f"the MTP head could not be loaded: {exc}",)

    @property
    def notices(self) -> tuple[str, ...]:
        """Settings changed at load time (and why) and warnings about the pair, for the user:
        the CLI's stats line, the window's gauge and status bar."""
        out = list(self._target_notices)
        out.extend(n for n in self._head_notices if n not in out)
        for n in self._draft_notices:
            if n not in out:
                out.append(n if n.startswith("the draft") else f"draft: {n}")
        return tuple(out)

    def describe(self) -> dict[str, LoadedModelInfo | None]:
        def one(rt: ModelRuntime | None) -> LoadedModelInfo | None:
            if rt is None:
                return None
            return LoadedModelInfo(
                rt.path,
                rt.info.display_name or rt.path.stem,
                rt.info.quantization,
                rt.size_bytes,
                rt.n_ctx,
                rt.config.n_gpu_layers,
                rt.n_threads,
                rt.where,
            )

        return {"target": one(self.target), "draft": one(self.draft)}

    def reset_caches(self) -> None:
        """Forget every cached prefix (benchmarks and comparisons start each run cold)."""
        with self._lock:
            self.target.reset()
            if self.draft is not None:
                self.draft.reset()
            self._lookup.clear()

    def use_history(self, index: HistoryIndex) -> None:
        """Draft from `index` as the earlier conversations from now on (an empty one: none)."""
        with self._lock:
            self.history = index
            self._lookup.history = index

    def remember(self, texts: Sequence[str]) -> None:
        """Add messages (a finished exchange) to the history index, so later conversations
        draft from them too; searchable at once."""
        docs = [self.target.tokenize(t, add_special=False, parse_special=False) for t in texts]
        self.history.add(docs)
        self.history.finish()

    def forget_lookup(self) -> None:
        """Empty the n-gram drafter's index and what it learned from refused drafts."""
        with self._lock:
            self._lookup.clear()

    def close(self) -> None:
        with self._lock:
            if self._head is not None:
                self._head.close()
                self._head = None
            if self.draft is not None:
                self.draft.close()
                self.draft = None
            self.target.close()

    # -- generation -------------------------------------------------------------------------
    def prompt_tokens(self, messages: Sequence[Message]) -> list[int]:
        return self.template.tokens(messages)

    def generate(
        self,
        messages: Sequence[Message],
        params: GenerationParams | None = None,
        mode: Mode | str = Mode.OFF,
        cancel: Cancel = None,
    ) -> Iterator[TokenEvent]:
        """Stream the assistant's reply to `messages`: one TokenEvent per decoding step."""
        return self.generate_tokens(self.prompt_tokens(messages), params, mode, cancel)

    def generate_tokens(
        self,
        prompt: Sequence[int],
        params: GenerationParams | None = None,
        mode: Mode | str = Mode.OFF,
        cancel: Cancel = None,
    ) -> Iterator[TokenEvent]:
        params, mode = self.checked(prompt, params, mode)
        if mode is Mode.DRAFT and self._model_drafter is None:
            raise DraftUnavailableError("no draft model is loaded: load one or pick another mode")
        if mode is Mode.MTP and self._head is None:
            raise DraftUnavailableError(
                "this model has no MTP head or assistant: give one with --draft "
                "(an mtp-*.gguf or a Gemma 4 assistant) or pick another mode"
            )
        tokens, stop = list(prompt), cancel_check(cancel)
        return self.exclusive(lambda: self._run(tokens, params, mode, stop))

    def _run(
        self,
        prompt: list[int],
        params: GenerationParams,
        mode: Mode,
        cancel: Callable[[], bool],
    ) -> Iterator[TokenEvent]:
        # The shared drafters are touched only once this call owns the engine.
        threads = self._fit_threads()
        for costly in (self._model_drafter, self._head):
            if costly is not None:
                costly.reset(params.k_init, params.k_max)
        self._lookup.reset(
            min_match=params.lookup_min_match,
            max_ngram=params.lookup_max_ngram,
            k_max=params.lookup_k_max,
        )
        dec = Decoder(
            self.target,
            prompt,
            params,
            mode,
            drafters=self._drafters(),
            cost=self.cost,
            cancel=cancel,
        )
        st = dec.stats
        st.threads, st.threads_wanted = threads, self.target.n_threads
        unmeasured = mode is Mode.AUTO and self.cost_curve is None
        refit = time.perf_counter() + REFIT_S
        try:
            for ev in dec.run():
                if unmeasured:  # Auto priced by the online line: its note says so
                    note_unmeasured(ev.stats)
                yield ev
                if time.perf_counter() >= refit:  # a program may start or stop meanwhile
                    st.threads = min(st.threads, self._fit_threads())
                    refit = time.perf_counter() + REFIT_S
        finally:
            self._others.mark()

    def _drafters(self) -> list[Drafter]:
        """Every drafter loaded, lookup first (the decoder keeps those the mode allows)."""
        out: list[Drafter] = [self._lookup]
        if self._model_drafter is not None:
            out.append(self._model_drafter)
        if self._head is not None:
            out.append(self._head)
        return out

    def _fit_threads(self) -> int:
        """The CPU threads to decode with now: fewer than the models were loaded with while
        other programs keep CPUs fully busy (over the last half second: machine/busy.py; a
        burst that has ended and this process's own children never count), as many again once
        they stop; unchanged on a GPU, or when too little time passed to tell."""
        if not self.fit_threads or self.target_on_gpu:
            return self.target.threads
        others = self._others.cores()
        if others is not None:
            n = threads_beside(others, self._others.cpus, self.target.n_threads)
            for rt in (self.target, self.draft):
                if rt is not None:
                    rt.use_threads(min(n, rt.n_threads))
        return self.target.threads


def _facts(info: GGUFInfo | None) -> RuntimeFacts:
    train = info.context_length if info is not None else None
    return RuntimeFacts(train, cpu_count(), gpu_offload_supported())


def _loadable(config: RuntimeConfig | None) -> RuntimeConfig:
    """The config to load with: absurd values refused, GPU layers and threads the machine cannot
    honour changed (decoding/config.py). The runtime caps the context at the trained one itself."""
    requested = (config or RuntimeConfig()).validate()
    return adjust_config(requested, _facts(None)).config


def _notices(config: RuntimeConfig | None, info: GGUFInfo) -> tuple[str, ...]:
    """What was changed for this model, and why (the same rules, with its trained context)."""
    return adjust_config(config or RuntimeConfig(), _facts(info)).notices
