"""Short texts for generation stats (as saved with each reply: GenerationStats.as_dict())."""

from __future__ import annotations

from typing import Any

from ..core.types import Mode

MODE_LABELS: dict[str, str] = {
    "off": "Off",
    "draft": "Draft model",
    "lookup": "Prompt lookup",
    "auto": "Auto",
}
MODE_TIPS: dict[str, str] = {
    "off": "No speculation: the target model decodes every token itself.",
    "draft": "A small draft model proposes tokens; the target verifies several in one pass.",
    "lookup": "Tokens are proposed by copying from the prompt and the reply so far "
    "(fast for edits of code or text you pasted).",
    "auto": "SpecChat picks the speculation method for each reply.",
}
FINISH_TEXT = {
    "stop": "",
    "length": "length limit",
    "context": "context full",
    "cancelled": "stopped",
}


def mode_label(mode: Mode | str) -> str:
    value = mode.value if isinstance(mode, Mode) else str(mode)
    return MODE_LABELS.get(value, value.replace("_", " ").capitalize())


def stats_summary(stats: dict[str, Any], long: bool = False) -> str:
    mode = str(stats.get("mode", "off"))
    parts = [("speculation off" if mode == "off" else mode_label(mode))]
    tps = stats.get("tokens_per_s")
    if isinstance(tps, (int, float)):
        parts.append(f"{tps:.1f} tok/s")
    rate = stats.get("acceptance_rate")
    if isinstance(rate, (int, float)):
        parts.append(f"{rate:.0%} accepted")
    elif mode != "off":
        parts.append("nothing drafted")
    if long:
        mal = stats.get("mean_accepted_length")
        if isinstance(mal, (int, float)):
            parts.append(f"mean accepted length {mal:.2f}")
        ttft = stats.get("ttft_s")
        if isinstance(ttft, (int, float)):
            parts.append(f"first token {ttft * 1000:.0f} ms")
        parts.append(f"{stats.get('tokens', 0)} tokens")
        for key in ("target", "draft"):
            if stats.get(key):
                parts.append(f"{key} {stats[key]}")
    finish = FINISH_TEXT.get(str(stats.get("finish_reason") or ""), "")
    if finish:
        parts.append(finish)
    note = stats.get("note")
    if long and note:
        parts.append(str(note))
    return " · ".join(parts)
