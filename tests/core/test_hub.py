"""Hub search and listing, range-read headers and the pair verdict, draft suggestions, the
memory plan and the `specchat-cli models` commands, against the local fake Hub (tests/fakehub.py)
through the real huggingface_hub client."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakehub import FakeHub, write_tiny_gguf
from huggingface_hub import constants

from specchat.cli.main import main as cli_main
from specchat.core.gguf.header import read_gguf_info
from specchat.core.hub.client import (
    HubClient,
    HubError,
    HubNotFound,
    HubOffline,
    RemoteFile,
    group_gguf_files,
    parse_quant,
)
from specchat.core.placement.footprint import ModelFootprint
from specchat.core.placement.memory_plan import (
    Fit,
    MachineMemory,
    file_fit,
    machine_memory,
    plan_memory,
)
from specchat.core.placement.pairing import (
    HubRef,
    LocalRef,
    catalog_remote,
    check_pair,
    inspect_pair,
    model_family,
    parse_model_ref,
    pick_model,
    recommended_pairs,
    repo_hint,
    suggest_drafts,
)
from specchat.core.store.catalog import load_catalog
from specchat.core.store.importing import import_model
from specchat.core.store.store import ModelStore

GB = 10**9
TARGET_REPO = "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"
DRAFT_REPO = "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"
TARGET_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
TINY = "test/Tiny-Coder-1.5B-Instruct-GGUF"


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path / "store"))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Small GGUF models written with gguf.GGUFWriter."""
    d = tmp_path_factory.mktemp("tiny")
    write_tiny_gguf(d / "same-vocab.gguf", seed=1)
    write_tiny_gguf(d / "target.gguf", weight_bytes=2 << 20)
    write_tiny_gguf(d / "fewer-words.gguf", n_words=100)
    write_tiny_gguf(d / "other-words.gguf", word="Ġother")
    write_tiny_gguf(d / "llama-vocab.gguf", vocab_type="llama")
    write_tiny_gguf(d / "part1.gguf", split=(1, 2))
    write_tiny_gguf(d / "part2.gguf", split=(2, 2))
    return d


@pytest.fixture
def hub(tiny_dir: Path) -> Iterator[FakeHub]:
    with FakeHub() as fake:
        tiny = fake.add_repo(TINY, downloads=500)
        fake.add_file(TINY, "tiny-coder-1.5b-instruct-Q4_K_M.gguf", tiny_dir / "target.gguf")
        fake.add_file(TINY, "tiny-coder-1.5b-instruct-Q8_0.gguf", tiny_dir / "same-vocab.gguf")
        fake.add_file(
            TINY, "big/tiny-coder-1.5b-instruct-F16-00001-of-00002.gguf", tiny_dir / "part1.gguf"
        )
        fake.add_file(
            TINY, "big/tiny-coder-1.5b-instruct-F16-00002-of-00002.gguf", tiny_dir / "part2.gguf"
        )
        fake.add_file(TINY, "mmproj-tiny-f16.gguf", tiny_dir / "same-vocab.gguf")
        fake.add_file(TINY, "README.md", tiny_dir / "same-vocab.gguf", lfs=False)
        assert tiny.files
        small = "test/Tiny-Coder-0.5B-Instruct-GGUF"
        fake.add_repo(small, downloads=300)
        fake.add_file(small, "tiny-coder-0.5b-instruct-Q4_K_M.gguf", tiny_dir / "same-vocab.gguf")
        fake.add_file(small, "tiny-coder-0.5b-instruct-Q2_K.gguf", tiny_dir / "fewer-words.gguf")
        fake.add_repo("test/Tiny-Coder-7B-Instruct-GGUF", downloads=50)
        fake.add_repo("test/Tiny-Math-0.5B-Instruct-GGUF", downloads=40)
        fake.add_repo("test/tiny-coder-safetensors", downloads=9000, tags=["transformers"])
        other = "test/Mismatch-GGUF"
        fake.add_file(other, "other-words.gguf", tiny_dir / "other-words.gguf")
        fake.add_file(other, "llama-vocab.gguf", tiny_dir / "llama-vocab.gguf")
        fake.add_file(other, "fewer-words.gguf", tiny_dir / "fewer-words.gguf")
        yield fake


