"""The HTML report of the real H200 pool-fusion capture, opened in a real headless Chromium.

Truth comes from outside the report: the CUPTI capture's own records (plain json), the bundle
manifests' catalog, and what Chromium drew (its DOM after JS ran, its console, a screenshot
decoded here with zlib).
"""
import copy
import json
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from rootcause.report import render_html
from rootcause.report.html import TOP_UNITS

import captures
from captures import CATALOGS, call_interval, compare_shared, many_units
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")

# The environment skill's flags for a headless, offline, sandbox-less Chromium.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium(page: Path, *extra: str, timeout: int = 90) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr",
                               "--v=0", "--virtual-time-budget=15000", *extra, page.as_uri()],
                              capture_output=True, text=True, timeout=timeout)


def console_lines(stderr: str) -> list[str]:
    """Chromium logs every console message (and uncaught exceptions) as INFO:CONSOLE."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and color in (2, 6)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, [bytes(r[i:i + 3]) for r in rows for i in range(0, stride, bpp)]


class PlotPoints(HTMLParser):
    """Per plot div id: how many plotly data points (<g class="point">) were drawn inside it."""

    def __init__(self, ids):
        super().__init__()
        self.ids, self.stack, self.points, self.svgs = set(ids), [], {i: 0 for i in ids}, {i: 0 for i in ids}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        owner = a.get("id") if a.get("id") in self.ids else (self.stack[-1][1] if self.stack else None)
        if tag not in ("path", "rect", "line", "circle", "br", "img", "input", "meta"):
            self.stack.append((tag, owner))
        if owner is None:
            return
        classes = (a.get("class") or "").split()
        if tag == "g" and "point" in classes:
            self.points[owner] += 1
        if tag == "svg" and "main-svg" in classes:
            self.svgs[owner] += 1

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                return


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    return compare_shared(tmp_path_factory.mktemp("att"), "--gpu", "H200")


@pytest.fixture(scope="module")
def attribution(compared):
    return json.loads(compared.read_text())


@pytest.fixture(scope="module")
def raw_calls():
    return captures.raw_calls()


@pytest.fixture(scope="module")
def page(compared, attribution):
    """The report.html compare wrote (plotly.js a piece at a time): the page render_html gives."""
    path = compared.parent / "report.html"
    assert path.read_text(encoding="utf-8") == render_html(attribution)
    return path


def _js_escaped(text: str) -> str:
    """text with each non-ASCII character as JavaScript's \\uXXXX escapes (UTF-16 code units)."""
    return "".join(c if c.isascii() else "".join(f"\\u{int.from_bytes(c.encode('utf-16-be')[i:i + 2], 'big'):04x}"
                                                for i in range(0, len(c.encode("utf-16-be")), 2))
                   for c in text)


@pytest.mark.parametrize("piece", [1, 2, 3, 5, 64])
def test_plotly_js_pieces_cut_no_character(tmp_path, monkeypatch, piece):
    """plotly.js is read a piece at a time; however the pieces fall (inside a character of two,
    three or four UTF-8 bytes, or at its edge) they join to the text escaped whole, each one ASCII."""
    from rootcause.report import html
    text = "a\u00e9b\u20ac\U0001d518" + "x" * 7 + "\u00e9\U0001d518\u20ac" + "/[\u00a0-\uffff]/" + "\u00e9"
    js = tmp_path / "plotly.min.js"
    js.write_text(text, encoding="utf-8")
    monkeypatch.setattr(html, "_JS_PIECE", piece)
    pieces = list(html._plotly_js_pieces(js))
    assert "".join(pieces) == _js_escaped(text) and all(p.isascii() for p in pieces)


@pytest.fixture(scope="module")
def dom(page):
    r = chromium(page, "--dump-dom")
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout, r.stderr


def test_verdict_against_the_capture(page, raw_calls):
    off, on = raw_calls
    ratio = call_interval(on) / call_interval(off)  # no measurement: calls are timed call to call
    text = page.read_text()
    assert f"ON is {ratio:.2f}x slower than OFF" in text
    verdict = text.index('class="verdict')
    assert verdict < text.index('id="waterfall"') < text.index("Resources per unit")


def test_self_contained(page):
    text = page.read_text()
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", text)
    import plotly.offline
    bundle = plotly.offline.get_plotlyjs()
    # plotly.js inline, the whole offline bundle, its few non-ASCII characters as JavaScript's
    # \uXXXX escapes (UTF-16 code units), so that the page is ASCII
    assert not bundle.isascii() and _js_escaped(bundle) in text and text.isascii()
    assert text.count("<script") == 2


def _fused_row(text):
    row = re.search(r"<tr[^>]*><td>ON</td><td><span class=\"k\"[^>]*>fused_pool2d_add2_kernel</span></td>(.*?)</tr>", text)
    assert row, "no resource row for the fused kernel"
    return row, re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))


