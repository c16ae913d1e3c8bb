"""Benchmark suites: TOML files of ``[[prompts]]`` tables (see
``resources/bench/default_suite.toml``).

A prompt is one user message, or a conversation: ``turns`` holds the earlier messages (user and
assistant, the assistant's replies stored in the file) and ``prompt`` the last user message,
the one the runner times. The earlier turns are replayed as context, so a drafter that reads
the whole conversation has them. ``history`` holds messages of earlier, other conversations:
the lookup drafter's history index holds exactly these while the prompt runs (a question or a
file seen in another chat), and a peer that has no such index sees nothing of them.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from specchat.core.engines.local import Message
from specchat.core.resources_path import resources_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

KINDS = ("code", "edit", "quote", "chat")
SUITE_PACKAGE = "specchat.bench_data"  # package data, once pyproject ships it
SUITE_FILE = "default_suite.toml"

_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_PROMPT_KEYS = {"id", "kind", "prompt", "system", "max_tokens", "turns", "history"}


# -- suites ---------------------------------------------------------------------------------
class SuiteError(ValueError):
    """A suite file that cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    kind: str  # one of KINDS
    prompt: str  # the (last) user message: the one that is timed
    system: str | None = None
    max_tokens: int | None = None
    turns: tuple[tuple[str, str], ...] = ()  # earlier (role, content) messages, replayed
    history: tuple[str, ...] = ()  # messages of other, earlier conversations (lookup history)

    def messages(self) -> list[Message]:
        out: list[Message] = []
        if self.system:
            out.append({"role": "system", "content": self.system})
        out += [{"role": role, "content": content} for role, content in self.turns]
        out.append({"role": "user", "content": self.prompt})
        return out


@dataclass(frozen=True)
class Suite:
    name: str
    prompts: tuple[BenchPrompt, ...]
    source: str = ""

    def select(self, ids: Iterable[str]) -> Suite:
        """The prompts with these ids, in the order given (unknown ids are an error)."""
        by_id = {p.id: p for p in self.prompts}
        wanted = [i.strip() for i in ids if i.strip()]
        missing = [i for i in wanted if i not in by_id]
        if missing:
            raise SuiteError(
                f"{self.source or self.name}: no prompt with id {', '.join(map(repr, missing))} "
                f"(ids: {', '.join(by_id)})"
            )
        return Suite(self.name, tuple(by_id[i] for i in wanted), self.source)


def parse_suite(text: str, source: str = "<suite>") -> Suite:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{source}: not valid TOML: {exc}") from None
    entries = data.get("prompts")
    if not isinstance(entries, list) or not entries:
        raise SuiteError(f"{source}: no [[prompts]] entries")
    prompts: list[BenchPrompt] = []
    seen: set[str] = set()
    for n, entry in enumerate(entries, 1):
        where = f"{source}: prompt #{n}"
        if not isinstance(entry, dict):
            raise SuiteError(f"{where}: must be a table")
        unknown = sorted(set(entry) - _PROMPT_KEYS)
        if unknown:
            raise SuiteError(f"{where}: unknown key(s) {', '.join(unknown)}")
        pid = entry.get("id")
        if not isinstance(pid, str) or not _ID_RE.fullmatch(pid):
            raise SuiteError(f"{where}: id must be a word of letters, digits, '_', '-' or '.'")
        where = f"{source}: prompt {pid!r}"
        if pid in seen:
            raise SuiteError(f"{where}: duplicate id")
        seen.add(pid)
        kind = entry.get("kind")
        if kind not in KINDS:
            raise SuiteError(f"{where}: kind must be one of {', '.join(KINDS)}, not {kind!r}")
        prompt = entry.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise SuiteError(f"{where}: prompt must be a non-empty string")
        system = entry.get("system")
        if system is not None and not isinstance(system, str):
            raise SuiteError(f"{where}: system must be a string")
        max_tokens = entry.get("max_tokens")
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise SuiteError(f"{where}: max_tokens must be a positive integer")
        turns = _turns(entry.get("turns", []), where)
        history = entry.get("history", [])
        if not isinstance(history, list) or not all(
            isinstance(h, str) and h.strip() for h in history
        ):
            raise SuiteError(f"{where}: history must be a list of non-empty messages")
        prompts.append(
            BenchPrompt(pid, kind, prompt, system or None, max_tokens, turns, tuple(history))
        )
    name = data.get("name", Path(source).stem)
    return Suite(str(name), tuple(prompts), source)


def _turns(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    """`turns = [{role = "user", content = "..."}, {role = "assistant", content = "..."}]`:
    user and assistant alternate, starting with the user (the timed prompt follows the last
    assistant reply)."""
    if not isinstance(value, list):
        raise SuiteError(f"{where}: turns must be a list of {{role, content}} tables")
    out: list[tuple[str, str]] = []
    for i, t in enumerate(value):
        want = "user" if i % 2 == 0 else "assistant"
        if not isinstance(t, dict) or set(t) != {"role", "content"}:
            raise SuiteError(f"{where}: turn #{i + 1} must be a table with role and content")
        if t["role"] != want or not isinstance(t["content"], str) or not t["content"].strip():
            raise SuiteError(f"{where}: turn #{i + 1} must be a non-empty {want} message")
        out.append((want, t["content"]))
    if out and out[-1][0] != "assistant":
        raise SuiteError(f"{where}: the turns must end with an assistant reply")
    return tuple(out)


def load_suite(path: str | os.PathLike[str] | None = None) -> Suite:
    """Read a suite file; without a path, the default suite shipped with SpecChat. A bare
    name that is no file (`heldout`) is the bundled suite of that name
    (`heldout_suite.toml`)."""
    if path is None:
        text, origin = _bundled_suite_text(SUITE_FILE)
        return parse_suite(text, origin)
    p = Path(path)
    if not p.exists() and _ID_RE.fullmatch(str(path)) and not p.suffix:
        text, origin = _bundled_suite_text(f"{path}_suite.toml")
        return parse_suite(text, origin)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SuiteError(f"cannot read suite {p}: {exc.strerror or exc}") from None
    return parse_suite(text, str(p))


def _bundled_suite_text(name: str) -> tuple[str, str]:
    try:
        res = resources.files(SUITE_PACKAGE) / name
        if res.is_file():
            return res.read_text(encoding="utf-8"), str(res)
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass
    path = resources_dir() / "bench" / name  # a checkout, or a PyInstaller bundle
    if path.is_file():
        return path.read_text(encoding="utf-8"), str(path)
    raise SuiteError(f"no bundled bench suite {name} (looked for {path})")