@pytest.fixture
def client(hub: FakeHub) -> HubClient:
    return HubClient(hub.endpoint, token=False, timeout=10)


def dead_endpoint() -> str:
    """An address where nothing listens (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# ---------------------------------------------------------------------------------------------
# Search and listing


def test_search_lists_gguf_repos_most_downloaded_first(client: HubClient, hub: FakeHub) -> None:
    found = client.search("tiny-coder")
    ids = [r.repo_id for r in found]
    assert ids == [
        TINY,
        "test/Tiny-Coder-0.5B-Instruct-GGUF",
        "test/Tiny-Coder-7B-Instruct-GGUF",
    ]  # not the safetensors repo: only GGUF repos
    assert found[0].downloads == 500
    request = hub.requests("GET", "/api/models")[-1]
    assert "filter=gguf" in request.query and "search=tiny-coder" in request.query
    assert client.search("no-such-model") == []


def test_list_models_sizes_quants_and_splits(client: HubClient, tiny_dir: Path) -> None:
    models = client.list_models(TINY)
    by_quant = {m.quant: m for m in models}
    assert set(by_quant) == {"Q4_K_M", "Q8_0", "F16"}  # no mmproj, no README
    q4 = by_quant["Q4_K_M"]
    assert q4.size == (tiny_dir / "target.gguf").stat().st_size
    assert q4.first.sha256 is not None and len(q4.first.sha256) == 64
    assert q4.ref == f"{TINY}/tiny-coder-1.5b-instruct-Q4_K_M.gguf"
    assert q4.revision is not None and len(q4.revision) == 40  # pinned to the commit
    split = by_quant["F16"]
    assert split.split_count == 2
    assert split.first.path.startswith("big/") and split.name.endswith("-00001-of-00002.gguf")
    assert split.display_name == "tiny-coder-1.5b-instruct-F16.gguf (2 parts)"
    parts = ("part1.gguf", "part2.gguf")
    assert split.size == sum((tiny_dir / p).stat().st_size for p in parts)
    assert [m.size for m in models] == sorted(m.size or 0 for m in models)  # smallest first
    assert pick_model(models) is q4
    assert pick_model(models, "q8_0") is by_quant["Q8_0"]
    assert pick_model(models, "IQ2_XS") is None


def test_list_models_falls_back_to_the_tree_listing(client: HubClient, hub: FakeHub) -> None:
    hub.repos[TINY].blobs_in_info = False  # a mirror whose model info has no sizes
    models = client.list_models(TINY)
    assert all(m.size for m in models) and len(models) == 3
    assert hub.requests("GET", f"/api/models/{TINY}/tree/")


def test_incomplete_split_is_not_a_model() -> None:
    files = [
        RemoteFile("m-Q4_K_M-00001-of-00003.gguf", 10),
        RemoteFile("m-Q4_K_M-00002-of-00003.gguf", 10),
        RemoteFile("m-Q8_0.gguf", 30),
    ]
    assert [m.name for m in group_gguf_files("o/r", files)] == ["m-Q8_0.gguf"]


@pytest.mark.parametrize(
    ("name", "quant"),
    [
        ("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "Q4_K_M"),
        ("Meta-Llama-3.1-8B-Instruct-IQ4_XS.gguf", "IQ4_XS"),
        ("Qwen2.5-7B-Instruct-Q4_K_M-00001-of-00002.gguf", "Q4_K_M"),
        ("model.Q8_0.gguf", "Q8_0"),
        ("gemma-2b-it-f16.gguf", "F16"),
        ("phi-3-mini-BF16.gguf", "BF16"),
        ("tinyllama-IQ2_XXS.gguf", "IQ2_XXS"),
        ("llama-Q4_0_4_4.gguf", "Q4_0_4_4"),
        ("model.gguf", None),
    ],
)
def test_parse_quant(name: str, quant: str | None) -> None:
    assert parse_quant(name) == quant


def test_missing_repo_and_file(client: HubClient, hub: FakeHub) -> None:
    with pytest.raises(HubNotFound, match="repository test/nope was not found"):
        client.list_models("test/nope")
    with pytest.raises(HubNotFound, match="missing.gguf was not found in " + TINY):
        client.read_header(TINY, "missing.gguf")


def test_server_error_names_the_status(client: HubClient, hub: FakeHub) -> None:
    name = "tiny-coder-1.5b-instruct-Q4_K_M.gguf"
    hub.fail(TINY, name, 500, methods=("HEAD",))
    with pytest.raises(HubError, match="HTTP 500 .*try again later"):
        client.read_header(TINY, name)


# ---------------------------------------------------------------------------------------------
# Offline


def test_offline_mode_gives_a_clear_message(
    client: HubClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_dir: Path
) -> None:
    store = ModelStore(tmp_path / "store")
    import_model(store, tiny_dir / "target.gguf")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for call in (lambda: client.search("tiny"), lambda: client.list_models(TINY)):
        with pytest.raises(HubOffline, match="Offline mode: HF_HUB_OFFLINE is set") as e:
            call()
        assert "Installed models and local files still work" in str(e.value)
    assert [m.file for m in store.models()] == ["target.gguf"]  # the store still works


def test_library_offline_switch_is_honoured(
    client: HubClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HF_HUB_OFFLINE set before huggingface_hub was imported: the library refuses requests."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubOffline, match="Offline mode"):
        client.search("tiny")


def test_unreachable_endpoint_fails_without_backing_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused connection is reported at once: no retry loop sleeps in between."""
    naps: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        real_sleep(min(seconds, 0.01))

    monkeypatch.setattr(time, "sleep", sleep)
    client = HubClient(dead_endpoint(), token=False)
    with pytest.raises(
        HubOffline, match=r"Cannot reach the Hugging Face Hub at .*connection refused"
    ):
        client.search("tiny")
    assert sum(naps) < 1.0, f"backed off for {sum(naps):.1f} s before giving up"


