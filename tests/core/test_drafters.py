"""Drafters SpecChat does not run itself (EAGLE-3, DFlash, DSpark files; MTP layers inside a
target) are named for what they are in `models import`, `check-pair`, the pair verdict and at
load time — never reported as a vocabulary mismatch or left to fail inside llama.cpp.

The files are tiny GGUFs written here: the header and metadata are what is recognised.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from tinymodel import tiny_vocab, write_loadable_gguf

from specchat.cli.main import main
from specchat.core.decoding.config import ModelLoadError
from specchat.core.decoding.runtime import ModelRuntime, RuntimeConfig
from specchat.core.gguf.compat import check_draft_compat
from specchat.core.gguf.drafters import drafter_note, mtp_layers, special_drafter
from specchat.core.gguf.header import read_gguf_info
from specchat.core.placement.pairing import LocalRef, check_pair


def write_drafter(path: Path, arch: str, *, with_vocab: bool = False) -> Path:
    """A drafter-only GGUF: its own architecture, one layer, no vocabulary unless asked (EAGLE-3
    files usually borrow the target's; a vocabulary check would then say 'no tokenizer')."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_string("general.name", f"tiny {arch}")
    w.add_uint32(f"{arch}.block_count", 1)
    w.add_uint32(f"{arch}.context_length", 256)
    w.add_uint32(f"{arch}.embedding_length", 16)
    w.add_uint32(f"{arch}.attention.head_count", 4)
    w.add_uint32(f"{arch}.attention.head_count_kv", 2)
    if with_vocab:
        tokens, types = tiny_vocab()
        w.add_string("tokenizer.ggml.model", "gpt2")
        w.add_array("tokenizer.ggml.tokens", tokens)
        w.add_array("tokenizer.ggml.token_type", types)
    w.add_tensor("fc.weight", np.zeros((16, 48), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def target(tmp_path: Path) -> Path:
    return write_loadable_gguf(tmp_path / "target.gguf")


@pytest.mark.parametrize(
    ("arch", "what", "spec_type"),
    [
        ("eagle3", "EAGLE-3", "draft-eagle3"),
        ("dflash", "DFlash", "draft-dflash"),
        ("dspark", "DSpark", "draft-dspark"),
    ],
)
def test_check_pair_names_the_drafter_and_how_to_use_it(
    tmp_path: Path,
    target: Path,
    arch: str,
    what: str,
    spec_type: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    drafter = write_drafter(tmp_path / f"{arch}.gguf", arch)
    code = main(["models", "check-pair", str(target), str(drafter)])
    out = capsys.readouterr().out
    assert code == 1, out
    assert f"{what} drafter" in out
    assert f"--spec-type {spec_type}" in out
    assert "remote engine" in out
    assert "check 'drafter_kind' failed" in out
    for vocabulary_error in ("vocab types differ", "vocab sizes differ", "no tokenizer type"):
        assert vocabulary_error not in out, out
    assert "(no vocabulary of its own)" in out


def test_a_drafter_with_its_own_vocabulary_is_still_named(tmp_path: Path, target: Path) -> None:
    """Even when the vocabularies agree, a drafter-only file cannot be SpecChat's draft."""
    drafter = write_drafter(tmp_path / "eagle.gguf", "eagle3", with_vocab=True)
    result = check_draft_compat(read_gguf_info(target), read_gguf_info(drafter))
    assert not result.ok and result.check == "drafter_kind"


def test_a_drafter_as_target_is_named_too(tmp_path: Path, target: Path) -> None:
    drafter = write_drafter(tmp_path / "dflash.gguf", "dflash")
    result = check_draft_compat(read_gguf_info(drafter), read_gguf_info(target))
    assert not result.ok and result.check == "target_kind"
    assert "DFlash drafter" in result.message


def test_ordinary_models_are_not_special(target: Path) -> None:
    info = read_gguf_info(target)
    assert special_drafter(info) is None and mtp_layers(info) == 0 and drafter_note(info) is None


def test_loading_a_drafter_says_what_it_is_before_llama_cpp_runs(tmp_path: Path) -> None:
    drafter = write_drafter(tmp_path / "eagle.gguf", "eagle3")
    with pytest.raises(ModelLoadError, match="EAGLE-3 drafter.*--spec-type draft-eagle3"):
        ModelRuntime(drafter, RuntimeConfig(n_ctx=256))


def test_mtp_layers_in_a_target_are_named_and_the_pair_still_works(
    tmp_path: Path, target: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mtp = write_loadable_gguf(tmp_path / "mtp-target.gguf", qwen2__nextn_predict_layers=1)
    assert mtp_layers(read_gguf_info(mtp)) == 1
    verdict = check_pair(LocalRef(mtp), LocalRef(target))
    assert verdict.ok
    assert any("MTP (NextN)" in w and "--spec-type draft-mtp" in w for w in verdict.warnings)
    code = main(["models", "check-pair", str(mtp), str(target)])
    out = capsys.readouterr().out
    assert code == 0 and "draft-mtp" in out


def test_models_import_says_what_the_file_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path / "store"))
    drafter = write_drafter(tmp_path / "eagle.gguf", "eagle3")
    assert main(["models", "import", str(drafter)]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "store" / "eagle.gguf").is_file()
    assert "NOTE:" in out and "EAGLE-3 drafter" in out and "draft-eagle3" in out
