"""Short texts for generation figures, shared by the gauge, the comparison window and the line
under each reply (whose saved record, `GenerationStats.to_dict()` plus the finish reason and the
model names, is read back with `GenerationStats.from_dict`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specchat.core.types import GenerationStats, Mode
from specchat.core.units import format_count

MODE_LABELS: dict[str, str] = {
    "off": "Off",
    "draft": "Draft model",
    "lookup": "Prompt lookup",
    "mtp": "MTP",
    "auto": "Auto",
}
MODE_TIPS: dict[str, str] = {
    "off": "No speculation: the target model decodes every token itself.",
    "draft": "A small draft model proposes tokens; the target verifies several in one pass.",
    "lookup": "Tokens are proposed by copying from the prompt and the reply so far "
    "(fast for edits of code or text you pasted).",
    "mtp": "The target's own multi-token-prediction (MTP) head, or a Gemma 4 target's assistant, "
    "proposes tokens from the target's hidden state; the target verifies several in one pass.",
    "auto": "SpecChat picks the speculation method for each reply.",
}
FINISH_TEXT = {
    "stop": "",
    "length": "length limit",
    "context": "context full",
    "cancelled": "stopped",
}
NONE = "—"


def mode_label(mode: Mode | str) -> str:
    value = mode.value if isinstance(mode, Mode) else str(mode)
    return MODE_LABELS.get(value, value.replace("_", " ").capitalize())


def acceptance_text(st: GenerationStats, digits: int = 0) -> str:
    """ "off" when speculation was off, "—" when nothing was drafted, else a percentage."""
    if st.mode == Mode.OFF.value:
        return "off"
    rate = st.acceptance_rate
    return NONE if rate is None else f"{rate:.{digits}%}"


def mean_accepted_text(st: GenerationStats) -> str:
    mal = st.mean_accepted_length
    return NONE if mal is None else f"{mal:.2f}"


def ttft_text(st: GenerationStats) -> str:
    return f"{st.ttft_s * 1000:.0f} ms" if st.tokens else NONE


def stats_summary(record: Mapping[str, Any], long: bool = False) -> str:
    """One line for a saved reply record; `long` adds the details for its tooltip."""
    st = GenerationStats.from_dict(record)
    parts = ["speculation off" if st.mode == Mode.OFF.value else mode_label(st.mode)]
    parts.append(f"{st.tokens_per_s:.1f} tok/s")
    rate = st.acceptance_rate
    if rate is not None:
        parts.append(f"{rate:.0%} accepted")
    elif st.mode != Mode.OFF.value:
        parts.append("nothing drafted")
    if long:
        mal = st.mean_accepted_length
        if mal is not None:
            parts.append(f"mean accepted length {mal:.2f}")
        if st.tokens:
            parts.append(f"first token {ttft_text(st)}")
        parts.append(format_count(st.tokens, "token"))
        for key in ("target", "draft"):
            if record.get(key):
                parts.append(f"{key} {record[key]}")
    finish = FINISH_TEXT.get(str(record.get("finish_reason") or ""), "")
    if finish:
        parts.append(finish)
    if st.threads_note:  # why this reply ran slower than the others (short: the header's width)
        parts.append(
            st.threads_note if long else f"{st.threads} of {st.threads_wanted} threads, CPU busy"
        )
    if long and st.note:
        parts.append(st.note)
    return " · ".join(parts)
