"""A report of 300 units stays readable: laid out by headless Chromium in a 1400 x 900 window,
the answer (the verdict block) is on the first screen, the charts show the top units and fold
the rest into 'other', every chart has a legend and no table outgrows its column.

The document is a real one made large: the H200 CUPTI attribution of pool_fusion
(gallery/pool_fusion_h200_cupti) with its 3 units replicated 100 times under new kernel names (each replica a hundredth of the real
unit's time, so the units still add up to the real delta), each given the module path of a model
layer ('layers.*.blockK', 8 layers: one unit a layer, as a compiler that gives each layer its own
kernels makes them), so the report shows each module's 8 units as one 'x8' row.
report_300_units.png beside this file is the first screen as this test draws it (made with
`python tests/test_report_300_units.py`)."""
from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path


from captures import many_units
from rootcause.report import render_html
from test_report_html import TOP_UNITS, chromium, needs_chromium
from test_report_layout import MEASURE

ROOT = Path(__file__).resolve().parents[1]
SHOT = Path(__file__).with_name("report_300_units.png")
LAYERS = 8
VERDICT_BOX = """<script>
window.addEventListener('load', () => setTimeout(() => {
  const v = document.querySelector('.verdict').getBoundingClientRect();
  const pre = document.createElement('pre'); pre.id = 'rootcause-verdict';
  pre.textContent = JSON.stringify({top: v.top, bottom: v.bottom});
  document.body.appendChild(pre);
}, 1000));
</script>"""


def page(out: Path) -> Path:
    real = json.loads((ROOT / "gallery/pool_fusion_h200_cupti/attribution.json").read_text())
    doc = many_units(real, 300)
    scale = len(real["units"]) / 300  # the replicas share the real units' time: the sums stay the real ones
    for u in doc["units"]:  # as the pipeline writes them: layer i's own kernels, the path collapsed
        u["module_paths"], u["repeats"] = [f"layers.*.block{u['unit'] // LAYERS}"], 1
        for key in ("time_a_ns", "time_b_ns", "delta_ns"):
            u[key] = {k: v * scale if k in ("median", "low", "high") else v for k, v in u[key].items()}
        u["share"] *= scale
    path = out / "report.html"
    path.write_text(render_html(copy.deepcopy(doc)).replace("</body>", VERDICT_BOX + MEASURE))
    return path


def _read(stdout: str, tag: str) -> dict:
    import html
    import re

    found = re.search(rf'<pre id="{tag}">(.*?)</pre>', stdout, re.S)
    assert found, stdout[-2000:]
    return json.loads(html.unescape(found.group(1)))


@needs_chromium
def test_300_units_answer_on_the_first_screen(tmp_path):
    report = page(tmp_path)
    text = report.read_text()
    # a module every layer repeats is one row: 'layers.*.block0 x8', its 8 units summed
    assert re.search(r"layers\.\*\.block\d+ x8", text) and not re.search(r"layers\.\d+\.block", text)
    assert f"other ({300 - TOP_UNITS * LAYERS} units)" in text
    r = chromium(report, "--dump-dom", "--window-size=1400,900")
    verdict, layout = _read(r.stdout, "rootcause-verdict"), _read(r.stdout, "rootcause-layout")
    assert 0 <= verdict["top"] and verdict["bottom"] <= 900, verdict  # the answer without scrolling
    assert layout["charts"] and all(c["legend"] >= 1 for c in layout["charts"])
    assert all(t["width"] <= t["room"] + 1 for t in layout["tables"]), layout["tables"]
    shot = tmp_path / "first-screen.png"
    chromium(report, f"--screenshot={shot}", "--window-size=1400,900", "--hide-scrollbars")
    assert shot.stat().st_size > 10_000


if __name__ == "__main__":  # the committed first screen
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        r = chromium(page(Path(tmp)), f"--screenshot={SHOT}", "--window-size=1400,900", "--hide-scrollbars")
        sys.exit(r.returncode)
