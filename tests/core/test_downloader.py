"""Resumable, verified downloads and the model store, against the local fake Hub through the real
huggingface_hub client: progress, dropped connections, resume after a cancel or a restart,
corrupted bytes, HTTP errors, a full disk (the one mock: shutil.disk_usage), offline."""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import threading
from collections import namedtuple
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakehub import FakeHub, sha256_of, write_tiny_gguf

from specchat.core.fetch import catalog_fetch as pypi_fetch
from specchat.core.fetch import hub_download as download
from specchat.core.fetch.catalog_fetch import fetch_model
from specchat.core.fetch.hub_download import Downloader, RetryPolicy
from specchat.core.hub.client import HubClient, HubNotFound, HubOffline
from specchat.core.store import store as store_mod
from specchat.core.store.catalog import Catalog, CatalogModel
from specchat.core.store.fileops import ChecksumMismatch, NotEnoughDiskSpace, StoreError
from specchat.core.store.importing import import_model
from specchat.core.store.progress import Cancelled, Progress, TransferError
from specchat.core.store.store import ModelStore

REPO = "test/Tiny-1B-GGUF"
FILE = "tiny-1b-Q4_K_M.gguf"
SPLIT = ("tiny-1b-F16-00001-of-00002.gguf", "tiny-1b-F16-00002-of-00002.gguf")
FAST = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.05)
DiskUsage = namedtuple("DiskUsage", "total used free")


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("models")
    return {
        FILE: write_tiny_gguf(d / FILE, weight_bytes=3 << 20),
        SPLIT[0]: write_tiny_gguf(d / SPLIT[0], split=(1, 2), weight_bytes=1 << 20),
        SPLIT[1]: write_tiny_gguf(d / SPLIT[1], split=(2, 2), weight_bytes=1 << 20),
        "in-git.gguf": write_tiny_gguf(d / "in-git.gguf", weight_bytes=64 << 10),
        "not-gguf.gguf": _write(d / "not-gguf.gguf", b"<html>" + bytes(200_000)),
    }


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.fixture
def hub(files: dict[str, Path]) -> Iterator[FakeHub]:
    with FakeHub() as fake:
        fake.add_file(REPO, FILE, files[FILE])
        for name in SPLIT:
            fake.add_file(REPO, f"F16/{name}", files[name])
        fake.add_file(REPO, "in-git.gguf", files["in-git.gguf"], lfs=False)
        fake.add_file(REPO, "not-gguf.gguf", files["not-gguf.gguf"])
        yield fake


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    return ModelStore(tmp_path / "store")


@pytest.fixture
def client(hub: FakeHub) -> HubClient:
    return HubClient(hub.endpoint, token=False, timeout=10)


def downloader(store: ModelStore, client: HubClient, **kwargs: object) -> Downloader:
    kwargs.setdefault("retry", FAST)
    kwargs.setdefault("progress_interval", 0.0)
    return Downloader(store, client, **kwargs)  # type: ignore[arg-type]


def leftovers(store: ModelStore) -> list[str]:
    return sorted(p.name for p in store.root.iterdir())


# ---------------------------------------------------------------------------------------------
# Success


