"""A small line chart written as a PNG with the standard library alone (zlib, struct).

No text: the chart has a frame, light grid lines at a quarter of each range, and one coloured
polyline per series; whoever writes one says what the colours mean (the soak prints a legend and
keeps the numbers in a CSV beside the picture). Panels stack vertically, each scaled on its own.
"""

from __future__ import annotations

import itertools
import struct
import zlib
from pathlib import Path

Series = dict[str, list[tuple[float, float]]]  # name -> (x, y) points
Rgb = tuple[int, int, int]

PALETTE: tuple[Rgb, ...] = (
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
)
_FRAME, _GRID, _BACK = (60, 60, 60), (225, 225, 225), (255, 255, 255)


class _Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(_BACK * (width * height))

    def dot(self, x: int, y: int, colour: Rgb) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            at = 3 * (y * self.width + x)
            self.pixels[at : at + 3] = bytes(colour)

    def line(self, x0: int, y0: int, x1: int, y1: int, colour: Rgb, thick: int = 1) -> None:
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for i in range(steps + 1):
            x = round(x0 + (x1 - x0) * i / steps)
            y = round(y0 + (y1 - y0) * i / steps)
            for dx in range(thick):
                for dy in range(thick):
                    self.dot(x + dx, y + dy, colour)

    def png(self) -> bytes:
        rows = b"".join(
            b"\x00" + bytes(self.pixels[3 * y * self.width : 3 * (y + 1) * self.width])
            for y in range(self.height)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(rows, 9))
            + chunk(b"IEND", b"")
        )


def line_chart(path: Path, panels: list[Series], width: int = 640, panel_height: int = 240) -> None:
    """Write ``panels`` (each a set of series sharing one scale) one above the other to ``path``;
    a series keeps its colour (:func:`legend`) in every panel."""
    colours = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(_names(panels))}
    canvas = _Canvas(width, panel_height * len(panels))
    margin = 12
    for index, panel in enumerate(panels):
        top = index * panel_height + margin
        box = (margin, top, width - margin, top + panel_height - 2 * margin)
        _draw_panel(canvas, panel, colours, box)
    path.write_bytes(canvas.png())


def _draw_panel(
    canvas: _Canvas, panel: Series, colours: dict[str, Rgb], box: tuple[int, int, int, int]
) -> None:
    left, top, right, bottom = box
    points = [p for series in panel.values() for p in series]
    if not points:
        return
    x_lo, x_hi = min(p[0] for p in points), max(p[0] for p in points)
    y_lo, y_hi = min(p[1] for p in points), max(p[1] for p in points)
    x_span, y_span = max(x_hi - x_lo, 1e-9), max(y_hi - y_lo, 1e-9)
    for q in (0.25, 0.5, 0.75):
        y = round(bottom - q * (bottom - top))
        canvas.line(left, y, right, y, _GRID)
    for x, y in ((left, top), (right, bottom)):
        canvas.line(left, y, right, y, _FRAME)
        canvas.line(x, top, x, bottom, _FRAME)
    for name, series in panel.items():
        placed = [
            (
                round(left + (x - x_lo) / x_span * (right - left)),
                round(bottom - (y - y_lo) / y_span * (bottom - top)),
            )
            for x, y in sorted(series)
        ]
        for (x0, y0), (x1, y1) in itertools.pairwise(placed):
            canvas.line(x0, y0, x1, y1, colours[name], thick=2)


def _names(panels: list[Series]) -> list[str]:
    return sorted({name for panel in panels for name in panel})


def legend(panels: list[Series]) -> dict[str, str]:
    """Each series' colour as ``#rrggbb``, as :func:`line_chart` draws it."""
    return {
        name: "#" + bytes(PALETTE[i % len(PALETTE)]).hex() for i, name in enumerate(_names(panels))
    }
