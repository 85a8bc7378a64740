#!/usr/bin/env python3
"""plot_check.py PNG SVG WINDOW_POINTS - tests/test_plot.sh: the PNG is a
real image that is not blank (the variance of its decoded filter bytes),
the SVG parses as XML and holds the expected series: a stroked path in each
of the loss panel's colours (train, val, test, window: the palette of
app/plot.c) and the window-loss curve with WINDOW_POINTS points."""
import re
import struct
import sys
import xml.etree.ElementTree as ET
import zlib

# app/plot.c's palette, as cairo's SVG writes colours (percent)
PALETTE = [(0.122, 0.467, 0.706), (1.000, 0.498, 0.055), (0.173, 0.627, 0.173),
           (0.839, 0.153, 0.157)]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("%s is not a PNG" % path)
    w, h = struct.unpack(">II", data[16:24])
    idat, pos = b"", 8
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    raw = zlib.decompress(idat)
    mean = sum(raw) / len(raw)
    var = sum((b - mean) ** 2 for b in raw[::7]) / len(raw[::7])
    if w < 600 or h < 300 or len(data) < 10000 or var < 100:
        fail("PNG %dx%d, %d bytes, variance %.1f: blank or too small" % (w, h, len(data), var))
    print("ok: PNG %dx%d, %d bytes, not blank (variance of its bytes %.0f)" % (w, h, len(data), var))


def svg(path, window_points):
    root = ET.parse(path).getroot()
    if not root.tag.endswith("svg"):
        fail("%s: root element %s" % (path, root.tag))
    paths = [(e.get("style") or "", e.get("d") or "") for e in root.iter() if e.tag.endswith("path")]
    rgb = re.compile(r"stroke:rgb\(([\d.]+)%,([\d.]+)%,([\d.]+)%\)")

    def colour(style):
        m = rgb.search(style.replace(" ", ""))
        return tuple(float(x) / 100 for x in m.groups()) if m else None
    found = []
    for i, c in enumerate(PALETTE):
        hits = [d for s, d in paths
                if colour(s) and all(abs(a - b) < 0.005 for a, b in zip(colour(s), c))]
        if not hits:
            fail("no stroked path in colour %d (%s)" % (i, c))
        found.append(hits)
    # the window loss: colour 3 in the loss panel, window_points points (move + lines)
    counts = sorted({d.count("L") + 1 for d in found[3]})
    if window_points not in counts:
        fail("no window-loss path of %d points (colour-3 paths have %s)" % (window_points, counts))
    print("ok: SVG parses as XML: %d paths; train, val, test and window curves drawn, the window "
          "loss with its %d points" % (len(paths), window_points))


png(sys.argv[1])
svg(sys.argv[2], int(sys.argv[3]))
