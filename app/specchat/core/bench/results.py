"""What one measured run is: the prompt as the runners see it, the record of a run (`RunResult`,
made in one place: `RunResult.of`), what a variant is, and the resident-set sampler."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from specchat.core.bench.suite import BenchPrompt
from specchat.core.machine.busy import BUSY_SHARE
from specchat.core.params import GenerationParams
from specchat.core.reply import Reply
from specchat.core.types import acceptance_rate

SERVER_OFF = "llama.cpp:server-off"  # llama-server without speculation (server_peers.py)


# -- one run --------------------------------------------------------------------------------
@dataclass(frozen=True)
class PreparedPrompt:
    """A suite prompt rendered with the target's chat template, as text and as token ids."""

    prompt: BenchPrompt
    text: str
    tokens: tuple[int, ...]
    max_tokens: int
    history: tuple[tuple[int, ...], ...] = ()  # the prompt's earlier conversations, tokenised


@dataclass
class RunResult:
    """One measured generation of one variant on one prompt."""

    label: str  # the variant: "off", "draft", "lcpp-py:draft", ...
    runner: str  # "specchat", "llama-cpp-python", "llama.cpp"
    mode: str
    prompt_id: str
    kind: str
    repeat: int
    pair: int  # runs with the same pair number were taken side by side
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    exact_ids: bool = True  # False: ids re-tokenized from the text (peers)
    tokens: int = 0
    prompt_tokens: int = 0
    tokens_per_s: float = 0.0  # decode speed after the first token
    e2e_tokens_per_s: float = 0.0  # tokens / (request start -> last token)
    ttft_s: float | None = None  # None: the runner cannot tell (llama.cpp native)
    elapsed_s: float = 0.0
    drafted: int | None = None  # None: the runner does not report it
    accepted: int | None = None
    verify_steps: int | None = None
    verify_tokens: int | None = None  # tokens the verification passes produced
    host_ms_per_token: float | None = None  # wall time outside llama_decode, per token
    decode_host_ms: float | None = None  # the same after the first token, per token after it
    setup_host_ms: float | None = None  # host time before the first token, per request
    plain_steps: int | None = None  # target passes after the first token that verified nothing
    draft_pos_proposed: list[int] | None = None  # passes that verified draft position i
    finish_reason: str | None = None
    peak_rss_bytes: int = 0
    start_rss_bytes: int = 0
    note: str = ""
    # other programs' share of the machine's CPU during the run (None: not measured, e.g. a
    # server's run, whose CPU is not this process's) and the busiest of them (busy.CpuMeter)
    others_share: float | None = None
    busiest: tuple[str, ...] = ()
    # CPU threads SpecChat's target decoded with (the fewest during the reply) and those it was
    # loaded with: fewer when another program kept a CPU busy (Engine.fit_threads); 0: not said
    threads: int = 0
    threads_wanted: int = 0

    @classmethod
    def of(cls, variant: Variant, prompt: PreparedPrompt, **figures: Any) -> RunResult:
        """The one place a run's record is made: which variant ran which prompt, and the
        figures its runner reports (repeat and pair are set by the schedule)."""
        figures.setdefault("mode", variant.mode)
        figures.setdefault("prompt_tokens", len(prompt.tokens))
        return cls(
            label=variant.label,
            runner=variant.runner,
            prompt_id=prompt.prompt.id,
            kind=prompt.prompt.kind,
            repeat=0,
            pair=0,
            **figures,
        )

    @classmethod
    def of_reply(
        cls, variant: Variant, prompt: PreparedPrompt, reply: Reply, **figures: Any
    ) -> RunResult:
        """A run whose engine reports GenerationStats (SpecChat's own, a remote server)."""
        st = reply.final_stats
        return cls.of(
            variant,
            prompt,
            **{
                "text": reply.text,
                "tokens": st.tokens,
                "prompt_tokens": st.prompt_tokens,
                "tokens_per_s": st.tokens_per_s,
                "e2e_tokens_per_s": st.tokens / st.elapsed_s if st.elapsed_s > 0 else 0.0,
                "ttft_s": st.ttft_s,
                "elapsed_s": st.elapsed_s,
                "finish_reason": reply.finish_reason.value if reply.finish_reason else None,
                "note": st.note,
                **figures,
            },
        )

    def timed(self, t0: float, t_first: float | None, t_last: float | None) -> RunResult:
        """Speeds from a stream's clock: request start, first and last token (peers)."""
        if t_first is None or t_last is None:
            return self
        n = self.tokens
        self.ttft_s = t_first - t0
        self.elapsed_s = t_last - t0
        self.e2e_tokens_per_s = n / self.elapsed_s if self.elapsed_s > 0 else 0.0
        span = t_last - t_first
        self.tokens_per_s = (n - 1) / span if n >= 2 and span > 0 else 0.0
        return self

    @property
    def acceptance_rate(self) -> float | None:
        return acceptance_rate(self.drafted, self.accepted)

    @property
    def busy(self) -> bool:
        """Other programs took more than busy.BUSY_SHARE of the CPU during this run."""
        return self.others_share is not None and self.others_share > BUSY_SHARE

    @property
    def tau(self) -> float | None:
        """Tokens per target forward pass: N / (N - accepted)."""
        return tau(self.tokens, self.accepted)

    def as_dict(self, with_text: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.prompt_id,
            "kind": self.kind,
            "mode": self.label,
            "runner": self.runner,
            "speculation": self.mode,
            "repeat": self.repeat,
            "pair": self.pair,
            "tokens": self.tokens,
            "prompt_tokens": self.prompt_tokens,
            "tokens_per_s": _r(self.tokens_per_s, 3),
            "e2e_tokens_per_s": _r(self.e2e_tokens_per_s, 3),
            "ttft_s": _r(self.ttft_s, 4),
            "total_s": _r(self.elapsed_s, 4),
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": _r(self.acceptance_rate, 4),
            "tau": _r(self.tau, 4),
            "plain_steps": self.plain_steps,
            "draft_pos_proposed": self.draft_pos_proposed,
            "host_ms_per_token": _r(self.host_ms_per_token, 4),
            "finish_reason": self.finish_reason,
            "peak_rss_mb": _r(self.peak_rss_bytes / 2**20, 1),
            "others_cpu_share": _r(self.others_share, 4),
            "busy": self.busy,
            "busiest_others": list(self.busiest),
            "threads": self.threads or None,
            "threads_wanted": self.threads_wanted or None,
            "note": self.note,
        }
        if with_text:
            out["text"] = self.text
        return out


