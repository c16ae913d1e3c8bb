"""``pip install`` with llama-cpp-python built for this machine: the README's set-up step.

    .venv/bin/python packaging/pip_install.py -e '.[dev]'

Run with the virtual environment's Python; the arguments go to ``pip install``. Before that it
prints which llama.cpp backend it builds for and why (CUDA with an NVIDIA GPU and the CUDA
toolkit, Metal on Apple Silicon, Vulkan with a Vulkan GPU that is not a CPU device and the Vulkan
SDK pieces, else the CPU, naming the packages a Vulkan build lacks;
``SPECCHAT_BACKEND=cpu|cuda|metal|vulkan`` overrides, and with ``cuda`` or ``vulkan`` a
``CMAKE_ARGS`` of yours is added to the backend's flag), and rebuilds an installed
llama-cpp-python that lacks that backend. On Debian 12, a Vulkan build takes Debian 13's headers:

    CMAKE_ARGS="$(bash packaging/vulkan-headers-debian.sh)" SPECCHAT_BACKEND=vulkan \
        .venv/bin/python packaging/pip_install.py -e '.[dev]'

pip's wheel cache keys a built wheel by its source, not by ``CMAKE_ARGS``: a GPU build therefore
uses a cache directory of its own (``<pip cache>/specchat-<backend>``), so it never picks up a
cached CPU wheel and a second run still reuses the GPU wheel. The platform's default build uses
pip's usual cache, untouched.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
CHOICE_MODULE = ROOT / "app" / "specchat" / "core" / "machine" / "backend_choice.py"
PACKAGE = "llama-cpp-python"


def load_choice_module() -> ModuleType:
    """core/machine/backend_choice.py, read from the source tree (SpecChat is not installed)."""
    spec = importlib.util.spec_from_file_location("specchat_backend_choice", CHOICE_MODULE)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {CHOICE_MODULE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def pinned_requirement(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """``llama-cpp-python==X`` as pinned in pyproject.toml (unpinned if it cannot be read)."""
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return PACKAGE
    m = re.search(r'"llama-cpp-python\s*==\s*([^";\s]+)', text)
    return f"{PACKAGE}=={m.group(1)}" if m else PACKAGE


def pip(args: list[str], env: dict[str, str]) -> int:
    cmd = [sys.executable, "-m", "pip", "install", *args]
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.call(cmd, env=env)


def backend_cache_dir(backend: str) -> list[str]:
    """pip options that give this backend's builds a wheel cache of their own."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True
    )
    base = proc.stdout.strip()
    if proc.returncode != 0 or not base:
        return ["--no-cache-dir"]  # the cache is off: build every time, never a wrong wheel
    return ["--cache-dir", str(Path(base) / f"specchat-{backend}")]


def main(argv: list[str]) -> int:
    bc = load_choice_module()
    try:
        choice = bc.choose_backend(bc.detect_build_facts())
    except ValueError as exc:
        print(f"specchat set-up: {exc}", file=sys.stderr)
        return 2
    print(choice.line(), flush=True)
    for warning in choice.warnings:
        print(f"specchat set-up: warning: {warning}", flush=True)
    env = dict(os.environ)
    env.update(choice.env)
    if choice.cmake_args:
        env["CMAKE_ARGS"] = choice.cmake_args
    requirement = pinned_requirement()
    installed = bc.installed_backends()
    if bc.needs_rebuild(installed, choice):
        have = ", ".join(sorted(installed or ())) or "nothing"
        print(f"specchat set-up: the installed {PACKAGE} has {have}: rebuilding it", flush=True)
        opts = ["--force-reinstall", "--no-deps", *backend_cache_dir(choice.backend)]
        code = pip([*opts, requirement], env)
        if code:
            return code
    elif installed is None and not choice.default_build:
        code = pip([*backend_cache_dir(choice.backend), requirement], env)
        if code:
            return code
    return pip(argv, env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