# ---------------------------------------------------------------------------------------------
# Headers over range requests and the pair verdict


def test_real_default_pair_is_compatible_from_a_few_megabytes(
    model_paths: tuple[Path, Path], hub: FakeHub, client: HubClient
) -> None:
    catalog = load_catalog()
    for repo, file, path in (
        (TARGET_REPO, TARGET_FILE, model_paths[0]),
        (DRAFT_REPO, DRAFT_FILE, model_paths[1]),
    ):
        pin = next(m for m in catalog.models.values() if m.file == file)
        hub.add_file(repo, file, path, sha256=pin.sha256)  # served from disk in chunks
    verdict = check_pair(HubRef(TARGET_REPO, TARGET_FILE), HubRef(DRAFT_REPO, DRAFT_FILE), client)
    assert verdict.ok, verdict.message
    assert verdict.target.vocab_size == verdict.draft.vocab_size == 151936
    assert verdict.message.startswith("the draft fits the target: compatible")
    for repo, file, path in (
        (TARGET_REPO, TARGET_FILE, model_paths[0]),
        (DRAFT_REPO, DRAFT_FILE, model_paths[1]),
    ):
        sent = hub.bytes_sent(repo, file)
        assert sent < 10 * 2**20, f"{file}: {sent:,} bytes read"  # the header is ~6 MB
        assert sent < path.stat().st_size / 40
        assert all(r.range for r in hub.requests("GET", f"/{repo}/resolve/"))
    assert verdict.bytes_read == sum(
        hub.bytes_sent(r, f) for r, f in ((TARGET_REPO, TARGET_FILE), (DRAFT_REPO, DRAFT_FILE))
    )
    # the same verdict as from the local files
    local = check_pair(LocalRef(model_paths[0]), LocalRef(model_paths[1]))
    assert local.result == verdict.result and local.bytes_read == 0


