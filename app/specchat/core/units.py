"""How SpecChat writes sizes, durations and counts for people: one formatter each, used
everywhere (CLI, window, messages). Sizes are decimal (1 GB = 10^9 bytes), like the file sizes
that operating systems and the Hugging Face Hub show."""

from __future__ import annotations


def format_bytes(n: float | None) -> str:
    """1.12 GB, 491.4 MB, 12 KB, 512 bytes; "?" when unknown."""
    if n is None:
        return "?"
    a = abs(n)
    if a >= 1e9:
        return f"{n / 1e9:.2f} GB"
    if a >= 1e6:
        return f"{n / 1e6:.1f} MB"
    if a >= 1e3:
        return f"{n / 1e3:.0f} KB"
    return f"{n:.0f} bytes"


def format_duration(seconds: float | None) -> str:
    """m:ss (or h:mm:ss); "--:--" when unknown."""
    if seconds is None or seconds != seconds or seconds < 0:
        return "--:--"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def format_count(n: int, word: str, plural: str = "") -> str:
    """1 conversation, 0 conversations, 12,345 tokens, 2 replies (`word` is the singular; the
    plural adds an s unless given)."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {plural or word + 's'}"
