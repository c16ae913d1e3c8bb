"""Work-around for reference-count bugs of PySide6 6.12.0 on Python < 3.12.

That release drops a reference it never took:
- `SignalInstance.emit()` returns True (or False) without a reference to it, so each emit from
  Python costs True one reference;
- each call of a Python slot by a signal emitted in C++ (a QTimer's timeout, a button's click)
  costs None one reference.
When the count reaches zero the interpreter aborts ("bool_dealloc" / "none_dealloc"). A chat
that emits per token and polls with timers gets there within minutes.

Python 3.12 made None, True and False immortal, so the lost references are harmless there. On
older Pythons `install()` probes for each leak and, only where it finds one, gives the object a
very large reserve of references (what 3.12 does for every interpreter). Builds without the bugs
are left untouched. Pinning PySide6 to a release without the bug is the real fix.
"""

from __future__ import annotations

import ctypes
import sys

from PySide6.QtCore import QObject, Signal

PROBE_CALLS = 64
RESERVE = 1 << 40  # references added to a leaking singleton: ~10^12 calls of headroom

_installed: list[str] = []


class _Probe(QObject):
    ping = Signal()


def _refcount_is_patchable() -> bool:
    # 3.12+: immortal singletons; debug builds put extra fields before ob_refcnt.
    return sys.version_info < (3, 12) and not hasattr(sys, "gettotalrefcount")


def _add_references(obj: object, n: int) -> None:
    ctypes.c_ssize_t.from_address(id(obj)).value += n


def emit_leaks_a_reference() -> bool:
    """Whether `emit()` drops a reference to its bool result on this build."""
    probe = _Probe()
    result = probe.ping.emit()  # type: ignore[func-returns-value]
    if not isinstance(result, bool):
        return False
    before = sys.getrefcount(result)
    for _ in range(PROBE_CALLS):
        probe.ping.emit()
    lost = before - sys.getrefcount(result)
    if lost > 0 and _refcount_is_patchable():
        _add_references(result, lost)  # give back what the probe took
    return lost >= PROBE_CALLS // 2


def slot_calls_leak_none() -> bool:
    """Whether calling a Python slot from a C++ signal drops a reference to None."""
    probe = QObject()
    probe.objectNameChanged.connect(lambda _name: None)
    before = sys.getrefcount(None)
    for i in range(PROBE_CALLS):
        probe.setObjectName(f"probe{i}")  # objectNameChanged is emitted by C++
    lost = before - sys.getrefcount(None)
    if lost > 0 and _refcount_is_patchable():
        _add_references(None, lost)
    return lost >= PROBE_CALLS // 2


def install() -> list[str]:
    """Protect the singletons this build leaks; returns their names (empty: nothing to do)."""
    if _installed or not _refcount_is_patchable():
        return _installed
    leaking: list[object] = []
    if emit_leaks_a_reference():
        leaking += [True, False]
    if slot_calls_leak_none():
        leaking.append(None)
    for obj in leaking:
        _add_references(obj, RESERVE)
        _installed.append(repr(obj))
    return _installed


install()