def test_mismatched_pair_names_the_failing_check(
    model_paths: tuple[Path, Path], hub: FakeHub, client: HubClient
) -> None:
    hub.add_file(TARGET_REPO, TARGET_FILE, model_paths[0])
    verdict = check_pair(
        HubRef(TARGET_REPO, TARGET_FILE), HubRef("test/Mismatch-GGUF", "fewer-words.gguf"), client
    )
    assert not verdict.ok and verdict.result.check == "vocab_size"
    assert "check 'vocab_size' failed: vocab sizes differ" in verdict.message
    assert "target 151936 vs draft 359 tokens" in verdict.message
    assert hub.bytes_sent(TARGET_REPO, TARGET_FILE) < 10 * 2**20


@pytest.mark.parametrize(
    ("draft", "check"),
    [
        ("other-words.gguf", "token_text"),
        ("llama-vocab.gguf", "vocab_type"),
        ("fewer-words.gguf", "vocab_size"),
    ],
)
def test_each_failing_check_is_named(client: HubClient, draft: str, check: str) -> None:
    target = HubRef(TINY, "tiny-coder-1.5b-instruct-Q4_K_M.gguf")
    verdict = check_pair(target, HubRef("test/Mismatch-GGUF", draft), client)
    assert verdict.result.check == check
    assert f"check '{check}' failed" in verdict.message


def test_local_target_with_hub_draft(client: HubClient, tiny_dir: Path) -> None:
    report = inspect_pair(
        LocalRef(tiny_dir / "target.gguf"),
        HubRef("test/Tiny-Coder-0.5B-Instruct-GGUF", "tiny-coder-0.5b-instruct-Q4_K_M.gguf"),
        n_ctx=2048,
        machine=MachineMemory(8 * GB, 16 * GB),
        hub=client,
    )
    assert report.ok and report.verdict is not None and report.verdict.bytes_read > 0
    assert report.plan.target_weights == (tiny_dir / "target.gguf").stat().st_size
    assert report.plan.draft_weights == (tiny_dir / "same-vocab.gguf").stat().st_size
    assert report.plan.fits


def test_parse_model_ref(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "store")
    (store.root / "here.gguf").write_bytes(b"x")
    ref = parse_model_ref(f"{TARGET_REPO}/{TARGET_FILE}")
    assert ref == HubRef(TARGET_REPO, TARGET_FILE)
    assert parse_model_ref(f"hf://{TINY}/sub/m.gguf") == HubRef(TINY, "sub/m.gguf")
    url = f"https://huggingface.co/{TARGET_REPO}/resolve/main/{TARGET_FILE}"
    assert parse_model_ref(url) == HubRef(TARGET_REPO, TARGET_FILE, "main")
    assert parse_model_ref("here.gguf", store) == LocalRef(store.root / "here.gguf")
    assert parse_model_ref(str(store.root / "here.gguf")) == LocalRef(store.root / "here.gguf")
    with pytest.raises(ValueError, match="no such file, and not a Hub file name"):
        parse_model_ref("./missing/model.gguf")


# ---------------------------------------------------------------------------------------------
# Recommendations


def test_recommended_pairs_default_first(tmp_path: Path) -> None:
    catalog = load_catalog()
    store = ModelStore(tmp_path / "store")
    default = catalog.default_pair()
    store.path_for(catalog.model(default.draft).file).write_bytes(b"x")
    recs = recommended_pairs(catalog, store)
    assert recs[0].pair is default and len(recs) == len(catalog.pairs)
    assert recs[0].draft_installed and not recs[0].target_installed and not recs[0].installed
    assert recs[0].label == "Qwen2.5-Coder-1.5B-Instruct Q4_K_M + 0.5B draft (default)"
    remote = catalog_remote(catalog.model(default.target))
    assert remote.size == 1117320768 and remote.first.sha256 == catalog.model(default.target).sha256


def test_model_family() -> None:
    assert model_family(TARGET_REPO) == ("qwen2.5-coder-instruct", 1.5)
    assert model_family("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF") == (
        "meta-llama-3.1-instruct",
        8,
    )
    assert model_family("Qwen2.5-7B-Instruct-Q4_K_M-00001-of-00002.gguf") == ("qwen2.5-instruct", 7)
    assert model_family("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF") == ("smollm2-instruct", 0.135)


