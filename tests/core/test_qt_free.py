"""The core imports and works with PySide6 unavailable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import specchat.core

CORE = Path(specchat.core.__file__).parent

SCRIPT = r"""
import importlib, pkgutil, sys

class BlockQt:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("PySide6", "shiboken6"):
            raise ImportError(f"{name} is blocked for this test")
        return None

sys.meta_path.insert(0, BlockQt())
import specchat.core as core
names = [m.name for m in pkgutil.walk_packages(core.__path__, "specchat.core.")]
for name in names:
    importlib.import_module(name)
import specchat.cli.main
assert not any(m.split(".")[0] in ("PySide6", "shiboken6") for m in sys.modules)
print(" ".join(names))
"""


def test_core_imports_without_qt() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    imported = set(proc.stdout.split())
    # every module file under specchat/core, found on disk, not by the walk being tested
    on_disk = {
        "specchat.core." + ".".join(f.relative_to(CORE).with_suffix("").parts)
        for f in CORE.rglob("*.py")
        if f.name != "__init__.py"
    }
    assert on_disk, CORE
    assert on_disk <= imported, f"not imported without Qt: {sorted(on_disk - imported)}"
