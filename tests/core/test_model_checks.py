"""Model files llama.cpp would abort on (#14 case 1) and pairs that cannot pay (case 7).

Every file here is a tiny qwen2 model that llama.cpp really loads (tests/tinymodel.py) with one
hyperparameter made absurd. Loading one of those in this process would kill pytest, so the
end-to-end checks run the CLI in a subprocess: it must exit 1 with a message naming the bad
value, never abort (exit 134) in silence.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tinymodel import write_loadable_gguf

from specchat.cli.main import main as cli_main
from specchat.core.gguf.compat import draft_size_warning
from specchat.core.gguf.header import GGUFError, read_gguf_info
from specchat.core.placement.pairing import LocalRef, inspect_pair

# (overrides, consistent tensors, text the error must contain); each of these aborted
# llama.cpp (exit 134) or left it loading a model with no usable context.
BAD: list[tuple[dict[str, Any], bool, str]] = [
    ({"qwen2__block_count": 0}, False, "qwen2.block_count = 0"),
    ({"qwen2__block_count": 100000}, False, "qwen2.block_count = 100000"),
    ({"qwen2__block_count": 513}, False, "1 to 512 layers"),
    ({"qwen2__embedding_length": 17}, True, "qwen2.embedding_length = 17"),
    ({"qwen2__embedding_length": 0}, False, "qwen2.embedding_length = 0"),
    ({"qwen2__attention__head_count": 3}, True, "3 attention heads must be a multiple of the KV"),
    (
        {"qwen2__attention__head_count": 3, "qwen2__attention__head_count_kv": 1},
        True,
        "qwen2.embedding_length = 16: it is not a multiple of qwen2.attention.head_count (3)",
    ),
    ({"qwen2__attention__head_count_kv": 3}, True, "qwen2.attention.head_count_kv = 3"),
    ({"qwen2__attention__head_count_kv": 8}, True, "qwen2.attention.head_count_kv = 8"),
    ({"qwen2__attention__head_count_kv": 0}, True, "qwen2.attention.head_count_kv = 0"),
    ({"qwen2__attention__head_count_kv": [2, 0]}, True, "qwen2.attention.head_count_kv"),
    (
        {"qwen2__attention__head_count": 16, "qwen2__attention__head_count_kv": 16},
        True,
        "odd",
    ),
    ({"qwen2__attention__key_length": 0}, False, "qwen2.attention.key_length = 0"),
    ({"qwen2__rope__dimension_count": 1000}, False, "qwen2.rope.dimension_count = 1000"),
    ({"qwen2__expert_count": 2000}, False, "qwen2.expert_count = 2000"),
    ({"qwen2__expert_used_count": 2}, False, "qwen2.expert_used_count = 2"),
    ({"qwen2__rope__scaling__type": "bogus"}, False, "qwen2.rope.scaling.type = 'bogus'"),
    ({"qwen2__nextn_predict_layers": 5}, False, "qwen2.nextn_predict_layers = 5"),
    ({"qwen2__context_length": 0}, False, "qwen2.context_length = 0"),
]


def _id(case: tuple[dict[str, Any], bool, str]) -> str:
    return ",".join(f"{k.split('__', 1)[1]}={v}" for k, v in case[0].items())


@pytest.mark.parametrize("case", BAD, ids=_id)
def test_absurd_hyperparameters_are_refused_by_name(
    case: tuple[dict[str, Any], bool, str], tmp_path: Path
) -> None:
    overrides, consistent, text = case
    path = write_loadable_gguf(tmp_path / "bad.gguf", consistent=consistent, **overrides)
    with pytest.raises(GGUFError) as err:
        read_gguf_info(path)
    message = str(err.value)
    assert message.startswith("bad.gguf: impossible model setting"), message
    assert text in message, message
    assert "not loaded" in message


def test_vocab_size_must_match_the_embedding_rows(tmp_path: Path) -> None:
    path = write_loadable_gguf(tmp_path / "bad.gguf", extra_vocab_rows=5)
    with pytest.raises(GGUFError, match=r"303 tokens but token_embd\.weight has 308 rows"):
        read_gguf_info(path)


def test_valid_tiny_model_is_accepted_and_runs(tmp_path: Path) -> None:
    from specchat.core.decoding.runtime import ModelRuntime, RuntimeConfig

    path = write_loadable_gguf(tmp_path / "good.gguf")
    info = read_gguf_info(path)
    assert (info.n_layers, info.n_embd, info.n_head, info.n_head_kv) == (2, 16, 4, 2)
    rt = ModelRuntime(path, RuntimeConfig(n_ctx=256, n_threads=1))
    try:
        rows = rt.decode(rt.tokenize("abc", add_special=False))
        assert rows.shape == (1, rt.n_vocab)
    finally:
        rt.close()


def test_real_default_pair_passes_the_checks(model_paths: tuple[Path, Path]) -> None:
    for path in model_paths:
        info = read_gguf_info(path)
        assert info.n_layers and info.n_embd and info.n_head


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SPECCHAT_TEST_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "specchat.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {"qwen2__block_count": 0},
        {"qwen2__block_count": 100000},
        {"qwen2__attention__head_count_kv": 3, "consistent": True},
    ],
    ids=["layers-0", "layers-100000", "kv-heads-3"],
)
def test_cli_names_the_bad_value_instead_of_aborting(
    overrides: dict[str, Any], tmp_path: Path
) -> None:
    path = write_loadable_gguf(tmp_path / "bad.gguf", **overrides)
    proc = _run_cli("generate", "--target", str(path), "--no-draft", "--prompt", "hi")
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "specchat-cli: error: bad.gguf: impossible model setting" in proc.stderr


def test_import_and_check_pair_refuse_a_bad_model(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    model_paths: tuple[Path, Path],
) -> None:
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path / "store"))
    bad = write_loadable_gguf(tmp_path / "bad.gguf", qwen2__block_count=0)
    assert cli_main(["models", "import", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "cannot import bad.gguf: bad.gguf: impossible model setting qwen2.block_count" in err
    assert not (tmp_path / "store" / "bad.gguf").exists()
    assert cli_main(["models", "check-pair", str(model_paths[0]), str(bad)]) == 2
    err = capsys.readouterr().err
    assert "cannot check the pair: bad.gguf: impossible model setting" in err


# ---------------------------------------------------------------------------------------------
# Case 7: a draft that is not smaller than its target


SWAPPED = (
    "the draft (1.78 B parameters) is larger than the target (0.63 B parameters): "
    "were the two swapped?"
)


def test_swapped_pair_is_warned_about(model_paths: tuple[Path, Path]) -> None:
    target, draft = model_paths
    t, d = read_gguf_info(target), read_gguf_info(draft)
    assert draft_size_warning(t, d) is None
    warning = draft_size_warning(d, t)
    assert warning is not None and warning.startswith(SWAPPED), warning
    report = inspect_pair(LocalRef(draft), LocalRef(target))
    assert report.verdict is not None and report.verdict.ok
    assert report.verdict.warnings == (warning,)


def test_check_pair_prints_the_warning(
    model_paths: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    target, draft = model_paths
    assert cli_main(["models", "check-pair", str(target), str(draft)]) == 0
    assert "WARNING" not in capsys.readouterr().out
    assert cli_main(["models", "check-pair", str(draft), str(target)]) == 0
    out = capsys.readouterr().out
    assert "OK: the draft fits the target" in out
    assert "WARNING: " + SWAPPED in out
