"""Where measured cost curves are kept: `CurveStore` keys a curve by the target file (path,
size, modification time), the settings that change its decodes (threads, GPU layers, batch) and
the machine (host name, llama.cpp's devices, CPUs, the bindings' version), in memory for this
process and in `cost_curves.json` in the data directory for the next. When a curve is measured
and reused is `curve_policy.py`'s.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specchat.core.decoding.pricing.cost_curve import MEASURED, CostCurve, CostCurveError
from specchat.core.state.paths import data_dir

if TYPE_CHECKING:
    from specchat.core.engines.local import Engine

log = logging.getLogger(__name__)

STORE_FILE = "cost_curves.json"
STORE_VERSION = 1


# -- what a curve is kept under ---------------------------------------------------------------
def curve_key(engine: Engine) -> str | None:
    """What sets the target's curve: its file, the settings it decodes with and the machine
    (None: the file cannot be read; such a curve is measured and not kept)."""
    rt = engine.target
    try:
        st = rt.path.stat()
        path = str(rt.path.resolve())
    except OSError:
        return None
    cfg = rt.config
    key = {
        "model": [path, st.st_size, st.st_mtime_ns],
        "decodes": [cfg.threads(), cfg.n_gpu_layers, cfg.n_batch],
        "machine": machine_id(),
    }
    return json.dumps(key, sort_keys=True)


_MACHINE: list[Any] = []


def machine_id() -> list[Any]:
    """This machine as a curve depends on it: host, llama.cpp's devices, CPUs, the bindings."""
    if not _MACHINE:
        from specchat.core.machine.backend_info import list_devices
        from specchat.core.machine.cpu import cpu_count

        try:
            devices = sorted(f"{d.name}: {d.description}" for d in list_devices())
        except Exception:  # llama.cpp could not be asked: the host and CPUs still tell
            log.info("no device list for the cost curve's key", exc_info=True)
            devices = []
        try:
            from importlib.metadata import version

            bindings = version("llama_cpp_python")
        except Exception:
            bindings = "?"
        _MACHINE.extend([platform.node(), platform.machine(), cpu_count(), devices, bindings])
    return list(_MACHINE)


def curve_from_dict(data: Any) -> CostCurve | None:
    """A kept curve (`CostCurve.as_dict`), or None when the entry is not one."""
    try:
        points = tuple((int(n), float(c)) for n, c in data["points"])
        t1 = data.get("t1_ms")
        share = data.get("others_share")
        return CostCurve(
            points,
            str(data.get("source", MEASURED)),
            None if t1 is None else float(t1) / 1000.0,
            None if share is None else float(share),
        )
    except (CostCurveError, KeyError, TypeError, ValueError, AttributeError):
        return None


class CurveStore:
    """Measured curves by `curve_key`: this process's in memory (the same object again on a
    reload), and every process's in `cost_curves.json` (default: in the data directory). A file
    that cannot be read or written costs a measurement, never an error."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._memory: dict[str, CostCurve] = {}
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._path if self._path is not None else data_dir() / STORE_FILE

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            log.info("cost curves file unreadable: measuring again", exc_info=True)
            return {}
        if not isinstance(data, dict) or data.get("version") != STORE_VERSION:
            return {}
        curves = data.get("curves")
        return curves if isinstance(curves, dict) else {}

    def get(self, key: str | None) -> CostCurve | None:
        if key is None:
            return None
        with self._lock:
            curve = self._memory.get(key)
            if curve is None:
                curve = curve_from_dict(self._read().get(key))
                if curve is not None:
                    self._memory[key] = curve
            return curve

    def put(self, key: str | None, curve: CostCurve) -> None:
        if key is None or curve.source != MEASURED:
            return
        with self._lock:
            self._memory[key] = curve
            curves = self._read()
            curves[key] = curve.as_dict()
            path = self.path
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                text = json.dumps({"version": STORE_VERSION, "curves": curves}, indent=1)
                tmp.write_text(text, encoding="utf-8")
                os.replace(tmp, path)
            except OSError:
                log.info("could not keep the cost curve in %s", path, exc_info=True)
