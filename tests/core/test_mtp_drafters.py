"""Drafter files found and fetched with their target, against the fake Hub serving repos shaped
like 2026's (tests/fakehub.py: a Qwen3.8 target with its mtp-*.gguf, a Gemma 4 target with an
assistant repo, NextN layers inside a model, a repo with only a DFlash drafter, an mtp-*.gguf
for another architecture), through the real huggingface_hub client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakehub import (
    DFLASH,
    DFLASH_FILE,
    GEMMA4,
    GEMMA4_ASSISTANT,
    GEMMA4_ASSISTANT_REPO,
    GEMMA4_TARGET,
    QWEN36,
    QWEN36_TARGET,
    QWEN38,
    QWEN38_MTP,
    QWEN38_TARGET,
    WRONG,
    WRONG_MTP,
    FakeHub,
    add_2026_repos,
    write_2026_files,
    write_arch_gguf,
)

from specchat.cli.main import main as cli_main
from specchat.core.fetch.hub_download import ChecksumMismatch, Downloader, RetryPolicy
from specchat.core.fetch.paired import DrafterRefused, download_with_drafter
from specchat.core.gguf.drafters import DrafterKind, Speedup, speculation_support
from specchat.core.gguf.header import read_gguf_info
from specchat.core.hub.client import HubClient
from specchat.core.placement.repo_drafters import inspect_repo
from specchat.core.placement.store_pairs import store_pairs
from specchat.core.store.catalog import load_catalog
from specchat.core.store.store import ModelStore


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path / "store"))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_2026_files(tmp_path_factory.mktemp("2026"))


@pytest.fixture
def hub(files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with FakeHub() as fake:
        add_2026_repos(fake, files)
        monkeypatch.setenv("HF_ENDPOINT", fake.endpoint)
        yield fake


@pytest.fixture
def client(hub: FakeHub) -> HubClient:
    return HubClient(hub.endpoint, token=False)


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    return ModelStore(tmp_path / "store")


def downloader(store: ModelStore, client: HubClient) -> Downloader:
    retry = RetryPolicy(attempts=2, base_delay_s=0.01)
    return Downloader(store, client, catalog=load_catalog(), retry=retry, progress_interval=0)


# ---------------------------------------------------------------------------------------------
# Discovery and labels


def test_the_sidecar_is_found_as_its_targets_drafter_from_headers_alone(
    hub: FakeHub, client: HubClient, store: ModelStore
) -> None:
    listing = inspect_repo(client, QWEN38, load_catalog())
    assert [m.name for m in listing.models] == [QWEN38_TARGET]  # the sidecar is not a model row
    target = listing.models[0]
    assert target.drafter is not None and target.drafter.name == QWEN38_MTP
    assert target.drafter.kind is DrafterKind.MTP
    support = listing.label(target)
    assert support is not None and support.speedup is Speedup.MTP_SIDECAR
    assert support.label == "MTP head (sidecar) · hybrid, rollback"
    assert QWEN38_MTP in support.tooltip and "rollback" in support.tooltip
    # only headers were read, by range requests; nothing in the store
    gets = hub.requests("GET", "/resolve/")
    assert gets and all(g.range for g in gets)
    assert not any(store.root.iterdir())


def test_each_repo_shape_gets_its_label(client: HubClient) -> None:
    catalog = load_catalog()
    gemma = inspect_repo(client, GEMMA4, catalog)  # the assistant lives in a companion repo
    target = gemma.model(GEMMA4_TARGET)
    assert target is not None and target.drafter is not None
    assert (target.drafter.repo_id, target.drafter.name) == (
        GEMMA4_ASSISTANT_REPO,
        GEMMA4_ASSISTANT,
    )
    assert target.drafter.kind is DrafterKind.ASSISTANT
    assert gemma.label(target).label == "assistant"  # type: ignore[union-attr]

    inside = inspect_repo(client, QWEN36, catalog)  # NextN layers inside the model
    m = inside.model(QWEN36_TARGET)
    assert m is not None and m.drafter is None
    assert inside.label(m).label == "MTP head (built in) · hybrid, rollback"  # type: ignore[union-attr]

    dflash = inspect_repo(client, DFLASH, catalog)  # only a DFlash drafter: llama-server's
    only = dflash.models[0]
    assert only.name == DFLASH_FILE and only.kind is DrafterKind.DFLASH
    support = dflash.label(only)
    assert support is not None and support.label == "DFlash (llama-server)"
    assert "--spec-type draft-dflash" in support.tooltip


def test_a_sidecar_for_another_architecture_is_not_offered(client: HubClient) -> None:
    listing = inspect_repo(client, WRONG, load_catalog())
    target = listing.model(QWEN38_TARGET)
    assert target is not None and target.drafter is None
    assert listing.label(target).label == "lookup only · hybrid, rollback"  # type: ignore[union-attr]
    assert any(
        WRONG_MTP in n and "check 'architecture' failed" in n and "glm4moe" in n
        for n in listing.notes
    )


def test_labels_for_catalog_drafts_recurrent_and_hybrid_models(tmp_path: Path) -> None:
    plain = read_gguf_info(write_arch_gguf(tmp_path / "plain.gguf", "llama"))
    assert speculation_support(plain).label == "lookup only"
    drafted = speculation_support(plain, catalog_draft="llama3 1B Q4_K_M")
    assert drafted.label == "draft model" and "llama3 1B" in drafted.tooltip
    mamba = read_gguf_info(write_arch_gguf(tmp_path / "mamba.gguf", "mamba"))
    assert speculation_support(mamba).label == "nothing"
    jamba = read_gguf_info(write_arch_gguf(tmp_path / "jamba.gguf", "jamba"))
    nothing = speculation_support(jamba, catalog_draft="x")
    assert nothing.label == "nothing (hybrid, no rollback)" and nothing.rollback is False
    lfm = read_gguf_info(write_arch_gguf(tmp_path / "lfm2.gguf", "lfm2"))
    assert speculation_support(lfm).label == "lookup only · hybrid, rollback"
    # NextN layers in an architecture SpecChat does not run them for: llama-server's
    glm = read_gguf_info(write_arch_gguf(tmp_path / "glm.gguf", "glm4moe", nextn=1))
    support = speculation_support(glm)
    assert support.label == "lookup only" and "llama-server" in support.tooltip


# ---------------------------------------------------------------------------------------------
# The paired download


def test_the_target_and_its_sidecar_are_fetched_together(
    hub: FakeHub, client: HubClient, store: ModelStore, files: dict[str, Path]
) -> None:
    target = inspect_repo(client, QWEN38).model(QWEN38_TARGET)
    assert target is not None and target.drafter is not None
    done = download_with_drafter(downloader(store, client), target, target.drafter)
    assert done.target == store.root / QWEN38_TARGET and done.drafter == store.root / QWEN38_MTP
    assert done.pairing == "MTP head (sidecar)"
    for name in (QWEN38_TARGET, QWEN38_MTP):
        assert (store.root / name).read_bytes() == files[name].read_bytes()
    links = store_pairs(store.models())
    assert links[QWEN38_TARGET].partner == QWEN38_MTP
    assert links[QWEN38_TARGET].support.label.startswith("MTP head (sidecar)")
    assert links[QWEN38_MTP].support.label == f"MTP head of {QWEN38_TARGET}"


def test_a_sidecar_whose_hash_does_not_match_is_refused_and_nothing_is_installed(
    hub: FakeHub, client: HubClient, store: ModelStore
) -> None:
    target = inspect_repo(client, QWEN38).model(QWEN38_TARGET)
    assert target is not None and target.drafter is not None
    hub.corrupt(QWEN38, QWEN38_MTP)  # the bytes differ from the announced LFS SHA-256
    with pytest.raises(ChecksumMismatch, match=f"{QWEN38_MTP} is damaged"):
        download_with_drafter(downloader(store, client), target, target.drafter)
    assert [p.name for p in store.root.iterdir() if p.suffix == ".gguf"] == []
    # the target was never started: only its header was read (ranges with an end)
    assert not store.part_path_for(QWEN38_TARGET).exists()
    target_gets = [r for r in hub.requests("GET", "/resolve/") if r.path.endswith(QWEN38_TARGET)]
    assert target_gets and all(r.range and not r.range.endswith("-") for r in target_gets)


def test_a_sidecar_for_another_architecture_is_refused_with_the_failing_check(
    hub: FakeHub, client: HubClient, store: ModelStore
) -> None:
    models = client.list_models(WRONG)  # by name, the mtp-*.gguf is attached
    target = next(m for m in models if m.name == QWEN38_TARGET)
    assert target.drafter is not None and target.drafter.name == WRONG_MTP
    with pytest.raises(DrafterRefused, match="check 'architecture' failed") as refused:
        download_with_drafter(downloader(store, client), target, target.drafter)
    assert refused.value.result.check == "architecture"
    assert "nothing was downloaded" in str(refused.value)
    assert not any(store.root.iterdir())
    assert all(r.range for r in hub.requests("GET", "/resolve/"))  # headers only


# ---------------------------------------------------------------------------------------------
# The CLI


def test_cli_files_download_with_drafter_and_check_pair(
    hub: FakeHub, store: ModelStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["models", "files", QWEN38]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    target_line = next(i for i, line in enumerate(lines) if QWEN38_TARGET in line)
    assert "[MTP head (sidecar) · hybrid, rollback]" in lines[target_line]
    assert f"drafter: {QWEN38}/{QWEN38_MTP}  (MTP head (sidecar))" in lines[target_line + 1]

    assert cli_main(["models", "download", QWEN38, QWEN38_TARGET, "--with-drafter"]) == 0
    out = capsys.readouterr().out
    assert str(store.root / QWEN38_TARGET) in out and str(store.root / QWEN38_MTP) in out
    assert "MTP head (sidecar)" in out

    code = cli_main(["models", "check-pair", QWEN38_TARGET, QWEN38_MTP])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "pairing: MTP head (sidecar)" in out
    assert (
        "OK: the MTP head (sidecar) fits the target: pairing: MTP head (sidecar) for qwen35" in out
    )

    assert cli_main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert f"drafter: {QWEN38_MTP}" in out and f"[MTP head of {QWEN38_TARGET}]" in out


def test_cli_check_pair_names_a_wrong_sidecar_and_a_gemma_assistant(
    hub: FakeHub, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli_main(["models", "check-pair", f"{WRONG}/{QWEN38_TARGET}", f"{WRONG}/{WRONG_MTP}"])
    out = capsys.readouterr().out
    assert code == 1 and "MISMATCH" in out and "check 'architecture' failed" in out
    code = cli_main(
        [
            "models",
            "check-pair",
            f"{GEMMA4}/{GEMMA4_TARGET}",
            f"{GEMMA4_ASSISTANT_REPO}/{GEMMA4_ASSISTANT}",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "pairing: assistant" in out, out
    # a Qwen sidecar cannot serve a Gemma target
    code = cli_main(["models", "check-pair", f"{GEMMA4}/{GEMMA4_TARGET}", f"{QWEN38}/{QWEN38_MTP}"])
    assert code == 1 and "check 'architecture' failed" in capsys.readouterr().out


def test_cli_download_with_drafter_says_when_there_is_none(
    hub: FakeHub, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["models", "download", QWEN36, QWEN36_TARGET, "--with-drafter"]) == 1
    err = capsys.readouterr().err
    assert f"no drafter file for {QWEN36_TARGET}" in err and "Traceback" not in err


def test_catalog_refresh_reads_sizes_from_the_hub(
    hub: FakeHub, files: dict[str, Path], store: ModelStore, capsys: pytest.CaptureFixture[str]
) -> None:
    cat = load_catalog()
    m = cat.model("qwen3.8-27b-q4_k_m")
    hub.add_file(m.repo, m.file, files[QWEN38_TARGET])  # the fake Hub holds one entry's file
    assert cli_main(["models", "catalog", "--refresh"]) == 0
    captured = capsys.readouterr()
    assert f"{m.repo}/{m.file}" in captured.out
    assert "MISSING: unsloth/Qwen3.8-27B-GGUF/mtp-Qwen3.8-27B-Q4_0.gguf" in captured.err
    from specchat.core.fetch.catalog_refresh import catalog_with_refresh

    refreshed = catalog_with_refresh(store)
    assert refreshed.model("qwen3.8-27b-q4_k_m").size_gb == round(
        files[QWEN38_TARGET].stat().st_size / 1e9, 3
    )
    assert "gemma-4-31b+assistant" in captured.out and "19.1 GB" in captured.out
