"""confirm: hybrid planning on real specs and real TVM catalogs, and the recovered-share statistics.

Planning is checked against the catalogs' own provenance (source_ops read from the IR by the TVM
frontend); the statistics against samples drawn from distributions whose true share is known."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from rootcause import build, pipeline, spec as spec_mod
from rootcause.analysis import confirm
from rootcause.artifacts.bundle import read_bundle
from rootcause.model import Hybrid

ROOT = Path(__file__).resolve().parents[1]
POOL = ROOT / "fixtures" / "cases" / "pool_fusion" / "variants.toml"
EINSUM = ROOT / "fixtures" / "cases" / "einsum_fusion" / "variants.toml"


@pytest.fixture(scope="session")
def pool(tmp_path_factory):
    """Specs and catalogs of pool_fusion on/off for llvm (cached builds)."""
    out = tmp_path_factory.mktemp("confirm")
    specs = {n: spec_mod.with_target(spec_mod.load(f"{POOL}#{n}"), "llvm") for n in ("on", "off", "serial")}
    cats = {n: read_bundle(build.build_bundle(specs[n], out / n)).kernels() for n in ("on", "off")}
    return specs, cats


def test_boundaries_cut_where_the_other_side_splits(pool):
    specs, cats = pool
    hybrids, _ = pipeline.plan_hybrids(specs["on"], specs["off"], cats["on"], cats["off"], limit=10)
    boundary = [h for h in hybrids if h.kind == "dataflow-boundary"]
    owner = {op: k.name for k in cats["off"] for op in k.source_ops}
    for h in boundary:
        kernel = next(k for k in cats["on"] if k.name == h.kernels[0])
        # a cut after op i exactly when OFF computes op i and op i+1 in different kernels
        want = [op.split("/")[1].split(":")[0] for op, nxt in zip(kernel.source_ops, kernel.source_ops[1:])
                if owner[op] != owner[nxt]]
        assert h.change["dataflow_boundaries_after"] == want
        assert h.spec.options.dataflow_boundaries_after == want and h.base == "a"
    assert any(h.kernels == ["fused_pool2d_add2"] and h.change["dataflow_boundaries_after"] == ["lv16"]
               for h in boundary)
    # OFF's add2 serves two bindings as one function: a reuse, not a fusion, so nothing to split
    assert not [h for h in boundary if h.base == "b"]


def test_pass_bisection_one_level(pool):
    specs, cats = pool
    hybrids, _ = pipeline.plan_hybrids(specs["on"], specs["off"], cats["on"], cats["off"], limit=10)
    passes = [h for h in hybrids if h.kind == "passes"]
    assert sorted(h.change["toggled"][0] for h in passes) == ["FuseOps", "FuseTIR"]
    for h in passes:
        assert h.spec.options.skip_passes == h.change["toggled"]
    assert len({h.name for h in hybrids}) == len(hybrids)


def test_override_hybrid_and_limit(pool):
    specs, cats = pool
    # serial differs from on only by the override of fused_pool2d_add2: that hybrid is B itself
    hybrids, _ = pipeline.plan_hybrids(specs["on"], specs["serial"], cats["on"], cats["on"], limit=10)
    assert not [h for h in hybrids if h.kind == "schedule-override"]
    # with a boundary on B too, the override alone is a real hybrid
    other = dataclasses.replace(specs["serial"], options=dataclasses.replace(specs["serial"].options,
                                                                         dataflow_boundaries_after=["lv2"]))
    hybrids, _ = pipeline.plan_hybrids(specs["on"], other, cats["on"], cats["on"], limit=10)
    over = [h for h in hybrids if h.kind == "schedule-override"]
    assert len(over) == 1 and over[0].spec.options.schedule_overrides == specs["serial"].options.schedule_overrides
    assert over[0].spec.options.dataflow_boundaries_after == []
    few, notes = pipeline.plan_hybrids(specs["on"], specs["off"], cats["on"], cats["off"], limit=1)
    assert len(few) == 1 and any("more hybrid" in n for n in notes)


def test_iree_flag_bisection():
    a = spec_mod.load(f"{EINSUM}#unfused_small")
    b = dataclasses.replace(a, name="flags", options=dataclasses.replace(a.options, flags=["--x=1", "--y=2"]))
    hybrids, notes = pipeline.plan_hybrids(a, b, [], [], limit=10)
    assert sorted(h.spec.options.flags for h in hybrids) == [["--x=1"], ["--y=2"]]
    assert any("substitut" in n for n in notes)
    single = dataclasses.replace(a, name="one", options=dataclasses.replace(a.options, flags=["--x=1"]))
    assert pipeline.plan_hybrids(a, single, [], [], limit=10)[0] == []  # one flag: the hybrid is B


def test_recovered_interval_covers_the_true_share():
    rng = np.random.default_rng(1)
    blocks, repeats = 30, 5
    drift = np.repeat(rng.normal(0, 2, blocks), repeats)  # block effects shared by all variants
    s = {"a": 100 + drift + rng.normal(0, 1, blocks * repeats), "b": 50 + drift + rng.normal(0, 1, blocks * repeats),
         "h": 62.5 + drift + rng.normal(0, 1, blocks * repeats)}
    point, lo, hi, method = confirm.recovered_interval(s, "a", repeats, blocks)
    assert lo < 0.75 < hi and hi - lo < 0.1 and "blocks" in method
    assert confirm.verdict(lo, hi) == "confirmed"
    # base B: how much of the gap the hybrid re-introduces from B's side
    point_b, lo_b, hi_b, _ = confirm.recovered_interval(s, "b", repeats, blocks)
    assert lo_b < 0.25 < hi_b and confirm.verdict(lo_b, hi_b) == "refuted"
    # unequal sample counts: independent resampling, still an interval around the truth
    uneven = {**s, "h": s["h"][:-3]}
    _, lo_u, hi_u, method_u = confirm.recovered_interval(uneven, "a", repeats, blocks)
    assert lo_u < 0.75 < hi_u and "independently" in method_u


def test_evaluate_marks_failed_and_insignificant():
    rng = np.random.default_rng(2)
    samples = {n: list(rng.normal(m, 0.5, 40)) for n, m in (("A", 10), ("B", 5), ("H", 6))}
    measurement = {"variants": {n: {"samples_s": v} for n, v in samples.items()},
                   "protocol": {"repeats": 5}, "blocks_run": 8}
    hs = [Hybrid("H", "a", "passes", {}, "h"), Hybrid("X", "a", "passes", {}, "x")]
    out = confirm.evaluate(measurement, "A", "B", hs, [], failed={"X": "build failed: no"})
    h, x = out["hybrids"]
    assert h["verdict"] == "confirmed" and h["recovered"]["low"] > 0.5
    assert x["verdict"] == "not measured" and "build failed" in x["sentence"]
    quiet = confirm.evaluate(measurement, "A", "B", hs[:1], [], delta_significant=False)
    assert quiet["hybrids"][0]["verdict"] == "inconclusive"


def test_unit_interval_carries_the_unit_delta_spread():
    """The unit share's interval resamples the profiled calls too: with noisy calls and a quiet
    measurement it covers the true share and is wider than with the calls held at their medians."""
    rng = np.random.default_rng(3)
    blocks, repeats = 30, 5
    s = {k: m + rng.normal(0, 0.1, blocks * repeats) for k, m in (("a", 100.0), ("b", 90.0), ("h", 70.0))}
    calls = {"a": 40 + rng.normal(0, 8, 15), "b": rng.normal(0, 8, 15)}  # unit delta about -40
    point, lo, hi, method = confirm.unit_interval(s, calls, "a", repeats, blocks)
    truth = (np.median(s["h"]) - np.median(s["a"])) / (np.median(calls["b"]) - np.median(calls["a"]))
    assert point == pytest.approx(truth) and lo < 0.75 < hi and "profiled calls" in method
    fixed = {k: np.full(15, np.median(v)) for k, v in calls.items()}
    _, lo_f, hi_f, _ = confirm.unit_interval(s, fixed, "a", repeats, blocks)
    assert hi_f - lo_f < 0.2 * (hi - lo)
    # base B: the mirror, (T_h - T_B) / (u_A - u_B)
    point_b, *_ = confirm.unit_interval(s, calls, "b", repeats, blocks)
    assert point_b == pytest.approx((np.median(s["h"]) - np.median(s["b"]))
                                    / (np.median(calls["a"]) - np.median(calls["b"])))


def test_evaluate_judges_unit_hybrids_on_their_unit():
    rng = np.random.default_rng(4)
    samples = {n: list(rng.normal(m, 0.5, 40)) for n, m in (("A", 100), ("B", 95), ("H", 40))}
    measurement = {"variants": {n: {"samples_s": v} for n, v in samples.items()},
                   "protocol": {"repeats": 5}, "blocks_run": 8}
    unit = {"unit": 3, "kernels_a": ["fused"], "kernels_b": ["p", "q"], "source_ops": ["main/lv1:p"],
            "significant": True}
    h = Hybrid("H", "a", "dataflow-boundary", {}, "splitting fused", ["main/lv1:p"], ["fused"])
    calls = {3: {"a": rng.normal(70, 0.5, 9), "b": rng.normal(0, 0.5, 9)}}
    row = confirm.evaluate(measurement, "A", "B", [h], [unit], unit_calls=calls)["hybrids"][0]
    assert row["recovered"]["of"] == "unit" and row["unit"] == 3
    assert row["recovered"]["median"] == pytest.approx(
        (np.median(samples["H"]) - np.median(samples["A"])) / (np.median(calls[3]["b"]) - np.median(calls[3]["a"])))
    assert row["verdict"] == "confirmed" and row["recovered_graph"]["median"] > 5  # 1200% of the A-B delta
    assert "of the unit's" in row["sentence"] and "2.5x faster than A" in row["sentence"]
    quiet = confirm.evaluate(measurement, "A", "B", [h], [{**unit, "significant": False}], unit_calls=calls)
    assert quiet["hybrids"][0]["verdict"] == "inconclusive" and "not significant" in quiet["hybrids"][0]["sentence"]
    # no share of a delta that is not significant is printed: not in the sentence, not in the table
    from rootcause.report.view import fmt_recovered

    assert "recovers" not in quiet["hybrids"][0]["sentence"] and "%" not in quiet["hybrids"][0]["sentence"]
    assert "%" not in fmt_recovered(quiet["hybrids"][0]["recovered"])
    # without per-call times the unit hybrid falls back to the whole-graph share, and says so
    bare = confirm.evaluate(measurement, "A", "B", [h], [unit])["hybrids"][0]
    assert bare["recovered"]["of"] == "graph" and "judged on the A-B delta" in bare["sentence"]


def test_a_hybrid_that_moves_far_more_than_its_unit_confirms_nothing():
    """A unit of -10 us (its calls), an A-B delta of -10 us, and a hybrid that moves the graph by
    -40 us: 400% of the unit and of the whole delta, by construction. It did more than swap this
    unit, so it is not called a confirmation; one that lands on B (100% of the whole delta) is, as
    a launch-bound unit's is, whose kernels hold a fraction of what its launches cost."""
    rng = np.random.default_rng(5)
    samples = {n: list(rng.normal(m, 0.2, 40)) for n, m in (("A", 100), ("B", 90), ("H", 60), ("L", 90))}
    measurement = {"variants": {n: {"samples_s": v} for n, v in samples.items()},
                   "protocol": {"repeats": 5}, "blocks_run": 8}
    unit = {"unit": 1, "kernels_a": ["k"], "kernels_b": ["k2"], "source_ops": ["main/lv1:k"], "significant": True}
    h = Hybrid("H", "a", "dataflow-boundary", {}, "splitting k", ["main/lv1:k"], ["k"])
    calls = {1: {"a": rng.normal(30, 0.2, 9), "b": rng.normal(20, 0.2, 9)}}
    row = confirm.evaluate(measurement, "A", "B", [h], [unit], unit_calls=calls)["hybrids"][0]
    assert row["recovered"]["median"] == pytest.approx(4.0, rel=0.05)
    assert row["verdict"] == "inconclusive" and "more than this unit" in row["sentence"]
    launch_bound = {1: {"a": rng.normal(30, 0.2, 9), "b": rng.normal(28, 0.2, 9)}}  # kernels: -2 us of -10 us
    lands = Hybrid("L", "a", "dataflow-boundary", {}, "splitting k", ["main/lv1:k"], ["k"])
    row = confirm.evaluate(measurement, "A", "B", [lands], [unit], unit_calls=launch_bound)["hybrids"][0]
    assert row["recovered"]["median"] == pytest.approx(5.0, rel=0.1) and row["verdict"] == "confirmed"


