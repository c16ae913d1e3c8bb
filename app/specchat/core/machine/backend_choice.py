"""Which llama.cpp backend to build llama-cpp-python for: a pure function of the machine's facts.

The set-up script (``packaging/pip_install.py``, the README's set-up step) loads this file by its
path before SpecChat is installed, so it imports nothing but the standard library. ``specchat-cli
doctor`` uses it too, to tell a user whose machine has a GPU but whose build is CPU-only the one
command that rebuilds.

Rules (``choose_backend``): ``SPECCHAT_BACKEND=cpu|cuda|metal|vulkan`` wins (with ``cuda`` or
``vulkan``, the user's own ``CMAKE_ARGS`` go after the backend's flag); then ``CMAKE_ARGS`` set
by the user is passed through as it is; then an Apple Silicon Mac gets Metal
(llama-cpp-python's default there); an NVIDIA GPU (``nvidia-smi``) with the CUDA toolkit
(``nvcc``) gets CUDA; a Vulkan GPU that is not a CPU device (``vulkaninfo --summary``: AMD,
Intel, or NVIDIA without the CUDA toolkit) gets Vulkan when the Vulkan SDK pieces llama.cpp needs
are there (``glslc``, Vulkan headers 1.3.275 or newer, SPIRV-Headers), else the CPU with the
packages that would bring them; everything else gets the CPU.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ENV_BACKEND = "SPECCHAT_BACKEND"
BACKENDS = ("cpu", "cuda", "metal", "vulkan")
LABELS = {"cpu": "CPU", "cuda": "CUDA", "metal": "Metal", "vulkan": "Vulkan", "custom": "custom"}
GPU_BACKENDS = frozenset({"cuda", "metal", "vulkan", "hip", "sycl", "opencl"})
OVERRIDE_HINT = f"set {ENV_BACKEND}=cpu|cuda|metal|vulkan to choose another"

_CMAKE = {"cuda": "-DGGML_CUDA=on", "vulkan": "-DGGML_VULKAN=on"}
_CUDA_HOMES = ("CUDA_HOME", "CUDA_PATH")
VULKAN_HEADERS_MIN = (1, 3, 275)  # vk::LayerSettingEXT (llama.cpp's ggml-vulkan uses it)
VULKAN_MIN_TEXT = ".".join(map(str, VULKAN_HEADERS_MIN))
_VULKAN_PACKAGES = {
    "debian": "sudo apt install glslc libvulkan-dev spirv-headers",
    "fedora": "sudo dnf install glslc vulkan-headers vulkan-loader-devel spirv-headers-devel",
    "arch": "sudo pacman -S shaderc vulkan-headers vulkan-icd-loader spirv-headers",
}
_GPU_TYPES = ("DISCRETE_GPU", "INTEGRATED_GPU", "VIRTUAL_GPU")
_FAMILIES = {
    "debian": ("debian", "ubuntu"),
    "fedora": ("fedora", "rhel", "centos"),
    "arch": ("arch", "manjaro", "endeavouros"),
}
_CUDA_DEFAULT = "/usr/local/cuda"


@dataclass(frozen=True)
class BuildFacts:
    """What the set-up can see about the machine before building anything."""

    system: str  # platform.system(): "Linux", "Darwin", "Windows"
    machine: str  # platform.machine(): "x86_64", "arm64", "AMD64", "aarch64"
    nvidia_smi: str | None = None  # path of nvidia-smi (the NVIDIA driver is installed)
    nvcc: str | None = None  # path of the CUDA compiler (the CUDA toolkit is installed)
    glslc: str | None = None  # path of the Vulkan shader compiler (the Vulkan SDK)
    override: str | None = None  # $SPECCHAT_BACKEND
    cmake_args: str | None = None  # $CMAKE_ARGS, when the user set it
    vulkan_gpus: tuple[str, ...] = ()  # Vulkan devices that are GPUs (not llvmpipe & co.)
    vulkan_headers: tuple[int, int, int] | None = None  # version of the Vulkan headers found
    spirv_headers: bool | None = None  # SPIRV-Headers' CMake files found (None: not looked)
    distro: str | None = None  # "debian", "fedora", "arch" (for package names)

    @property
    def vulkan_missing(self) -> tuple[str, ...]:
        """What a Vulkan build of llama.cpp lacks here, one phrase each (empty: nothing)."""
        out = []
        if not self.glslc:
            out.append("the shader compiler glslc")
        if self.vulkan_headers is None:
            out.append("the Vulkan headers")
        elif self.vulkan_headers < VULKAN_HEADERS_MIN:
            have = ".".join(map(str, self.vulkan_headers))
            out.append(f"Vulkan headers {VULKAN_MIN_TEXT} or newer (found {have})")
        if self.spirv_headers is False:
            out.append("SPIRV-Headers")
        return tuple(out)

    @property
    def apple_silicon(self) -> bool:
        return self.system == "Darwin" and self.machine.lower() in ("arm64", "aarch64")

    @property
    def has_gpu(self) -> bool:
        """A GPU llama.cpp can use is known to be there (NVIDIA driver, an Apple Silicon Mac, or
        a Vulkan GPU)."""
        return self.nvidia_smi is not None or self.apple_silicon or bool(self.vulkan_gpus)


@dataclass(frozen=True)
class BackendChoice:
    backend: str  # one of BACKENDS, or "custom" (the user's own CMAKE_ARGS)
    reason: str
    cmake_args: str | None = None  # CMAKE_ARGS for the build; None: llama-cpp-python's default
    env: Mapping[str, str] = field(default_factory=dict)  # more build environment (CUDACXX)
    warnings: tuple[str, ...] = ()
    explicit: bool = False  # asked for by SPECCHAT_BACKEND or CMAKE_ARGS

    @property
    def label(self) -> str:
        return LABELS.get(self.backend, self.backend)

    @property
    def default_build(self) -> bool:
        """Whether a plain ``pip install llama-cpp-python`` builds exactly this (so pip's usual
        wheel cache may be used: it keys wheels by source, not by CMAKE_ARGS)."""
        return self.cmake_args is None

    def line(self) -> str:
        """The set-up's one line: which backend and why."""
        return f"specchat set-up: {self.label} backend: {self.reason} ({OVERRIDE_HINT})"


