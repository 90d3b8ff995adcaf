"""The pipeline core (rootcause.pipeline.attribute_pair) and the renderers on small inputs built
here: two variants whose kernel times are chosen, so every number the document and the reports
carry can be computed by hand."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from rootcause import pipeline
from rootcause.artifacts.attribution import check
from rootcause.model import CatalogKernel, WholeGraph
from rootcause.report import render_html, render_markdown, render_text

CALLS = 7
# A runs three kernels per call (one per source op), B one fused kernel covering all three.
A_KERNELS = {"scale": 3000, "shift": 2000, "square": 5000}  # ns per launch
B_KERNELS = {"fused_scale_shift_square": 16000}
OPS = {"scale": ["main/scale"], "shift": ["main/shift"], "square": ["main/square"],
       "fused_scale_shift_square": ["main/scale", "main/shift", "main/square"]}


def _events(kernels: dict[str, int], jitter: int) -> pd.DataFrame:
    rows, t = [], 0
    for call in range(CALLS):
        for name, dur in kernels.items():
            d = dur + jitter * (call % 3)
            rows.append({"kernel": name, "start_ns": t, "end_ns": t + d, "duration_ns": d, "grid_x": 64,
                         "grid_y": 1, "grid_z": 1, "block_x": 256, "block_y": 1, "block_z": 1, "registers": 32,
                         "shared_bytes": 0, "local_bytes": 0, "stream": 7, "device": 0, "correlation": len(rows),
                         "source": "test", "call": call})
            t += d + 500  # a 500 ns gap after every launch
        t += 20000
    return pd.DataFrame(rows)


def _catalog(kernels: dict[str, int]) -> list[CatalogKernel]:
    return [CatalogKernel(k, k, OPS[k], ["main"], schedule={"rule": "Test"}) for k in kernels]


@pytest.fixture(scope="module")
def doc():
    whole = {"a": WholeGraph(12000.0, 11800.0, 12200.0, "measured", 100),
             "b": WholeGraph(17000.0, 16900.0, 17100.0, "measured", 100)}
    a = pipeline.Side("unfused", "a.json", _events(A_KERNELS, 10), _catalog(A_KERNELS), None, "main", whole["a"])
    b = pipeline.Side("fused", "b.json", _events(B_KERNELS, 10), _catalog(B_KERNELS), None, "main", whole["b"])
    return pipeline.attribute_pair(a, b, pipeline.Context(device="H200", command="test"))


def test_one_unit_by_provenance(doc):
    check(doc)
    (unit,) = [u for u in doc["units"] if u["kernels_a"] or u["kernels_b"]]
    assert sorted(unit["kernels_a"]) == sorted(A_KERNELS) and unit["kernels_b"] == list(B_KERNELS)
    assert unit["method"] == "provenance"


def test_numbers_by_hand(doc):
    (unit,) = doc["units"]
    # per-call unit time: the median over calls of the kernels' summed durations
    per_call_a = [sum(d + 10 * (c % 3) for d in A_KERNELS.values()) for c in range(CALLS)]
    per_call_b = [16000 + 10 * (c % 3) for c in range(CALLS)]
    assert unit["time_a_ns"]["median"] == pytest.approx(np.median(per_call_a))
    assert unit["time_b_ns"]["median"] == pytest.approx(np.median(per_call_b))
    assert unit["delta_ns"]["median"] == pytest.approx(np.median(per_call_b) - np.median(per_call_a))
    w = doc["whole_graph"]
    assert w["delta_ns"]["median"] == pytest.approx(5000.0) and w["significant"] is True
    # residual = measured whole graph - busy kernel time; closure = (units + residual delta) / delta
    resid = {"a": 12000 - np.median(per_call_a), "b": 17000 - np.median(per_call_b)}
    assert doc["residual"]["delta_ns"]["median"] == pytest.approx(resid["b"] - resid["a"])
    assert doc["closure"] == pytest.approx((unit["delta_ns"]["median"] + resid["b"] - resid["a"]) / 5000.0)
    assert doc["residual"]["launches_per_call"] == {"a": 3, "b": 1}


def test_renderers_say_what_the_document_says(doc):
    text = render_text(doc)
    assert text.splitlines()[0].startswith("fused is 1.42x slower than unfused")  # 17000 / 12000
    assert "aligned by provenance" in text
    md = render_markdown(doc)
    assert "1.42x slower" in md.splitlines()[0] and "`fused_scale_shift_square`" in md
    page = render_html(doc)
    assert "fused_scale_shift_square" in page and "1.42x" in page
    # the catalog facts travel inside the document: the schedule column reads them
    assert doc["catalogs"]["b"]["kernels"] == {} and "Test" not in md  # no catalog path: none embedded


def test_embedded_catalogs_reach_the_report(tmp_path):
    from rootcause.fileio import write_json

    bundle = tmp_path / "b"
    write_json(bundle / "manifest.json", {"name": "fused", "kernels": [k.to_dict() for k in _catalog(B_KERNELS)],
                                          "versions": {"npc": "1.0"}})
    b = pipeline.Side("fused", "b.json", _events(B_KERNELS, 0), _catalog(B_KERNELS), str(bundle), "main")
    a = pipeline.Side("unfused", "a.json", _events(A_KERNELS, 0), _catalog(A_KERNELS), None, "main")
    doc = pipeline.attribute_pair(a, b, pipeline.Context())
    assert doc["catalogs"]["b"]["versions"] == {"npc": "1.0"}
    assert doc["catalogs"]["b"]["kernels"]["fused_scale_shift_square"]["schedule"] == {"rule": "Test"}
    assert "Test" in render_markdown(json.loads(json.dumps(doc)))


def test_cpu_profile_slower_than_the_measurement_is_scaled_to_it():
    """A profile taken apart from the timed calls (CPU profilers) whose kernels alone exceed the
    measured latency: kernel times are scaled to the measurement and the notes say by how much."""
    busy_a = float(np.median([sum(d + 10 * (c % 3) for d in A_KERNELS.values()) for c in range(CALLS)]))
    whole = {"a": WholeGraph(8000.0, 7900.0, 8100.0, "measured", 100),  # below A's profiled 10,010 ns
             "b": WholeGraph(17000.0, 16900.0, 17100.0, "measured", 100)}
    a = pipeline.Side("unfused", "a.json", _events(A_KERNELS, 10), _catalog(A_KERNELS), None, "main", whole["a"],
                      profiled_apart=True)
    b = pipeline.Side("fused", "b.json", _events(B_KERNELS, 10), _catalog(B_KERNELS), None, "main", whole["b"],
                      profiled_apart=True)
    doc = pipeline.attribute_pair(a, b, pipeline.Context())
    (unit,) = doc["units"]
    assert unit["time_a_ns"]["median"] == pytest.approx(8000.0, abs=3)  # scaled by 8000 / busy_a
    assert unit["time_b_ns"]["median"] == pytest.approx(16010.0)  # B's kernels fit its latency: as profiled
    assert abs(doc["residual"]["a"]["median"]) < 5
    (note,) = [n for n in doc["notes"] if "scaled by" in n]
    assert f"{busy_a / 1e3:.1f} us per call" in note and f"{8000 / busy_a:.3f}" in note
