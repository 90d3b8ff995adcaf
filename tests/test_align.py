"""Alignment on the real H200 CUPTI capture of the pool_fusion case (pool_fusion ON and OFF), and the
name rules on real compiler symbol names."""
import pandas as pd
import pytest

from captures import build_prefill, pool_segments, raw_records
from rootcause.analysis.align import align, call_site_ops
from rootcause.frontends.iree.alignment import dispatch_key, normalize_op
from rootcause.frontends.tvm.alignment import fused_ops


@pytest.fixture(scope="module")
def variants():
    """(OFF, ON) events: the capture's two call segments, told apart by the fused kernel."""
    return pool_segments()


@pytest.fixture(scope="module")
def raw():
    return raw_records()


def test_every_launched_kernel_in_exactly_one_unit(variants, raw):
    off, on = variants
    al = align(off, on)
    # The capture's own records: first 60 are ON (PROVENANCE.md), the rest OFF.
    names_on = {r["name"] for r in raw[:60]}
    names_off = {r["name"] for r in raw[60:]}
    got_a = [k for ks in al.units.kernels_a for k in ks]
    got_b = [k for ks in al.units.kernels_b for k in ks]
    assert sorted(got_a) == sorted(names_off) and len(got_a) == len(set(got_a))
    assert sorted(got_b) == sorted(names_on) and len(got_b) == len(set(got_b))


def test_fused_pool_unit_covers_pool2d_and_add2(variants):
    off, on = variants
    al = align(off, on)
    unit = al.units[al.units.kernels_b.map(lambda ks: "fused_pool2d_add2_kernel" in ks)].iloc[0]
    # OFF's add2_kernel computes lv17 (fused into the pool kernel in ON) and lv18 (ON's add2).
    assert set(unit.kernels_a) == {"pool2d_kernel", "add2_kernel"}
    assert set(unit.kernels_b) == {"fused_pool2d_add2_kernel", "add2_kernel"}
    assert unit.method == "fused-name" and not unit.flagged
    prelude = al.units[al.units.kernels_b.map(lambda ks: any(k.startswith("fused_add") for k in ks))].iloc[0]
    assert set(prelude.kernels_a) == {"add_kernel", "concatenate_kernel", "add1_kernel", "concatenate1_kernel"}
    assert len(al.units) == 2


def test_fused_name_split_keeps_underscored_ops():
    vocab = {"layer_norm", "add", "pool2d", "add2"}
    assert fused_ops("fused_layer_norm_add_kernel", vocab) == ["layer_norm", "add"]
    assert fused_ops("fused_pool2d_add2_kernel", vocab) == ["pool2d", "add2"]
    assert fused_ops("pool2d_kernel", vocab) == ["pool2d"]
    assert fused_ops("fused_mystery_op_kernel", vocab) == ["mystery", "op"]


def test_unmatched_kernels_are_flagged(variants):
    off, on = variants
    only = off[off.kernel == "concatenate1_kernel"].assign(kernel="library_gemm_kernel")
    al = align(pd.concat([off, only]), on)
    row = al.units[al.units.kernels_a.map(lambda ks: "library_gemm_kernel" in ks)].iloc[0]
    assert row.flagged and row.kernels_b == () and row.method == "unmatched"


def test_shape_fallback_matches_unique_work_size(variants):
    off, on = variants
    # Rename ON's prelude kernel so no name rule can match: its 576 x 1024 launch is unique
    # among the leftovers only once OFF's concatenate1_kernel (also 576 x 1024) is the one left.
    on2 = on.assign(kernel=on.kernel.where(~on.kernel.str.startswith("fused_add"), "opaque_kernel"))
    off2 = off[off.kernel.isin(["concatenate1_kernel", "pool2d_kernel", "add2_kernel"])]
    al = align(off2, on2)
    row = al.units[al.units.kernels_b.map(lambda ks: "opaque_kernel" in ks)].iloc[0]
    assert row.kernels_a == ("concatenate1_kernel",) and row.method == "shape" and row.flagged


def test_dispatch_key_and_op_normalisation():
    # CUDA launch symbols of iree-compile 3.13 ('$' becomes '_' in PTX), seen in its dumps.
    a = "prefill_bs2_async_dispatch_0_matmul_Dx131072x5120_f16xf16xf32"
    b = "prefill_bs8$async_dispatch_3_matmul_Dx131072x5120_f16xf16xf32"
    assert dispatch_key(a) == dispatch_key(b) == "matmul_Dx131072x5120_f16xf16xf32"
    assert normalize_op(f"prefill_bs8/{b}") == "prefill_bs8/matmul_Dx131072x5120_f16xf16xf32"
    assert normalize_op("main/lv16:pool2d") == "main/lv16:pool2d"


@pytest.fixture(scope="module")
def prefill_catalogs(tmp_path_factory):
    """the prefill_dedup case built for real: prefill_bs8 alone and in the module with prefill_bs2 (IREE 3.13)."""
    return build_prefill(tmp_path_factory)


