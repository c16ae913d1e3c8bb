"""Tests for the GGUF header reader (specchat.core.gguf) and draft compatibility checks."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import struct
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from specchat.core.gguf import header as gguf_mod
from specchat.core.gguf.compat import (
    CompatResult,
    IncompatibleDraftError,
    check_draft_compat,
    require_compatible,
)
from specchat.core.gguf.header import (
    GGUFError,
    GGUFInfo,
    NeedMoreData,
    parse_gguf_prefix,
    read_gguf_info,
)

N_TOKENS = 300
N_EMBD = 16

TARGET_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


# ---------------------------------------------------------------------------------------------
# Helpers


def make_vocab(n: int = N_TOKENS) -> tuple[list[str], list[int]]:
    """256 byte tokens, ordinary words, then a few control tokens at the end."""
    tokens = [f"<0x{i:02X}>" for i in range(256)]
    types = [int(gguf.TokenType.BYTE)] * 256
    n_words = n - 256 - 3
    tokens += [f"Ġword{i}" for i in range(n_words)]
    types += [int(gguf.TokenType.NORMAL)] * n_words
    tokens += ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types += [int(gguf.TokenType.CONTROL)] * 3
    return tokens, types


def write_model(
    path: Path,
    *,
    arch: str = "qwen2",
    vocab_type: str = "gpt2",
    tokens: Sequence[str] | None = None,
    token_types: Sequence[int] | None = None,
    bos: int = N_TOKENS - 3,
    eos: int = N_TOKENS - 1,
    add_bos: bool = False,
    extra: dict[str, Any] | None = None,
    typed: dict[str, tuple[Any, gguf.GGUFValueType]] | None = None,
) -> Path:
    """Write a tiny but complete GGUF model file with gguf.GGUFWriter."""
    if tokens is None:
        tokens, default_types = make_vocab()
        token_types = default_types if token_types is None else token_types
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("Tiny Test Model")
    w.add_context_length(256)
    w.add_block_count(2)
    w.add_embedding_length(N_EMBD)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model(vocab_type)
    w.add_token_list(list(tokens))
    if token_types is not None:
        w.add_token_types(list(token_types))
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(add_bos)
    w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")
    for key, value in (extra or {}).items():
        w.add_key_value(key, value, gguf.GGUFValueType.get_type(value))
    for key, (value, vtype) in (typed or {}).items():
        w.add_key_value(key, value, vtype)
    emb = np.arange(len(tokens) * N_EMBD, dtype=np.float32).reshape(len(tokens), N_EMBD)
    w.add_tensor("token_embd.weight", emb)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    return write_model(tmp_path / "tiny.gguf")


@pytest.fixture
def model_bytes(model_path: Path) -> bytes:
    return model_path.read_bytes()


def info_with(info: GGUFInfo, **changes: Any) -> GGUFInfo:
    """A copy of `info` with some metadata keys replaced."""
    return dataclasses.replace(info, metadata={**info.metadata, **changes})


# ---------------------------------------------------------------------------------------------
# Valid files


def test_valid_file_parses(model_path: Path) -> None:
    info = read_gguf_info(model_path)
    tokens, types = make_vocab()
    assert info.name == "tiny.gguf"
    assert info.version == 3
    assert info.n_tensors == 2 and len(info.tensors) == 2
    assert info.n_kv == len(info.metadata)
    assert info.file_size == model_path.stat().st_size
    assert info.architecture == "qwen2"
    assert info.model_name == "Tiny Test Model"
    assert info.context_length == 256
    assert info.vocab_type == "gpt2"
    assert info.tokens == tokens
    assert list(info.token_types or []) == types
    assert info.vocab_size == N_TOKENS
    assert (info.bos_id, info.eos_id, info.add_bos) == (N_TOKENS - 3, N_TOKENS - 1, False)
    assert info.chat_template is not None and "messages" in info.chat_template
    assert info.quantization == "F32"
    assert (info.n_layers, info.n_embd, info.n_head, info.n_head_kv) == (2, N_EMBD, 4, 2)
    # 2 (K and V) * 2 layers * 2 kv heads * head dim 4 * 2 bytes
    assert info.kv_bytes_per_token() == 2 * 2 * 2 * 4 * 2
    assert info.kv_bytes_per_token(type_bytes=1) == 2 * 2 * 2 * 4
    assert info.n_params == N_TOKENS * N_EMBD + N_EMBD

    emb = next(t for t in info.tensors if t.name == "token_embd.weight")
    assert emb.ggml_type == int(gguf.GGMLQuantizationType.F32)
    assert emb.shape == (N_EMBD, N_TOKENS)  # ggml order: innermost first
    assert emb.nbytes == N_TOKENS * N_EMBD * 4
    assert info.header_size % 32 == 0
    assert info.data_end == max(info.header_size + t.offset + t.nbytes for t in info.tensors)
    assert info.data_end <= info.file_size


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("Qwen2.5 Coder 0.5B Instruct AWQ", "Qwen2.5 Coder 0.5B Instruct"),
        ("Qwen2.5 Coder 1.5B Instruct GGUF", "Qwen2.5 Coder 1.5B Instruct"),
        ("Llama 3.1 8B Instruct Q4_K_M GGUF", "Llama 3.1 8B Instruct"),
        ("Mistral 7B v0.3 (GGUF)", "Mistral 7B v0.3"),
        ("Gemma 2 9b it bf16", "Gemma 2 9b it"),
        ("Tiny IQ3_XXS", "Tiny"),
        ("Some Model 4bit", "Some Model"),
        # the model's own words stay, sizes and versions included
        ("Qwen2.5 7B Instruct 1M", "Qwen2.5 7B Instruct 1M"),
        ("Phi 3 mini 4k instruct", "Phi 3 mini 4k instruct"),
        ("Qwen3 4B", "Qwen3 4B"),
        ("GGUF", None),  # nothing left: the file name is shown
    ],
)
def test_the_name_shown_drops_packaging_words(
    model_path: Path, name: str, shown: str | None
) -> None:
    """`general.name` shown without the format and quantisation words an uploader left at its
    end (the default draft's file says "... AWQ" though it is a Q4_K_M GGUF)."""
    info = info_with(read_gguf_info(model_path), **{"general.name": name})
    assert info.model_name == name
    assert info.display_name == shown


def test_the_default_pair_is_shown_by_its_models_names(model_paths: tuple[Path, Path]) -> None:
    """The real files: the draft's metadata names it "... AWQ", the target's "... GGUF"."""
    target, draft = (read_gguf_info(p) for p in model_paths)
    assert draft.model_name is not None and draft.model_name.endswith("AWQ")
    assert (target.display_name, draft.display_name) == (
        "Qwen2.5 Coder 1.5B Instruct",
        "Qwen2.5 Coder 0.5B Instruct",
    )


def test_agrees_with_reference_reader(model_path: Path) -> None:
    info = read_gguf_info(model_path)
    ref = gguf.GGUFReader(model_path)
    assert info.header_size == ref.data_offset
    assert [t.name for t in info.tensors] == [t.name for t in ref.tensors]
    assert [t.nbytes for t in info.tensors] == [int(t.n_bytes) for t in ref.tensors]
    for ours, theirs in zip(info.tensors, ref.tensors, strict=True):
        assert info.header_size + ours.offset == theirs.data_offset


def test_all_value_types(tmp_path: Path) -> None:
    vt = gguf.GGUFValueType
    typed: dict[str, tuple[Any, gguf.GGUFValueType]] = {
        "test.u8": (200, vt.UINT8),
        "test.i8": (-100, vt.INT8),
        "test.u16": (60000, vt.UINT16),
        "test.i16": (-30000, vt.INT16),
        "test.u32": (4_000_000_000, vt.UINT32),
        "test.i32": (-2_000_000_000, vt.INT32),
        "test.u64": (2**64 - 1, vt.UINT64),
        "test.i64": (-(2**62), vt.INT64),
        "test.f32": (0.5, vt.FLOAT32),
        "test.f64": (0.1, vt.FLOAT64),
        "test.flag": (True, vt.BOOL),
        "test.text": ("héllo ✓", vt.STRING),
    }
    extra: dict[str, Any] = {
        "test.big": list(range(2000)),
        "test.small": [1.5, 2.5],
        "test.bools": [True, False],
        "test.nested": [[1, 2], [3]],
        "test.words": ["a", "bb", ""],
    }
    info = read_gguf_info(write_model(tmp_path / "types.gguf", extra=extra, typed=typed))
    md = info.metadata
    for key, (value, _) in typed.items():
        assert md[key] == value and type(md[key]) is type(value), key
    assert isinstance(md["test.big"], np.ndarray) and md["test.big"].tolist() == extra["test.big"]
    assert md["test.small"] == [1.5, 2.5]
    assert md["test.bools"] == [True, False]
    assert md["test.nested"] == [[1, 2], [3]]
    assert md["test.words"] == ["a", "bb", ""]


def test_parse_accepts_memoryview_and_header_only_prefix(model_bytes: bytes) -> None:
    full = parse_gguf_prefix(memoryview(model_bytes), name="m", file_size=len(model_bytes))
    head = parse_gguf_prefix(model_bytes[: full.header_size], name="m", file_size=len(model_bytes))
    assert head.tokens == full.tokens and head.data_end == full.data_end


def test_read_without_mmap(model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_mmap(*args: Any, **kwargs: Any) -> Any:
        raise OSError("mmap not supported here")

    monkeypatch.setattr(gguf_mod.mmap, "mmap", no_mmap)
    monkeypatch.setattr(gguf_mod, "_FIRST_CHUNK", 64)  # force several growing reads
    info = read_gguf_info(model_path)
    assert info.vocab_size == N_TOKENS and info.n_tensors == 2


def test_a_large_files_header_is_read_once_until_the_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Headers of large files are kept (a 150k-token vocabulary takes ~0.4 s to parse): the
    same file is parsed once, under any name; a rewritten file is parsed again."""
    monkeypatch.setattr(gguf_mod, "_MEMO_MIN_BYTES", 0)  # the test's files are tiny
    parsed: list[str] = []
    parse = gguf_mod._parse_open_file

    def counting(f: Any, name: str) -> GGUFInfo:
        parsed.append(name)
        return parse(f, name)

    monkeypatch.setattr(gguf_mod, "_parse_open_file", counting)
    path = write_model(tmp_path / "kept.gguf")
    first = read_gguf_info(path)
    assert read_gguf_info(path).metadata == first.metadata and len(parsed) == 1
    link = tmp_path / "other-name.gguf"
    link.symlink_to(path)
    assert read_gguf_info(link).name == "other-name.gguf"
    path.unlink()  # replaced by a different model: read again
    write_model(path, extra={"general.description": "rewritten"})
    assert read_gguf_info(path).metadata["general.description"] == "rewritten"
    data = bytearray(path.read_bytes())  # the same size, written in place: read again
    i = data.index(b"rewritten")
    data[i : i + 9] = b"REWRITTEN"
    with open(path, "r+b") as f:
        f.write(data)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert read_gguf_info(path).metadata["general.description"] == "REWRITTEN"
    assert parsed == ["kept.gguf", "kept.gguf", "kept.gguf"]


# ---------------------------------------------------------------------------------------------
# Broken files


def test_zip_file_is_not_gguf(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("weights.bin", b"\0" * 100)
    with pytest.raises(GGUFError, match="model.gguf is not a GGUF file") as err:
        read_gguf_info(path)
    assert "PK" in str(err.value) and "zip" in str(err.value)


def test_html_file_is_not_gguf(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_text("<!DOCTYPE html><html>Rate limited</html>")
    with pytest.raises(GGUFError, match="not a GGUF file.*web page"):
        read_gguf_info(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="nothere.gguf does not exist"):
        read_gguf_info(tmp_path / "nothere.gguf")


def test_directory(tmp_path: Path) -> None:
    (tmp_path / "dir.gguf").mkdir()
    with pytest.raises(GGUFError, match="dir.gguf is a directory"):
        read_gguf_info(tmp_path / "dir.gguf")


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(GGUFError, match="empty.gguf is empty"):
        read_gguf_info(tmp_path / "empty.gguf")


def test_truncated_in_header(tmp_path: Path, model_bytes: bytes) -> None:
    info = parse_gguf_prefix(model_bytes, name="x", file_size=len(model_bytes))
    path = tmp_path / "cut.gguf"
    path.write_bytes(model_bytes[: info.header_size // 2])
    with pytest.raises(GGUFError, match="cut.gguf is truncated"):
        read_gguf_info(path)


def test_truncated_in_tensor_data(tmp_path: Path, model_bytes: bytes) -> None:
    info = parse_gguf_prefix(model_bytes, name="x", file_size=len(model_bytes))
    path = tmp_path / "cut.gguf"
    path.write_bytes(model_bytes[: (info.header_size + info.data_end) // 2])
    with pytest.raises(GGUFError, match="cut.gguf is truncated: tensor '.*' ends at byte") as err:
        read_gguf_info(path)
    assert "download incomplete" in str(err.value)


def test_every_prefix_is_truncated_not_a_crash(model_bytes: bytes) -> None:
    info = parse_gguf_prefix(model_bytes, name="x", file_size=len(model_bytes))
    for cut in [*range(1, 64), *range(64, info.data_end, 97)]:
        with pytest.raises(GGUFError, match="truncated"):
            parse_gguf_prefix(model_bytes[:cut], name="x", file_size=cut)


def test_huge_string_length_fails_fast(tmp_path: Path) -> None:
    garbage = b"GGUF" + struct.pack("<IQQQ", 3, 1, 1, 9 * 10**18) + b"key" + b"\0" * 64
    path = tmp_path / "bad.gguf"
    path.write_bytes(garbage)
    # (a reader that believed the length would try to allocate 9 EB and fail differently)
    with pytest.raises(GGUFError, match="header is corrupt: string length 9,000,000,000"):
        read_gguf_info(path)
    with pytest.raises(GGUFError, match="corrupt"):  # also without knowing the file size
        parse_gguf_prefix(garbage, name="bad.gguf", file_size=None)


@pytest.mark.parametrize("field, value", [("n_tensors", 10**12), ("n_kv", 2**63)])
def test_absurd_counts_fail_fast(field: str, value: int) -> None:
    counts = {"n_tensors": 1, "n_kv": 1, field: value}
    data = b"GGUF" + struct.pack("<IQQ", 3, counts["n_tensors"], counts["n_kv"]) + b"\0" * 64
    with pytest.raises(GGUFError, match="corrupt"):
        parse_gguf_prefix(data, name="bad.gguf", file_size=len(data))


@pytest.mark.parametrize(
    "version, message",
    [
        (1, "version 1, which is too old"),
        (7, "unsupported GGUF version 7"),
        (3 << 24, "big-endian"),
    ],
)
def test_versions(model_bytes: bytes, version: int, message: str) -> None:
    data = model_bytes[:4] + struct.pack("<I", version) + model_bytes[8:]
    with pytest.raises(GGUFError, match=message):
        parse_gguf_prefix(data, name="v.gguf", file_size=len(data))


def test_random_corruption_gives_gguf_errors_only(model_bytes: bytes) -> None:
    info = parse_gguf_prefix(model_bytes, name="x", file_size=len(model_bytes))
    rng = random.Random(1234)
    for _ in range(300):
        data = bytearray(model_bytes)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(info.header_size)
            data[pos] = rng.choice([0, 0xFF, rng.randrange(256)])
        with contextlib.suppress(GGUFError):
            parse_gguf_prefix(data, name="x", file_size=len(data))


# ---------------------------------------------------------------------------------------------
# Prefix parsing (for HTTP range requests)


def test_prefix_needs_more_data(model_bytes: bytes) -> None:
    full = parse_gguf_prefix(model_bytes, name="m", file_size=len(model_bytes))
    for n in (0, 3, 10, 30, 100, full.header_size // 2, full.header_size - 40):
        with pytest.raises(NeedMoreData) as err:
            parse_gguf_prefix(model_bytes[:n], name="m", file_size=None)
        assert err.value.needed > n
        with pytest.raises(NeedMoreData):  # known size but more of it to fetch
            parse_gguf_prefix(model_bytes[:n], name="m", file_size=len(model_bytes))


def test_prefix_grows_to_success(model_bytes: bytes) -> None:
    n, rounds = 16, 0
    while True:
        try:
            info = parse_gguf_prefix(model_bytes[:n], name="m", file_size=None)
            break
        except NeedMoreData as e:
            assert e.needed > n
            n, rounds = e.needed, rounds + 1
    assert rounds > 10  # string by string
    assert info.tokens == make_vocab()[0] and info.file_size is None


# ---------------------------------------------------------------------------------------------
# Draft compatibility


@pytest.fixture
def target_info(model_path: Path) -> GGUFInfo:
    return read_gguf_info(model_path)


def test_identical_vocab_is_compatible(target_info: GGUFInfo, tmp_path: Path) -> None:
    draft = read_gguf_info(write_model(tmp_path / "draft.gguf", arch="llama"))
    result = check_draft_compat(target_info, draft)
    assert result == CompatResult(
        ok=True,
        check=None,
        message=f"compatible: same vocab type 'gpt2', {N_TOKENS} tokens, identical texts",
    )
    require_compatible(target_info, draft)


def test_different_vocab_type(target_info: GGUFInfo, tmp_path: Path) -> None:
    draft = read_gguf_info(write_model(tmp_path / "draft.gguf", vocab_type="llama"))
    result = check_draft_compat(target_info, draft)
    assert not result.ok and result.check == "vocab_type"
    assert "'gpt2'" in result.message and "'llama'" in result.message
    with pytest.raises(IncompatibleDraftError) as err:
        require_compatible(target_info, draft)
    assert err.value.result == result and str(err.value) == result.message


def test_vocab_size_difference(target_info: GGUFInfo, tmp_path: Path) -> None:
    tokens, types = make_vocab(N_TOKENS + 129)
    big = read_gguf_info(write_model(tmp_path / "d.gguf", tokens=tokens, token_types=types))
    result = check_draft_compat(target_info, big)
    assert not result.ok and result.check == "vocab_size" and "129" in result.message

    tokens, types = make_vocab(N_TOKENS)
    padded = info_with(
        target_info,
        **{
            "tokenizer.ggml.tokens": tokens + [f"[PAD{i}]" for i in range(128)],
            "tokenizer.ggml.token_type": types + [gguf.TokenType.UNUSED] * 128,
        },
    )
    assert check_draft_compat(target_info, padded).ok  # within llama.cpp's tolerance


def test_edited_token_text(target_info: GGUFInfo, tmp_path: Path) -> None:
    tokens, types = make_vocab()
    tokens[270] = "Ġedited"
    draft = read_gguf_info(write_model(tmp_path / "d.gguf", tokens=tokens, token_types=types))
    result = check_draft_compat(target_info, draft)
    assert not result.ok and result.check == "token_text"
    assert "id 270" in result.message
    assert "'Ġword14'" in result.message and "'Ġedited'" in result.message


def test_control_token_text_is_not_compared(target_info: GGUFInfo) -> None:
    tokens = list(target_info.tokens)
    tokens[-2] = "<|something_else|>"  # a control token
    assert check_draft_compat(
        target_info, info_with(target_info, **{"tokenizer.ggml.tokens": tokens})
    ).ok


def test_special_ids(target_info: GGUFInfo) -> None:
    eos = check_draft_compat(
        target_info, info_with(target_info, **{"tokenizer.ggml.eos_token_id": 5})
    )
    assert eos.check == "eos" and "EOS" in eos.message
    bos = check_draft_compat(
        target_info, info_with(target_info, **{"tokenizer.ggml.bos_token_id": 5})
    )
    assert bos.check == "bos"
    flag = info_with(target_info, **{"tokenizer.ggml.add_bos_token": True})
    assert check_draft_compat(target_info, flag).check == "add_bos"
    no_bos = dict(target_info.metadata)
    del no_bos["tokenizer.ggml.bos_token_id"]
    assert check_draft_compat(target_info, dataclasses.replace(target_info, metadata=no_bos)).ok


def test_different_eos_file(target_info: GGUFInfo, tmp_path: Path) -> None:
    draft = read_gguf_info(write_model(tmp_path / "d.gguf", eos=N_TOKENS - 2))
    result = check_draft_compat(target_info, draft)
    assert result.check == "eos"
    assert str(N_TOKENS - 1) in result.message and str(N_TOKENS - 2) in result.message


# ---------------------------------------------------------------------------------------------
# Real models (the default pair from the model store, as the app finds it)


@pytest.fixture(scope="module")
def real_target(model_paths: tuple[Path, Path]) -> GGUFInfo:
    return read_gguf_info(model_paths[0])


@pytest.fixture(scope="module")
def real_draft(model_paths: tuple[Path, Path]) -> GGUFInfo:
    return read_gguf_info(model_paths[1])


def test_real_models(real_target: GGUFInfo, real_draft: GGUFInfo) -> None:
    for info, layers in ((real_target, 28), (real_draft, 24)):
        assert info.architecture == "qwen2"
        assert info.vocab_type == "gpt2"
        assert info.vocab_size == 151936
        assert info.chat_template and "<|im_start|>" in info.chat_template
        assert info.quantization == "Q4_K_M"
        assert info.n_layers == layers
        assert info.data_end == info.file_size
        assert info.eos_id == 151645
        kv = info.kv_bytes_per_token()
        assert kv is not None and kv > 0
    assert 1.3e9 < real_target.n_params < 2.0e9
    assert 0.4e9 < real_draft.n_params < 0.7e9
    # 2 * 28 layers * 2 kv heads * 128 head dim * 2 bytes
    assert real_target.kv_bytes_per_token() == 2 * 28 * 2 * 128 * 2


def test_real_draft_is_compatible(real_target: GGUFInfo, real_draft: GGUFInfo) -> None:
    result = check_draft_compat(real_target, real_draft)
    assert result.ok, result.message


def test_real_edited_draft_fails_token_text(real_target: GGUFInfo, real_draft: GGUFInfo) -> None:
    tokens = list(real_draft.tokens)
    tokens[1234] = "Ġzzzz_edited"
    edited = info_with(real_draft, **{"tokenizer.ggml.tokens": tokens})
    result = check_draft_compat(real_target, edited)
    assert result.check == "token_text"
    assert "id 1234" in result.message and "'Ġzzzz_edited'" in result.message
    assert repr(real_target.tokens[1234]) in result.message
