"""What the installed llama.cpp can do: versions, compiled backends, devices and their memory.

Asked of ggml's backend registry through the native library llama-cpp-python ships
(``ggml_backend_reg_*`` and ``ggml_backend_dev_*`` with ctypes), so the figures are llama.cpp's
own. Every probe is best effort: a missing library or symbol gives empty answers, never an error.
The memory plan (``specchat.core.placement.memory_plan.detect_vram``) and
``specchat-cli doctor`` read this.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specchat.core.machine.backend_choice import installed_backends, installed_lib_dir

__all__ = ["BackendInfo", "Device", "gpu_devices", "list_devices", "probe_backend"]

log = logging.getLogger(__name__)

_DEVICE_KINDS = {0: "CPU", 1: "GPU", 2: "iGPU", 3: "accelerator"}  # enum ggml_backend_dev_type


@dataclass(frozen=True)
class Device:
    """One device llama.cpp can run on, with the memory it reports (bytes)."""

    name: str  # "CPU", "CUDA0", "Metal", "Vulkan0"
    description: str  # "NVIDIA GeForce RTX 4090", "Apple M2 Pro", the CPU's model
    kind: str  # "CPU", "GPU", "iGPU" or "accelerator"
    backend: str  # the registry it belongs to: "CPU", "CUDA", "Metal", …
    free: int | None = None
    total: int | None = None

    @property
    def is_gpu(self) -> bool:
        return self.kind in ("GPU", "iGPU")


@dataclass(frozen=True)
class BackendInfo:
    llama_cpp_python: str | None = None  # the bindings' version
    ggml_version: str | None = None
    commit: str | None = None  # llama.cpp's git commit the library was built from
    system_info: str | None = None  # llama_print_system_info(): CPU features per backend
    registries: tuple[tuple[str, int], ...] = ()  # (backend name, its device count)
    devices: tuple[Device, ...] = ()
    gpu_offload: bool | None = None  # llama_supports_gpu_offload()
    lib_dir: Path | None = None
    lib_backends: frozenset[str] = field(default_factory=frozenset)  # from the library files
    error: str | None = None  # why llama.cpp could not be asked (not installed, …)

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.registries)


def _lib() -> Any:
    """libggml, with the signatures of the functions used here declared."""
    from llama_cpp import _ggml  # the native library, loaded once

    lib = _ggml.libggml
    vp, sz, cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
    for name, args, res in (
        ("ggml_backend_reg_count", [], sz),
        ("ggml_backend_reg_get", [sz], vp),
        ("ggml_backend_reg_name", [vp], cp),
        ("ggml_backend_reg_dev_count", [vp], sz),
        ("ggml_backend_dev_count", [], sz),
        ("ggml_backend_dev_get", [sz], vp),
        ("ggml_backend_dev_name", [vp], cp),
        ("ggml_backend_dev_description", [vp], cp),
        ("ggml_backend_dev_type", [vp], ctypes.c_int),
        ("ggml_backend_dev_backend_reg", [vp], vp),
        ("ggml_backend_dev_memory", [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)], None),
    ):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    return lib


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", "replace").strip() if raw else ""


def list_devices() -> list[Device]:
    """Every device in ggml's registry with its free/total memory ([] when unavailable)."""
    try:
        lib = _lib()
        out = []
        for i in range(int(lib.ggml_backend_dev_count())):
            dev = lib.ggml_backend_dev_get(i)
            if not dev:
                continue
            free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
            lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
            reg = lib.ggml_backend_dev_backend_reg(dev)
            out.append(
                Device(
                    name=_text(lib.ggml_backend_dev_name(dev)) or f"device {i}",
                    description=_text(lib.ggml_backend_dev_description(dev)),
                    kind=_DEVICE_KINDS.get(int(lib.ggml_backend_dev_type(dev)), "other"),
                    backend=_text(lib.ggml_backend_reg_name(reg)) if reg else "",
                    free=int(free.value) if total.value else None,
                    total=int(total.value) or None,
                )
            )
        return out
    except Exception as exc:  # an optional probe: never fatal
        log.debug("no device list from the backend: %s", exc)
        return []


def gpu_devices() -> list[Device]:
    return [d for d in list_devices() if d.is_gpu]


def _registries(lib: Any) -> tuple[tuple[str, int], ...]:
    regs = []
    for i in range(int(lib.ggml_backend_reg_count())):
        reg = lib.ggml_backend_reg_get(i)
        if reg:
            regs.append(
                (_text(lib.ggml_backend_reg_name(reg)), int(lib.ggml_backend_reg_dev_count(reg)))
            )
    return tuple(regs)


def _string_fn(lib: Any, name: str) -> str | None:
    try:
        fn = getattr(lib, name)
    except AttributeError:
        return None
    fn.argtypes, fn.restype = [], ctypes.c_char_p
    return _text(fn()) or None


def gpu_offload_supported() -> bool:
    """Whether this llama.cpp build can offload layers to a GPU (asked of llama.cpp directly:
    this module sits below decoding and model logistics)."""
    import llama_cpp

    return bool(llama_cpp.llama_supports_gpu_offload())


def probe_backend() -> BackendInfo:
    """Everything llama.cpp says about itself and this machine."""
    lib_dir = installed_lib_dir()
    lib_backends = (installed_backends(lib_dir) or frozenset()) if lib_dir else frozenset()
    try:
        import llama_cpp

        offload = gpu_offload_supported()
        lib = _lib()
        return BackendInfo(
            llama_cpp_python=getattr(llama_cpp, "__version__", None),
            ggml_version=_string_fn(lib, "ggml_version"),
            commit=_string_fn(lib, "ggml_commit"),
            system_info=_text(llama_cpp.llama_print_system_info()) or None,
            registries=_registries(lib),
            devices=tuple(list_devices()),
            gpu_offload=offload,
            lib_dir=lib_dir,
            lib_backends=lib_backends,
        )
    except Exception as exc:  # not installed, or a build without these symbols
        log.debug("llama.cpp probe failed", exc_info=True)
        return BackendInfo(
            lib_dir=lib_dir, lib_backends=lib_backends, error=f"{type(exc).__name__}: {exc}"
        )
