"""The Linux system libraries Qt's xcb platform plugin needs, and the packages that hold them.

PySide6's wheels carry Qt but not these X11/xcb libraries; a desktop without them (Ubuntu 22.04
lacks ``libxcb-cursor0``) cannot open a window, and Qt's own message does not say what to
install. ``missing_xcb_libs`` tries to load each one; ``install_hint`` names the packages for the
distribution. Used by the launcher (``specchat.startup.qt_startup``) and by ``specchat-cli doctor``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

__all__ = ["XCB_LIBS", "distro_family", "install_hint", "missing_xcb_libs", "read_os_release"]

# soname -> package on (Debian/Ubuntu, Fedora, Arch); the order is the order of the hint.
XCB_LIBS: dict[str, tuple[str, str, str]] = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms", "xcb-util-keysyms"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11", "libxkbcommon-x11"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image", "xcb-util-image"),
    "libxcb-render-util.so.0": (
        "libxcb-render-util0",
        "xcb-util-renderutil",
        "xcb-util-renderutil",
    ),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util", "xcb-util"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb", "libxcb"),
    "libxcb.so.1": ("libxcb1", "libxcb", "libxcb"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb", "libx11"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon", "libxkbcommon"),
}
# The four a desktop most often lacks (the README lists them).
COMMON = ("libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxkbcommon-x11.so.0")
_FAMILIES = ("debian", "fedora", "arch")
_INSTALL = {
    "debian": "sudo apt install",
    "fedora": "sudo dnf install",
    "arch": "sudo pacman -S",
}


def missing_xcb_libs(load: Callable[[str], object] = ctypes.CDLL) -> list[str]:
    """The sonames from XCB_LIBS that cannot be loaded here (this process's library path)."""
    missing = []
    for soname in XCB_LIBS:
        try:
            load(soname)
        except OSError:
            missing.append(soname)
    return missing


def read_os_release(path: Path = Path("/etc/os-release")) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip('"')
    return out


def distro_family(os_release: dict[str, str]) -> str | None:
    """ "debian" (Debian, Ubuntu, Mint, …), "fedora" (Fedora, RHEL, …), "arch", or None."""
    ids = [os_release.get("ID", "").lower(), *os_release.get("ID_LIKE", "").lower().split()]
    for name in ids:
        if name in ("debian", "ubuntu"):
            return "debian"
        if name in ("fedora", "rhel", "centos"):
            return "fedora"
        if name in ("arch", "manjaro", "endeavouros"):
            return "arch"
    return None


def packages_for(sonames: Iterable[str], family: str) -> list[str]:
    col = _FAMILIES.index(family)
    out: list[str] = []
    for soname in sonames:
        pkgs = XCB_LIBS.get(soname)
        if pkgs and pkgs[col] not in out:
            out.append(pkgs[col])
    return out


def install_hint(missing: Sequence[str], family: str | None) -> str:
    """The command that installs what is missing, e.g. ``sudo apt install libxcb-cursor0``;
    for an unknown distribution the Debian/Ubuntu and the Fedora/Arch package names."""
    if family in _INSTALL:
        return f"{_INSTALL[family]} {' '.join(packages_for(missing, family))}"
    deb = " ".join(packages_for(missing, "debian"))
    fed = " ".join(packages_for(missing, "fedora"))
    return f"install {deb} (Debian/Ubuntu) or {fed} (Fedora/Arch)"
