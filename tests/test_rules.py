"""The recomputation and parallelism rules on small tables built here (the zoo's captures test
them on real regressions): they fire on the structure they name and on nothing else.

Each case is two variants whose launches and catalogs are written out below; the whole-graph
latency is the kernels' busy time plus a fixed host share, so closure is exact."""
from __future__ import annotations

import re

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


# --- held-out failure modes of issue 11, numbers by hand ---------------------------------------

def _unit_with(doc: dict, kernel_b: str) -> dict:
    (u,) = [u for u in doc["units"] if kernel_b in u["kernels_b"]]
    return u


def test_one_kernel_serving_two_independent_ops_is_split_per_launch():
    # The unfused side runs one `mean` executable for two bindings (lv: mean of x, lv3: mean of the
    # squares), launched twice per call; the fused side fuses each mean with its own neighbour.
    # Nothing joins the two fused kernels but that executable: they are two units, each launch
    # of `mean` in its own, in launch order (lv first).
    unfused = [("mean", ["main/lv:mean", "main/lv3:mean"], 1000, 256, 1024, 262_400),
               ("sub", ["main/lv1:subtract"], 2000, 256, 1024, 262_144),
               ("mean", ["main/lv:mean", "main/lv3:mean"], 5000, 256, 1024, 262_400),
               ("add", ["main/lv4:add"], 3000, 256, 1024, 262_144)]
    fused = [("fused_mean_sub", ["main/lv:mean", "main/lv1:subtract"], 2500, 256, 1024, 524_544),
             ("fused_mean_add", ["main/lv3:mean", "main/lv4:add"], 6000, 256, 1024, 524_544)]
    _, doc = _findings(_side("unfused", unfused), _side("fused", fused))
    first, second = _unit_with(doc, "fused_mean_sub"), _unit_with(doc, "fused_mean_add")
    assert first["unit"] != second["unit"]
    assert sorted(first["kernels_a"]) == ["mean", "sub"] and sorted(second["kernels_a"]) == ["add", "mean"]
    # per call: the unit's launches summed; jitter 7 ns x (call % 3) per launch, median at call % 3 == 1
    assert first["time_a_ns"]["median"] == 1000 + 2000 + 2 * 7 and first["time_b_ns"]["median"] == 2500 + 7
    assert second["time_a_ns"]["median"] == 5000 + 3000 + 2 * 7 and second["time_b_ns"]["median"] == 6000 + 7
    assert first["launches_a"] == 2 and second["launches_a"] == 2


def test_a_kernel_launched_once_for_two_ops_is_not_split():
    # One launch per call serving two source ops (one fused kernel) stays one node.
    a = [("fused_xy", ["main/x", "main/y"], 4000, 64, 256, 1_000)]
    b = [("kx", ["main/x"], 2000, 64, 256, 500), ("ky", ["main/y"], 2100, 64, 256, 500)]
    _, doc = _findings(_side("a", a), _side("b", b))
    (u,) = doc["units"]
    assert u["kernels_a"] == ["fused_xy"] and sorted(u["kernels_b"]) == ["kx", "ky"]


def test_recomputation_not_across_a_pairing_without_shared_ops():
    # The catalogs name different ops on each side, so the kernels meet only by elimination: a
    # 1000x work ratio there says nothing about recomputation, and the tool says it did not check.
    a = [("one", ["main/q"], 50000, 64, 256, 1_000_000_000)]
    b = [("r", ["main/r"], 3000, 32, 128, 1_000), ("s", ["main/s"], 3000, 16, 128, 1_000)]
    found, doc = _findings(_side("b", b), _side("a", a))
    assert "recomputation" not in found
    assert any("recomputes its producers was not checked" in c for c in doc["cannot_conclude"])


def test_recomputation_not_on_the_faster_fused_side():
    # The fused kernel does 8x the work of the three it replaces but is the faster side: the
    # unit's cost is elsewhere, recomputation is not its cause.
    fast_fused = [("fused_exp_exp_add", ["main/lv1:exp", "main/lv2:exp", "main/lv3:add"], 5000, 64, 256, 24_000)]
    found, _ = _findings(_side("unfused", EXP_CHAIN), _side("fused", fast_fused))
    assert "recomputation" not in found


def test_recomputation_not_when_the_fused_work_does_not_grow():
    # Slower and fused, but doing exactly the work of its parts (1000 + 1000 + 1000 flops).
    same_work = [("fused_exp_exp_add", ["main/lv1:exp", "main/lv2:exp", "main/lv3:add"], 40000, 64, 256, 3_000)]
    found, _ = _findings(_side("unfused", EXP_CHAIN), _side("fused", same_work))
    assert "recomputation" not in found


def test_launch_overhead_when_more_launches_spend_more_outside_the_kernels():
    # B launches 2 kernels for A's one and spends 30 us outside them against 2 us: +28 us residual.
    a = [("fused_xy", ["main/x", "main/y"], 3000, 64, 256, 1_000)]
    b = [("kx", ["main/x"], 1500, 64, 256, 500), ("ky", ["main/y"], 1500, 64, 256, 500)]
    found, doc = _findings(_side("a", a, host_ns=2000), _side("b", b, host_ns=30000))
    (f,) = found["launch-overhead"]
    assert f["evidence"]["launches_per_call"] == {"a": 1, "b": 2}
    # residual = measured whole - kernel busy, per side: 2000 and 30000 ns (busy is the median call)
    assert doc["residual"]["delta_ns"]["median"] == pytest.approx(28000, abs=20)