def test_full_download_with_progress(
    store: ModelStore, client: HubClient, hub: FakeHub, files: dict[str, Path]
) -> None:
    events: list[Progress] = []
    path = downloader(store, client).download_file(REPO, FILE, progress=events.append)
    size = files[FILE].stat().st_size
    assert path == store.root / FILE
    assert sha256_of(path) == sha256_of(files[FILE])
    assert leftovers(store) == [FILE, FILE + ".verified"]  # no .part, no .part.json
    assert store.cached_sha256(path) == sha256_of(files[FILE])
    assert store.source_of(path) == f"{REPO}/{FILE}"

    phases = [e.phase for e in events]
    assert phases[0] == "connect" and phases[-1] == "done"
    assert phases.index("download") < phases.index("verify") < phases.index("done")
    assert all(e.what == FILE for e in events)
    downloading = [e for e in events if e.phase == "download"]
    assert len(downloading) > 5  # progress per chunk, not only at the end
    assert [e.done for e in downloading] == sorted(e.done for e in downloading)
    assert all(e.total == size for e in downloading)
    assert downloading[-1].done == size and downloading[-1].fraction == 1.0
    assert any(e.speed and e.speed > 0 for e in downloading)
    assert any(e.eta is not None for e in downloading)
    assert events[-1].message == f"{FILE} installed"
    gets = hub.requests("GET", f"/{REPO}/resolve/")
    assert len(gets) == 1 and gets[0].range is None

    model = store.model(FILE)
    assert model is not None and model.ok
    assert (model.quant, model.architecture, model.context_length) == ("F32", "qwen2", 4096)
    assert model.vocab_size == 659 and model.size == size

    # asking again: nothing is transferred
    assert downloader(store, client).download_file(REPO, FILE) == path
    assert len(hub.requests("GET", f"/{REPO}/resolve/")) == 1


def test_split_model_downloads_all_parts(
    store: ModelStore, client: HubClient, files: dict[str, Path]
) -> None:
    models = client.list_models(REPO)
    split = next(m for m in models if m.split_count == 2)
    events: list[Progress] = []
    path = downloader(store, client).download(split, progress=events.append)
    assert path == store.root / SPLIT[0]
    assert all(sha256_of(store.root / n) == sha256_of(files[n]) for n in SPLIT)
    assert {e.part for e in events if e.phase == "download"} == {1, 2}
    assert events[-1].total == sum(files[n].stat().st_size for n in SPLIT)
    (model,) = [m for m in store.models() if m.file.startswith("tiny-1b-F16")]
    assert model.parts == (store.root / SPLIT[0], store.root / SPLIT[1]) and model.ok
    assert store.delete(SPLIT[1])  # any part's name deletes the whole model
    assert not list(store.root.glob("tiny-1b-F16*"))


def test_file_kept_in_git_is_verified_by_its_blob_id(
    store: ModelStore, client: HubClient, files: dict[str, Path]
) -> None:
    path = downloader(store, client).download_file(REPO, "in-git.gguf")
    assert path.read_bytes() == files["in-git.gguf"].read_bytes()


# ---------------------------------------------------------------------------------------------
# Interrupted transfers


def test_cut_connection_is_resumed_and_verified(
    store: ModelStore, client: HubClient, hub: FakeHub, files: dict[str, Path]
) -> None:
    hub.cut_after(REPO, FILE, 1 << 20)
    events: list[Progress] = []
    path = downloader(store, client).download_file(REPO, FILE, progress=events.append)
    assert sha256_of(path) == sha256_of(files[FILE])
    gets = hub.requests("GET", f"/{REPO}/resolve/")
    assert [g.range for g in gets] == [None, f"bytes={1 << 20}-"]
    assert gets[1].status == 206
    retry = next(e for e in events if e.phase == "retry")
    assert retry.done == 1 << 20
    assert retry.message.startswith("the connection was lost; retrying in")


def test_server_errors_are_retried_with_backoff(
    store: ModelStore, client: HubClient, hub: FakeHub
) -> None:
    hub.fail(REPO, FILE, 503, times=2)
    events: list[Progress] = []
    downloader(store, client).download_file(REPO, FILE, progress=events.append)
    retries = [e.message for e in events if e.phase == "retry"]
    assert len(retries) == 2
    assert "the Hub answered HTTP 503 Service Unavailable; retrying in 0.01 s" in retries[0]
    assert "(attempt 3 of 3)" in retries[1]


