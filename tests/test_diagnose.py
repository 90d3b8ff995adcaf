"""Diagnosis rules on the real H200 capture of the pool_fusion case and the real IREE builds of the prefill_dedup case."""
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rootcause.analysis.align import align
from rootcause.analysis.attribute import attribute
from rootcause.analysis.diagnose import Context, Side, diagnose, shared_executable
from rootcause.analysis.result import Unit
from rootcause.model import Interval
from captures import ROOT, build_prefill, pool_segments, raw_records


@pytest.fixture(scope="module")
def variants():
    return pool_segments()


@pytest.fixture(scope="module")
def diagnosed(variants):
    off, on = variants
    al = align(off, on)
    att = attribute(off, on, al, labels=("OFF", "ON"))
    diagnose(att, al, device="H200")
    return att


@pytest.fixture(scope="module")
def fused_record():
    return next(r for r in raw_records() if r["name"] == "fused_pool2d_add2_kernel")


def _rules(unit):
    return {f.rule: f for f in unit.findings}


def test_launch_config_fires_on_fused_pool(diagnosed, fused_record):
    top = diagnosed.units[0]
    f = _rules(top)["launch-config"]
    ev = f.evidence["ON"]
    assert ev["blocks"] == fused_record["grid_x"] * fused_record["grid_y"] * fused_record["grid_z"]
    assert ev["threads_per_block"] == fused_record["block_x"]
    # H200: 132 SMs, 2048 threads/SM (CUDA C++ Programming Guide, CC 9.0) -> 8 blocks of 256.
    assert ev["waves"]["blocks_per_sm"] == 2048 // fused_record["block_x"]
    assert ev["waves"]["waves"] == pytest.approx(ev["blocks"] / (132 * 8))
    assert f.evidence["one_block_per_element"]
    assert "one block of 256 threads per element that `pool2d_kernel` computes with one thread" in f.sentence


def test_shared_memory_introduced(diagnosed, fused_record):
    f = _rules(diagnosed.units[0])["shared-memory"]
    size = fused_record["static_shared_memory"] + fused_record["dynamic_shared_memory"]
    assert f.evidence["shared_bytes"] == size == 132
    assert f"{size} B of shared memory per block" in f.sentence


def test_launch_overhead_named(diagnosed):
    f = next(f for f in diagnosed.findings if f.rule == "launch-overhead")
    assert f.evidence["launches_per_call"] == {"a": 19.0, "b": 3.0}
    assert "19" in f.sentence and "3 launches" in f.sentence


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
    return build_prefill(tmp_path_factory)


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
    t = Interval(0.0, 0.0, 0.0)
    unit = Unit(0, [shared.name], [own.name], [], "provenance", False, t, t, 1.0, 1.0, 0.0, 0.0,
                Interval(-1.0, -1.0, -1.0), True, None)
    found = shared_executable(Context(unit, a, b, None))
    assert len(found) == 1
    s = found[0].sentence
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
    from rootcause.artifacts.bundle import load_catalog

    off, on = variants
    cat_off, man_off = load_catalog(str(pool_bundles["off"]))
    cat_on, man_on = load_catalog(str(pool_bundles["on"]))
    al = align(off, on, cat_off, cat_on, man_off.get("entry"), man_on.get("entry"))
    assert set(al.units.method) == {"provenance"}
    att = attribute(off, on, al, labels=("OFF", "ON"))
    diagnose(att, al, cat_off, cat_on, "H200")
    top = att.units[0]
    fused = next(k for k in man_on["kernels"] if "main/lv16:pool2d" in k["source_ops"])
    assert fused["name"] in top.kernels_b and "main/lv16:pool2d" in top.source_ops
    rules = _rules(top)
    assert fused["schedule"]["rule"] in rules["schedule"].sentence
    bw = rules["bandwidth"].evidence["ON"]
    assert bw["bytes_per_call"] == sum(k["bytes_moved"] for k in man_on["kernels"] if k["name"] in top.kernels_b)
    assert bw["bytes_per_s"] == pytest.approx(bw["bytes_per_call"] / top.time_b_ns.median * 1e9)


# ---- the einsum_fusion case: recomputation, on real IREE llvm-cpu builds profiled on local-task ----------

EINSUM = ROOT / "fixtures/cases/einsum_fusion"


def _iree_tool(name):
    import iree.runtime

    return Path(iree.runtime.__file__).resolve().parent.parent / "_runtime_libs" / name