def test_a_hybrid_that_is_the_other_side_is_named_not_built():
    """The zoo's tvm_serial_rowsum: one function scheduled by an override in A, by dlight in B. The
    only hybrid (B with A's override) is A itself: none is built, and the notes say why (the
    pair's own catalogs, from its H200 capture's manifests)."""
    case = ROOT / "fixtures" / "zoo" / "tvm_serial_rowsum"
    a, b = (spec_mod.load(f"{case / 'variants.toml'}#{v}") for v in ("serial", "dlight"))
    bundles = case / "capture" / "analyze" / "bundles"
    cats = [read_bundle(bundles / n).kernels() for n in ("rowsum-serial", "rowsum-dlight")]
    hybrids, notes = pipeline.plan_hybrids(a, b, *cats)
    assert hybrids == []
    assert notes == ["scheduling sum as A does (serial_kernel.py): that builds rowsum-serial itself (the variants "
                     "differ in nothing else a hybrid can swap), so the A-B measurement is this counterfactual"]


@pytest.mark.slow


def test_a_hybrid_that_compiles_like_an_earlier_one_is_dropped(tmp_path, capsys):
    """The zoo's tvm_unfused_chain: the full dataflow split of its one fused kernel compiles to the
    unfused side's 32 kernels, and skipping FuseOps (the pass hybrid) gives the same module and
    kernels byte for byte: measured once. Truth: B's own build for the split's kernels."""
    from rootcause import cli

    case = ROOT / "fixtures" / "zoo" / "tvm_unfused_chain" / "variants.toml"
    out = tmp_path / "o"
    assert cli.main(["analyze", f"{case}#on", f"{case}#off", "--bundle-only", "--hybrids", "2", "--out", str(out)]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert [h["kind"] for h in plan["hybrids"]] == ["dataflow-boundary"]
    assert "skipping FuseOps as B does: compiles to the same kernels as unfused_chain-on~h1-dataflow-boundary, so it " \
           "was not kept" in plan["notes"]
    split, off = (read_bundle(out / plan["bundles"][n]).kernels() for n in ("unfused_chain-on~h1-dataflow-boundary",
                                                                            "unfused_chain-off"))
    assert sorted(k.function for k in split) == sorted(k.function for k in off) and len(off) == 32
