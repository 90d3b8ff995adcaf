"""The reports as a reader sees them: laid out by headless Chromium in a 1400 px window, every
chart has a legend and no table is wider than the column it sits in (a cut or hidden verdict
column). The pages: the README main job's case (gallery/einsum_cpu_local_task, the CPU einsum
pair), a Kineto compare of the H200 captures (fixtures/captures/h200-2026-12-05-kineto4, the
data-loader pair), an analyze report with its hybrid table (gallery/pool_fusion_h200_analyze)
and a sweep's table (gallery/sweep-cases-llvm's rows); a screenshot of each is kept beside the
test's output for a person. Before the legends and the wrapping cells, the waterfall and the
timeline had no legend and the hybrid table was 1338 px in a 1200 px column."""
from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from test_report_html import chromium, needs_chromium

ROOT = Path(__file__).resolve().parents[1]
KINETO = ROOT / "fixtures/captures/h200-2026-12-05-kineto4"

# Runs in the page after plotly has drawn: what the test reads back through --dump-dom.
MEASURE = """<script>
window.addEventListener('load', () => setTimeout(() => {
  const out = {tables: [], charts: []};
  document.querySelectorAll('table').forEach((t) => {
    out.tables.push({width: t.scrollWidth, room: t.parentElement.clientWidth,
                     head: Array.from(t.rows[0] ? t.rows[0].cells : []).map(c => c.innerText)});
  });
  document.querySelectorAll('.js-plotly-plot').forEach((p) => {
    const title = p.layout && p.layout.title ? (p.layout.title.text || p.layout.title) : '';
    out.charts.push({title: String(title), legend: p.querySelectorAll('.legend .traces').length,
                     width: p.scrollWidth, room: p.parentElement.clientWidth});
  });
  // words of prose (not code) in table cells laid out over two lines: a word broken mid-word
  out.broken = [];
  document.querySelectorAll('th, td').forEach((cell) => {
    const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walk.nextNode(); node; node = walk.nextNode()) {
      if (node.parentElement.closest('code, .k, .brk')) continue;  // symbols may break
      for (const m of node.textContent.matchAll(/[A-Za-z]{3,}/g)) {
        const r = document.createRange();
        r.setStart(node, m.index); r.setEnd(node, m.index + m[0].length);
        const tops = new Set(Array.from(r.getClientRects()).map((q) => Math.round(q.top)));
        if (tops.size > 1) out.broken.push(m[0]);
      }
    }
  });
  const pre = document.createElement('pre');
  pre.id = 'rootcause-layout';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 1000));
</script></body>"""


def _layout(page: Path, shot: Path) -> dict:
    measured = page.with_name("measured.html")
    measured.write_text(page.read_text().replace("</body>", MEASURE))
    r = chromium(measured, "--dump-dom", "--window-size=1400,1000")
    found = re.search(r'<pre id="rootcause-layout">(.*?)</pre>', r.stdout, re.S)
    assert found, r.stderr[-2000:]
    chromium(page, f"--screenshot={shot}", "--window-size=1400,2400", "--hide-scrollbars")
    return json.loads(html.unescape(found.group(1)))


GALLERY = {"main-job": "einsum_cpu_local_task", "analyze-with-hybrids": "pool_fusion_h200_analyze"}


def _report(tmp_path: Path, which: str) -> Path:
    out = tmp_path / which
    if which == "sweep":  # the committed sweep's rows, rendered by today's code
        from rootcause.report.sweep import render_sweep_html

        doc = json.loads((ROOT / "gallery/sweep-cases-llvm/sweep.json").read_text())
        out.mkdir()
        (out / "sweep.html").write_text(render_sweep_html(doc["rows"], doc))
        return out / "sweep.html"
    if which in GALLERY:
        argv = ["report", str(ROOT / "gallery" / GALLERY[which] / "attribution.json"), "--out", str(out / "report.html")]
    else:
        argv = ["compare", str(KINETO / "hostop-light.json.gz"), str(KINETO / "hostop-heavy.json.gz"), "--gpu", "H200",
                "--out", str(out)]
    subprocess.run([sys.executable, "-m", "rootcause", *argv], check=True, capture_output=True, cwd=ROOT)
    return out / "report.html"


@needs_chromium
@pytest.mark.parametrize("which", ["main-job", "kineto-compare", "analyze-with-hybrids", "sweep"])
def test_every_chart_has_a_legend_and_no_table_is_cut(tmp_path, which):
    page = _report(tmp_path, which)
    layout = _layout(page, tmp_path / f"{which}.png")
    assert layout["tables"] and (layout["charts"] or which == "sweep"), layout
    for chart in layout["charts"]:
        assert chart["legend"] >= 1, chart["title"]  # a legend entry at least: what the colours mean
        assert chart["width"] <= chart["room"] + 1, chart
    for table in layout["tables"]:
        assert table["width"] <= table["room"] + 1, table  # the whole table in its column at 1400 px
    assert layout["broken"] == [], layout["broken"]  # no word of prose broken inside a cell
    assert (tmp_path / f"{which}.png").stat().st_size > 10_000