def test_dedup_executable_aligns_with_own_build_by_call_site(prefill_catalogs):
    """The deduplicated module runs prefill_bs2's executable for the bs8 call; split by call
    site it aligns with the bs8-only build's executable through provenance."""
    (alone, _), (dedup, _) = prefill_catalogs["alone"], prefill_catalogs["dedup"]
    shared = [k for k in dedup.kernels if "prefill_bs8" in k.call_sites]
    own = [k for k in alone.kernels if "prefill_bs8" in k.call_sites]
    assert len(shared) == 1 and len(own) == 1 and len(shared[0].call_sites) == 2
    # The launch list of one bs8 call in each module: the kernels the catalogs say it runs.
    launches = lambda ks: pd.DataFrame({"kernel": [k.name for k in ks], "start_ns": 0, "end_ns": 1,
                                        "duration_ns": 1, "call": 0})
    al = align(launches(shared), launches(own), dedup.kernels, alone.kernels, "prefill_bs8", "prefill_bs8")
    unit = al.units.iloc[0]
    assert len(al.units) == 1 and unit.method == "provenance"
    assert unit.kernels_a == (shared[0].name,) and unit.kernels_b == (own[0].name,)
    assert "prefill_bs2" in shared[0].name  # the bs2 executable serves the bs8 call
    k = al.kernels[al.kernels.kernel == shared[0].name].iloc[0]
    assert set(k.shared_call_sites) == {"prefill_bs2", "prefill_bs8"}
    assert call_site_ops(shared[0], "prefill_bs8") == [op for op in unit.source_ops]


def test_leftovers_of_both_sides_join_as_remainder():
    """the einsum_fusion case's IREE names (iree-compile 3.13, llvm-cpu, fixtures/cases/einsum_fusion): the
    fused 'reduction' dispatch shares no name, op or work size with 'elementwise' +
    'matmul_like', so only elimination pairs them; a kernel of one side alone stays flagged."""
    ev = lambda names, grids: pd.DataFrame({"kernel": names, "start_ns": range(len(names)),
                                            "end_ns": range(1, len(names) + 1), "duration_ns": 1,
                                            "call": 0, "grid_x": grids, "grid_y": 1, "grid_z": 1,
                                            "block_x": 1, "block_y": 1, "block_z": 1})
    split = ev(["main_dispatch_0_elementwise_24x24x8_f32", "main_dispatch_0_elementwise_24x24x8_f32",
                "main_dispatch_2_matmul_like_8x24x24x24_f32"], [1, 1, 8])
    fused = ev(["main_dispatch_0_reduction_8x24x24x24_f32"], [16])
    al = align(split, fused)
    (unit,) = al.units.itertuples()
    assert unit.method == "remainder" and not unit.flagged and len(unit.kernels_a) == 2
    assert any("by elimination" in n for n in al.notes)
    al = align(split, fused.iloc[:0])
    assert al.units.flagged.all() and set(al.units.method) == {"unmatched"}


def test_shape_tier_does_not_join_kernels_whose_bytes_are_far_apart(tmp_path):
    """iree_reduction_twostage for llvm (real iree-compile, the CPU profile of both variants): on the
    CPU the serial 4 x 8388608 reduction and the twostage's 4 x 512 combine launch the same number
    of workgroups, so their launch sizes match; their bytes (128 MiB against 8 KiB, from the input
    shapes) cannot be the same work. The serial dispatch must meet both twostage dispatches."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = root / "fixtures" / "zoo" / "iree_reduction_twostage" / "variants.toml"
    out = tmp_path / "o"
    r = subprocess.run([sys.executable, "-m", "rootcause", "analyze", f"{spec}#twostage", f"{spec}#serial",
                        "--target", "llvm", "--budget-s", "2", "--no-confirm", "--out", str(out)],
                       capture_output=True, text=True, cwd=root)
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "attribution.json").read_text())
    serial = "main_dispatch_0_reduction_4x8388608_f32"
    unit = next(u for u in doc["units"] if serial in u["kernels_b"])
    assert sorted(unit["kernels_a"]) == ["main_dispatch_0_reduction_2048x16384_f32", "main_dispatch_1_reduction_4x512_f32"]
    moved = {k["name"]: k["bytes_moved"] for v in "ab" for k in doc["catalogs"][v]["kernels"].values()}
    assert moved[serial] >= 4 * 8388608 * 4 and moved["main_dispatch_1_reduction_4x512_f32"] <= 4 * 512 * 4 + 16


@pytest.mark.parametrize("first_op, joined", [("aten::mm", True), ("aten::addmm", False)])
def test_cpu_op_tier_keys_a_kernel_by_its_most_frequent_op_the_first_on_a_tie(first_op, joined):
    """A's gemm is launched twice by aten::mm and twice by aten::addmm; B's differently named gemm
    only by aten::mm. The tie goes to the op that launched A's kernel first: when that is aten::mm
    the cpu-op tier joins the two gemms, when it is aten::addmm it cannot."""
    other = "aten::addmm" if first_op == "aten::mm" else "aten::mm"
    ev = lambda names, ops: pd.DataFrame({"kernel": names, "cpu_op": ops, "start_ns": range(len(names)),
                                          "end_ns": range(1, len(names) + 1), "duration_ns": 1})
    a = ev(["sm80_gemm_a"] * 4, [first_op, other, first_op, other])
    b = ev(["sm90_gemm_b"] * 2, ["aten::mm"] * 2)
    methods = set(align(a, b).kernels.method)
    assert (methods == {"cpu-op"}) == joined
