"""Every committed report's resource table against its attribution.json: each kernel row's
launches and time per call are the sums over that unit's and variant's per-launch rows of that
kernel (computed here from the JSON, not by the renderer's index)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rootcause.names import short
from rootcause.report import render_markdown

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "gallery").glob("*/attribution.json"))
UNITS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def _ns(cell: str) -> tuple[float, float]:
    """The time a cell shows, and half its last digit (fmt_time: 0.1 us, or 3 significant digits)."""
    number, unit = cell.split()
    digits = number.split(".")[1] if "." in number else ""
    return float(number) * UNITS[unit], 0.5 * 10 ** -len(digits) * UNITS[unit]


def _resource_rows(md: str) -> list[list[str]]:
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("**Resources of the top units**"))
    rows = []
    for line in lines[start + 4:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return rows


@pytest.mark.parametrize("path", DOCS, ids=[p.parent.name for p in DOCS])
def test_resource_cells_are_the_json_sums(path):
    doc = json.loads(path.read_text())
    labels = {doc["variants"][v]["label"]: v for v in "ab"}
    rows = _resource_rows(render_markdown(doc))
    assert rows
    checked = 0
    for unit, label, kernel, launches, time, *_ in rows:
        v = labels[label.replace("\\", "")]
        shown = re.sub(r"^`|`( \(dominant\))?$", "", kernel.replace("**", ""))
        mine = [k for k in doc["kernels"] if k["variant"] == v and k["unit"] == int(unit)
                and shown in (k["kernel"], short(k["kernel"], 60))]
        names = {k["kernel"] for k in mine}
        assert len(names) == 1, (unit, label, shown)
        assert float(launches.replace("**", "").replace(",", "")) == pytest.approx(
            sum(k["launches_per_call"] for k in mine), abs=0.01)
        shown_ns, half_digit = _ns(time.replace("**", ""))
        assert shown_ns == pytest.approx(sum(k["time_per_call_ns"] for k in mine), abs=half_digit + 1e-6)
        checked += 1
    assert checked == len(rows)