def test_resource_table_against_capture_and_catalog(page, raw_calls, attribution):
    off, on = raw_calls
    fused = next(r for r in on[0] if r["name"] == "fused_pool2d_add2_kernel")
    row, cells = _fused_row(page.read_text())
    assert cells[2] == f"{fused['grid_x']:,}" and cells[3] == f"{fused['block_x']:,}"
    assert cells[4] == str(fused["registers_per_thread"])
    assert cells[5] == str(fused["static_shared_memory"] + fused["dynamic_shared_memory"])
    catalog = json.loads((CATALOGS / "pool_fusion_on.manifest.json").read_text())
    rule = next(k for k in catalog["kernels"] if k["name"] == "fused_pool2d_add2_kernel")["schedule"]["rule"]
    assert rule in cells[-1]
    # grid and registers differ from OFF's dominant kernel: highlighted
    assert re.search(r'<td class="num changed">' + re.escape(f"{fused['grid_x']:,}"), row.group(1))
    # compare was given --gpu H200 and attribution.json records it: occupancy is shown
    assert attribution["device"] == "H200" and cells[7].endswith("%") and cells[8] != "n/a"
    text = render_html({**attribution, "device": None})
    row, cells = _fused_row(text)
    table = text[text.rindex("<table", 0, row.start()):row.start()]
    head = re.findall(r"<th[^>]*>(.*?)</th>", table)
    # no device named: no occupancy guessed (a column no row has a value in is left out)
    shown = dict(zip(head[2:], cells))
    assert shown.get("occupancy", "n/a") == "n/a" and shown.get("limiter", "n/a") == "n/a"


def test_occupancy_with_device(attribution):
    """Occupancy and limiter as diagnose recorded them in the finding's evidence (waves)."""
    ev = next(f["evidence"] for f in attribution["units"][0]["findings"] if f["rule"] == "launch-config")
    waves = ev["ON"]["waves"]
    text = render_html(attribution, device="H200")
    row = re.search(r"<td>ON</td><td><span class=\"k\"[^>]*>fused_pool2d_add2_kernel</span></td>(.*?)</tr>", text)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))
    assert cells[7] == f"{waves['occupancy']:.0%}" and cells[8] == waves["limiter"]


@needs_chromium
def test_loads_without_console_errors(dom):
    _, stderr = dom
    assert console_lines(stderr) == []


