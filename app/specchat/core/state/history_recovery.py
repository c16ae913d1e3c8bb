"""Recovering from a damaged conversation database (no Qt).

When the history file cannot be opened as SQLite ("file is not a database") or SQLite finds it
damaged ("database disk image is malformed"), `History` does not refuse to start: it reads every
row SQLite can still read (`salvage`), keeps the damaged file beside it as a backup
(`move_aside`), starts a fresh database, puts the rows back, and reports a `HistoryRecovery`
whose `message` tells the user what happened and where the backup is. A database that is only
locked by another process is not damaged and is never moved.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat.core.units import format_count

__all__ = ["HistoryRecovery", "Salvage", "is_damage", "move_aside", "salvage"]

_DAMAGE_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
MAX_PROBES = 1_000_000  # rowid lookups per table when a full scan fails


def is_damage(exc: BaseException) -> bool:
    """Whether `exc` says the file is damaged (not merely locked, read-only or missing)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code in _DAMAGE_CODES
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text or "damaged" in text


@dataclass(frozen=True)
class HistoryRecovery:
    """What happened to a damaged history database at start-up."""

    path: Path  # the history file (fresh now)
    backup: Path  # the damaged file, kept
    reason: str  # SQLite's words
    conversations: int  # recovered
    messages: int

    @property
    def message(self) -> str:
        if self.conversations or self.messages:
            got = (
                f"{format_count(self.conversations, 'conversation')} with "
                f"{format_count(self.messages, 'message')} were recovered from it"
            )
            fresh = "a new history was started"
        else:
            got = "nothing could be recovered from it"
            fresh = "a new, empty history was started"
        return (
            f"The conversation history ({self.path}) was damaged and could not be opened "
            f"({self.reason}). It was kept as {self.backup} and {fresh}; {got}."
        )


@dataclass
class Salvage:
    """Rows read back from a damaged file, as plain dicts."""

    conversations: list[dict[str, Any]]
    messages: list[dict[str, Any]]


def salvage(path: Path) -> Salvage:
    """Every row of the two tables that SQLite can still read from `path` (read-only)."""
    out = Salvage([], [])
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0)
    except sqlite3.Error:
        return out
    db.row_factory = sqlite3.Row
    try:
        out.conversations = list(_rows(db, "conversations"))
        out.messages = list(_rows(db, "messages"))
    finally:
        db.close()
    return out


def _rows(db: sqlite3.Connection, table: str) -> Iterator[dict[str, Any]]:
    try:
        yield from (dict(r) for r in db.execute(f"SELECT * FROM {table} ORDER BY rowid"))
        return
    except sqlite3.Error:
        pass
    # A damaged page breaks the scan: look rows up one by one and skip the unreadable ones.
    # (Rows already yielded by the scan are read again; the caller keys them by id.)
    try:
        upper = int(db.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0] or 0)
    except sqlite3.Error:
        try:
            upper = int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] or 0) + 10_000
        except sqlite3.Error:
            return
    for rowid in range(1, min(upper, MAX_PROBES) + 1):
        try:
            row = db.execute(f"SELECT * FROM {table} WHERE rowid = ?", (rowid,)).fetchone()
        except sqlite3.Error:
            continue
        if row is not None:
            yield dict(row)


def move_aside(path: Path) -> Path:
    """Rename the damaged file (and its -wal / -shm files) to ``<name>.damaged-<time>``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backup = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 2
    while backup.exists():
        backup = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
        n += 1
    os.replace(path, backup)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            with contextlib.suppress(OSError):
                os.replace(side, backup.with_name(backup.name + suffix))
    return backup


def clean_conversation(row: dict[str, Any], now: float) -> tuple[Any, ...] | None:
    """(id, title, system_prompt, created_at, updated_at, deleted_at) or None if unusable."""
    cid = row.get("id")
    if not isinstance(cid, int) or cid <= 0:
        return None
    title = row.get("title") if isinstance(row.get("title"), str) else ""
    system = row.get("system_prompt") if isinstance(row.get("system_prompt"), str) else ""
    created = _time(row.get("created_at"), now)
    updated = _time(row.get("updated_at"), created)
    deleted = row.get("deleted_at")
    deleted = deleted if isinstance(deleted, (int, float)) else None
    return (cid, title or f"Recovered chat {cid}", system, created, updated, deleted)


def clean_message(
    row: dict[str, Any], roles: tuple[str, ...], now: float
) -> tuple[Any, ...] | None:
    """(id, conversation_id, role, content, stats, draft_spans, created_at) or None."""
    mid, cid = row.get("id"), row.get("conversation_id")
    role, content = row.get("role"), row.get("content")
    if not (isinstance(mid, int) and isinstance(cid, int) and role in roles):
        return None
    if not isinstance(content, str):
        return None
    return (
        mid,
        cid,
        role,
        content,
        _json_text(row.get("stats")),
        _json_text(row.get("draft_spans")),
        _time(row.get("created_at"), now),
    )


def _time(value: Any, default: float) -> float:
    return (
        float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default
    )


def _json_text(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        json.loads(value)
    except ValueError:
        return None
    return value
