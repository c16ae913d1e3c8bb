"""Saved conversations: a small SQLite database in the user data directory (no Qt).

Each message is written in its own transaction, so a crash loses at most the message being
written. The database runs in WAL mode, so several windows can share it (`changed_elsewhere`).
A damaged file is kept as a backup and replaced by a fresh database holding what could be read
from it (:mod:`.history_recovery`). Deleting a conversation only marks it deleted, so the
front end can offer "undo"; `purge_deleted()` removes marked conversations for good.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specchat.core.state.history_recovery import (
    HistoryRecovery,
    Salvage,
    clean_conversation,
    clean_message,
    is_damage,
    move_aside,
    salvage,
)
from specchat.core.state.paths import data_dir

log = logging.getLogger(__name__)

DB_FILE = "history.sqlite3"
DEFAULT_TITLE = "New chat"
TITLE_CHARS = 48
SCHEMA_VERSION = 1
ROLES = ("system", "user", "assistant")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    system_prompt TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    deleted_at REAL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content TEXT NOT NULL,
    stats TEXT,
    draft_spans TEXT,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages (conversation_id, id);
"""


@dataclass(frozen=True)
class ConversationSummary:
    id: int
    title: str
    updated_at: float
    message_count: int


@dataclass(frozen=True)
class StoredMessage:
    id: int
    conversation_id: int
    role: str
    content: str
    stats: dict[str, Any] | None = None  # generation stats of an assistant reply
    draft_spans: tuple[tuple[int, int], ...] = ()  # [start, end) character ranges from the draft
    created_at: float = 0.0


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    system_prompt: str
    created_at: float
    updated_at: float
    messages: list[StoredMessage] = field(default_factory=list)

    def chat_messages(self) -> list[dict[str, str]]:
        """The conversation as engine messages, led by the system prompt when there is one."""
        out: list[dict[str, str]] = []
        if self.system_prompt.strip():
            out.append({"role": "system", "content": self.system_prompt})
        out.extend({"role": m.role, "content": m.content} for m in self.messages)
        return out


def title_from_text(text: str, limit: int = TITLE_CHARS) -> str:
    """A one-line title made from the start of a message."""
    line = " ".join(text.split())
    if not line:
        return DEFAULT_TITLE
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def default_db_path() -> Path:
    return data_dir() / DB_FILE


