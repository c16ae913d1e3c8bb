"""llama.cpp's own account of a model load, read from its log: where the layers went and how
big each device buffer is.

llama.cpp reports what it did while loading a model and creating a context: the devices it uses
(``using device Vulkan0 (llvmpipe …) - 7926 MiB free``), the layers it offloads (``offloaded
25/25 layers to GPU``) and every buffer it allocates (``Vulkan0 model buffer size = 235.76 MiB``,
``KV buffer size``, ``compute buffer size``, ``output buffer size``). `capture()` collects those
lines while a block runs (llama-cpp-python's own log handling goes on as before) and
`LoadReport.parse` reads them: a figure of llama.cpp's, never one of SpecChat's plan.
"""

from __future__ import annotations

import ctypes
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DeviceUse", "LoadReport", "LogCapture", "capture"]

MIB = 1 << 20
_DEVICE = re.compile(r"using device (\S+) \((.+)\) \(([^()]*)\) - (\d+) MiB free")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_BUFFER = re.compile(r"^\S+:\s+(\S+)\s+(model|KV|compute|output|RS) buffer size = +([\d.]+) MiB")


@dataclass(frozen=True)
class DeviceUse:
    name: str  # "Vulkan0"
    description: str  # "llvmpipe (LLVM 15.0.6, 256 bits)"
    free_mib: int  # free memory llama.cpp saw when it chose the device


@dataclass(frozen=True)
class LoadReport:
    """What llama.cpp logged for one model load (and its context)."""

    devices: tuple[DeviceUse, ...] = ()
    layers_offloaded: int | None = None
    layers_total: int | None = None
    buffers: dict[tuple[str, str], int] = field(default_factory=dict)  # (buffer, kind): bytes

    @classmethod
    def parse(cls, text: str) -> LoadReport:
        devices: list[DeviceUse] = []
        offloaded = total = None
        buffers: dict[tuple[str, str], int] = {}
        for line in text.splitlines():
            if m := _DEVICE.search(line):
                devices.append(DeviceUse(m.group(1), m.group(2), int(m.group(4))))
            elif m := _OFFLOADED.search(line):
                offloaded, total = int(m.group(1)), int(m.group(2))
            elif m := _BUFFER.match(line.strip()):
                key = (m.group(1), m.group(2))
                buffers[key] = buffers.get(key, 0) + round(float(m.group(3)) * MIB)
        return cls(tuple(devices), offloaded, total, buffers)

    def device_bytes(self, kind: str, *, on_device: bool = True) -> int:
        """Bytes of ``kind`` ("model", "KV", "compute", "output") on the GPU devices (or, with
        ``on_device=False``, in host buffers: ``CPU``, ``CPU_Mapped``, ``Vulkan_Host`` …)."""
        names = {d.name for d in self.devices}
        return sum(
            size
            for (buf, k), size in self.buffers.items()
            if k == kind and (buf in names) == on_device
        )

    def where(self) -> str:
        """ "Vulkan0 (llvmpipe): 25/25 layers", or "CPU" when nothing went to a device."""
        if not self.devices or not self.layers_offloaded:
            return "CPU"
        dev = self.devices[0]
        short = dev.description.split(" (")[0]
        return f"{dev.name} ({short}): {self.layers_offloaded}/{self.layers_total} layers"


class LogCapture:
    """The lines llama.cpp logged while a `capture()` block ran."""

    def __init__(self) -> None:
        self._parts: list[str] = []

    def _add(self, text: str) -> None:
        self._parts.append(text)

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def report(self) -> LoadReport:
        return LoadReport.parse(self.text)


_lock = threading.Lock()
_active: list[LogCapture] = []
_installed: list[Any] = []  # the ctypes callback, kept alive while llama.cpp holds it


def _install() -> None:
    """Put a callback in front of llama-cpp-python's: it copies every line to the active
    captures, then hands it on unchanged."""
    if _installed:
        return
    import llama_cpp
    from llama_cpp import _logger  # sets llama-cpp-python's own callback first

    forward = _logger.llama_log_callback

    @llama_cpp.llama_log_callback  # type: ignore[misc]
    def _callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        if _active:
            line = text.decode("utf-8", "replace")
            with _lock:
                for cap in _active:
                    cap._add(line)
        forward(level, text, user_data)

    llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))
    _installed.append(_callback)


@contextmanager
def capture() -> Iterator[LogCapture]:
    """Collect what llama.cpp logs inside the block (all threads)."""
    with _lock:
        _install()
        cap = LogCapture()
        _active.append(cap)
    try:
        yield cap
    finally:
        with _lock:
            _active.remove(cap)