def test_persistent_server_error_gives_up_and_keeps_the_bytes(
    store: ModelStore, client: HubClient, hub: FakeHub
) -> None:
    hub.cut_after(REPO, FILE, 1 << 20)
    hub.fail(REPO, FILE, 500, times=None, skip=1)  # from the second GET on
    with pytest.raises(TransferError) as e:
        downloader(store, client).download_file(REPO, FILE)
    assert str(e.value) == (
        f"downloading {FILE} failed after 3 attempts: the Hub answered HTTP 500 Internal Server "
        "Error. 1.0 MB of 3.2 MB are kept; download it again to resume."
    )
    assert store.part_path_for(FILE).stat().st_size == 1 << 20
    assert not (store.root / FILE).exists()


def test_cancel_then_resume_after_a_restart(
    store: ModelStore, client: HubClient, hub: FakeHub, files: dict[str, Path]
) -> None:
    hub.hold_after(REPO, FILE, 1 << 20)
    cancel, got_bytes = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def progress(p: Progress) -> None:
        if p.phase == "download" and p.done >= 1 << 20:
            got_bytes.set()

    def run() -> None:
        try:
            downloader(store, client).download_file(REPO, FILE, progress=progress, cancel=cancel)
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    assert got_bytes.wait(10) and hub.holding.wait(10)
    cancel.set()  # the server is stalled: the cancel must not wait for the read timeout
    thread.join(3)
    assert not thread.is_alive()
    hub.release()
    assert len(errors) == 1 and isinstance(errors[0], Cancelled)
    assert str(errors[0]).startswith(f"download of {FILE} cancelled; ")
    assert "downloaded so far are kept to resume later" in str(errors[0])
    part = store.part_path_for(FILE)
    have = part.stat().st_size
    assert 1 << 20 <= have < files[FILE].stat().st_size
    assert not (store.root / FILE).exists()
    record = json.loads(store.part_meta_path_for(FILE).read_text())
    assert record["repo_id"] == REPO and record["filename"] == FILE
    (partial,) = store.partial_downloads()
    assert (partial.file, partial.have, partial.ref) == (FILE, have, f"{REPO}/{FILE}")

    # "restart": new client, new downloader, same store
    fresh = HubClient(hub.endpoint, token=False)
    events: list[Progress] = []
    path = downloader(ModelStore(store.root), fresh).download_file(
        REPO, FILE, progress=events.append
    )
    assert sha256_of(path) == sha256_of(files[FILE])
    assert hub.requests("GET", f"/{REPO}/resolve/")[-1].range == f"bytes={have}-"
    first = next(e for e in events if e.phase == "download")
    assert first.done == have
    assert leftovers(store) == [FILE, FILE + ".verified"]


def test_stale_partial_from_another_file_is_restarted(
    store: ModelStore, client: HubClient, hub: FakeHub, files: dict[str, Path]
) -> None:
    store.part_path_for(FILE).write_bytes(b"junk" * 1000)  # no source record
    path = downloader(store, client).download_file(REPO, FILE)
    assert sha256_of(path) == sha256_of(files[FILE])
    assert hub.requests("GET", f"/{REPO}/resolve/")[-1].range is None


# ---------------------------------------------------------------------------------------------
# Rejected downloads


def test_corrupted_bytes_are_rejected(store: ModelStore, client: HubClient, hub: FakeHub) -> None:
    hub.corrupt(REPO, FILE)
    with pytest.raises(ChecksumMismatch) as e:
        downloader(store, client).download_file(REPO, FILE)
    message = str(e.value)
    assert message.startswith(f"{FILE} is damaged: its SHA-256 is ")
    assert message.endswith("The download was deleted and nothing was installed; try again.")
    assert leftovers(store) == []
    assert store.models() == []


def test_valid_checksum_but_not_a_model(store: ModelStore, client: HubClient) -> None:
    with pytest.raises(TransferError, match=r"not-gguf.gguf is not a usable GGUF model \("):
        downloader(store, client).download_file(REPO, "not-gguf.gguf")
    assert leftovers(store) == []


