"""A two-prompt bench suite for the tests of the bench's bookkeeping (runs by stand-in
variants: the prompts' text is never decoded)."""

from __future__ import annotations

from specchat.core.bench.runner import parse_suite

TWO_PROMPTS = parse_suite(
    """
name = "two"

[[prompts]]
id = "a"
kind = "code"
prompt = "x"

[[prompts]]
id = "b"
kind = "chat"
prompt = "y"
"""
)
