"""How sizes, durations and counts are written for people (core/units.py)."""

from __future__ import annotations

from specchat.core.units import format_bytes, format_count, format_duration


def test_counts_are_written_in_words() -> None:
    """Singular for one, thousands grouped."""
    assert format_count(1, "conversation") == "1 conversation"
    assert format_count(0, "conversation") == "0 conversations"
    assert format_count(12345, "token") == "12,345 tokens"
    assert format_count(2, "reply", "replies") == "2 replies"  # a plural of its own
    assert format_count(1, "reply", "replies") == "1 reply"


def test_sizes_and_durations() -> None:
    assert format_bytes(1_120_000_000) == "1.12 GB"
    assert format_bytes(491_400_000) == "491.4 MB"
    assert format_bytes(512) == "512 bytes"
    assert format_bytes(None) == "?"
    assert format_duration(75) == "1:15"
    assert format_duration(3725) == "1:02:05"
    assert format_duration(float("nan")) == "--:--"
