"""Diagnosis rules on the real H200 capture of seed 000 and the real IREE builds of seed 001."""
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from rootcause.align import align
from rootcause.attribute import attribute
from rootcause.diagnose import Context, Side, diagnose, shared_executable
from rootcause.profilers import load, split_calls

ROOT = Path(__file__).parent.parent
CAPTURE = ROOT / "fixtures/captures/h200-2026-12-02/tvm_pool_fusion.cupti.json"


@pytest.fixture(scope="module")
def variants():
    ev = split_calls(load(CAPTURE))
    segs = [g.reset_index(drop=True) for _, g in ev.groupby("segment")]
    on = next(g for g in segs if (g.kernel == "fused_pool2d_add2_kernel").any())
    off = next(g for g in segs if not (g.kernel == "fused_pool2d_add2_kernel").any())
    return off, on


@pytest.fixture(scope="module")
def diagnosed(variants):
    off, on = variants
    al = align(off, on)
    att = attribute(off, on, al, labels=("OFF", "ON"))
    diagnose(att, al, device="H200")
    return att


@pytest.fixture(scope="module")
def fused_record():
    return next(r for r in json.loads(CAPTURE.read_text()) if r["name"] == "fused_pool2d_add2_kernel")


def _rules(unit):
    return {f["rule"]: f for f in unit["findings"]}


def test_launch_config_fires_on_fused_pool(diagnosed, fused_record):
    top = diagnosed.units[0]
    f = _rules(top)["launch-config"]
    ev = f["evidence"]["ON"]
    assert ev["blocks"] == fused_record["grid_x"] * fused_record["grid_y"] * fused_record["grid_z"]
    assert ev["threads_per_block"] == fused_record["block_x"]
    # H200: 132 SMs, 2048 threads/SM (CUDA C++ Programming Guide, CC 9.0) -> 8 blocks of 256.
    assert ev["waves"]["blocks_per_sm"] == 2048 // fused_record["block_x"]
    assert ev["waves"]["waves"] == pytest.approx(ev["blocks"] / (132 * 8))
    assert f["evidence"]["one_block_per_element"]
    assert "one block of 256 threads per element that `pool2d_kernel` computes with one thread" in f["sentence"]


def test_shared_memory_introduced(diagnosed, fused_record):
    f = _rules(diagnosed.units[0])["shared-memory"]
    size = fused_record["static_shared_memory"] + fused_record["dynamic_shared_memory"]
    assert f["evidence"]["shared_bytes"] == size == 132
    assert f"{size} B of shared memory per block" in f["sentence"]


def test_launch_overhead_named(diagnosed):
    f = next(f for f in diagnosed.findings if f["rule"] == "launch-overhead")
    assert f["evidence"]["launches_per_call"] == {"a": 19.0, "b": 3.0}
    assert "19" in f["sentence"] and "3 launches" in f["sentence"]


def test_no_finding_against_itself(variants):
    _, on = variants
    first, second = on[on.call < on.call.min() + 10], on[on.call >= on.call.min() + 10]
    al = align(first, second)
    att = attribute(first, second, al)
    assert diagnose(att, al, device="H200") == []


def test_occupancy_rule_silent_when_both_full(diagnosed):
    # Both pool kernels reach 64 of 64 warps per SM on sm_90 (8 x 256 and 2 x 1024 threads).
    assert "occupancy" not in _rules(diagnosed.units[0])


@pytest.fixture(scope="module")
def prefill(tmp_path_factory):
    from rootcause import spec
    from rootcause.frontends import iree

    toml = ROOT / "fixtures/cases/prefill_dedup/variants.toml"
    out = {}
    for v in ("alone", "dedup"):
        d = tmp_path_factory.mktemp(v)
        out[v] = (iree.build(spec.load(f"{toml}#{v}"), d), d)
    return out


def _config_lists(bundle_dir):
    """workgroup/subgroup tile lists straight from the compiler's configured_*.mlir dump."""
    text = next((bundle_dir / "ir").glob("configured_*.mlir")).read_text()
    return {k: re.search(rf"\b{k} = (\[[0-9, ]*\])", text).group(1) for k in ("workgroup", "subgroup")}


def test_shared_executable_names_lowering_config(prefill):
    (alone, d_alone), (dedup, d_dedup) = prefill["alone"], prefill["dedup"]
    shared = next(k for k in dedup.kernels if "prefill_bs8" in k.call_sites)
    own = next(k for k in alone.kernels if "prefill_bs8" in k.call_sites)
    al = align(pd.DataFrame({"kernel": [shared.name]}), pd.DataFrame({"kernel": [own.name]}),
               dedup.kernels, alone.kernels, "prefill_bs8", "prefill_bs8")
    rows = lambda name: pd.DataFrame({"kernel": [name], "time_per_call_ns": [0.0]})
    a = Side("dedup", rows(shared.name), {shared.name: shared},
             {shared.name: tuple(al.kernels.shared_call_sites[0])}, "prefill_bs8")
    b = Side("alone", rows(own.name), {own.name: own}, {}, "prefill_bs8")
    unit = {"unit": 0, "delta_ns": {"median": -1.0}}
    found = shared_executable(Context(unit, a, b, None, None, None, None))
    assert len(found) == 1
    s = found[0]["sentence"]
    want_dedup, want_alone = _config_lists(d_dedup), _config_lists(d_alone)
    assert want_dedup != want_alone  # the seed's point: bs2's tiles differ from bs8's
    for key in ("workgroup", "subgroup"):
        if want_dedup[key] != want_alone[key]:
            assert f"{key}={want_dedup[key]}" in s and f"{key}={want_alone[key]}" in s
    assert "prefill_bs2" in s and "prefill_bs8" in s


@pytest.fixture(scope="module")
def pool_bundles(tmp_path_factory):
    """D's real pool_fusion bundles (TVM 0.27, cuda:sm_90) for FuseOps OFF and ON."""
    from rootcause import spec as spec_mod
    from rootcause.build import build_bundle

    out = {}
    for v in ("off", "on"):
        sp = spec_mod.with_target(spec_mod.load(f"{ROOT / 'fixtures/cases/pool_fusion/variants.toml'}#{v}"),
                                  "cuda:sm_90")
        d = tmp_path_factory.mktemp(f"pool_{v}")
        build_bundle(sp, d)
        out[v] = d
    return out


def test_catalogs_give_provenance_units_and_schedule_rule(variants, pool_bundles):
    from rootcause.compare import load_catalog

    off, on = variants
    cat_off, man_off = load_catalog(str(pool_bundles["off"]))
    cat_on, man_on = load_catalog(str(pool_bundles["on"]))
    al = align(off, on, cat_off, cat_on, man_off.get("entry"), man_on.get("entry"))
    assert set(al.units.method) == {"provenance"}
    att = attribute(off, on, al, labels=("OFF", "ON"))
    diagnose(att, al, cat_off, cat_on, "H200")
    top = att.units[0]
    fused = next(k for k in man_on["kernels"] if "main/lv16:pool2d" in k["source_ops"])
    assert fused["name"] in top["kernels_b"] and "main/lv16:pool2d" in top["source_ops"]
    rules = _rules(top)
    assert fused["schedule"]["rule"] in rules["schedule"]["sentence"]
    bw = rules["bandwidth"]["evidence"]["ON"]
    assert bw["bytes_per_call"] == sum(k["bytes_moved"] for k in man_on["kernels"] if k["name"] in top["kernels_b"])
    assert bw["bytes_per_s"] == pytest.approx(bw["bytes_per_call"] / top["time_b_ns"]["median"] * 1e9)
