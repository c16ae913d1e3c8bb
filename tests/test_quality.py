"""Code habits checked as part of the test command: lint, format, types, import layering."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    exe = BIN / name
    found = str(exe) if exe.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (pip install -e '.[dev]')")
    return found


def _run(*cmd: str) -> None:
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"


def test_ruff_lint() -> None:
    _run(_tool("ruff"), "check", "app", "tests", "packaging")


def test_ruff_format() -> None:
    _run(_tool("ruff"), "format", "--check", "app", "tests", "packaging")


def test_mypy() -> None:
    _run(_tool("mypy"))


def test_import_contract_keeps_qt_out_of_core() -> None:
    _run(_tool("lint-imports"))