def backend_from_cmake_args(args: str) -> str:
    """The backend a CMAKE_ARGS string asks for ("custom" when it names none)."""
    on = {m.group(1).lower() for m in re.finditer(r"-DGGML_(\w+)=(?:on|1|yes|true)\b", args, re.I)}
    for name in ("cuda", "vulkan", "metal", "hip", "sycl"):
        if name in on:
            return name
    return "cpu" if re.search(r"-DGGML_METAL=(?:off|0|no|false)\b", args, re.I) else "custom"


def choose_backend(facts: BuildFacts) -> BackendChoice:
    """The backend to build llama-cpp-python for. Raises ValueError for an impossible override."""
    override = (facts.override or "").strip().lower()
    if override:
        return _overridden(override, facts)
    if facts.cmake_args:
        return BackendChoice(
            backend_from_cmake_args(facts.cmake_args),
            f"CMAKE_ARGS={facts.cmake_args!r} is set, so it is passed to the build as it is",
            facts.cmake_args,
            explicit=True,
        )
    if facts.apple_silicon:
        return BackendChoice("metal", "an Apple Silicon Mac (Metal is llama-cpp-python's default)")
    if facts.system == "Darwin":
        return BackendChoice("cpu", "an Intel Mac (Metal turned off)", "-DGGML_METAL=off")
    if facts.nvidia_smi and facts.nvcc:
        return BackendChoice(
            "cuda",
            f"an NVIDIA GPU ({facts.nvidia_smi}) and the CUDA toolkit ({facts.nvcc})",
            _CMAKE["cuda"],
            {"CUDACXX": facts.nvcc},
        )
    if facts.vulkan_gpus:
        return _vulkan_auto(facts)
    if facts.nvidia_smi:
        why = (
            f"an NVIDIA GPU was found ({facts.nvidia_smi}) but not the CUDA toolkit (nvcc), "
            "which the CUDA build needs; install it and run this command again"
        )
        return BackendChoice("cpu", why, warnings=(why,))
    return BackendChoice(
        "cpu",
        "no NVIDIA GPU (no nvidia-smi on PATH), no Vulkan GPU (vulkaninfo) "
        "and not an Apple Silicon Mac",
    )


def _overridden(name: str, facts: BuildFacts) -> BackendChoice:
    why = f"{ENV_BACKEND}={name}"
    if name not in BACKENDS:
        raise ValueError(f"{why}: choose one of {', '.join(BACKENDS)}")
    if name == "cpu":
        flags = "-DGGML_METAL=off" if facts.system == "Darwin" else None
        return BackendChoice("cpu", why, flags, explicit=True)
    if name == "metal":
        if facts.system != "Darwin":
            raise ValueError(f"{why}: Metal is for macOS only")
        return BackendChoice("metal", why, explicit=True)
    if name == "cuda":
        if facts.system == "Darwin":
            raise ValueError(f"{why}: CUDA does not run on macOS")
        warnings = () if facts.nvcc else ("the CUDA toolkit (nvcc) was not found: the build fails",)
        env = {"CUDACXX": facts.nvcc} if facts.nvcc else {}
        flags = _with_users(_CMAKE["cuda"], facts)
        return BackendChoice("cuda", why, flags, env, warnings, explicit=True)
    missing = facts.vulkan_missing
    warnings = (vulkan_hint(facts),) if missing else ()
    flags = _with_users(_CMAKE["vulkan"], facts)
    return BackendChoice("vulkan", why, flags, warnings=warnings, explicit=True)