def test_launch_overhead_not_when_the_side_with_fewer_launches_spends_more():
    a = [("kx", ["main/x"], 1500, 64, 256, 500), ("ky", ["main/y"], 1500, 64, 256, 500)]
    b = [("fused_xy", ["main/x", "main/y"], 3000, 64, 256, 1_000)]
    found, doc = _findings(_side("a", a, host_ns=2000), _side("b", b, host_ns=30000))
    assert "launch-overhead" not in found
    assert any("launching fewer kernels" in c for c in doc["cannot_conclude"])


def test_launch_overhead_not_within_the_profilers_excess():
    # Both sides' profiled kernels outlast their measured calls (by 8 and 6.5 us: residuals -8000
    # and -6500 ns), so a 1.5 us change of the residual is the profiler's, not launch overhead
    # (the tvm_exp_recompute_d8 capture's shape). Kernels of 30 us keep the unit's 3 us change big.
    a = [("kx", ["main/x"], 15000, 64, 256, 500), ("ky", ["main/y"], 15000, 64, 256, 500)]
    b = [("kx", ["main/x"], 16500, 64, 256, 500), ("ky", ["main/y"], 16500, 64, 256, 500)]
    found, doc = _findings(_side("a", a, host_ns=-8000), _side("b", b, host_ns=-6500))
    assert doc["residual"]["delta_ns"]["median"] == pytest.approx(1500, abs=20)
    assert "launch-overhead" not in found
    assert any("negative on a and b" in c and "14.5 us longer" in c for c in doc["cannot_conclude"])


def test_launch_overhead_beyond_the_profilers_excess():
    # The fused side's residual is -2 us (its profile overstates it by 2 us); the unfused side
    # spends 30 us outside its two kernels: a 32 us change, far beyond that excess.
    a = [("kx", ["main/x"], 1500, 64, 256, 500), ("ky", ["main/y"], 1500, 64, 256, 500)]
    b = [("fused_xy", ["main/x", "main/y"], 3000, 64, 256, 1_000)]
    found, doc = _findings(_side("a", a, host_ns=30000), _side("b", b, host_ns=-2000))
    (f,) = found["launch-overhead"]
    assert f["evidence"]["profiler_excess_ns"] == pytest.approx(2000, abs=20)
    assert doc["residual"]["delta_ns"]["median"] == pytest.approx(-32000, abs=20)


def test_no_comparison_across_a_shape_only_pairing():
    # Two kernels whose catalogs share no op and whose launches have the same size (64 x 256 =
    # 256 x 64 threads) are joined by shape alone: their launches, threads and work are not
    # compared (a different partner would be blamed), and the tool says so.
    a = [("alpha", ["main/p"], 2000, 64, 256, 1_000)]
    b = [("beta", ["main/q"], 9000, 256, 64, 1_000_000)]
    found, doc = _findings(_side("a", a), _side("b", b))
    (u,) = doc["units"]
    assert u["method"] == "shape" and u["significant"]
    assert not found.keys() - {"launch-overhead"}
    assert any(f"unit {u['unit']} was joined by shape alone" in c for c in doc["cannot_conclude"])


def test_no_comparison_on_a_unit_of_one_variant():
    # A kernel only B launches (three times per call, 4 us each): not "more launches for the same
    # ops" than A, which has no partner for it.
    a = [("k", ["main/x"], 3000, 64, 256, 1_000)]
    b = [("k", ["main/x"], 3000, 64, 256, 1_000)] + [("extra", ["main/z"], 4000, 64, 256, 1_000)] * 3
    found, doc = _findings(_side("a", a), _side("b", b))
    (u,) = [u for u in doc["units"] if u["kernels_b"] == ["extra"]]
    assert u["significant"] and not u["kernels_a"]
    assert not u["findings"] and "launch-count" not in found
    assert any(f"unit {u['unit']} has kernels of one variant only" in c for c in doc["cannot_conclude"])


PREFIX = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


@pytest.mark.parametrize("flops", [3_000, 24_000, 2_950_000, 7_500_000_000])
def test_compute_states_work_and_rate_with_a_prefix_that_keeps_their_digits(flops):
    # One kernel a call on each side, B twice A's time; the work is the catalog's flops (one launch a
    # call) and the time the median launch: 3000 + 7 ns on A (durations 3000, 3007, 3014 ns).
    found, _ = _findings(_side("a", [("k", ["main/x"], 3000, 64, 256, flops)]),
                         _side("b", [("k", ["main/x"], 6000, 64, 256, flops)]))
    (f,) = found["compute"]
    said = re.findall(r"(\w+) does ([\d,.]+) (\w?)FLOP in [^(]+\(([\d,.]+) (\w?)FLOP/s", f["sentence"])
    assert [s[0] for s in said] == ["a", "b"], f["sentence"]
    for (_, work, work_prefix, rate, rate_prefix), busy_ns in zip(said, (3007, 6007)):
        assert float(work.replace(",", "")) * PREFIX[work_prefix] == pytest.approx(flops, rel=0.005)
        assert float(rate.replace(",", "")) * PREFIX[rate_prefix] == pytest.approx(flops / busy_ns * 1e9, rel=0.005)
        assert float(work.replace(",", "")) >= 0.1 and float(rate.replace(",", "")) >= 0.1
