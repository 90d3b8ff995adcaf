"""Ideas that had several drifting copies now have one definition each; these tests pin them.

- spills: stores + loads, in inspect rows and in IREE catalogs alike (against ptxas -v's own text);
- a kernel's launch configuration in the attribution: its most common launch, not its first;
- device names: `compare --gpu 'NVIDIA H200'` and `report --gpu 'NVIDIA H200'` both resolve;
- bootstrap percentiles: computed in rootcause/stats.py only;
- the verdict sentence: the text summary and the Markdown comment open with the same one.
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rootcause import cli, gpus, cuda_tools
from rootcause.analysis.align import align
from rootcause.analysis.attribute import attribute
from rootcause.report import render_markdown, view

ROOT = Path(__file__).resolve().parents[1]
SPILL_PTX = ROOT / "fixtures/binaries/cuda/spill.ptx"
CAPTURE = ROOT / "fixtures/captures/h200-2026-12-02/tvm_pool_fusion.cupti.json"


def _ptxas_v_spills(ptx: Path) -> int:
    """Spill stores + loads as ptxas -v itself prints them (this test's own reading)."""
    ptxas = cuda_tools.find_tool("ptxas")
    if ptxas is None:
        pytest.skip("ptxas not installed (rootcause[cuda-tools])")
    log = subprocess.run([str(ptxas), "-v", "-arch=sm_90", str(ptx), "-o", "/dev/null"],
                         capture_output=True, text=True, check=True).stderr
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return int(m.group(1)) + int(m.group(2))


def test_spills_are_stores_plus_loads_in_every_catalog():
    want = _ptxas_v_spills(SPILL_PTX)
    assert want > 0  # the fixture really spills (208 bytes with ptxas 13.5)
    from rootcause.inspect import inspect_paths

    rows = inspect_paths([SPILL_PTX], "sm_90").records
    assert [r.spills for r in rows] == [want]
    from rootcause.frontends.iree import catalog as iree_catalog

    catalog_rows, why = iree_catalog._resources(SPILL_PTX, "spill.ptx", "sm_90")
    assert why is None and catalog_rows["spill"]["spills"] == want


def _events(launches: list[tuple[str, int, int]]) -> pd.DataFrame:
    """A KernelEvents table (parsers/events.py columns) of one call: (kernel, grid_x, registers)."""
    rows, t = [], 0
    for name, grid, regs in launches:
        rows.append({"kernel": name, "start_ns": t, "end_ns": t + 1000, "duration_ns": 1000, "stream": 7,
                     "device": 0, "correlation": len(rows), "grid_x": grid, "grid_y": 1, "grid_z": 1,
                     "block_x": 128, "block_y": 1, "block_z": 1, "registers": regs, "shared_bytes": 0,
                     "local_bytes": 0, "source": "test", "call": 0})
        t += 2000
    return pd.DataFrame(rows)


def test_launch_statistics_take_the_most_common_launch():
    # k's first launch is grid 4 with 32 registers; its other two are grid 64 with 40 registers.
    ev = _events([("k", 4, 32), ("k", 64, 40), ("k", 64, 40), ("j", 8, 16)])
    att = attribute(ev, ev, align(ev, ev))
    k = att.kernels[(att.kernels["variant"] == "a") & (att.kernels["kernel"] == "k")].iloc[0]
    assert tuple(k["grid"]) == (64, 1, 1) and int(k["registers"]) == 40
    # ties go to the launch seen first
    tie = _events([("t", 2, 8), ("t", 3, 9)])
    t = attribute(tie, tie, align(tie, tie)).kernels.iloc[0]
    assert tuple(t["grid"]) == (2, 1, 1)


@pytest.mark.parametrize("given", ["NVIDIA H200", "h200", "H200"])
def test_one_device_resolution(given):
    assert gpus.resolve_device(given) == "H200"
    with pytest.raises(Exception, match="unknown GPU"):
        gpus.resolve_device("NVIDIA Imaginary 9000")


def test_report_and_compare_take_the_same_device_names(tmp_path, capsys):
    out = tmp_path / "c"
    assert cli.main(["compare", f"{CAPTURE}#1", f"{CAPTURE}#0", "--gpu", "NVIDIA H200", "--out", str(out)]) == 0
    assert json.loads((out / "attribution.json").read_text())["device"] == "H200"
    assert cli.main(["report", str(out / "attribution.json"), "--format", "markdown", "--gpu", "NVIDIA H200",
                     "--out", str(tmp_path / "r.md")]) == 0
    text = capsys.readouterr().out
    first = text.split("wrote ")[0].strip().splitlines()[0]
    md = render_markdown(json.loads((out / "attribution.json").read_text()))
    # the printed summary and the Markdown comment open with one verdict sentence
    sentence = view.verdict_sentence(view.verdict(json.loads((out / "attribution.json").read_text())))
    assert first == sentence
    assert sentence.replace("_", "\\_").split(":")[0] in md.replace("**", "")


def test_percentiles_are_computed_in_stats_only():
    """No module but rootcause/stats.py calls np.percentile / np.quantile or defines a bootstrap."""
    offenders = []
    for path in (ROOT / "rootcause").rglob("*.py"):
        if path.name == "stats.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("percentile", "quantile", "nanpercentile"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.FunctionDef) and re.search(r"boot.*median|median.*boot", node.name):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} def {node.name}")
    assert offenders == []


def test_stats_interval_against_numpy():
    """stats.median_ci is the percentile bootstrap NumPy computes from the same draws."""
    from rootcause import stats

    x = np.random.default_rng(3).normal(10, 2, 101)
    rng = np.random.default_rng(0)
    meds = np.median(x[rng.integers(0, x.size, size=(2000, x.size))], axis=1)
    assert stats.median_ci(x) == pytest.approx(tuple(np.percentile(meds, [2.5, 97.5])))