def _with_users(flag: str, facts: BuildFacts) -> str:
    """The backend's flag and the user's own ``CMAKE_ARGS`` after it (architectures, paths)."""
    return flag + (f" {facts.cmake_args}" if facts.cmake_args else "")


def _vulkan_auto(facts: BuildFacts) -> BackendChoice:
    gpus = ", ".join(facts.vulkan_gpus)
    if not facts.vulkan_missing:
        why = f"a Vulkan GPU ({gpus})" + (
            " and no CUDA toolkit (nvcc) for a CUDA build" if facts.nvidia_smi else ""
        )
        return BackendChoice("vulkan", why, _CMAKE["vulkan"])
    why = f"a Vulkan GPU was found ({gpus}) but {vulkan_hint(facts)}, then run this again"
    return BackendChoice("cpu", why, warnings=(why,))


def vulkan_hint(facts: BuildFacts) -> str:
    """ "the Vulkan build needs X and Y: sudo apt install …" for this system."""
    missing = facts.vulkan_missing or ("the Vulkan SDK",)
    need = f"the Vulkan build needs {' and '.join(missing)}"
    if facts.system == "Windows":
        return f"{need}: install the Vulkan SDK from https://vulkan.lunarg.com (it sets VULKAN_SDK)"
    old = facts.vulkan_headers is not None and facts.vulkan_headers < VULKAN_HEADERS_MIN
    if old and facts.distro == "debian":  # Debian 12, Ubuntu 22.04: the packaged ones are old
        return (
            f'{need}: CMAKE_ARGS="$(bash packaging/vulkan-headers-debian.sh)" fetches '
            "Debian 13's headers (docs/gpu.md)"
        )
    pkgs = _VULKAN_PACKAGES.get(facts.distro or "")
    return f"{need}: {pkgs}" if pkgs else f"{need} (docs/gpu.md lists the packages)"


def detect_build_facts(
    environ: Mapping[str, str] | None = None,
    *,
    which: Callable[[str], str | None] = shutil.which,
    is_file: Callable[[str], bool] = os.path.isfile,
    system: str | None = None,
    machine: str | None = None,
    vulkan_summary: Callable[[], str] | None = None,
) -> BuildFacts:
    """Look at this machine (the arguments let tests describe another one)."""
    env = os.environ if environ is None else environ
    nvcc = which("nvcc")
    if nvcc is None:
        homes = [env.get(k) for k in _CUDA_HOMES] + [_CUDA_DEFAULT]
        for home in filter(None, homes):
            for name in ("nvcc", "nvcc.exe"):
                candidate = os.path.join(home, "bin", name)
                if is_file(candidate):
                    nvcc = candidate
                    break
            if nvcc:
                break
    system = system or platform.system()
    cmake_args = env.get("CMAKE_ARGS") or None
    if vulkan_summary is None:
        vulkan_summary = lambda: run_vulkaninfo(which)  # noqa: E731
    gpus = () if system == "Darwin" else vulkan_gpus_in(vulkan_summary())
    return BuildFacts(
        system=system,
        machine=machine or platform.machine(),
        nvidia_smi=which("nvidia-smi"),
        nvcc=nvcc,
        glslc=which("glslc"),
        override=env.get(ENV_BACKEND) or None,
        cmake_args=cmake_args,
        vulkan_gpus=gpus,
        vulkan_headers=find_vulkan_headers(_include_dirs(env, cmake_args)),
        spirv_headers=None if system == "Windows" else _spirv_found(env, cmake_args),
        distro=_distro(),
    )


def vulkan_devices_in(summary: str) -> tuple[tuple[str, str], ...]:
    """(name, type) of each device in ``vulkaninfo --summary`` output; type as Vulkan says it:
    "DISCRETE_GPU", "INTEGRATED_GPU", "VIRTUAL_GPU", "CPU" (llvmpipe, SwiftShader), "OTHER"."""
    out = []
    for block in re.split(r"\nGPU\d+:", summary)[1:]:
        kind = re.search(r"deviceType\s*=\s*PHYSICAL_DEVICE_TYPE_(\w+)", block)
        name = re.search(r"deviceName\s*=\s*(.+)", block)
        if kind and name:
            out.append((name.group(1).strip(), kind.group(1)))
    return tuple(out)


def vulkan_gpus_in(summary: str) -> tuple[str, ...]:
    """Names of the GPUs in ``vulkaninfo --summary`` output (CPU devices such as llvmpipe left
    out: llama.cpp skips them, and a CPU build runs faster there)."""
    return tuple(name for name, kind in vulkan_devices_in(summary) if kind in _GPU_TYPES)


