"""A target and its drafter file (an MTP sidecar ``mtp-*.gguf`` or a Gemma 4 assistant),
fetched together.

Before a byte is downloaded, both GGUF headers are read with range requests and the drafter is
checked against the target (:func:`~specchat.core.gguf.sidecar.check_sidecar`): a drafter for
another architecture or another hidden size is refused, naming the failing check, and nothing
is downloaded. The drafter (small) is then fetched first, with the same progress, resume and
SHA-256 check as every file (:class:`~specchat.core.fetch.hub_download.Downloader`); if it is
damaged it is refused and the target is not fetched, so nothing is installed. Then the target.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from specchat.core.fetch.hub_download import Downloader
from specchat.core.gguf.compat import CompatResult
from specchat.core.gguf.header import GGUFError, read_gguf_info
from specchat.core.gguf.sidecar import check_sidecar, pairing_name
from specchat.core.hub.values import RemoteModel
from specchat.core.store.fileops import remove_files
from specchat.core.store.progress import ProgressFn, TransferError
from specchat.core.store.store import VERIFIED_SUFFIX

__all__ = ["DrafterRefused", "PairedDownload", "check_remote_drafter", "download_with_drafter"]


class DrafterRefused(TransferError):
    """The drafter file does not belong to the target; ``result.check`` names the check."""

    def __init__(self, message: str, result: CompatResult) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class PairedDownload:
    target: Path
    drafter: Path
    pairing: str  # "MTP head (sidecar)", "assistant"
    message: str  # what the check found


def _refusal(target: RemoteModel, drafter: RemoteModel, result: CompatResult) -> DrafterRefused:
    return DrafterRefused(
        f"{drafter.name} is not a drafter for {target.name}: check '{result.check}' failed: "
        f"{result.message}; nothing was downloaded",
        result,
    )


def check_remote_drafter(
    downloader: Downloader, target: RemoteModel, drafter: RemoteModel
) -> tuple[CompatResult, str]:
    """Check the pair from the two remote headers (range requests); (verdict, pairing name)."""
    hub = downloader.hub
    t_info = hub.read_header(target.repo_id, target.first.path, target.revision).info
    d_info = hub.read_header(drafter.repo_id, drafter.first.path, drafter.revision).info
    return check_sidecar(t_info, d_info), pairing_name(d_info)


def download_with_drafter(
    downloader: Downloader,
    target: RemoteModel,
    drafter: RemoteModel,
    *,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
) -> PairedDownload:
    """Check, then download the drafter and the target (see the module's docstring).

    Raises :class:`DrafterRefused` for a drafter that does not fit (nothing downloaded),
    :class:`~specchat.core.store.progress.TransferError` (e.g. ``ChecksumMismatch``) when a
    file fails, and HubError from the Hub.
    """
    result, pairing = check_remote_drafter(downloader, target, drafter)
    if not result.ok:
        raise _refusal(target, drafter, result)
    d_path = downloader.download(drafter, progress=progress, cancel=cancel)
    try:  # the installed bytes must say the same as the header read before
        local = check_sidecar(
            downloader.hub.read_header(target.repo_id, target.first.path, target.revision).info,
            read_gguf_info(d_path),
        )
    except GGUFError as e:
        local = CompatResult(False, "header", str(e))
    if not local.ok:
        remove_files(d_path, d_path.with_name(d_path.name + VERIFIED_SUFFIX))
        raise _refusal(target, drafter, local)
    t_path = downloader.download(target, progress=progress, cancel=cancel)
    return PairedDownload(t_path, d_path, pairing, result.message)