@pytest.fixture(scope="module")
def einsum_runs(tmp_path_factory):
    """fused_small and split_small built by `rootcause build` (IREE 3.13, llvm-cpu), each run
    12 times by iree-benchmark-module with host-execution profiling, dumped by iree-profile
    (the commands of fixtures/captures/iree-3.13-local-task/PROVENANCE.md)."""
    import os
    import subprocess

    from rootcause import spec as spec_mod
    from rootcause.artifacts.bundle import bundle_inputs, read_bundle
    from rootcause.build import build_bundle
    from rootcause.frontends.iree.runtime import tool_input

    base = tmp_path_factory.mktemp("einsum")
    old = os.environ.get("ROOTCAUSE_CACHE")
    os.environ["ROOTCAUSE_CACHE"] = str(base / "cache")  # this tree's frontend, not an old cached build
    out = {}
    try:
        for v in ("fused_small", "split_small"):
            d = base / v
            build_bundle(spec_mod.load(f"{EINSUM / 'variants.toml'}#{v}"), d)
            manifest = json.loads((d / "manifest.json").read_text())
            # drawn inputs are not stored: drawn again from the bundle, written for the tool
            inputs = [f"--input={tool_input(a, base / f'{v}_input{i}')}" for i, a in enumerate(bundle_inputs(read_bundle(d)))]
            prof = base / f"{v}.ireeprof"
            subprocess.run([str(_iree_tool("iree-benchmark-module")), f"--module={d / manifest['module']}",
                            "--device=local-task", f"--function={manifest['entry']}", *inputs,
                            "--benchmark_min_time=12x", "--device_profiling_mode=host-execution",
                            f"--device_profiling_output={prof}"], check=True, capture_output=True)
            dump = subprocess.run([str(_iree_tool("iree-profile")), "dispatch", "--dispatch_events",
                                   "--format=jsonl", str(prof)], check=True, capture_output=True)
            (base / f"{v}.jsonl").write_bytes(dump.stdout)
            out[v] = (d, manifest, base / f"{v}.jsonl")
    finally:
        if old is None:
            os.environ.pop("ROOTCAUSE_CACHE", None)
        else:
            os.environ["ROOTCAUSE_CACHE"] = old
    return out


def _generic_flops(mlir_text):
    """Per linalg.generic of an input file: loop extents from its operand shapes and maps (NumPy
    shape arithmetic over the text, regexes only) x the arith/math lines of its body."""
    aliases = dict(re.findall(r"^(#\w+) = (affine_map<.*>)$", mlir_text, re.M))
    out = []
    for m in re.finditer(r"linalg\.generic \{indexing_maps = \[([^\]]*)\].*?ins\(([^)]*)\) outs\(([^)]*)\)"
                         r"(.*?)linalg\.yield", mlir_text, re.S):
        maps_text, ins, outs, body = m.groups()
        maps = [aliases.get(x.strip(), x.strip()) for x in maps_text.split(", ")]
        shapes = [[int(n) for n in t.rstrip("x").split("x")]
                  for t in re.findall(r"tensor<((?:\d+x)+)f32>", ins.split(" : ")[1] + outs.split(" : ")[1])]
        extents = {}
        for mp, shape in zip(maps, shapes, strict=True):
            dims, res = re.match(r"affine_map<\(([^)]*)\) -> \(([^)]*)\)>", mp).groups()
            extents.update(zip(res.split(", "), shape, strict=True))
        domain = [extents[d] for d in dims.split(", ")]
        ops = len(re.findall(r"= (?:arith|math)\.", body))
        out.append(int(np.prod(domain, dtype=np.int64)) * ops)
    return out


def test_einsum_catalog_flops_from_linalg(einsum_runs):
    fused = _generic_flops((EINSUM / "einsum_fused_small.mlir").read_text())
    split = _generic_flops((EINSUM / "einsum_split_small.mlir").read_text())
    # fused: 8 x 24 x 24 x 24 points (c, i, j, k) x 18 body ops; split: 2 producers of 24 x 24 x 8
    # points x 8 ops, then the reduction with 2 ops per point.
    assert fused == [8 * 24 * 24 * 24 * 18] and split == [24 * 24 * 8 * 8] * 2 + [8 * 24 ** 3 * 2]
    (k,) = einsum_runs["fused_small"][1]["kernels"]
    assert k["flops"] == fused[0]
    ks = {kk["name"]: kk for kk in einsum_runs["split_small"][1]["kernels"]}
    ew = next(kk for n, kk in ks.items() if "elementwise" in n)
    mm = next(kk for n, kk in ks.items() if "matmul_like" in n)
    assert len(ew["source_ops"]) == 2  # one executable serves both producers (dedup)
    assert ew["flops"] == split[0] and mm["flops"] == split[2]