def run_vulkaninfo(which: Callable[[str], str | None] = shutil.which) -> str:
    """``vulkaninfo --summary``'s output ("" without vulkaninfo or when it fails)."""
    exe = which("vulkaninfo")
    if exe is None:
        return ""
    try:
        done = subprocess.run(
            [exe, "--summary"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout


def _flag(cmake_args: str | None, name: str) -> str | None:
    m = re.search(rf"-D{re.escape(name)}(?::\w+)?=(\S+)", cmake_args or "")
    return m.group(1).strip("\"'") if m else None


def _include_dirs(env: Mapping[str, str], cmake_args: str | None) -> list[str]:
    given = _flag(cmake_args, "Vulkan_INCLUDE_DIR")
    if given:
        return [given]  # what the build will use
    sdk = env.get("VULKAN_SDK")
    dirs = [os.path.join(sdk, "include"), os.path.join(sdk, "Include")] if sdk else []
    return [*dirs, "/usr/include", "/usr/local/include"]


def find_vulkan_headers(dirs: Iterable[str]) -> tuple[int, int, int] | None:
    """The version of the first ``vulkan/vulkan_core.h`` found in ``dirs``."""
    for d in dirs:
        try:
            text = Path(d, "vulkan", "vulkan_core.h").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        patch = re.search(r"#define VK_HEADER_VERSION (\d+)", text)
        full = re.search(r"VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION\(0, (\d+), (\d+),", text)
        if patch and full:
            return int(full.group(1)), int(full.group(2)), int(patch.group(1))
    return None


def _spirv_found(env: Mapping[str, str], cmake_args: str | None) -> bool:
    given = _flag(cmake_args, "SPIRV-Headers_DIR")
    if given:
        return os.path.isdir(given)
    prefixes = [p for p in (env.get("VULKAN_SDK"), "/usr", "/usr/local") if p]
    triplet = f"lib/{platform.machine()}-linux-gnu/cmake"
    subdirs = ("share/cmake", "lib/cmake", "lib64/cmake", triplet)
    return any(
        os.path.isdir(os.path.join(p, s, "SPIRV-Headers")) for p in prefixes for s in subdirs
    )


def _distro(path: str = "/etc/os-release") -> str | None:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return None
    ids = " ".join(re.findall(r"^ID(?:_LIKE)?=\"?([^\"\n]+)", text, re.M)).lower().split()
    for family, names in _FAMILIES.items():
        if any(name in names for name in ids):
            return family
    return None


# -- what is installed ------------------------------------------------------------------------
def backends_in_libs(names: Iterable[str]) -> frozenset[str]:
    """Backends of a llama-cpp-python build, from the file names in ``llama_cpp/lib``
    (``libggml-cuda.so``, ``ggml-vulkan.dll``, ``libggml-metal.dylib``, …)."""
    found: set[str] = set()
    for name in names:
        m = re.match(r"(?:lib)?ggml-([a-z]+)", name.lower())
        if m and m.group(1) != "base":
            found.add(m.group(1))
        elif name.lower().startswith(("libggml.", "ggml.", "libllama.", "llama.")):
            found.add("cpu")  # an older layout: everything in one library, the CPU included
    return frozenset(found)


def installed_lib_dir() -> Path | None:
    """``llama_cpp/lib`` of the llama-cpp-python this interpreter would import (not imported)."""
    try:
        spec = importlib.util.find_spec("llama_cpp")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    lib = Path(spec.origin).parent / "lib"
    return lib if lib.is_dir() else None


def installed_backends(lib_dir: Path | None = None) -> frozenset[str] | None:
    """Backends of the installed build, or None when llama-cpp-python is not installed."""
    lib_dir = lib_dir or installed_lib_dir()
    if lib_dir is None:
        return None
    return backends_in_libs(p.name for p in lib_dir.iterdir())


def needs_rebuild(installed: frozenset[str] | None, choice: BackendChoice) -> bool:
    """Whether an installed build must be rebuilt for ``choice`` (pip keeps an installed
    llama-cpp-python of the pinned version, whatever it was built for)."""
    if installed is None or choice.backend == "custom":
        return False
    if choice.backend in GPU_BACKENDS:
        return choice.backend not in installed
    return choice.explicit and bool(installed & GPU_BACKENDS)  # asked for the CPU explicitly


def rebuild_command(choice: BackendChoice, version: str, python: str = "python") -> str:
    """One shell command that rebuilds llama-cpp-python for ``choice`` (POSIX shell syntax)."""
    prefix = f'CMAKE_ARGS="{choice.cmake_args}" ' if choice.cmake_args else ""
    return (
        f"{prefix}{python} -m pip install --force-reinstall --no-deps --no-cache-dir "
        f"llama-cpp-python=={version}"
    )
