"""The machine a benchmark ran on, as its report records it."""

from __future__ import annotations

import os
import platform
from typing import Any


def machine_info() -> dict[str, Any]:
    import psutil

    try:
        from importlib.metadata import version

        lcp = version("llama-cpp-python")
    except Exception:
        lcp = None
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cpu_count_logical": os.cpu_count(),
        "cpu_count_physical": psutil.cpu_count(logical=False),
        "memory_gb": round(psutil.virtual_memory().total / 1e9, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "llama_cpp_python": lcp,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
