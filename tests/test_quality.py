"""Code habits checked as part of the test command: lint, format, types, import layering."""

from __future__ import annotations

import os
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


def _copy_of_the_package(tmp_path: Path) -> Path:
    """The package's sources and the contracts, copied where a test may break them."""
    shutil.copytree(
        ROOT / "app" / "specchat",
        tmp_path / "app" / "specchat",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path / "app" / "specchat"


@pytest.mark.parametrize(
    ("module", "bad_import", "contract"),
    [
        # a shared shape reaching up into an engine: the layers contract
        ("core/types.py", "import specchat.core.engines.local", "Layers"),
        # two rooms of one floor: model storage and the Hub client
        ("core/store/store.py", "import specchat.core.hub.client", "Layers"),
        # the GUI's Qt inside the CLI
        ("cli/generate.py", "import PySide6.QtWidgets", "Qt only in the window"),
    ],
)
def test_import_contracts_break_on_a_violation(
    tmp_path: Path, module: str, bad_import: str, contract: str
) -> None:
    """The contracts are not vacuous: one wrong import in a copy of the package breaks them."""
    pkg = _copy_of_the_package(tmp_path)
    with open(pkg / module, "a", encoding="utf-8") as f:
        f.write(f"\n{bad_import}  # deliberate violation\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "app")}
    proc = subprocess.run(
        [_tool("lint-imports")], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode != 0, proc.stdout
    broken = [line for line in proc.stdout.splitlines() if " BROKEN" in line]
    assert any(line.startswith(contract) for line in broken), proc.stdout
