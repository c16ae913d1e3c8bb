"""Bad input at the command line (#14): invalid UTF-8 (case 3), conversations that outgrow the
context and over-long prompts (case 4), settings changed behind the user's back (case 6), and
empty prompts (case 8).

The CLI runs in this process on the tiny loadable model of tests/tinymodel.py (256-token
context, random weights: it loads in milliseconds and babbles), so these tests are quick.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from tinymodel import write_loadable_gguf

from specchat.cli.main import main as cli_main
from specchat.core.conversation.context_fit import (
    CLI_ADVICE,
    PromptTooLongError,
    fit_messages,
    reply_room,
)
from specchat.core.decoding.config import RuntimeFacts, adjust_config
from specchat.core.decoding.runtime import RuntimeConfig
from specchat.core.machine.backend_info import gpu_offload_supported

REPLACED = "replaced 1 byte that is not valid UTF-8 with \ufffd (U+FFFD)"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_loadable_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


def _base(tiny: Path, *extra: str) -> list[str]:
    return ["--target", str(tiny), "--no-draft", "--threads", "1", "--gpu-layers", "0", *extra]


def _generate(tiny: Path, *args: str) -> int:
    return cli_main(["generate", *_base(tiny, "--max-tokens", "4", "--ctx", "256"), *args])


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes, errors: str = "strict") -> None:
    monkeypatch.setattr(
        "sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors=errors)
    )


def _chat(tiny: Path, monkeypatch: pytest.MonkeyPatch, data: bytes, *extra: str, errors="strict"):
    _stdin(monkeypatch, data, errors)
    return cli_main(
        ["chat", "--mode", "off", *_base(tiny, "--max-tokens", "6", "--ctx", "256"), *extra]
    )


# -- case 3: invalid UTF-8 -----------------------------------------------------------------------


@pytest.mark.parametrize("errors", ["strict", "surrogateescape"])
def test_chat_replaces_an_invalid_byte_and_goes_on(
    tiny: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    errors: str,
) -> None:
    rc = _chat(tiny, monkeypatch, b"caf\xe9 au lait\nsecond message\n/quit\n", errors=errors)
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert f"note: {REPLACED}" in err
    assert out.count("assistant> ") == 2  # the conversation went on


def test_generate_accepts_an_invalid_byte_in_the_prompt(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _generate(tiny, "--prompt", "caf\udce9 au lait") == 0  # as argv decodes 0xE9
    assert f"specchat-cli: note: {REPLACED}" in capsys.readouterr().err


# -- case 8: empty prompts -----------------------------------------------------------------------


@pytest.mark.parametrize("prompt", ["", "   ", "\u200b\n\t"])
def test_generate_refuses_an_empty_prompt(
    tiny: Path, capsys: pytest.CaptureFixture[str], prompt: str
) -> None:
    assert _generate(tiny, "--prompt", prompt) == 1
    assert capsys.readouterr().err.strip() == (
        "specchat-cli: error: the prompt is empty: there is nothing to send "
        "(give it with --prompt TEXT, --prompt-file PATH, or --prompt - to read stdin)"
    )


def test_generate_needs_some_prompt(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        _generate(tiny)
    assert exit_.value.code == 2
    assert "one of the arguments --prompt --prompt-file is required" in capsys.readouterr().err


def test_chat_refuses_an_invisible_message(
    tiny: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = _chat(tiny, monkeypatch, "\u200b\u200b\nhello\n/quit\n".encode())
    out, err = capsys.readouterr()
    assert rc == 0
    assert "not sent: the message is empty: there is nothing to send" in err
    assert out.count("assistant> ") == 1


# -- case 4: prompts and conversations longer than the context -----------------------------------


LONG = " ".join(["a b c"] * 200)  # ~600 tokens: more than the tiny model's 256


def test_generate_fails_on_a_prompt_longer_than_the_context(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _generate(tiny, "--prompt", LONG) == 1
    err = capsys.readouterr().err
    assert "specchat-cli: error: too long for the context: the message takes" in err
    assert "the context holds 256, with no room left for a reply; shorten it" in err
    assert "use a larger --ctx" in err


def test_prompt_from_a_file_and_from_stdin(
    tiny: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "prompt.txt"
    path.write_bytes(b"\xef\xbb\xbfwrite a b c\n")
    assert _generate(tiny, "--prompt-file", str(path), "--json") == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["prompt_tokens"] > 0 and record["finish_reason"] in ("length", "stop")

    _stdin(monkeypatch, b"from stdin \xff\n")
    assert _generate(tiny, "--prompt", "-") == 0
    assert f"specchat-cli: note: {REPLACED}" in capsys.readouterr().err

    assert _generate(tiny, "--prompt-file", str(tmp_path / "missing.txt")) == 1
    assert (
        f"specchat-cli: error: cannot read the prompt file {tmp_path / 'missing.txt'}: "
        "No such file or directory" in capsys.readouterr().err
    )
    path.write_text(LONG)
    assert _generate(tiny, "--prompt-file", str(path)) == 1
    assert "too long for the context" in capsys.readouterr().err


def test_chat_drops_the_oldest_exchanges_and_says_so(
    tiny: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    turn = " ".join(["a b c"] * 12)  # ~40 tokens with the template
    lines = "".join(f"{turn} {i}\n" for i in range(8)) + "/quit\n"
    rc = _chat(tiny, monkeypatch, lines.encode())
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out.count("assistant> ") == 8
    assert "fills the" not in err  # never again "the prompt fills the context"
    assert "note: Left out the 2 oldest messages (1 exchange) so that the conversation" in err
    assert "To keep them, type /new to start afresh with a summary, or restart with a" in err
    assert " 0 tokens" not in err  # every message got a reply


def test_chat_refuses_one_message_too_long_and_goes_on(
    tiny: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = _chat(tiny, monkeypatch, f"{LONG}\nshort one\n/quit\n".encode())
    out, err = capsys.readouterr()
    assert rc == 0
    assert "not sent: too long for the context: the message takes" in err
    assert out.count("assistant> ") == 1


def _words(messages: Sequence[dict[str, str]]) -> int:
    return sum(len(m["content"].split()) + 2 for m in messages)


def test_fit_policy_keeps_the_system_prompt_and_whole_exchanges() -> None:
    system = {"role": "system", "content": "be brief"}
    turns = []
    for i in range(6):
        turns.append({"role": "user", "content": f"question {i} " + "w " * 20})
        turns.append({"role": "assistant", "content": f"answer {i} " + "w " * 20})
    turns.append({"role": "user", "content": "last question"})
    msgs = [system, *turns]
    whole = _words(msgs)
    fit = fit_messages(msgs, _words, whole + 100, max_tokens=50)
    assert fit.messages == msgs and fit.dropped == 0 and fit.notice == ""

    fit = fit_messages(msgs, _words, 200, max_tokens=50)
    assert fit.messages[0] == system and fit.messages[-1] == turns[-1]
    assert fit.messages[1]["role"] == "user"  # never half an exchange
    assert fit.dropped % 2 == 0 and fit.dropped_messages == turns[: fit.dropped]
    assert fit.prompt_tokens is not None
    assert fit.prompt_tokens + reply_room(200, 50) <= 200
    assert fit.notice.startswith(
        f"Left out the {fit.dropped} oldest messages ({fit.dropped // 2} exchanges) so that the "
        "conversation fits the 200-token context"
    )
    # only the newest message fits, without the room wanted: sent anyway
    fit = fit_messages(msgs, _words, _words([system, turns[-1]]) + 1, max_tokens=50)
    assert fit.messages == [system, turns[-1]]
    with pytest.raises(PromptTooLongError, match="restart with a larger --ctx"):
        fit_messages(msgs, _words, 4, max_tokens=50, advice=CLI_ADVICE)


# -- case 6: settings the model cannot run with ----------------------------------------------------


def test_adjust_config_says_what_it_changed() -> None:
    asked = RuntimeConfig(n_ctx=1_000_000, n_gpu_layers=-1, n_threads=1024)
    adj = adjust_config(asked, RuntimeFacts(n_ctx_train=32768, cpus=2, gpu_offload=False))
    assert (adj.config.n_ctx, adj.config.n_gpu_layers, adj.config.n_threads) == (32768, 0, 2)
    assert adj.notices == (
        "GPU layers -1 (all) ignored: this llama-cpp-python build cannot offload to a GPU, so "
        "the model runs on the CPU (install a CUDA or Metal build to use the GPU)",
        "context 1,000,000 tokens cut to 32,768: the model was trained on 32,768 tokens at most",
        "threads 1,024 lowered to 2: this machine has 2 CPUs, and more threads than CPUs makes "
        "llama.cpp many times slower",
    )
    fine = RuntimeConfig(n_ctx=4096, n_gpu_layers=-1, n_threads=2)
    adj = adjust_config(fine, RuntimeFacts(n_ctx_train=32768, cpus=2, gpu_offload=True))
    assert adj.config == fine and adj.notices == ()


def test_generate_names_every_override_in_its_stats_line(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["generate", "--prompt", "hi", "--max-tokens", "2", "--target", str(tiny)]
    args += ["--no-draft", "--ctx", "1000000", "--threads", "1024", "--gpu-layers", "-1"]
    assert cli_main(args) == 0
    stats = capsys.readouterr().err.strip().splitlines()[-1]
    assert "context 1,000,000 tokens cut to 256: the model was trained on 256" in stats
    assert "threads 1,024 lowered to" in stats
    if not gpu_offload_supported():
        assert "GPU layers -1 (all) ignored: this llama-cpp-python build cannot offload" in stats
    assert cli_main([*args, "--json"]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert any(n.startswith("context 1,000,000 tokens cut to 256") for n in record["notices"])


def test_threads_above_the_limit_name_the_limit(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = cli_main(["generate", "--prompt", "hi", *_base(tiny), "--threads", "10000"])
    assert rc == 1
    assert (
        "specchat-cli: error: threads must be 0 (automatic) or at most 1,024, not 10,000"
        in capsys.readouterr().err
    )
