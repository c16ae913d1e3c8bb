"""System information for ``specchat-cli doctor`` and the window's Help → System information.

`gather()` collects the facts (Python, llama-cpp-python and llama.cpp versions, compiled backends,
devices with the memory llama.cpp reports, GPU offload, the GPU the set-up would build for, the
model store, free disk, Qt's system libraries, and what the selected target is: its facts and
rows are `doctor_target.py`'s); `advice()` turns them into what to do, as a pure function;
`render()` makes the text both front ends show. No Qt.
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specchat import __version__
from specchat.core.doctor_target import TargetFacts, target_facts, target_rows
from specchat.core.machine.amx import REBUILD_HINT as AMX_REBUILD
from specchat.core.machine.amx import amx_in_build
from specchat.core.machine.backend_choice import (
    BackendChoice,
    BuildFacts,
    choose_backend,
    detect_build_facts,
    run_vulkaninfo,
    vulkan_devices_in,
)
from specchat.core.machine.backend_choice import rebuild_command as _rebuild_command
from specchat.core.machine.backend_info import BackendInfo, probe_backend
from specchat.core.machine.desktop_libs import (
    distro_family,
    install_hint,
    missing_xcb_libs,
    read_os_release,
)
from specchat.core.state.settings import Settings, load_settings
from specchat.core.store.local_models import default_pair_installed, default_pair_paths
from specchat.core.store.store import ModelStore
from specchat.core.units import format_bytes

__all__ = ["SystemFacts", "advice", "gather", "render"]

LOW_DISK = 2 * 10**9  # below this much free space in the store, say so
FALLBACK_PIN = "0.3.36"
_VK_KINDS = {
    "CPU": "a CPU device",
    "DISCRETE_GPU": "discrete GPU",
    "INTEGRATED_GPU": "integrated GPU",
    "VIRTUAL_GPU": "virtual GPU",
}


@dataclass(frozen=True)
class SystemFacts:
    specchat: str
    python: str
    python_exe: str
    os: str
    backend: BackendInfo
    build: BuildFacts
    choice: BackendChoice | None  # what the set-up would build for here
    choice_error: str | None = None
    nvidia_gpus: tuple[str, ...] = ()  # "name, memory" lines from nvidia-smi
    vulkan_devices: tuple[tuple[str, str], ...] = ()  # (name, type) from vulkaninfo --summary
    store_dir: str = ""
    store_models: tuple[str, ...] = ()
    store_bytes: int = 0
    default_pair_installed: bool = False
    disk_free: int | None = None
    disk_total: int | None = None
    pyside6: str | None = None
    linux: bool = False
    missing_libs: tuple[str, ...] = ()
    distro: str | None = None
    gpu_layers: tuple[str, str] = ("auto", "auto")  # the settings' target and draft values
    llama_pin: str = FALLBACK_PIN
    notes: tuple[str, ...] = field(default_factory=tuple)
    target: TargetFacts | None = None  # the settings' target, else the default one, if present

    @property
    def rebuild_command(self) -> str | None:
        """The command that rebuilds llama-cpp-python for the GPU the set-up would choose."""
        if self.choice is None or self.choice.backend in ("cpu", "custom"):
            return None
        return _rebuild_command(self.choice, self.llama_pin, sys.executable)


def advice(f: SystemFacts) -> list[str]:
    """What to do about what is missing (empty when nothing is)."""
    out: list[str] = []
    b = f.backend
    if b.error:
        out.append(f"llama-cpp-python does not load ({b.error}): run the set-up command again.")
    elif not b.gpu_offload and f.rebuild_command:
        gpu = "an NVIDIA GPU" if f.build.nvidia_smi else "a GPU"
        out.append(
            f"This machine has {gpu} but llama-cpp-python was built for the CPU only. "
            f"Rebuild it for {f.choice.label if f.choice else 'the GPU'}: {f.rebuild_command}"
        )
    elif not b.gpu_offload and f.build.nvidia_smi and not f.build.nvcc:
        out.append(
            "This machine has an NVIDIA GPU but not the CUDA toolkit (nvcc), which a CUDA build "
            "of llama-cpp-python needs: install it, then run the set-up again "
            "(it builds for CUDA when it finds both)."
        )
    if amx_in_build(b.system_info):
        out.append(
            "This llama.cpp build has Intel AMX compiled in; its kernels crash the pinned "
            "llama.cpp at the first decode, so SpecChat loads models without them and without "
            f"llama.cpp's other repacked weight layouts (slower). {AMX_REBUILD}"
        )
    skipped = _skipped_vulkan(f)
    if skipped:
        out.append(
            f"llama.cpp's Vulkan backend skips {', '.join(skipped)} (a CPU-type Vulkan device, "
            "slower than the CPU backend); GGML_VK_VISIBLE_DEVICES=0 makes it use it anyway, "
            "for testing the GPU code path."
        )
    if b.gpu_offload and "0" in f.gpu_layers:
        out.append(
            "GPU offload works but the settings keep a model on the CPU (GPU layers 0): "
            "set GPU layers to auto in Settings."
        )
    if f.missing_libs:
        out.append(
            f"The window needs system libraries that are missing ({', '.join(f.missing_libs)}): "
            f"{install_hint(f.missing_libs, f.distro)}"
        )
    t = f.target
    if t is not None and t.hybrid and not (t.rollback and t.build_rollback):
        why = (
            f"llama.cpp cannot roll back the recurrent state of {t.architecture} models"
            if not t.rollback
            else "this llama-cpp-python has no rollback snapshots (n_rs_seq)"
        )
        out.append(
            f"The target {t.name} is a hybrid model and {why}: SpecChat runs it without "
            "speculation. Choose a target of another architecture to speed it up."
        )
    if not f.default_pair_installed:
        out.append("The default model pair is not installed: specchat-cli models fetch-default")
    if f.disk_free is not None and f.disk_free < LOW_DISK:
        out.append(f"Only {format_bytes(f.disk_free)} free where the models are stored.")
    return out


def _skipped_vulkan(f: SystemFacts) -> list[str]:
    """CPU-type Vulkan devices of a Vulkan build that llama.cpp left out (none in its list)."""
    used = [d for d in f.backend.devices if d.backend.lower() == "vulkan"]
    if "vulkan" not in f.backend.lib_backends or used:
        return []
    return [name for name, kind in f.vulkan_devices if kind == "CPU"]


def _nvidia_gpus() -> tuple[str, ...]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        done = subprocess.run(
            [smi, "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return (f"nvidia-smi failed: {exc}",)
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return tuple(lines) if done.returncode == 0 else (f"nvidia-smi failed: {done.stderr.strip()}",)


def _llama_pin() -> str:
    try:
        from importlib.metadata import requires

        for req in requires("specchat") or []:
            m = re.match(r"llama[-_]cpp[-_]python\s*==\s*([\w.]+)", req)
            if m:
                return m.group(1)
    except Exception:
        pass
    return FALLBACK_PIN


def _pyside6() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("PySide6-Essentials", "PySide6"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def _selected_target(settings: Settings, store: ModelStore) -> Path | None:
    """The target the window loads: the settings' last one, else the default pair's."""
    if settings.target_path:
        return Path(settings.target_path)
    try:
        path = default_pair_paths(store)[0]
    except (OSError, ValueError, KeyError):
        return None
    return path if path.is_file() else None


def gather() -> SystemFacts:

    build = detect_build_facts()
    try:
        choice: BackendChoice | None = choose_backend(build)
        choice_error = None
    except ValueError as exc:
        choice, choice_error = None, str(exc)
    store = ModelStore()
    models = store.installed() if store.root.is_dir() else []
    free: int | None = None
    total: int | None = None
    try:
        usage = shutil.disk_usage(store.root if store.root.exists() else Path.home())
        free, total = usage.free, usage.total
    except OSError:
        pass
    linux = sys.platform.startswith("linux")
    settings = load_settings()
    backend = probe_backend()
    selected = _selected_target(settings, store)
    target = None
    if selected is not None:
        on_gpu = bool(backend.gpu_offload) and str(settings.target_gpu_layers) != "0"
        target = target_facts(selected, gpu=on_gpu)
    return SystemFacts(
        specchat=__version__,
        python=platform.python_version(),
        python_exe=sys.executable,
        os=platform.platform(),
        backend=backend,
        build=build,
        choice=choice,
        choice_error=choice_error,
        nvidia_gpus=_nvidia_gpus(),
        vulkan_devices=vulkan_devices_in(run_vulkaninfo()) if sys.platform != "darwin" else (),
        store_dir=str(store.root),
        store_models=tuple(p.name for p in models),
        store_bytes=sum(p.stat().st_size for p in models),
        default_pair_installed=default_pair_installed(store),
        disk_free=free,
        disk_total=total,
        pyside6=_pyside6(),
        linux=linux,
        missing_libs=tuple(missing_xcb_libs()) if linux else (),
        distro=distro_family(read_os_release()) if linux else None,
        gpu_layers=(str(settings.target_gpu_layers), str(settings.draft_gpu_layers)),
        llama_pin=_llama_pin(),
        target=target,
    )


def _mem(free: int | None, total: int | None) -> str:
    if total is None:
        return "memory not reported"
    return f"{format_bytes(free or 0)} free of {format_bytes(total)}"


def rows(f: SystemFacts) -> list[tuple[str, str]]:
    """(label, value) pairs, in the order shown."""
    b = f.backend
    out = [
        ("SpecChat", f.specchat),
        ("Python", f"{f.python} ({f.python_exe})"),
        ("System", f.os),
        ("llama-cpp-python", b.llama_cpp_python or f"not loaded: {b.error}"),
    ]
    if b.commit or b.ggml_version:
        version = (
            f"commit {b.commit or '?'} (ggml {b.ggml_version or '?'}; no build number exposed)"
        )
        out.append(("llama.cpp", version))
    libs = ", ".join(sorted(b.lib_backends)) or "none found"
    regs = ", ".join(f"{name} ({n} device{'s' if n != 1 else ''})" for name, n in b.registries)
    out.append(("Backends", f"{regs or 'none'}; libraries in the build: {libs}"))
    for dev in b.devices:
        where = f"{dev.description or '?'} ({dev.kind}, {dev.backend or '?'} backend)"
        out.append((f"Device {dev.name}", f"{where}: {_mem(dev.free, dev.total)}"))
    offload = {True: "supported", False: "not supported (CPU-only build)", None: "unknown"}
    out.append(("GPU offload", offload[b.gpu_offload]))
    layers = f"target {f.gpu_layers[0]}, draft {f.gpu_layers[1]} (settings)"
    if b.gpu_offload is False and "auto" in f.gpu_layers:
        layers += "; auto means the CPU here (CPU-only build)"
    out.append(("GPU layers", layers))
    if f.nvidia_gpus:
        out.append(("nvidia-smi", "; ".join(f.nvidia_gpus)))
    if f.vulkan_devices:
        kinds = "; ".join(
            f"{name} ({_VK_KINDS.get(kind, kind.lower())})" for name, kind in f.vulkan_devices
        )
        out.append(("Vulkan devices", f"{kinds} (vulkaninfo; memory: the Device rows above)"))
    if f.choice is not None:
        out.append(("Set-up builds for", f"{f.choice.label}: {f.choice.reason}"))
    else:
        out.append(("Set-up builds for", f"nothing: {f.choice_error}"))
    out.append(("System info", b.system_info or "?"))
    store = f"{f.store_dir}: {len(f.store_models)} model file(s), {format_bytes(f.store_bytes)}"
    store += "; default pair installed" if f.default_pair_installed else "; default pair missing"
    out.append(("Model store", store))
    out.append(("Free disk", _mem(f.disk_free, f.disk_total) if f.disk_total else "unknown"))
    if f.target is not None:
        out.extend(target_rows(f.target))
    qt = f"PySide6 {f.pyside6 or 'not installed'}"
    if f.linux:
        qt += "; xcb libraries: " + (
            "all present" if not f.missing_libs else "missing " + ", ".join(f.missing_libs)
        )
    out.append(("Qt", qt))
    return out


def render(f: SystemFacts) -> str:
    table = rows(f)
    width = max(len(label) for label, _ in table)
    lines = [f"{label.ljust(width)}  {value}" for label, value in table]
    todo = advice(f)
    lines.append("")
    lines.append("What to do:" if todo else "What to do: nothing, all is in place.")
    lines.extend(f"  - {item}" for item in todo)
    return "\n".join(lines)


def to_dict(f: SystemFacts) -> dict[str, Any]:
    """The facts as JSON-ready data (``specchat-cli doctor --json``)."""
    b = f.backend
    return {
        "rows": dict(rows(f)),
        "gpu_offload": b.gpu_offload,
        "backends": list(b.backends),
        "devices": [d.__dict__ for d in b.devices],
        "setup_backend": f.choice.backend if f.choice else None,
        "rebuild_command": f.rebuild_command,
        "missing_libs": list(f.missing_libs),
        "advice": advice(f),
        "target": None if f.target is None else dict(f.target.__dict__),
    }
