"""`specchat-cli chat`'s /mode mtp: taken when the target has an MTP head (here the built-in one
of the generated hybrid qwen35 of tests/tinymodel.py), refused with the reason when it has none
(the generated lfm2), as /mode draft is without a draft model."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from tinymodel import write_lfm2, write_qwen35_mtp

from specchat.cli.main import main as cli_main


def _chat(monkeypatch: pytest.MonkeyPatch, target: Path, typed: str, mode: str = "off") -> int:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(typed.encode()), "utf-8"))
    args = ["--target", str(target), "--no-draft", "--threads", "1", "--gpu-layers", "0"]
    args += ["--max-tokens", "8", "--ctx", "256", "--p-min", "0"]
    return cli_main(["chat", "--mode", mode, *args])


def test_mode_mtp_with_a_built_in_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    target = write_qwen35_mtp(tmp_path / "tiny-qwen35-mtp.gguf")
    assert _chat(monkeypatch, target, "/mode mtp\nw1 w2 w3\n/quit\n") == 0
    out, err = capsys.readouterr()
    assert "speculation: mtp (Built-in MTP)" in err
    assert re.search(r"\[mode mtp, 8 tokens, .* accepted \d+/[1-9]\d* ", err), err  # it drafted
    assert out.count("assistant> ") == 1


def test_mode_mtp_refused_without_a_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    target = write_lfm2(tmp_path / "tiny-lfm2.gguf")
    assert _chat(monkeypatch, target, "/mode mtp\nw1 w2 w3\n/quit\n", mode="mtp") == 0
    err = capsys.readouterr().err
    assert "no MTP head or assistant: speculating with lookup instead" in err  # --mode mtp
    assert "ready — speculation: lookup" in err
    assert "this model has no MTP head or assistant (load one with --draft" in err  # /mode mtp
    assert "staying in lookup" in err and "[mode lookup, 8 tokens" in err
