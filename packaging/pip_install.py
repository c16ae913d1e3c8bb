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

On a CPU with Intel AMX the build leaves llama.cpp's AMX kernels out (they crash the pinned
llama.cpp at the first decode: ``app/specchat/core/machine/amx.py``), and an installed build that
has them is rebuilt.

pip's wheel cache keys a built wheel by its source, not by ``CMAKE_ARGS`` or compiler flags: a GPU
build, and any build without AMX, therefore uses a cache directory of its own
(``<pip cache>/specchat-<backend>[-no-amx]``), so it never picks up another build's cached wheel
and a second run still reuses its own. The platform's default build uses pip's usual cache,
untouched.
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
MACHINE = ROOT / "app" / "specchat" / "core" / "machine"
CHOICE_MODULE = MACHINE / "backend_choice.py"
AMX_MODULE = MACHINE / "amx.py"
PACKAGE = "llama-cpp-python"


def load_machine_module(path: Path = CHOICE_MODULE) -> ModuleType:
    """A module of core/machine (backend_choice.py, amx.py), read from the source tree (SpecChat
    is not installed)."""
    spec = importlib.util.spec_from_file_location(f"specchat_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
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


def installed_system_info() -> str | None:
    """llama_print_system_info() of the installed llama-cpp-python (None: it does not import)."""
    code = "import sys, llama_cpp; sys.stdout.write(llama_cpp.llama_print_system_info().decode())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def main(argv: list[str]) -> int:
    bc = load_machine_module()
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
    cache, own_build = choice.backend, not choice.default_build
    amx = load_machine_module(AMX_MODULE)
    no_amx = amx.native_has_amx()
    if no_amx:
        env, cache, own_build = amx.without_amx(env), f"{cache}-no-amx", True
        flags = " ".join(amx.NO_AMX_FLAGS)
        print(
            "specchat set-up: this CPU has Intel AMX, whose llama.cpp kernels crash at the "
            f"first decode in the pinned version: building without them ({flags})",
            flush=True,
        )
    requirement = pinned_requirement()
    installed = bc.installed_backends()
    amx_installed = no_amx and installed is not None and amx.amx_in_build(installed_system_info())
    if bc.needs_rebuild(installed, choice) or amx_installed:
        have = ", ".join(sorted(installed or ())) or "nothing"
        have += " with AMX" if amx_installed else ""
        print(f"specchat set-up: the installed {PACKAGE} has {have}: rebuilding it", flush=True)
        opts = ["--force-reinstall", "--no-deps", *backend_cache_dir(cache)]
        code = pip([*opts, requirement], env)
        if code:
            return code
    elif installed is None and own_build:
        code = pip([*backend_cache_dir(cache), requirement], env)
        if code:
            return code
    return pip(argv, env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
