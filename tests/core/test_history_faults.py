"""A damaged history database (#14 case 2) and two windows on one database (case 5)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from specchat.core.state.history import History


def _fill(path: Path, conversations: int = 30, per: int = 6) -> None:
    with History(path) as h:
        for i in range(conversations):
            cid = h.create(f"chat {i}")
            for j in range(per):
                role = "user" if j % 2 == 0 else "assistant"
                h.add_message(cid, role, f"message {i}.{j} " + "x" * 400)


def test_garbage_file_is_kept_as_a_backup_and_a_fresh_history_starts(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    garbage = b"this is not a database \xff\xfe" * 200
    path.write_bytes(garbage)
    with History(path) as h:  # used to raise "file is not a database", at every start
        rec = h.recovery
        assert rec is not None
        assert rec.backup.parent == tmp_path and rec.backup.name.startswith(
            "history.sqlite3.damaged-"
        )
        assert rec.backup.read_bytes() == garbage
        assert (rec.conversations, rec.messages) == (0, 0)
        assert rec.message == (
            f"The conversation history ({path}) was damaged and could not be opened (file is "
            f"not a database). It was kept as {rec.backup} and a new, empty history was "
            "started; nothing could be recovered from it."
        )
        assert h.conversations() == []
        cid = h.create()
        h.add_message(cid, "user", "hello again")
        assert h.integrity_ok()
    with History(path) as h:  # the next start is an ordinary one
        assert h.recovery is None and len(h.conversations()) == 1


def test_readable_rows_are_recovered_from_a_damaged_page(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    _fill(path)
    with open(path, "r+b") as f:  # wreck one page of the messages table
        f.seek(4096 * 11)
        f.write(b"\xff" * 300)
    with sqlite3.connect(path) as db, pytest.raises(sqlite3.DatabaseError):
        db.execute("SELECT * FROM messages").fetchall()
    with History(path) as h:
        rec = h.recovery
        assert rec is not None and rec.backup.is_file()
        assert rec.conversations == 30 and 150 <= rec.messages < 180, rec
        assert "database disk image is malformed" in rec.message
        assert f"30 conversations with {rec.messages} messages were recovered" in rec.message
        assert h.integrity_ok()
        convs = h.conversations()
        assert len(convs) == 30 and sum(c.message_count for c in convs) == rec.messages
        first = h.conversation(convs[-1].id)
        assert first.title == "chat 0" and first.messages[0].content.startswith("message 0.0")


def test_a_locked_database_is_not_mistaken_for_a_damaged_one(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    _fill(path, 1, 2)
    holder = sqlite3.connect(path, timeout=0.1)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            History(path, timeout=0.2)
    finally:
        holder.rollback()
        holder.close()
    assert not list(tmp_path.glob("*.damaged-*"))
    with History(path) as h:
        assert h.recovery is None and len(h.conversations()) == 1


def test_two_connections_see_each_others_writes(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    with History(path) as a, History(path) as b:
        assert not b.changed_elsewhere()
        cid = a.create("from A")
        assert b.changed_elsewhere()  # the conversation list polls this
        assert not b.changed_elsewhere()  # ... once per change
        assert [c.title for c in b.conversations()] == ["from A"]
        b.add_message(cid, "user", "written by B")
        assert a.changed_elsewhere() and not b.changed_elsewhere()  # its own write: no news
        a.add_message(cid, "assistant", "written by A")
        assert [m.content for m in b.messages(cid)] == ["written by B", "written by A"]
        assert a.integrity_ok() and b.integrity_ok()