def test_suggest_drafts_from_catalog_and_hub(client: HubClient) -> None:
    catalog = load_catalog()
    found = suggest_drafts("Qwen/Qwen2.5-Coder-7B-Instruct-GGUF", catalog)
    # smaller models of the same tokenizer family; the same model line first
    assert [s.repo_id for s in found] == [
        DRAFT_REPO,
        TARGET_REPO,
        "Qwen/Qwen2.5-0.5B-Instruct-GGUF",
    ]
    assert all(s.source == "catalog" and s.filename for s in found)

    found = suggest_drafts(TINY, catalog, client)  # not in the catalog: the Hub
    assert [(s.repo_id, s.source) for s in found] == [("test/Tiny-Coder-0.5B-Instruct-GGUF", "hub")]
    assert found[0].label == "test/Tiny-Coder-0.5B-Instruct-GGUF (0.5B, Hub)"


def test_suggest_drafts_offline_keeps_the_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    found = suggest_drafts(TARGET_REPO, load_catalog(), HubClient(dead_endpoint(), token=False))
    assert [s.repo_id for s in found] == [DRAFT_REPO, "Qwen/Qwen2.5-0.5B-Instruct-GGUF"]


def test_repo_hint_for_installed_models(tmp_path: Path, tiny_dir: Path) -> None:
    catalog = load_catalog()
    store = ModelStore(tmp_path / "store")
    assert repo_hint(store.root / TARGET_FILE, catalog, store) == TARGET_REPO
    path = import_model(store, tiny_dir / "target.gguf").path
    assert repo_hint(path, catalog, store) == "target"  # no metadata to go by
    store.record_verified(path, "0" * 64, f"{TINY}/x.gguf")
    assert repo_hint(path, catalog, store) == TINY


# ---------------------------------------------------------------------------------------------
# Memory plan


def test_memory_plan_counts_weights_kv_and_buffers(tiny_dir: Path) -> None:
    info = read_gguf_info(tiny_dir / "target.gguf")
    fp = ModelFootprint.from_info(info)
    assert fp.weights_bytes == (tiny_dir / "target.gguf").stat().st_size
    assert fp.kv_bytes_per_token == info.kv_bytes_per_token()
    plan = plan_memory(fp, fp, 4096, machine=MachineMemory(8 * GB, 16 * GB))
    assert plan.target_kv == plan.draft_kv == int(fp.kv_bytes_per_token or 0) * 4096
    assert plan.ram_needed == 2 * (fp.weights_bytes + plan.target_kv) + plan.overhead
    assert plan.fits and plan.fit == Fit.FITS and plan.vram_needed == 0
    assert "needs about" in plan.summary() and "8.00 GB of RAM available" in plan.summary()


def test_memory_plan_warns_what_will_not_fit() -> None:
    big = ModelFootprint("big.gguf", 7 * GB, 100_000, n_layers=32)
    small = ModelFootprint("small.gguf", 1 * GB, 20_000, n_layers=24)
    plan = plan_memory(big, small, 32768, machine=MachineMemory(6 * GB, 16 * GB))
    assert not plan.fits and plan.fit == Fit.TOO_BIG
    assert plan.warnings[0].startswith("This will not fit in RAM: it needs about")
    # all layers on a GPU with too little VRAM
    gpu = MachineMemory(32 * GB, 64 * GB, vram_free=4 * GB, vram_total=8 * GB, gpu_name="GPU0")
    plan = plan_memory(big, small, 4096, machine=gpu, target_gpu_layers=-1)
    assert plan.vram_needed > 4 * GB
    assert any("The GPU part will not fit" in w for w in plan.warnings)
    plan = plan_memory(
        big, None, 4096, machine=MachineMemory(32 * GB, 64 * GB), target_gpu_layers=-1
    )
    assert any("reports no GPU memory" in w for w in plan.warnings)
    half = plan_memory(big, None, 4096, machine=gpu, target_gpu_layers=16)
    assert 0 < half.vram_needed < plan.vram_needed


def test_file_fit_hints() -> None:
    machine = MachineMemory(8 * GB, 16 * GB)
    assert file_fit(1 * GB, machine) == Fit.FITS
    assert file_fit(int(7.2 * GB), machine) == Fit.TIGHT
    assert file_fit(9 * GB, machine) == Fit.TOO_BIG
    assert file_fit(None, machine) is None
    assert machine_memory(probe_gpu=False).ram_available > 0