def test_catalog_pin_must_match_the_hub(store: ModelStore, client: HubClient, hub: FakeHub) -> None:
    pinned = CatalogModel(
        id="tiny", repo=REPO, file=FILE, family="tiny", params="1B", quant="Q4_K_M",
        context_length=4096, sha256="0" * 64,
    )  # fmt: skip
    catalog = Catalog(models={"tiny": pinned}, pairs=())
    with pytest.raises(TransferError, match="differs from the catalog's pin"):
        downloader(store, client, catalog=catalog).download_file(REPO, FILE)
    assert not hub.requests("GET", f"/{REPO}/resolve/")  # refused before any byte


@pytest.mark.parametrize(
    ("repo", "name", "message"),
    [
        (REPO, "missing.gguf", f"missing.gguf was not found in {REPO}"),
        ("test/nope", FILE, "repository test/nope was not found on the Hub"),
    ],
)
def test_not_found(
    store: ModelStore, client: HubClient, repo: str, name: str, message: str
) -> None:
    with pytest.raises(HubNotFound, match=message):
        downloader(store, client).download_file(repo, name)
    assert leftovers(store) == []


def test_not_found_after_the_lookup(store: ModelStore, client: HubClient, hub: FakeHub) -> None:
    hub.fail(REPO, FILE, 404)  # the HEAD succeeds, the GET says 404
    with pytest.raises(TransferError, match=f"{FILE} in {REPO} was not found on the Hub"):
        downloader(store, client).download_file(REPO, FILE)


def test_not_enough_disk(
    store: ModelStore, client: HubClient, hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda _path: DiskUsage(10**9, 10**9, 50 << 20))
    with pytest.raises(NotEnoughDiskSpace) as e:
        downloader(store, client).download_file(REPO, FILE)
    assert str(e.value) == (
        f"not enough free disk space for downloading {FILE}: it needs 137.4 MB including "
        f"134.2 MB to spare, but only 52.4 MB is free in {store.root}"
    )
    assert not hub.requests("GET", f"/{REPO}/resolve/") and leftovers(store) == []


# ---------------------------------------------------------------------------------------------
# Offline


def test_offline_mode(
    store: ModelStore, client: HubClient, hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    downloader(store, client).download_file(REPO, FILE)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubOffline, match="Offline mode: HF_HUB_OFFLINE is set"):
        downloader(store, client).download_file(REPO, "in-git.gguf")
    assert [m.file for m in store.models()] == [FILE]  # the store is still usable


def test_nothing_listening(store: ModelStore) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"
    client = HubClient(endpoint, token=False)
    with pytest.raises(
        HubOffline, match=r"Cannot reach the Hugging Face Hub at .*connection refused"
    ):
        downloader(store, client).download_file(REPO, FILE)
    assert leftovers(store) == []


# ---------------------------------------------------------------------------------------------
# Store: listing, import, delete


def test_import_validates_and_copies_atomically(
    store: ModelStore, files: dict[str, Path], tmp_path: Path
) -> None:
    seen: list[tuple[int, int]] = []
    model = import_model(store, files[FILE], lambda done, total: seen.append((done, total)))
    assert model.path == store.root / FILE and model.ok and model.quant == "F32"
    assert seen[-1] == (files[FILE].stat().st_size,) * 2
    digest = hashlib.sha256(files[FILE].read_bytes()).hexdigest()
    assert store.cached_sha256(model.path) == digest
    assert import_model(store, files[FILE]).path == model.path  # the same file again: fine

    other = write_tiny_gguf(tmp_path / FILE, seed=7)  # same name, other bytes
    with pytest.raises(StoreError, match=f"a different model named {FILE} is already installed"):
        import_model(store, other)

    bad = _write(tmp_path / "cut.gguf", files[FILE].read_bytes()[:100_000])
    with pytest.raises(StoreError, match=r"cannot import cut.gguf: cut.gguf is truncated"):
        import_model(store, bad)
    assert leftovers(store) == [FILE, FILE + ".verified"]


