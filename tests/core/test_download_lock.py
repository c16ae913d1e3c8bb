"""Two downloads of one file into one store (#14 case 5): the second waits for the first (and
says so) instead of racing it on the same `.part` file."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakehub import FakeHub, sha256_of, write_tiny_gguf

from specchat.core.fetch.hub_download import Downloader, RetryPolicy
from specchat.core.hub.client import HubClient
from specchat.core.store.progress import Cancelled, Progress
from specchat.core.store.store import ModelStore

REPO = "test/Tiny-1B-GGUF"
FILE = "tiny-1b-Q4_K_M.gguf"
FAST = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.05)
WAITING = f"waiting: another download of {FILE} into this model store is running"


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[FakeHub]:
    source = write_tiny_gguf(tmp_path / FILE, weight_bytes=3 << 20)
    with FakeHub() as fake:
        fake.add_file(REPO, FILE, source)
        yield fake


def _downloader(root: Path, hub: FakeHub) -> Downloader:
    client = HubClient(hub.endpoint, token=False, timeout=10)
    return Downloader(ModelStore(root), client, retry=FAST, progress_interval=0.0)


def test_second_download_of_the_same_file_waits_and_says_so(tmp_path: Path, hub: FakeHub) -> None:
    root = tmp_path / "store"
    hub.hold_after(REPO, FILE, 1 << 20)
    results: dict[str, Path | BaseException] = {}
    events: list[Progress] = []
    second_waits = threading.Event()

    def run(name: str, progress) -> None:
        try:
            results[name] = _downloader(root, hub).download_file(REPO, FILE, progress=progress)
        except BaseException as e:  # noqa: BLE001 - reported below
            results[name] = e

    def watch(p: Progress) -> None:
        events.append(p)
        if p.message.startswith("waiting: "):
            second_waits.set()

    first = threading.Thread(target=run, args=("first", None))
    first.start()
    assert hub.holding.wait(10)  # the first is mid-file, its .part half written
    second = threading.Thread(target=run, args=("second", watch))
    second.start()
    try:
        assert second_waits.wait(10), [e.message for e in events]
        assert second.is_alive()  # waiting, not failing on the first one's .part file
    finally:
        hub.release()
    first.join(30)
    second.join(30)
    assert results["first"] == results["second"] == root / FILE, results
    assert sha256_of(root / FILE) == sha256_of(tmp_path / FILE)
    assert any(e.message.startswith(WAITING) for e in events)
    assert sorted(p.name for p in root.iterdir()) == [FILE, FILE + ".verified"]  # no lock left
    assert len(hub.requests("GET", f"/{REPO}/resolve/")) == 1  # the second found it installed


def test_a_waiting_download_can_be_cancelled(tmp_path: Path, hub: FakeHub) -> None:
    root = tmp_path / "store"
    hub.hold_after(REPO, FILE, 1 << 20)
    first = threading.Thread(target=lambda: _downloader(root, hub).download_file(REPO, FILE))
    first.start()
    try:
        assert hub.holding.wait(10)
        cancel = threading.Event()
        waiting = threading.Event()

        def progress(p: Progress) -> None:
            if p.message.startswith("waiting: "):
                waiting.set()
                cancel.set()

        with pytest.raises(Cancelled):
            _downloader(root, hub).download_file(REPO, FILE, progress=progress, cancel=cancel)
        assert waiting.is_set()
    finally:
        hub.release()
        first.join(30)
    assert (root / FILE).is_file()