def test_exp_evaluations_are_the_sources_iteration_spaces_times_their_exps(einsum_runs):
    """The catalog's evaluations: the fused dispatch's math.exp lines (read with a regex from the
    input file) at every point of its (c, i, j, k) domain; the split form's producers once per
    element of their (i, k, c) domain (one executable serving both: each launch counts once)."""
    text = (EINSUM / "einsum_fused_small.mlir").read_text()
    exps = len(re.findall(r"= math\.exp ", text))
    (k,) = einsum_runs["fused_small"][1]["kernels"]
    assert exps == 2 and k["evaluations"] == {"exp": exps * 8 * 24 * 24 * 24}
    ks = {kk["name"]: kk for kk in einsum_runs["split_small"][1]["kernels"]}
    ew = next(kk for n, kk in ks.items() if "elementwise" in n)
    mm = next(kk for n, kk in ks.items() if "matmul_like" in n)
    assert ew["evaluations"] == {"exp": 24 * 24 * 8} and mm["evaluations"] == {}


def test_recomputation_across_sources_is_claimed_by_evaluations_not_by_flops(einsum_runs, tmp_path):
    """The two einsum variants compile different sources (the thread's fused generic written out
    against the split producers): their kernels share no source op, so the unit is joined by
    elimination. Flops alone (6.75x, the MLIR text's own arithmetic below) are no evidence that
    the fused kernel computes what the two kernels compute; how often each side evaluates exp for
    the same outputs is: the finding rests on the evaluations, counted from the IR, never on flops."""
    import subprocess
    import sys

    (d_split, _, p_split), (d_fused, m_fused, p_fused) = einsum_runs["split_small"], einsum_runs["fused_small"]
    calls = 12  # each profile's calls (the fixture's): a one-dispatch call has no sequence to split by
    r = subprocess.run([sys.executable, "-m", "rootcause", "compare", str(p_split), str(p_fused),
                        "--catalog-a", str(d_split), "--catalog-b", str(d_fused), "--calls", str(calls),
                        "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    att = json.loads((tmp_path / "attribution.json").read_text())
    fused_name = m_fused["kernels"][0]["name"]
    unit = next(u for u in att["units"] if fused_name in u["kernels_b"])
    assert unit["method"] == "remainder" and len(unit["kernels_a"]) == 2 and unit["significant"]
    (found,) = [f for f in unit["findings"] if f["rule"] == "recomputation"]
    assert found["evidence"]["metric"] == "evaluations of exp" and "arithmetic" not in found["sentence"]
    # exp per call from the MLIR text: the fused generic's two exps at every (c, i, j, k); the split
    # producers' one exp per element, launched as often as the raw iree-profile JSONL counts them
    rows = [json.loads(x) for x in p_split.read_text().splitlines() if '"host_dispatch_event"' in x]
    per_call = {k: sum(r["key"] == k for r in rows) / calls for k in {r["key"] for r in rows}}
    producer_launches = sum(n for k, n in per_call.items() if "elementwise" in k)
    assert found["evidence"]["einsum-split-small"] == producer_launches * 24 * 24 * 8 == 2 * 24 * 24 * 8
    assert found["evidence"]["einsum-fused-small"] == 2 * 8 * 24 ** 3
    fused_flops = _generic_flops((EINSUM / "einsum_fused_small.mlir").read_text())[0]
    ew, mm = [24 * 24 * 8 * 8, 8 * 24 ** 3 * 2]
    split_flops = sum(n * (ew if "elementwise" in k else mm) for k, n in per_call.items())
    assert split_flops == 2 * ew + mm and fused_flops / split_flops > 6


def test_a_last_wave_that_is_whole_is_said_full():
    """A grid of exactly two waves of resident blocks (the construction: blocks = 2 x the
    occupancy's blocks per SM x the H200's SMs) has a last wave 100% full, not 0%."""
    import pandas as pd

    from rootcause import gpus
    from rootcause.analysis import diagnose
    from rootcause.analysis.rules.common import resident_waves

    arch, sms = gpus.DEVICES["H200"]
    per_sm = gpus.occupancy(arch, 256, 32, 0).active_blocks
    row = pd.Series({"grid": (2 * per_sm * sms, 1, 1), "block": (256, 1, 1), "registers": 32.0, "shared_bytes": 0.0})
    side = diagnose.Side("B", pd.DataFrame(), {}, {}, None, "H200", arch, sms)
    waves = resident_waves(side, row)
    assert waves["waves"] == 2 and waves["tail"] == 1.0
