"""A tiny RGB canvas written out as PNG with zlib + struct: rectangles, lines and 5x7 bitmap text. Enough for
a legible bar chart without any plotting dependency."""
from __future__ import annotations

import struct
import zlib
from pathlib import Path

from .font import HEIGHT as GLYPH_H
from .font import WIDTH as GLYPH_W
from .font import glyph

RGB = tuple[int, int, int]
WHITE: RGB = (255, 255, 255)
BLACK: RGB = (0, 0, 0)


class Canvas:
    def __init__(self, width: int, height: int, background: RGB = WHITE):
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def rect(self, x: int, y: int, w: int, h: int, color: RGB) -> None:
        """Fill [x, x+w) x [y, y+h), clipped to the canvas."""
        x0, x1 = max(0, x), min(self.width, x + w)
        y0, y1 = max(0, y), min(self.height, y + h)
        if x0 >= x1 or y0 >= y1:
            return
        run = bytes(color) * (x1 - x0)
        for yy in range(y0, y1):
            i = (yy * self.width + x0) * 3
            self.pixels[i:i + len(run)] = run

    def hline(self, x: int, y: int, w: int, color: RGB) -> None:
        self.rect(x, y, w, 1, color)

    def vline(self, x: int, y: int, h: int, color: RGB, dash: int = 0) -> None:
        if not dash:
            self.rect(x, y, 1, h, color)
            return
        for yy in range(y, y + h, 2 * dash):
            self.rect(x, yy, 1, min(dash, y + h - yy), color)

    def outline(self, x: int, y: int, w: int, h: int, color: RGB) -> None:
        self.hline(x, y, w, color)
        self.hline(x, y + h - 1, w, color)
        self.vline(x, y, h, color)
        self.vline(x + w - 1, y, h, color)

    def text(self, x: int, y: int, s: str, color: RGB = BLACK, scale: int = 2) -> int:
        """Draw ``s`` with its top-left corner at (x, y); returns the x just past it."""
        for ch in s:
            for row, bits in enumerate(glyph(ch)):
                for col, bit in enumerate(bits):
                    if bit == "#":
                        self.rect(x + col * scale, y + row * scale, scale, scale, color)
            x += text_width(ch, scale)
        return x

    def save(self, path: str | Path) -> None:
        write_png(path, self.width, self.height, bytes(self.pixels))


def text_width(s: str, scale: int = 2) -> int:
    return len(s) * (GLYPH_W + 1) * scale


def text_height(scale: int = 2) -> int:
    return GLYPH_H * scale


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def write_png(path: str | Path, width: int, height: int, rgb: bytes) -> None:
    """8-bit RGB, no interlace; every scanline uses filter 0 (none)."""
    stride = width * 3
    raw = b"".join(b"\x00" + rgb[y * stride:(y + 1) * stride] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, 9)) \
        + _chunk(b"IEND", b"")
    Path(path).write_bytes(data)


def read_png_size(path: str | Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR; raises ValueError when the file is not a PNG."""
    data = Path(path).read_bytes()[:24]
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError(f"{path} is not a PNG")
    return struct.unpack(">II", data[16:24])
