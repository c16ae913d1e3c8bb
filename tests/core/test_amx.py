"""Intel AMX: the set-up builds llama.cpp without its kernels where a native build would have them
(they crash the pinned llama.cpp at the first decode), and a build that has them anyway loads
models without llama.cpp's extra weight layouts (doctor's advice: test_system.py)."""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path

import llama_cpp
import pytest

from specchat.core.decoding.runtime import model_params
from specchat.core.machine.amx import (
    NO_AMX_FLAGS,
    amx_in_build,
    has_amx_macros,
    native_has_amx,
    native_macros,
    without_amx,
)

INFO_AMX = (
    "CPU : SSE3 = 1 | AVX512 = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | OPENMP = 1 | REPACK = 1 |"
)
INFO_PLAIN = "CPU : SSE3 = 1 | AVX2 = 1 | FMA = 1 | OPENMP = 1 | REPACK = 1 |"


def _cpu_has_amx() -> bool:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " amx_int8" in text or " amx_tile" in text


def test_system_info_tells_an_amx_build() -> None:
    assert amx_in_build(INFO_AMX)
    assert not amx_in_build(INFO_PLAIN)
    assert not amx_in_build(INFO_PLAIN.replace("FMA = 1", "AMX_INT8 = 0"))
    assert not amx_in_build(None) and not amx_in_build("")


def test_the_flags_are_added_after_the_users_own() -> None:
    env = without_amx({"CFLAGS": "-O2 -g", "PATH": "/bin"})
    assert env["CFLAGS"] == "-O2 -g " + " ".join(NO_AMX_FLAGS)
    assert env["CXXFLAGS"] == " ".join(NO_AMX_FLAGS)
    assert env["PATH"] == "/bin"


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86 only")
def test_the_flags_leave_amx_out_of_a_native_build() -> None:
    """With the real compiler: `-march=native` turns AMX on exactly where the CPU has it, and
    the flags turn it off again (a flag the compiler does not know fails here)."""
    macros = native_macros()
    if macros is None:
        pytest.skip("no C compiler that takes -march=native")
    assert native_has_amx() == has_amx_macros(macros)
    if _cpu_has_amx():
        assert has_amx_macros(macros)
    without = native_macros(None, *NO_AMX_FLAGS)
    assert without is not None and not has_amx_macros(without)
    if shutil.which("env"):  # a CC with a launcher in front, as ccache users set it
        launched = native_macros("env LC_ALL=C " + (os.environ.get("CC") or "cc"))
        assert launched is not None and has_amx_macros(launched) == has_amx_macros(macros)
    assert "__AVX2__" in without or "__AVX2__" not in macros  # the rest stays native


def test_the_installed_build_has_no_amx() -> None:
    """The set-up's build (the one these tests run on) never has AMX compiled in: on an AMX CPU
    the native build would have it, and every real-model test would die at its first decode."""
    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    assert "CPU :" in info
    assert not amx_in_build(info)


def test_a_build_with_amx_loads_models_without_extra_layouts() -> None:
    assert model_params(llama_cpp, 0, INFO_PLAIN).use_extra_bufts
    with_amx = model_params(llama_cpp, -1, INFO_AMX)
    assert not with_amx.use_extra_bufts
    assert with_amx.n_gpu_layers == 0x7FFFFFFF
