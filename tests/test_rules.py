"""The recomputation and parallelism rules on small tables built here (the zoo's captures test
them on real regressions): they fire on the structure they name and on nothing else.

Each case is two variants whose launches and catalogs are written out below; the whole-graph
latency is the kernels' busy time plus a fixed host share, so closure is exact."""
from __future__ import annotations

import pandas as pd
import pytest

from rootcause import pipeline
from rootcause.model import CatalogKernel, WholeGraph

CALLS = 9


def _side(label: str, kernels: list[tuple], host_ns: float = 2000.0) -> pipeline.Side:
    """kernels: (name, source ops, duration ns, grid, block, flops) in launch order."""
    rows, cats, t = [], {}, 0
    for call in range(CALLS):
        for name, ops, dur, grid, block, flops in kernels:
            d = dur + 7 * (call % 3)
            rows.append({"kernel": name, "start_ns": t, "end_ns": t + d, "duration_ns": d, "grid_x": grid,
                         "grid_y": 1, "grid_z": 1, "block_x": block, "block_y": 1, "block_z": 1, "registers": 32,
                         "shared_bytes": 0, "local_bytes": 0, "stream": 7, "device": 0,
                         "correlation": len(rows), "source": "test", "call": call})
            t += d + 300
            cats[name] = CatalogKernel(name, name, list(ops), ["main"], flops=flops)
        t += 10000
    ev = pd.DataFrame(rows)
    busy = ev.groupby("call")["duration_ns"].sum().median()
    whole = busy + host_ns
    return pipeline.Side(label, f"{label}.json", ev, list(cats.values()), None, "main",
                         WholeGraph(whole, whole - 50, whole + 50, "measured", 100))


def _findings(a, b) -> dict[str, list[dict]]:
    doc = pipeline.attribute_pair(a, b, pipeline.Context(device="H200"))
    out: dict[str, list[dict]] = {}
    for f in doc["findings"]:
        out.setdefault(f["rule"], []).append(f)
    return out, doc


EXP_CHAIN = [("exp1", ["main/lv1:exp"], 3000, 64, 256, 1_000), ("exp2", ["main/lv2:exp"], 3000, 64, 256, 1_000),
             ("add", ["main/lv3:add"], 3000, 64, 256, 1_000)]
FUSED = [("fused_exp_exp_add", ["main/lv1:exp", "main/lv2:exp", "main/lv3:add"], 40000, 64, 256, 24_000)]


def test_recomputation_fires_on_the_fused_kernel():
    found, doc = _findings(_side("unfused", EXP_CHAIN), _side("fused", FUSED))
    (f,) = found["recomputation"]
    assert f["evidence"]["fused_kernel"] == "fused_exp_exp_add" and f["evidence"]["ratio"] == pytest.approx(8.0)
    assert sorted(f["evidence"]["replaced"]) == ["add", "exp1", "exp2"]
    assert "fused" in f["sentence"] and "8.0x their arithmetic" in f["sentence"]


def test_recomputation_never_blames_the_side_with_more_launches():
    # 32 unfused launches do 32x the memory traffic of the one fused kernel: that is not recomputation.
    unfused = [(f"k{i}", [f"main/lv{i}:add"], 2000, 64, 256, 32_000) for i in range(32)]
    fused = [("fused_all", [f"main/lv{i}:add" for i in range(32)], 3000, 64, 256, 32_000)]
    found, _ = _findings(_side("fused", fused), _side("unfused", unfused))
    assert "recomputation" not in found


def test_split_reduction_is_parallelism_not_recomputation():
    # One serial dispatch of a reduction against its split form: a partial reduction over many
    # workgroups plus a combine, the same source op. 1 block of 32 threads on a 132-SM H200.
    serial = [("reduce_serial", ["main/sum"], 400000, 1, 32, 131072 * 32)]
    split = [("reduce_partial", ["main/sum"], 9000, 1024, 256, 131072 * 32),
             ("reduce_combine", ["main/sum"], 2000, 1, 256, 262144)]
    found, doc = _findings(_side("split", split), _side("serial", serial))
    assert "recomputation" not in found
    (p,) = found["parallelism"]
    ev = p["evidence"]
    assert ev["kernel"] == "reduce_serial" and ev["threads"] == 32 and ev["other_threads"] == 1024 * 256
    assert ev["resident_thread_slots"] == 132 * 2048 and ev["sms"] == 132
    assert ev["work_per_thread"] == {"metric": "flops", "value": 131072}
    assert "1 of 132 SMs busy" in p["sentence"] and "`reduce_partial`" in p["sentence"]


def test_parallelism_is_silent_when_both_sides_fill_the_device():
    a = [("k", ["main/x"], 5000, 4096, 256, None)]
    b = [("k2", ["main/x"], 9000, 2048, 256, None)]
    found, _ = _findings(_side("a", a), _side("b", b))
    assert "parallelism" not in found
