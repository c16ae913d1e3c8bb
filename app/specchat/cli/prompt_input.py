"""What `generate` and `chat` do with the user's text before the engine sees it.

- `--prompt TEXT`, `--prompt -` (standard input) or `--prompt-file PATH`, so that a long prompt
  never meets the shell's argument limit;
- invalid UTF-8 is replaced with U+FFFD, and the user is told (core/conversation/text_input.py);
- an empty prompt is refused;
- a conversation that outgrows the context loses its oldest exchanges, with a note, and a message
  that cannot fit at all is refused with what to do (core/conversation/context_fit.py).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specchat.core.conversation.context_fit import (
    CLI_ADVICE,
    Advice,
    PromptTooLongError,
    fit_for_engine,
)
from specchat.core.conversation.text_input import CleanText, clean_text, decode_bytes

__all__ = [
    "GENERATE_ADVICE",
    "PromptTooLongError",
    "add_prompt_options",
    "chat_messages",
    "clean_line",
    "fit_prompt",
    "note",
    "read_prompt",
    "read_system",
    "tolerant_stdin",
]

Message = dict[str, str]
EMPTY_HINT = " (give it with --prompt TEXT, --prompt-file PATH, or --prompt - to read stdin)"
GENERATE_ADVICE = Advice(restart="start with a shorter prompt", larger="use a larger --ctx")


def add_prompt_options(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--prompt", metavar="TEXT", help="the user message ('-': read standard input)")
    g.add_argument("--prompt-file", metavar="PATH", type=Path, help="read the user message here")


def note(text: str) -> None:
    print(f"specchat-cli: note: {text}", file=sys.stderr)


def _stdin_bytes() -> bytes:
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        return bytes(buffer.read())
    return sys.stdin.read().encode("utf-8", "surrogateescape")


def read_prompt(args: argparse.Namespace) -> str:
    """The prompt from --prompt / --prompt - / --prompt-file, cleaned; refuses an empty one."""
    if args.prompt_file is not None:
        try:
            got = decode_bytes(Path(args.prompt_file).read_bytes())
        except OSError as exc:
            raise ValueError(
                f"cannot read the prompt file {args.prompt_file}: {exc.strerror or exc}"
            ) from None
    elif args.prompt == "-":
        got = decode_bytes(_stdin_bytes())
    else:
        got = clean_text(args.prompt)
    if got.note:
        note(got.note)
    return got.require("the prompt", EMPTY_HINT)


def read_system(args: argparse.Namespace) -> str | None:
    if not args.system:
        return None
    got = clean_text(args.system)
    if got.note:
        note(f"system prompt: {got.note}")
    return got.text


def fit_prompt(engine: Any, messages: Sequence[Message]) -> None:
    """Refuse a prompt that leaves the model no room to answer (PromptTooLongError)."""
    fit_for_engine(engine, messages, max_tokens=1, advice=GENERATE_ADVICE)


def tolerant_stdin() -> None:
    """Read invalid UTF-8 from the terminal as escapes (then replaced) instead of failing."""
    if isinstance(sys.stdin, io.TextIOWrapper):
        with contextlib.suppress(ValueError, io.UnsupportedOperation):  # exotic streams
            sys.stdin.reconfigure(errors="surrogateescape")


def clean_line(line: str) -> CleanText:
    """A chat line, invalid bytes replaced (with a note on stderr)."""
    got = clean_text(line)
    if got.note:
        print(f"note: {got.note}", file=sys.stderr)
    return got


def chat_messages(engine: Any, history: Sequence[Message], max_tokens: int) -> list[Message]:
    """What to send for the conversation so far: the oldest exchanges left out (with a note)
    when it outgrows the context. Raises PromptTooLongError when the newest message cannot fit."""
    fitted = fit_for_engine(engine, history, max_tokens=max_tokens, advice=CLI_ADVICE)
    if fitted.notice:
        print(f"note: {fitted.notice}", file=sys.stderr)
    return fitted.messages
