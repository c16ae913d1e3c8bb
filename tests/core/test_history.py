"""The conversation database: persistence, titles, search, delete with undo, WAL."""

from __future__ import annotations

import json
import sqlite3

import pytest

from specchat.core.state.history import DEFAULT_TITLE, History, default_db_path, title_from_text


@pytest.fixture
def history(tmp_path):
    with History(tmp_path / "h.sqlite3") as h:
        yield h


def test_database_lives_in_the_data_dir_and_uses_wal(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    assert default_db_path() == tmp_path / "data" / "history.sqlite3"
    with History() as h:
        assert h.path == default_db_path()
        assert h.journal_mode() == "wal"
        h.create()
    assert default_db_path().is_file()


def test_messages_and_stats_survive_a_reopen(tmp_path) -> None:
    path = tmp_path / "h.sqlite3"
    stats = {"mode": "draft", "tokens_per_s": 41.5, "acceptance_rate": 0.72, "tokens": 20}
    with History(path) as h:
        cid = h.create(system_prompt="Be brief.")
        h.add_message(cid, "user", "What is a monad?")
        msg = h.add_message(cid, "assistant", "A burrito.", stats=stats, draft_spans=[(2, 9)])
        assert msg.stats == stats
    with History(path) as h:
        conv = h.conversation(cid)
        assert conv.title == "What is a monad?"  # the first user message titles a new chat
        assert [m.role for m in conv.messages] == ["user", "assistant"]
        assert conv.messages[1].stats == stats
        assert conv.messages[1].draft_spans == ((2, 9),)
        assert conv.chat_messages() == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is a monad?"},
            {"role": "assistant", "content": "A burrito."},
        ]
        assert h.integrity_ok()
    # stats are stored as JSON text, readable by any SQLite client
    db = sqlite3.connect(path)
    raw = db.execute("SELECT stats FROM messages WHERE role = 'assistant'").fetchone()[0]
    db.close()
    assert json.loads(raw)["mode"] == "draft"


def test_each_message_is_committed_at_once(tmp_path) -> None:
    path = tmp_path / "h.sqlite3"
    h = History(path)
    cid = h.create()
    h.add_message(cid, "user", "hello")
    other = sqlite3.connect(path)  # a second connection sees it without h closing
    assert other.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 1
    other.close()
    h.close()


def test_rename_search_and_order(history: History) -> None:
    a = history.create("Sorting algorithms")
    b = history.create("Rust lifetimes")
    c = history.create("Ünïcode TITLES")
    history.add_message(a, "user", "quicksort?")  # a becomes the most recent
    assert [s.id for s in history.conversations()][0] == a
    assert [s.id for s in history.conversations("rust")] == [b]
    assert [s.id for s in history.conversations("ÜNÏCODE")] == [c]
    assert [s.id for s in history.conversations("%")] == []  # no SQL wildcards
    history.rename(b, "  Borrow   checker ")
    assert history.conversation(b).title == "Borrow checker"
    with pytest.raises(ValueError):
        history.rename(b, "   ")
    with pytest.raises(KeyError):
        history.rename(9999, "x")
    summary = next(s for s in history.conversations() if s.id == a)
    assert summary.message_count == 1 and summary.title == "Sorting algorithms"


def test_delete_can_be_undone_until_purged(history: History) -> None:
    cid = history.create()
    history.add_message(cid, "user", "keep me")
    history.delete(cid)
    assert history.conversations() == []
    assert not history.exists(cid)
    with pytest.raises(KeyError):
        history.conversation(cid)
    history.restore(cid)
    assert history.conversation(cid).messages[0].content == "keep me"
    history.delete(cid)
    assert history.purge_deleted() == 1
    history.restore(cid)
    assert not history.exists(cid)
    assert history.messages(cid) == []  # messages went with it


def test_regenerate_and_edit_truncate_the_tail(history: History) -> None:
    cid = history.create()
    u1 = history.add_message(cid, "user", "one")
    history.add_message(cid, "assistant", "1")
    u2 = history.add_message(cid, "user", "two")
    history.add_message(cid, "assistant", "2")
    assert history.delete_messages_from(cid, u2.id) == 2
    assert [m.content for m in history.messages(cid)] == ["one", "1"]
    history.delete_messages_from(cid, u1.id)
    assert history.messages(cid) == []


def test_system_prompt_and_bad_input(history: History) -> None:
    cid = history.create()
    history.set_system_prompt(cid, "You are terse.")
    assert history.conversation(cid).system_prompt == "You are terse."
    with pytest.raises(ValueError):
        history.add_message(cid, "wizard", "hi")
    with pytest.raises(KeyError):
        history.add_message(12345, "user", "hi")


def test_titles() -> None:
    assert title_from_text("  hello\n  world ") == "hello world"
    assert title_from_text("") == DEFAULT_TITLE
    long = title_from_text("word " * 40)
    assert len(long) <= 48 and long.endswith("…")