@needs_chromium
def test_console_check_catches_a_broken_page(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    assert any("Uncaught" in line for line in console_lines(chromium(bad, "--dump-dom").stderr))


@needs_chromium
def test_plots_drawn_with_every_point(dom, attribution, raw_calls):
    html_dom, _ = dom
    p = PlotPoints(["waterfall", "pairs", "timeline"])
    p.feed(html_dom)
    n_units = len(attribution["units"])
    assert all(n >= 1 for n in p.svgs.values()), p.svgs
    unexplained = abs(attribution["whole_graph"]["delta_ns"]["median"] - sum(u["delta_ns"]["median"] for u in attribution["units"])
                      - attribution["residual"]["delta_ns"]["median"]) >= 5  # ns: a bar its +0.01 us label can show
    assert p.points["waterfall"] == n_units + 1 + unexplained + 1  # units, residual, [rest], total
    assert p.points["pairs"] == 2 * n_units
    off, on = raw_calls
    assert p.points["timeline"] == len(off[0]) + len(on[0])  # one call of each variant


@needs_chromium
def test_screenshot_is_not_blank(page, tmp_path):
    shot = tmp_path / "shot.png"
    r = chromium(page, f"--screenshot={shot}", "--window-size=1200,1800")
    assert shot.is_file(), r.stderr[-2000:]
    w, h, pixels = png_pixels(shot.read_bytes())
    assert (w, h) == (1200, 1800)
    colors = set(pixels)
    assert len(colors) > 200
    assert sum(px != b"\xff\xff\xff" for px in pixels) > 0.05 * len(pixels)
    # bars in the report's own fill colours: B slower (waterfall red), A and B series
    for rgb in ((0xd6, 0x27, 0x28), (0x4C, 0x78, 0xA8), (0xF5, 0x85, 0x18)):
        assert bytes(rgb) in colors, rgb


HOSTILE = "</script><script>alert(1)</script><b>&amp;x|y"


def _hostile(attribution):
    doc = copy.deepcopy(attribution)
    old = doc["units"][0]["kernels_b"][0]
    for u in doc["units"]:
        u["kernels_b"] = [HOSTILE if k == old else k for k in u["kernels_b"]]
        for f in u["findings"]:
            f["sentence"] = f["sentence"].replace(old, HOSTILE)
    doc["variants"]["b"]["label"] = "<i>B</i>"
    return doc


def test_names_are_escaped(attribution):
    text = render_html(_hostile(attribution))
    assert HOSTILE not in text and "<i>B</i>" not in text
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;b&gt;&amp;amp;x|y" in text
    assert "\\u003c/script\\u003e" in text  # the plot JSON (unit labels) is escaped too
    assert text.count("<script") == 2


@needs_chromium
def test_hostile_names_render_as_text(attribution, tmp_path):
    page = tmp_path / "hostile.html"
    page.write_text(render_html(_hostile(attribution)))
    r = chromium(page, "--dump-dom")
    assert console_lines(r.stderr) == []
    assert r.stdout.count("<script") == 2  # no injected script element
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in r.stdout


@needs_chromium
def test_thousands_of_units_fold(attribution, tmp_path):
    doc = many_units(attribution, 3000)
    page = tmp_path / "big.html"
    page.write_text(render_html(doc))
    text = page.read_text()
    assert "<details><summary>2988 more units" in text
    assert f"other ({3000 - TOP_UNITS} units)" in text
    r = chromium(page, "--dump-dom")
    assert console_lines(r.stderr) == []
    p = PlotPoints(["waterfall", "pairs"])
    p.feed(r.stdout)
    assert p.points["pairs"] == 2 * (TOP_UNITS + 1)
    assert TOP_UNITS + 3 <= p.points["waterfall"] <= TOP_UNITS + 4  # + other, residual, [rest], total


def _without_profiles(attribution):
    doc = copy.deepcopy(attribution)
    doc["variants"]["a"]["profile"] = "/nonexistent/off.cupti.json"
    doc["variants"]["b"].pop("profile")
    return doc


def test_missing_profile_says_not_available(attribution):
    """An attribution without the recorded sections (an older file) and without its profiles."""
    doc = _without_profiles(attribution)
    for key in ("findings", "environment", "closure", "cannot_conclude", "notes", "kernels", "timeline"):
        doc.pop(key)
    text = render_html(doc)
    assert "Timeline not available" in text and "launch facts not available" in text
    assert "closure not available" in text


def test_recorded_sections_need_no_profile(attribution, raw_calls):
    """attribution.json's own 'kernels' and 'timeline' carry the report when the profiles are gone:
    the fused kernel's row and one call of each variant, as in the capture's records."""
    off, on = raw_calls
    text = render_html(_without_profiles(attribution))
    assert "not available: profile" not in text and "Timeline not available" not in text
    fused = next(r for r in on[0] if r["name"] == "fused_pool2d_add2_kernel")
    _, cells = _fused_row(text)
    assert cells[2] == f"{fused['grid_x']:,}" and cells[4] == str(fused["registers_per_thread"])
    tl = attribution["timeline"]
    for v, calls in (("a", off), ("b", on)):
        raw = calls[tl[v]["call"]]
        t0 = raw[0]["start"]
        assert [(k["kernel"], k["start_ns"], k["end_ns"]) for k in tl[v]["kernels"]] == \
            [(r["name"], r["start"] - t0, r["end"] - t0) for r in raw]


def test_timeline_colours_each_launch_by_its_own_unit():
    """the committed H200 analyze attribution: OFF's add2_kernel runs for lv17 (with pool2d, against the
    fused kernel) and then for lv18 (against ON's own add2): each launch takes its own unit's colour,
    by the catalog's op order (gallery/inputs manifest) and the launch order in the raw CUPTI records."""
    root = Path(__file__).resolve().parents[1]
    doc = json.loads((root / "gallery/pool_fusion_h200_analyze/attribution.json").read_text())
    ops = next(k for k in json.loads((CATALOGS / "pool_fusion_off.manifest.json").read_text())["kernels"]
               if k["name"] == "add2_kernel")["source_ops"]
    assert ops == ["main/lv17:add2", "main/lv18:add2"]
    calls, rows = captures.run_launches(root / "fixtures/captures/h200-2026-12-02-analyze/run", "pool_fusion-off")
    assert sorted(i for c, k, i, _ in rows if c == 0 and k == "add2_kernel") == [0, 1]  # twice a call
    html = render_html(doc)
    figs = json.loads(html[html.index("const FIGS=") + len("const FIGS="):html.index(";for(const [id,f]")])
    colour = {}  # (side, kernel) -> colours of its launches in start order
    for side, label in (("a", "pool_fusion-on"), ("b", "pool_fusion-off")):
        bars = [(b, k, t["marker"]["color"]) for t in figs["timeline"]["data"]
                for b, k, y in zip(t["base"], t["hovertext"], t["y"]) if y == label]
        for _, k, c in sorted(bars):
            colour.setdefault((side, k), []).append(c)
    first, second = colour["b", "add2_kernel"]
    assert first == colour["b", "pool2d_kernel"][0] == colour["a", "fused_pool2d_add2_kernel"][0]
    assert second == colour["a", "add2_kernel"][0] != first
