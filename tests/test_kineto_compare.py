"""`rootcause compare` on the real Kineto traces of fixtures/captures/h200-2026-12-03-kineto/
(torch.profiler on the H200), against truth.json: step times the capture script measured itself
around each profiled step (torch.cuda.synchronize + time.perf_counter), never read from a trace."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KINETO = ROOT / "fixtures/captures/h200-2026-12-03-kineto"
TRUTH = json.loads((KINETO / "truth.json").read_text())
STEPPED = [p for p, v in TRUTH["pairs"].items() if TRUTH["traces"][v["a"]].get("annotated")]


def _compare(pair: str, tmp_path: Path) -> tuple[dict, str]:
    a, b = TRUTH["pairs"][pair]["a"], TRUTH["pairs"][pair]["b"]
    out = tmp_path / pair
    r = subprocess.run([sys.executable, "-m", "rootcause", "compare", str(KINETO / f"{a}.json.gz"),
                        str(KINETO / f"{b}.json.gz"), "--out", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return json.loads((out / "attribution.json").read_text()), r.stdout


def _truth_ratio(pair: str) -> float:
    p = TRUTH["pairs"][pair]
    wall = {s: statistics.median(TRUTH["traces"][p[s]]["step_wall_ms"]) for s in "ab"}
    return wall["b"] / wall["a"]


@pytest.mark.parametrize("pair", STEPPED)
def test_verdict_matches_the_measured_steps(pair, tmp_path):
    doc, printed = _compare(pair, tmp_path)
    w = doc["whole_graph"]
    assert w["source"] == "profiler-steps"
    assert doc["variants"]["a"]["calls"] == TRUTH["traces"][TRUTH["pairs"][pair]["a"]]["steps"]
    ratio, want = w["b"]["median"] / w["a"]["median"], _truth_ratio(pair)
    assert ratio == pytest.approx(want, rel=0.05)
    if abs(want - 1) > 0.2:  # a clear difference: the verdict says its direction
        assert w["significant"] and ("slower" if want > 1 else "faster") in printed.splitlines()[0]
    assert doc["closure"] is None or 0.95 <= doc["closure"] <= 1.05


def test_copies_are_attributed(tmp_path):
    """copies-extra adds 32 device-to-device copies and 8 memsets per step (truth.json expect)."""
    doc, _ = _compare("copies", tmp_path)
    expect = TRUTH["traces"][TRUTH["pairs"]["copies"]["b"]]["expect"]
    copies = [u for u in doc["units"] if any(k.startswith("Memcpy DtoD") for k in u["kernels_b"])]
    assert copies and copies[0]["significant"]
    rows = [k for k in doc["kernels"] if k["variant"] == "b" and k["kernel"].startswith("Memcpy DtoD")]
    assert sum(k["launches_per_call"] for k in rows) == expect["memcpy_dtod_per_step"]


def test_unmarked_trace_splits_on_its_gaps(tmp_path):
    """No ProfilerStep: 20 calls of 32 launches of one kernel (truth.json), told apart by the host
    gap between calls, and the slower side named."""
    doc, printed = _compare("nomarker", tmp_path)
    for s in "ab":
        t = TRUTH["traces"][TRUTH["pairs"]["nomarker"][s]]
        assert doc["variants"][s]["calls"] * doc["variants"][s]["launches_per_call"] == t["expect"]["kernel_events"]
    assert doc["variants"]["a"]["launches_per_call"] == 32
    assert "slower" in printed.splitlines()[0] and doc["whole_graph"]["significant"]


def test_null_pair_is_not_significant(tmp_path):
    """The same GPU-bound training step in two processes (truth: 32.13 vs 32.12 ms)."""
    doc, printed = _compare("null", tmp_path)
    assert doc["whole_graph"]["significant"] is False and not any(u["significant"] for u in doc["units"])
    assert printed.startswith("No significant whole-graph difference")


def test_ambiguous_calls_are_said(tmp_path):
    """32 launches from Python per call, no markers, no gap structure: the per-launch times are
    not per-call times, and the output says so instead of passing them off as calls."""
    doc, _ = _compare("nomarkerhost", tmp_path)
    assert any("taken as one call" in n and "--calls" in n for n in doc["cannot_conclude"])
