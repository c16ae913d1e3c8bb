"""Regenerate the app icons from resources/specchat.svg.

Writes resources/icons/specchat-<size>.png (16 … 512 px, used by the Linux launcher and the
window icon), specchat.ico (Windows: PNG-compressed entries up to 256 px) and specchat.icns
(macOS: PNG entries up to 1024 px). Both containers are assembled here from the rendered PNGs,
so any machine with PySide6 can regenerate every icon; on a Mac, `iconutil` gives the same
.icns (see build-macos.sh).

    python packaging/make_icons.py
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SVG = ROOT / "resources" / "specchat.svg"
OUT = ROOT / "resources" / "icons"

PNG_SIZES = (16, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)  # ICO entries stop at 256 px
# ICNS element types holding PNG data, with the pixel size each one stores.
ICNS_TYPES = (
    (b"icp4", 16),
    (b"icp5", 32),
    (b"icp6", 64),
    (b"ic07", 128),
    (b"ic08", 256),
    (b"ic09", 512),
    (b"ic10", 1024),  # 512@2x
    (b"ic11", 32),  # 16@2x
    (b"ic12", 64),  # 32@2x
    (b"ic13", 256),  # 128@2x
    (b"ic14", 512),  # 256@2x
)


def render_png(svg: Path, size: int) -> bytes:
    """The SVG rendered into a size × size transparent PNG."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QRectF, Qt
    from PySide6.QtGui import QImage, QImageWriter, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"{svg} is not a valid SVG file")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter, QRectF(0, 0, size, size))
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    writer = QImageWriter(buffer, QByteArray(b"png"))
    if not writer.write(image.convertToFormat(QImage.Format.Format_ARGB32)):
        raise RuntimeError(f"could not encode a {size} px PNG: {writer.errorString()}")
    buffer.close()
    return bytes(data.data())


def ico_bytes(pngs: dict[int, bytes]) -> bytes:
    """An ICO container with one PNG-compressed 32-bit entry per size (Windows Vista and later)."""
    sizes = sorted(pngs)
    header = struct.pack("<HHH", 0, 1, len(sizes))  # reserved, type 1 = icon, count
    offset = len(header) + 16 * len(sizes)
    entries, blobs = [], []
    for size in sizes:
        data = pngs[size]
        side = 0 if size >= 256 else size  # 0 means 256
        entries.append(struct.pack("<BBBBHHII", side, side, 0, 0, 1, 32, len(data), offset))
        blobs.append(data)
        offset += len(data)
    return header + b"".join(entries) + b"".join(blobs)


def icns_bytes(elements: list[tuple[bytes, bytes]]) -> bytes:
    """An ICNS container: 'icns', total length, then (type, length, data) elements."""
    body = b"".join(kind + struct.pack(">I", 8 + len(data)) + data for kind, data in elements)
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def main() -> int:
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication.instance() or QGuiApplication([sys.argv[0]])
    needed = sorted({*PNG_SIZES, *ICO_SIZES, *(size for _, size in ICNS_TYPES)})
    pngs = {size: render_png(SVG, size) for size in needed}
    OUT.mkdir(parents=True, exist_ok=True)
    written = []
    for size in PNG_SIZES:
        path = OUT / f"specchat-{size}.png"
        path.write_bytes(pngs[size])
        written.append(path)
    ico = OUT / "specchat.ico"
    ico.write_bytes(ico_bytes({size: pngs[size] for size in ICO_SIZES}))
    icns = OUT / "specchat.icns"
    icns.write_bytes(icns_bytes([(kind, pngs[size]) for kind, size in ICNS_TYPES]))
    for path in [*written, ico, icns]:
        print(f"{path.relative_to(ROOT)}  {path.stat().st_size:,} bytes")
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())
