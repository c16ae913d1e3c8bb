"""How many CPUs this process may use."""

from __future__ import annotations

import os

__all__ = ["cpu_count"]


def cpu_count() -> int:
    """CPUs available to this process (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
