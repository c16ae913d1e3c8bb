"""SIGTERM stops `specchat-cli` as Ctrl+C does, but ends a chat rather than only its reply
(the bench's partial report and its peers: tests/remote/test_bench_ngram_peers.py)."""

from __future__ import annotations

import io
import os
import signal
from pathlib import Path

import pytest
from tinymodel import write_loadable_gguf

from specchat.cli.main import main as cli_main

PROMPT = "\nyou> "


class TermOnReply(io.StringIO):
    """stdout that sends this process SIGTERM when the first reply's first text is written."""

    def __init__(self) -> None:
        super().__init__()
        self.trigger: str | None = None

    def write(self, s: str) -> int:
        n = super().write(s)
        opened = "assistant> " in self.getvalue() and "assistant> " not in s
        if self.trigger is None and opened and s.strip():
            self.trigger = s
            os.kill(os.getpid(), signal.SIGTERM)
        return n


def test_sigterm_during_a_chat_reply_ends_the_chat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGTERM while a reply streams ends the whole chat (exit code 130, "interrupted"), where
    Ctrl+C stops only the reply and the chat goes on. Fails if SIGTERM is not taken as Ctrl+C
    (the test's own handler gets it and the chat answers the second message too) or if the
    chat takes it for a stopped reply ("[stopped]", then the second message)."""
    tiny = write_loadable_gguf(tmp_path / "tiny.gguf")
    got: list[int] = []

    def guard(signum: int, frame: object) -> None:  # (without the fix: keeps pytest alive)
        got.append(signum)

    earlier = signal.signal(signal.SIGTERM, guard)
    out = TermOnReply()
    stdin = io.TextIOWrapper(io.BytesIO(b"first message\nsecond message\n/quit\n"), "utf-8")
    monkeypatch.setattr("sys.stdin", stdin)
    monkeypatch.setattr("sys.stdout", out)
    try:
        rc = cli_main(
            ["chat", "--mode", "off", "--target", str(tiny), "--no-draft", "--threads", "1",
             "--gpu-layers", "0", "--max-tokens", "48", "--ctx", "256"]
        )  # fmt: skip
    finally:
        after = signal.signal(signal.SIGTERM, earlier)
    err = capsys.readouterr().err
    assert out.trigger is not None and PROMPT.strip() not in out.trigger  # mid-reply
    assert not got, "SIGTERM reached the handler the command found (not taken as Ctrl+C)"
    assert rc == 130 and "interrupted" in err and "[stopped]" not in err, err
    assert out.getvalue().count("assistant> ") == 1
    assert after is guard  # the command put back the handler it found