def test_import_split_model_and_cancel(store: ModelStore, files: dict[str, Path]) -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled, match=f"^import of {SPLIT[0]} cancelled; nothing was added"):
        import_model(store, files[SPLIT[0]], cancel=cancel)
    assert leftovers(store) == []
    model = import_model(store, files[SPLIT[1]])  # any part brings the whole model
    assert model.path.name == SPLIT[0] and len(model.parts) == 2


def test_import_needs_disk_space(
    store: ModelStore, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda _path: DiskUsage(10**9, 10**9, 1 << 20))
    with pytest.raises(StoreError) as e:  # NotEnoughDiskSpace is a StoreError
        import_model(store, files[FILE])
    assert isinstance(e.value, NotEnoughDiskSpace)
    assert str(e.value).startswith(
        f"not enough free disk space for importing {FILE}: it needs 137.4 MB including "
        "134.2 MB to spare, but only 1.0 MB is free in "
    )
    assert leftovers(store) == []


def test_store_lists_broken_files_and_missing_parts(
    store: ModelStore, files: dict[str, Path]
) -> None:
    _write(store.root / "broken.gguf", b"GGUF" + bytes(10))
    shutil.copy(files[SPLIT[0]], store.root / SPLIT[0])
    by_file = {m.file: m for m in store.models()}
    assert set(by_file) == {"broken.gguf", SPLIT[0]}
    assert not by_file["broken.gguf"].ok and "broken.gguf" in (by_file["broken.gguf"].error or "")
    assert by_file[SPLIT[0]].error == f"part(s) missing: {SPLIT[1]}"


# ---------------------------------------------------------------------------------------------
# fetch-default's Hub path goes through the same downloader


def test_fetch_model_from_the_hub_resumes_and_checks_the_pin(
    store: ModelStore, hub: FakeHub, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    sha = sha256_of(files[FILE])
    model = CatalogModel(
        id="tiny", repo=REPO, file=FILE, family="tiny", params="1B", quant="Q4_K_M",
        context_length=4096, size=files[FILE].stat().st_size, sha256=sha,
    )  # fmt: skip
    hub.cut_after(REPO, FILE, 1 << 20)
    events: list[Progress] = []
    path = fetch_model(model, store, progress=events.append, prefer="hf")
    assert path == store.root / FILE and store.cached_sha256(path) == sha
    assert hub.requests("GET", f"/{REPO}/resolve/")[-1].range == f"bytes={1 << 20}-"
    assert {e.phase for e in events} == {"download", "verify"}
    assert events[-1].message == f"{FILE} is ready" or events[-1].message.endswith("installed")

    store.delete(FILE)
    wrong = CatalogModel(**{**model.__dict__, "sha256": "f" * 64})
    with pytest.raises(TransferError, match="differs from the catalog's pin"):
        fetch_model(wrong, store, prefer="hf")


# ---------------------------------------------------------------------------------------------
# The former names of the shared vocabulary stay importable (the GUI still uses them)


def test_former_names_are_aliases_of_the_shared_vocabulary() -> None:
    assert download.DownloadProgress is pypi_fetch.FetchProgress is Progress
    assert download.DownloadCancelled is pypi_fetch.FetchCancelled is Cancelled
    assert store_mod.ImportCancelled is Cancelled
    assert download.DownloadError is pypi_fetch.FetchError is TransferError
    assert issubclass(NotEnoughDiskSpace, StoreError) and issubclass(StoreError, TransferError)
    assert issubclass(ChecksumMismatch, TransferError)
    assert download.NotEnoughDiskSpace is NotEnoughDiskSpace
    assert download.ChecksumMismatch is ChecksumMismatch
    p = Progress("m.gguf", "download", 5, 10, speed=2.0, eta=2.5)
    old = (p.name, p.stage, p.done_bytes, p.total_bytes, p.speed_bps, p.eta_s, p.fraction)
    assert old == ("m.gguf", "download", 5, 10, 2.0, 2.5, 0.5)