class History:
    """The conversation database. Use it from one thread (the GUI thread)."""

    def __init__(self, path: str | Path | None = None, *, timeout: float = 5.0) -> None:
        """Open (or create) the database. A damaged file is kept as a backup and a fresh
        database holding whatever could be read from it takes its place: `recovery` then says
        what happened (None on an ordinary start)."""
        self.path = Path(path) if path is not None else default_db_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.recovery: HistoryRecovery | None = None
        try:
            self._db = self._open(timeout)
        except sqlite3.DatabaseError as exc:
            if not is_damage(exc):
                raise  # locked by another process, read-only, ...: not ours to replace
            rows = salvage(self.path)
            backup = move_aside(self.path)
            self._db = self._open(timeout)
            n_conv, n_msg = self._restore(rows)
            self.recovery = HistoryRecovery(self.path, backup, str(exc), n_conv, n_msg)
            log.warning("%s", self.recovery.message)
        self._data_version = self._version()

    def _open(self, timeout: float) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=timeout)
        try:
            db.row_factory = sqlite3.Row
            db.create_function("fold", 1, _fold, deterministic=True)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            with db:
                db.executescript(_SCHEMA)
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            check = str(db.execute("PRAGMA quick_check").fetchone()[0])
            if check != "ok":
                raise sqlite3.DatabaseError(f"database disk image is malformed ({check})")
        except BaseException:
            db.close()
            raise
        return db

    def _restore(self, rows: Salvage) -> tuple[int, int]:
        """Put salvaged rows into the fresh database; returns (conversations, messages)."""
        now = time.time()
        convs = {
            c[0]: c for c in filter(None, (clean_conversation(r, now) for r in rows.conversations))
        }
        msgs = {
            m[0]: m for m in filter(None, (clean_message(r, ROLES, now) for r in rows.messages))
        }
        for cid in sorted({m[1] for m in msgs.values()} - set(convs)):  # orphans get a chat
            convs[cid] = (cid, f"Recovered chat {cid}", "", now, now, None)
        with self._db:
            self._db.executemany(
                "INSERT INTO conversations (id, title, system_prompt, created_at, updated_at,"
                " deleted_at) VALUES (?, ?, ?, ?, ?, ?)",
                [convs[k] for k in sorted(convs)],
            )
            self._db.executemany(
                "INSERT INTO messages (id, conversation_id, role, content, stats, draft_spans,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [msgs[k] for k in sorted(msgs)],
            )
        live = sum(1 for c in convs.values() if c[5] is None)
        return live, sum(1 for m in msgs.values() if convs[m[1]][5] is None)

    def _version(self) -> int:
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    def changed_elsewhere(self) -> bool:
        """Whether another connection (another window) committed a change since the last call:
        a cheap poll for refreshing what is shown."""
        version = self._version()
        changed, self._data_version = version != self._data_version, version
        return changed

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def journal_mode(self) -> str:
        return str(self._db.execute("PRAGMA journal_mode").fetchone()[0])

    # -- conversations ----------------------------------------------------------------------
    def create(self, title: str = DEFAULT_TITLE, system_prompt: str = "") -> int:
        now = time.time()
        with self._db:
            cur = self._db.execute(
                "INSERT INTO conversations (title, system_prompt, created_at, updated_at)"
                " VALUES (?, ?, ?, ?)",
                (title.strip() or DEFAULT_TITLE, system_prompt, now, now),
            )
        return int(cur.lastrowid or 0)

    def conversations(self, search: str = "") -> list[ConversationSummary]:
        """Conversations not deleted, newest first; `search` matches titles, ignoring case."""
        sql = (
            "SELECT c.id, c.title, c.updated_at,"
            " (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id) AS n"
            " FROM conversations c WHERE c.deleted_at IS NULL"
        )
        args: list[Any] = []
        if search.strip():
            sql += " AND instr(fold(c.title), ?) > 0"
            args.append(_fold(search.strip()))
        sql += " ORDER BY c.updated_at DESC, c.id DESC"
        return [
            ConversationSummary(r["id"], r["title"], r["updated_at"], r["n"])
            for r in self._db.execute(sql, args)
        ]

    def conversation(self, conversation_id: int) -> Conversation:
        row = self._db.execute(
            "SELECT * FROM conversations WHERE id = ? AND deleted_at IS NULL", (conversation_id,)
        ).fetchone()
        if row is None:
            raise KeyError(f"no conversation {conversation_id}")
        return Conversation(
            row["id"],
            row["title"],
            row["system_prompt"],
            row["created_at"],
            row["updated_at"],
            self.messages(conversation_id),
        )

    def exists(self, conversation_id: int) -> bool:
        row = self._db.execute(
            "SELECT 1 FROM conversations WHERE id = ? AND deleted_at IS NULL", (conversation_id,)
        ).fetchone()
        return row is not None

    def rename(self, conversation_id: int, title: str) -> None:
        title = " ".join(title.split())
        if not title:
            raise ValueError("a conversation needs a title")
        self._update(conversation_id, "title = ?", (title,))

    def set_system_prompt(self, conversation_id: int, text: str) -> None:
        self._update(conversation_id, "system_prompt = ?", (text,))

    def delete(self, conversation_id: int) -> None:
        """Mark a conversation deleted (`restore()` undoes it until `purge_deleted()`)."""
        with self._db:
            self._db.execute(
                "UPDATE conversations SET deleted_at = ? WHERE id = ?",
                (time.time(), conversation_id),
            )

    def restore(self, conversation_id: int) -> None:
        with self._db:
            self._db.execute(
                "UPDATE conversations SET deleted_at = NULL WHERE id = ?", (conversation_id,)
            )

    def purge_deleted(self) -> int:
        """Remove every conversation marked deleted, with its messages. Returns how many."""
        with self._db:
            cur = self._db.execute("DELETE FROM conversations WHERE deleted_at IS NOT NULL")
        return cur.rowcount

    def _update(self, conversation_id: int, assignment: str, args: Sequence[Any]) -> None:
        with self._db:
            cur = self._db.execute(
                f"UPDATE conversations SET {assignment}, updated_at = ? WHERE id = ?",
                (*args, time.time(), conversation_id),
            )
        if cur.rowcount == 0:
            raise KeyError(f"no conversation {conversation_id}")

    # -- messages ---------------------------------------------------------------------------
    def add_message(
        self,
        conversation_id: int,
        role: str,
        content: str,
        stats: Mapping[str, Any] | None = None,
        draft_spans: Iterable[tuple[int, int]] = (),
    ) -> StoredMessage:
        """Append a message in one transaction. The first user message titles a new chat."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        spans = tuple((int(a), int(b)) for a, b in draft_spans)
        now = time.time()
        with self._db:
            row = self._db.execute(
                "SELECT title FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
            if row is None:
                raise KeyError(f"no conversation {conversation_id}")
            cur = self._db.execute(
                "INSERT INTO messages"
                " (conversation_id, role, content, stats, draft_spans, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    conversation_id,
                    role,
                    content,
                    None if stats is None else json.dumps(dict(stats)),
                    json.dumps(spans) if spans else None,
                    now,
                ),
            )
            title = row["title"]
            if role == "user" and title == DEFAULT_TITLE:
                title = title_from_text(content)
            self._db.execute(
                "UPDATE conversations SET updated_at = ?, title = ? WHERE id = ?",
                (now, title, conversation_id),
            )
        return StoredMessage(
            int(cur.lastrowid or 0),
            conversation_id,
            role,
            content,
            None if stats is None else dict(stats),
            spans,
            now,
        )

    def messages(self, conversation_id: int) -> list[StoredMessage]:
        rows = self._db.execute(
            "SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,)
        )
        return [_message(r) for r in rows]

    def delete_messages_from(self, conversation_id: int, message_id: int) -> int:
        """Delete a message and every later one in its conversation (regenerate, edit)."""
        with self._db:
            cur = self._db.execute(
                "DELETE FROM messages WHERE conversation_id = ? AND id >= ?",
                (conversation_id, message_id),
            )
            self._db.execute(
                "UPDATE conversations SET updated_at = ? WHERE id = ?",
                (time.time(), conversation_id),
            )
        return cur.rowcount

    def integrity_ok(self) -> bool:
        return str(self._db.execute("PRAGMA integrity_check").fetchone()[0]) == "ok"


def _fold(text: object) -> str:
    return str(text).casefold() if text is not None else ""


def _message(r: sqlite3.Row) -> StoredMessage:
    spans: tuple[tuple[int, int], ...] = ()
    if r["draft_spans"]:
        spans = tuple((int(a), int(b)) for a, b in json.loads(r["draft_spans"]))
    return StoredMessage(
        r["id"],
        r["conversation_id"],
        r["role"],
        r["content"],
        json.loads(r["stats"]) if r["stats"] else None,
        spans,
        r["created_at"],
    )
