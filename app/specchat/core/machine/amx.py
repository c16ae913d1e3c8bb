"""Intel AMX and the pinned llama.cpp: built without it, and a build that has it made safe.

On a CPU with AMX (Xeon Sapphire Rapids and later), llama.cpp's native build (`GGML_NATIVE`, the
default: `-march=native`) compiles ggml's AMX matrix kernels in and stores Q4_K and other weights
in the AMX layout. In the llama.cpp that llama-cpp-python 0.3.36 vendors those kernels crash the
process at the first decode (SIGSEGV at `ldtilecfg` in `ggml_backend_amx_mul_mat`: the tile
configuration it loads is not the one it built; llama.cpp issue 20824, pull request 26954). A
crash takes the whole app with it, so:

- the set-up (``packaging/pip_install.py``) and the llama-server build add `NO_AMX_FLAGS` to the
  compiler's flags where `-march=native` would turn AMX on (`native_has_amx`); every other
  instruction set of the machine stays on, and the weights take llama.cpp's CPU repack layout;
- a build that has AMX compiled in anyway (`amx_in_build` of its system info) loads models
  without llama.cpp's extra weight layouts (`use_extra_bufts` off: the AMX layout is one), which
  is slower but does not crash; ``specchat-cli doctor`` says so and how to rebuild.

The set-up loads this file by its path before SpecChat is installed: the standard library only.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping

NO_AMX_FLAGS = ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16")
_AMX_MACRO = re.compile(r"^#define __AMX_(?:TILE|INT8|BF16)__\b", re.M)
_AMX_INFO = re.compile(r"\bAMX_INT8 = 1\b")

REBUILD_HINT = (
    "Rebuild llama-cpp-python without AMX: run the set-up command again "
    "(python packaging/pip_install.py -e . in SpecChat's source folder)."
)


def native_macros(cc: str | None = None, *flags: str) -> str | None:
    """The C compiler's predefined macros for `-march=native` (plus `flags`), or None when
    there is no compiler or it refuses (MSVC, a compiler that does not know the flags)."""
    compiler = cc or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        return None
    try:
        proc = subprocess.run(  # CC may carry a launcher or flags: "ccache gcc", "gcc -m64"
            [*shlex.split(compiler), "-march=native", *flags, "-dM", "-E", "-x", "c", os.devnull],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def has_amx_macros(macros: str) -> bool:
    return bool(_AMX_MACRO.search(macros))


def native_has_amx(cc: str | None = None) -> bool:
    """Whether a native build here would compile llama.cpp's AMX kernels in."""
    macros = native_macros(cc)
    return macros is not None and has_amx_macros(macros)


def without_amx(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with `NO_AMX_FLAGS` added to CFLAGS and CXXFLAGS (CMake reads them on its first
    configure; the user's own flags stay, before ours)."""
    out = dict(env)
    for name in ("CFLAGS", "CXXFLAGS"):
        out[name] = " ".join(filter(None, [env.get(name, "").strip(), *NO_AMX_FLAGS]))
    return out


def amx_in_build(system_info: str | None) -> bool:
    """Whether a llama.cpp build has AMX compiled in, from `llama_print_system_info()`."""
    return bool(system_info and _AMX_INFO.search(system_info))