def tau(tokens: int, accepted: int | None) -> float | None:
    """Tokens per target forward pass, N / (N - accepted) (each pass gives the target's own
    token after the accepted drafts)."""
    if accepted is None or tokens <= accepted:
        return None
    return tokens / (tokens - accepted)


def _r(x: float | None, nd: int) -> float | None:
    return None if x is None else round(x, nd)


class Variant(Protocol):
    """Something the runner can measure: a speculation mode of our engine, or a peer. One
    that runs in this process or in its child processes (a llama-server it started) may say
    `metered = True`: the runner then measures other programs' CPU use during its runs (and
    runs a disturbed pair again)."""

    label: str
    runner: str
    mode: str
    baseline: str | None  # label of the variant's own no-speculation baseline, if any

    def run(self, prompt: PreparedPrompt, params: GenerationParams) -> RunResult: ...

    def close(self) -> None: ...


class RssSampler:
    """The peak resident set of a process while active (`peak`; `start_rss` before).

    On Linux the kernel keeps the peak (VmHWM in /proc/PID/status) and resets it on request
    (writing 5 to /proc/PID/clear_refs): nothing runs beside the measured run. Elsewhere, or
    where the reset is refused, a thread samples the resident set every `interval` seconds; it
    wakes during the run and takes the interpreter's lock from it, which costs the bench's
    host figures ~0.015 ms a token on a 2-core machine. (ru_maxrss only ever grows, so it
    cannot give a per-run peak.)"""

    def __init__(self, pid: int | None = None, interval: float = 0.01) -> None:
        import psutil

        self._proc = psutil.Process(pid)
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc_dir = f"/proc/{self._proc.pid}"
        self.start_rss = self._rss()
        self.peak = self.start_rss
        self.kernel_peak = False  # whether the kernel's high-water mark gave the peak

    def _rss(self) -> int:
        try:
            return int(self._proc.memory_info().rss)
        except Exception:  # the process ended
            return 0

    def _reset_kernel_peak(self) -> bool:
        try:
            with open(f"{self._proc_dir}/clear_refs", "w") as f:
                f.write("5")
        except OSError:  # not Linux, an old kernel, or not ours to reset
            return False
        return self._kernel_peak() is not None

    def _kernel_peak(self) -> int | None:
        try:
            with open(f"{self._proc_dir}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmHWM:"):
                        return int(line.split()[1]) * 1024  # kB
        except (OSError, ValueError, IndexError):
            pass
        return None

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.peak = max(self.peak, self._rss())

    def __enter__(self) -> RssSampler:
        self.kernel_peak = self._reset_kernel_peak()
        if not self.kernel_peak:
            self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.peak = max(self.peak, self._rss())
        if self.kernel_peak:
            self.peak = max(self.peak, self._kernel_peak() or 0)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
