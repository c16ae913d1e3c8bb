"""`specchat-cli doctor`: the advice as a pure function of the facts, Qt's system libraries, and
the real report on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import llama_cpp

from specchat.core.doctor import SystemFacts, advice, render
from specchat.core.machine.backend_choice import BuildFacts, choose_backend
from specchat.core.machine.backend_info import BackendInfo, Device
from specchat.core.machine.desktop_libs import (
    XCB_LIBS,
    distro_family,
    install_hint,
    missing_xcb_libs,
    read_os_release,
)

BIN = Path(sys.executable).parent
CPU_BUILD = BackendInfo(
    llama_cpp_python="0.3.36",
    ggml_version="0.25.3",
    commit="abc1234",
    registries=(("CPU", 1),),
    devices=(Device("CPU", "Some CPU", "CPU", "CPU", 8 << 30, 16 << 30),),
    gpu_offload=False,
    lib_backends=frozenset({"cpu"}),
)
CUDA_BUILD = replace(
    CPU_BUILD,
    registries=(("CUDA", 1), ("CPU", 1)),
    devices=(Device("CUDA0", "NVIDIA RTX 4090", "GPU", "CUDA", 20 << 30, 24 << 30),),
    gpu_offload=True,
)


def facts(backend: BackendInfo = CPU_BUILD, build: BuildFacts | None = None, **kw) -> SystemFacts:
    build = build or BuildFacts("Linux", "x86_64")
    base = SystemFacts(
        specchat="0.1.0",
        python="3.11.7",
        python_exe="/v/bin/python",
        os="Linux",
        backend=backend,
        build=build,
        choice=choose_backend(build),
        store_dir="/models",
        default_pair_installed=True,
        disk_free=50 * 10**9,
        disk_total=100 * 10**9,
        linux=True,
    )
    return replace(base, **kw)


def test_nothing_to_do_on_a_complete_cpu_machine() -> None:
    f = facts()
    assert advice(f) == []
    text = render(f)
    assert "What to do: nothing" in text
    assert "not supported (CPU-only build)" in text and "Some CPU" in text
    assert "Set-up builds for  CPU: no NVIDIA GPU" in text


def test_a_gpu_with_a_cpu_only_build_gets_the_rebuild_command() -> None:
    gpu = BuildFacts("Linux", "x86_64", nvidia_smi="/usr/bin/nvidia-smi", nvcc="/usr/bin/nvcc")
    (line,) = advice(facts(build=gpu))
    assert "NVIDIA GPU but llama-cpp-python was built for the CPU only" in line
    assert 'CMAKE_ARGS="-DGGML_CUDA=on" ' in line and "--force-reinstall" in line
    assert "llama-cpp-python==0.3.36" in line
    no_toolkit = replace(gpu, nvcc=None)
    (line,) = advice(facts(build=no_toolkit))
    assert "CUDA toolkit (nvcc)" in line
    mac = BuildFacts("Darwin", "arm64")
    (line,) = advice(facts(build=mac, linux=False))
    assert "Rebuild it for Metal" in line and "CMAKE_ARGS" not in line


def test_other_advice() -> None:
    f = facts(
        CUDA_BUILD,
        missing_libs=("libxcb-cursor.so.0",),
        distro="debian",
        default_pair_installed=False,
        disk_free=10**9,
        gpu_layers=("0", "auto"),
    )
    todo = advice(f)
    assert any("set GPU layers to auto" in a for a in todo)
    assert any(a.endswith("sudo apt install libxcb-cursor0") for a in todo)
    assert any("specchat-cli models fetch-default" in a for a in todo)
    assert any(a.startswith("Only 1.00 GB free") for a in todo)
    assert "NVIDIA RTX 4090 (GPU, CUDA backend): 21.47 GB free of 25.77 GB" in render(f)


def test_doctor_says_what_an_amx_build_costs_and_how_to_rebuild() -> None:
    plain = replace(CPU_BUILD, system_info="CPU : AVX2 = 1 | OPENMP = 1 |")
    assert not any("AMX" in a for a in advice(facts(plain)))
    amx = replace(CPU_BUILD, system_info="CPU : AVX512 = 1 | AMX_INT8 = 1 |")
    (line,) = [a for a in advice(facts(amx)) if "AMX" in a]
    assert "crash" in line and "slower" in line and "pip_install.py" in line


def test_install_hints_per_distribution() -> None:
    missing = ["libxcb-cursor.so.0", "libxcb-icccm.so.4"]
    assert install_hint(missing, "debian") == "sudo apt install libxcb-cursor0 libxcb-icccm4"
    assert install_hint(missing, "fedora") == "sudo dnf install xcb-util-cursor xcb-util-wm"
    assert install_hint(missing, "arch") == "sudo pacman -S xcb-util-cursor xcb-util-wm"
    unknown = install_hint(["libxcb-cursor.so.0"], None)
    assert (
        "libxcb-cursor0 (Debian/Ubuntu)" in unknown and "xcb-util-cursor (Fedora/Arch)" in unknown
    )
    assert distro_family({"ID": "ubuntu", "ID_LIKE": "debian"}) == "debian"
    assert distro_family({"ID": "linuxmint", "ID_LIKE": "ubuntu"}) == "debian"
    assert distro_family({"ID": "fedora"}) == "fedora"
    assert distro_family({"ID": "manjaro", "ID_LIKE": "arch"}) == "arch"
    assert distro_family({}) is None


def test_missing_libraries_are_found_by_loading_them(tmp_path: Path) -> None:
    def load(name: str) -> object:
        if name == "libxcb-cursor.so.0":
            raise OSError(f"{name}: cannot open shared object file")
        return object()

    assert missing_xcb_libs(load) == ["libxcb-cursor.so.0"]
    assert missing_xcb_libs(lambda _: None) == []
    assert list(XCB_LIBS)[0] == "libxcb-cursor.so.0"
    release = tmp_path / "os-release"
    release.write_text('NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\n')
    assert read_os_release(release)["ID_LIKE"] == "debian"
    assert read_os_release(tmp_path / "none") == {}


def test_doctor_on_this_machine(tmp_path: Path) -> None:
    cli = str(BIN / "specchat-cli")
    env = {**os.environ, "SPECCHAT_DATA_DIR": str(tmp_path)}  # fresh settings: auto
    proc = subprocess.run([cli, "doctor"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"llama-cpp-python   {llama_cpp.__version__}" in out
    assert "llama.cpp          commit " in out
    assert "Backends           CPU (1 device)" in out  # ggml's registry on this CPU build
    assert "GPU offload" in out and "Model store" in out and "Free disk" in out
    assert "GPU layers         target auto, draft auto (settings)" in out
    assert "What to do" in out
    proc = subprocess.run(
        [cli, "doctor", "--json"], capture_output=True, text=True, env=env, timeout=120
    )
    data = json.loads(proc.stdout)
    assert "CPU" in data["backends"] and isinstance(data["gpu_offload"], bool)
    assert data["devices"] and data["devices"][0]["total"] > 0