# ---------------------------------------------------------------------------------------------
# CLI


@pytest.fixture
def cli_env(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    return hub


def test_cli_check_pair_exit_codes(
    cli_env: FakeHub, model_paths: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    cli_env.add_file(TARGET_REPO, TARGET_FILE, model_paths[0])
    cli_env.add_file(DRAFT_REPO, DRAFT_FILE, model_paths[1])
    rc = cli_main(
        ["models", "check-pair", f"{TARGET_REPO}/{TARGET_FILE}", f"{DRAFT_REPO}/{DRAFT_FILE}"]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "OK: the draft fits the target" in out and "of GGUF headers from the Hub" in out

    rc = cli_main(
        ["models", "check-pair", str(model_paths[0]), "test/Mismatch-GGUF/fewer-words.gguf"]
    )
    out = capsys.readouterr().out
    assert rc == 1
    assert "MISMATCH: the draft does not fit the target: check 'vocab_size' failed" in out

    rc = cli_main(
        ["models", "check-pair", str(model_paths[0]), str(model_paths[1]), "--ctx", "8192"]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "memory: needs about" in out and "8,192 tokens" in out

    rc = cli_main(["models", "check-pair", str(model_paths[0]), f"{TINY}/missing.gguf"])
    captured = capsys.readouterr()
    assert (
        rc == 2 and f"cannot check the pair: missing.gguf was not found in {TINY}" in captured.err
    )


def test_cli_search_files_download_list_delete(
    cli_env: FakeHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert cli_main(["models", "search", "tiny-coder"]) == 0
    out = capsys.readouterr().out
    assert TINY in out and "500 downloads" in out
    assert cli_main(["models", "files", TINY]) == 0
    out = capsys.readouterr().out
    assert "Q4_K_M" in out and f"{TINY}/big/tiny-coder-1.5b-instruct-F16-00001-of-00002.gguf" in out

    assert cli_main(["models", "download", TINY, "--quant", "Q8_0"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path == tmp_path / "store" / "tiny-coder-1.5b-instruct-Q8_0.gguf" and path.is_file()
    assert (
        cli_main(
            ["models", "download", f"{TINY}/big/tiny-coder-1.5b-instruct-F16-00002-of-00002.gguf"]
        )
        == 0
    )
    capsys.readouterr()
    assert cli_main(["models", "download", TINY, "--quant", "IQ1_S"]) == 1
    assert "has no IQ1_S file; available: F16, Q4_K_M, Q8_0" in capsys.readouterr().err

    assert cli_main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert (
        "tiny-coder-1.5b-instruct-Q8_0.gguf" in out
        and "F32  qwen2  context 4,096  vocab 659" in out
    )
    assert "tiny-coder-1.5b-instruct-F16-00001-of-00002.gguf" in out and ", 2 parts" in out
    assert "00002-of-00002" not in out.replace("00001-of-00002", "")

    assert cli_main(["models", "delete", "tiny-coder-1.5b-instruct-F16-00001-of-00002.gguf"]) == 0
    assert not list((tmp_path / "store").glob("*F16*"))
    assert cli_main(["models", "delete", "nothing.gguf"]) == 1


def test_cli_offline_and_unreachable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert cli_main(["models", "search", "qwen"]) == 1
    assert "specchat-cli: error: Offline mode: HF_HUB_OFFLINE is set" in capsys.readouterr().err
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", dead_endpoint())
    assert cli_main(["models", "download", f"{TINY}/x.gguf"]) == 1
    assert "Cannot reach the Hugging Face Hub" in capsys.readouterr().err
    assert cli_main(["models", "list"]) == 0  # the store needs no network


def test_cli_import(tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["models", "import", str(tiny_dir / "target.gguf")]) == 0
    assert (tmp_path / "store" / "target.gguf").is_file()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"<html>not a model</html>")
    assert cli_main(["models", "import", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "cannot import bad.gguf: bad.gguf is not a GGUF file" in err and "web page" in err
