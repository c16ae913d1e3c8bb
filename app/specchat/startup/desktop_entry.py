"""`specchat --install-desktop-entry`: a user launcher (.desktop file + icons) for pip installs on
Linux, so a pip user can start SpecChat by double-clicking too (freedesktop.org conventions)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from specchat.core.resources_path import resources_dir

ICON_SIZES = (16, 32, 48, 64, 128, 256, 512)


def _data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def _launch_command() -> str:
    """The command the launcher runs: the frozen binary, or the installed `specchat` script."""
    if getattr(sys, "frozen", False):
        return f'"{Path(sys.executable).resolve()}"'
    script = Path(sys.executable).with_name("specchat")
    if script.exists():
        return f'"{script}"'
    found = shutil.which("specchat")
    if found:
        return f'"{found}"'
    return f'"{sys.executable}" -m specchat.gui.app'


def desktop_file_text(exec_cmd: str, icon: str = "specchat") -> str:
    return "\n".join(
        [
            "[Desktop Entry]",
            "Type=Application",
            "Version=1.0",
            "Name=SpecChat",
            "GenericName=Local AI chat",
            "Comment=Chat with local GGUF models, sped up by speculative decoding",
            f"Exec={exec_cmd} %U",
            f"Icon={icon}",
            "Terminal=false",
            "Categories=Utility;",
            "Keywords=LLM;AI;chat;GGUF;llama;",
            "StartupWMClass=specchat",
            "",
        ]
    )


def install_desktop_entry(data_home: Path | None = None) -> Path:
    """Write the launcher and icons; returns the .desktop file's path."""
    home = data_home or _data_home()
    icons = resources_dir() / "icons"
    for size in ICON_SIZES:
        src = icons / f"specchat-{size}.png"
        if src.exists():
            dest = home / "icons" / "hicolor" / f"{size}x{size}" / "apps" / "specchat.png"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
    svg = resources_dir() / "specchat.svg"
    if svg.exists():
        dest = home / "icons" / "hicolor" / "scalable" / "apps" / "specchat.svg"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(svg, dest)
    apps = home / "applications"
    apps.mkdir(parents=True, exist_ok=True)
    target = apps / "specchat.desktop"
    tmp = target.with_suffix(".desktop.part")
    tmp.write_text(desktop_file_text(_launch_command()), encoding="utf-8")
    tmp.chmod(0o755)
    os.replace(tmp, target)
    return target
