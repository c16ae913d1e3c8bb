"""The files the packaged builds are made from: icons, the launcher template, install.sh, the
build scripts. (The frozen build itself is built and self-tested by packaging/ci-smoke.sh.)"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.startup.desktop_entry import ICON_SIZES, desktop_file_text

ROOT = Path(__file__).resolve().parents[1]
ICONS = ROOT / "resources" / "icons"
PACKAGING = ROOT / "packaging"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.mark.parametrize("size", ICON_SIZES)
def test_png_icons_have_their_size(size: int) -> None:
    assert _png_size((ICONS / f"specchat-{size}.png").read_bytes()) == (size, size)


def test_ico_holds_png_entries_up_to_256() -> None:
    data = (ICONS / "specchat.ico").read_bytes()
    reserved, kind, count = struct.unpack("<HHH", data[:6])
    assert (reserved, kind) == (0, 1) and count >= 4
    sizes = []
    for i in range(count):
        w, h, _, _, planes, bpp, length, offset = struct.unpack(
            "<BBBBHHII", data[6 + 16 * i : 22 + 16 * i]
        )
        side = w or 256
        assert (w, planes, bpp) == (h, 1, 32)
        assert _png_size(data[offset : offset + length]) == (side, side)
        sizes.append(side)
    assert {16, 32, 48, 256} <= set(sizes)


def test_icns_elements_fill_the_file() -> None:
    data = (ICONS / "specchat.icns").read_bytes()
    assert data[:4] == b"icns" and struct.unpack(">I", data[4:8])[0] == len(data)
    pos, kinds = 8, {}
    while pos < len(data):
        kind, length = data[pos : pos + 4], struct.unpack(">I", data[pos + 4 : pos + 8])[0]
        kinds[kind] = _png_size(data[pos + 8 : pos + length])[0]
        pos += length
    assert pos == len(data)
    assert kinds[b"ic07"] == 128 and kinds[b"ic08"] == 256 and kinds[b"ic09"] == 512
    assert kinds[b"ic10"] == 1024 and kinds[b"icp4"] == 16


def test_desktop_template_matches_the_generated_launcher() -> None:
    template = (ROOT / "resources" / "specchat.desktop").read_text(encoding="utf-8")
    assert template == desktop_file_text("specchat")
    validator = shutil.which("desktop-file-validate")  # Debian: desktop-file-utils
    if validator is not None:
        proc = subprocess.run([validator, str(ROOT / "resources" / "specchat.desktop")])
        assert proc.returncode == 0


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX shell script")
def test_install_sh_installs_and_uninstalls(tmp_path: Path) -> None:
    """install.sh from an unpacked tarball (with a stand-in app) into a throw-away home."""
    pkg = tmp_path / "specchat linux"  # a space in the path must survive the Exec line
    icons = pkg / "specchat" / "_internal" / "resources" / "icons"
    icons.mkdir(parents=True)
    app = pkg / "specchat" / "specchat"
    app.write_text("#!/bin/sh\necho fake specchat\n")
    app.chmod(0o755)
    for size in ICON_SIZES:
        shutil.copyfile(ICONS / f"specchat-{size}.png", icons / f"specchat-{size}.png")
    shutil.copyfile(ROOT / "resources" / "specchat.desktop", pkg / "specchat.desktop")
    shutil.copyfile(ICONS / "specchat-256.png", pkg / "specchat.png")
    shutil.copyfile(PACKAGING / "install.sh", pkg / "install.sh")
    home = tmp_path / "home"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}

    def run(*args: str) -> str:
        proc = subprocess.run(
            ["sh", str(pkg / "install.sh"), *args], env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert "installed" in run()
    dest = home / ".local" / "opt" / "specchat" / "specchat"
    launcher = home / ".local" / "share" / "applications" / "specchat.desktop"
    lines = launcher.read_text(encoding="utf-8").splitlines()
    assert f'Exec="{dest}" %U' in lines
    assert "Icon=specchat" in lines
    for size in ICON_SIZES:
        assert (home / f".local/share/icons/hicolor/{size}x{size}/apps/specchat.png").is_file()
    out = subprocess.run([str(home / ".local" / "bin" / "specchat")], capture_output=True)
    assert out.stdout == b"fake specchat\n"
    run()  # installing again replaces the copy

    assert "removed" in run("--uninstall")
    assert not dest.exists() and not launcher.exists()
    assert not (home / ".local" / "bin" / "specchat").exists()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("script", ["build-linux.sh", "build-macos.sh", "ci-smoke.sh"])
def test_build_scripts_parse(script: str) -> None:
    path = PACKAGING / script
    assert os.access(path, os.X_OK)
    subprocess.run(["bash", "-n", str(path)], check=True)
