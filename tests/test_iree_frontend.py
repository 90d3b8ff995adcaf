"""rootcause.frontends.iree on the seed cases, with the real iree-compile (each build once).

Truth comes from outside the frontend: the dumped configured_*.mlir text (grepped here with
plain regexes), ptxas -v run here, docs/GPU_HOST.md's measured configs, tile arithmetic over the
shapes in the export names, and NumPy (reference.py) for the llvm build run on local-task.
"""
import dataclasses
import importlib.util
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from rootcause import spec as specs
from rootcause import cuda_tools
from rootcause.errors import UsageError
from rootcause.frontends.iree import build as iree
from rootcause.frontends.iree.compile import target_flags

CASES = Path(__file__).resolve().parent.parent / "fixtures" / "cases"
PREFILL = CASES / "prefill_dedup" / "variants.toml"
EINSUM = CASES / "einsum_fusion" / "variants.toml"


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    cache = {}

    def get(toml: Path, variant: str):
        key = (toml, variant)
        if key not in cache:
            spec = specs.load(f"{toml}#{variant}")
            out = tmp_path_factory.mktemp(f"{toml.parent.name}-{variant}")
            cache[key] = (iree.build(spec, out), out, spec)
        return cache[key]
    return get


def config_text(out: Path, kernel) -> str:
    return (out / kernel.schedule["config_file"]).read_text()


def grep_workgroup_tile(text: str) -> list[int]:
    """The workgroup = [...] inside the one lowering_config of a configured dump."""
    (cfg,) = re.findall(r"lowering_config = #iree_gpu\.lowering_config<\{(.*?)\}>", text)
    return [int(x) for x in re.search(r"\bworkgroup = \[([^\]]*)\]", cfg).group(1).split(",")]


# -- prefill dedup (seeds/001) -----------------------------------------------------------------

@pytest.mark.parametrize("alone, dedup", [("alone", "dedup"), ("alone_hip", "dedup_hip")])
def test_dedup_executable_serves_both_call_sites(built, alone, dedup):
    a_out, a_dir, _ = built(PREFILL, alone)
    d_out, d_dir, _ = built(PREFILL, dedup)
    (a,) = a_out.kernels
    (d,) = d_out.kernels
    assert d.call_sites == ["prefill_bs2", "prefill_bs8"]
    assert a.call_sites == ["prefill_bs8"]
    # the bs8 call site keeps its own pre-dedup dispatch name, so align can pair it with 'alone'
    bs8 = [s for s in d.source_ops if s.startswith("prefill_bs8/")]
    assert bs8 == a.source_ops
    assert d.function.startswith("prefill_bs2$async_dispatch")  # bs2's executable won
    # the dump itself says the executable serves both ranges (bs2: udiv 64, bs8: udiv 256)
    text = config_text(d_dir, d)
    assert re.search(r"util\.assume\.int %\w+\[<umin = 64, umax = \d+, udiv = 64>, <umin = 256,", text)
    tile_d, tile_a = grep_workgroup_tile(text), grep_workgroup_tile(config_text(a_dir, a))
    assert d.schedule["lowering_config"]["workgroup"] == tile_d
    assert a.schedule["lowering_config"]["workgroup"] == tile_a
    assert tile_d != tile_a
    for k, out in ((a, a_dir), (d, d_dir)):
        m = re.search(r"workgroup_size = \[(\d+), (\d+), (\d+)\] subgroup_size = (\d+)", config_text(out, k))
        assert k.schedule["workgroup_size"] == [int(m.group(i)) for i in (1, 2, 3)]
        assert k.schedule["subgroup_size"] == int(m.group(4))
        assert k.schedule["pipeline"] == re.search(r"pipeline<(\w+)>", config_text(out, k)).group(1)
        assert k.launch["block"] == k.schedule["workgroup_size"]
        assert k.launch["grid"] is None  # M is dynamic: the count is computed at run time
        assert k.bytes_moved is None


def test_prefill_cuda_configs_match_gpu_notes(built):
    # docs/GPU_HOST.md (H200 host, IREE 3.13 sm_80): dedup carries workgroup [1,64,32], subgroup
    # [0,2,2,0]; the bs8-only build picks [1,64,64], [0,2,4,0].
    (a,) = built(PREFILL, "alone")[0].kernels
    (d,) = built(PREFILL, "dedup")[0].kernels
    assert d.schedule["lowering_config"]["workgroup"][:3] == [1, 64, 32]
    assert d.schedule["lowering_config"]["subgroup"] == [0, 2, 2, 0]
    assert a.schedule["lowering_config"]["workgroup"][:3] == [1, 64, 64]
    assert a.schedule["lowering_config"]["subgroup"] == [0, 2, 4, 0]
    assert d.schedule["lowering_config"]["mma_kind"] == re.search(
        r"mma_kind = #iree_gpu\.mma_layout<(\w+)>", config_text(built(PREFILL, "dedup")[1], d)).group(1)


def test_prefill_cuda_resources_match_ptxas(built):
    out, out_dir, spec = built(PREFILL, "alone")
    (k,) = out.kernels
    ptx = out_dir / k.schedule["binary"]
    assert ptx.suffix == ".ptx" and f".entry {k.name}(" in ptx.read_text()
    log = subprocess.run([str(cuda_tools.require_tool("ptxas")), "-v", "-arch=sm_80", str(ptx), "-o", "/dev/null"],
                         capture_output=True, text=True).stderr
    assert k.resources["registers"] == int(re.search(r"Used (\d+) registers", log).group(1))
    assert "ptxas" in out.versions and "iree-compiler" in out.versions


def test_prefill_hip_resources_from_hsaco(built):
    out, out_dir, _ = built(PREFILL, "dedup_hip")
    (k,) = out.kernels
    assert k.schedule["binary"].endswith(".hsaco")
    assert k.resources["arch"] == "gfx942" and k.resources["name"] == k.name
    # the kernel's LDS holds both promoted operand tiles: (M x K + K x N) f16 per workgroup
    wg, red = k.schedule["lowering_config"]["workgroup"], k.schedule["lowering_config"]["reduction"]
    assert k.resources["shared_bytes"] >= (wg[1] * red[3] + red[3] * wg[2]) * 2


# -- einsum fusion (seeds/002) -----------------------------------------------------------------

def n_dispatches(kernels) -> int:
    return sum(len(k.source_ops) for k in kernels)


def test_einsum_fused_is_one_dispatch_with_reduction_and_sigmoid(built):
    out, out_dir, _ = built(EINSUM, "fused")
    (k,) = out.kernels
    text = config_text(out_dir, k)
    generics = re.findall(r"linalg\.generic \{indexing_maps = .*?iterator_types = \[([^\]]*)\]", text)
    assert any('"reduction"' in g for g in generics)
    assert text.count("math.exp") == 2  # both sigmoid gates recomputed inside the reduction
    assert k.source_ops == ["main/" + k.function] and k.call_sites == ["main"]
    # static grid = product over parallel loops of ceil(extent / workgroup tile)
    dims = [int(x) for x in re.search(r"_(\d+(?:x\d+)+)_f32$", k.function).group(1).split("x")]
    tile = grep_workgroup_tile(text)
    want = math.prod(math.ceil(d / t) for d, t in zip(dims, tile) if t)
    assert k.launch["grid"] == [want, 1, 1]
    # every operand once: mask, 4 projections, 4 biases, the output (f32)
    n, c = 702, 128
    sizes = [np.zeros((n, n), np.float32).nbytes] + [np.zeros((n, n, c), np.float32).nbytes] * 4 + \
        [np.zeros(c, np.float32).nbytes] * 4 + [np.zeros((c, n, n), np.float32).nbytes]
    assert k.bytes_moved == sum(sizes)


@pytest.mark.parametrize("variant", ["unfused", "split"])
def test_einsum_producers_stay_out_of_the_reduction(built, variant):
    out, out_dir, _ = built(EINSUM, variant)
    assert len(out.kernels) == 2 and n_dispatches(out.kernels) == 3
    reduction = [k for k in out.kernels if '"reduction"' in config_text(out_dir, k)]
    (red,) = reduction
    assert "math.exp" not in config_text(out_dir, red)
    (ew,) = [k for k in out.kernels if k is not red]
    assert config_text(out_dir, ew).count("math.exp") == 1
    # both producers were deduplicated into one executable; each call site keeps its own name
    assert sorted(s.split("_dispatch_")[1][0] for s in ew.source_ops) == ["0", "1"]
    assert len(ew.launch["grids"]["main"]) == 2


@pytest.mark.parametrize("variant", ["fused_small", "unfused_small", "split_small"])
def test_einsum_llvm_build_matches_numpy(built, variant):
    import iree.runtime as rt

    out, out_dir, spec = built(EINSUM, variant)
    assert out.kernels and all(k.schedule["pipeline"] == "DoubleTilingExpert" for k in out.kernels)
    rng_inputs = []
    for i in spec.inputs:
        rng = np.random.default_rng(i.seed)
        x = rng.uniform(i.low, i.high, i.shape) if i.distribution == "uniform" else rng.normal(i.mean, i.std, i.shape)
        rng_inputs.append(x.astype(i.dtype))
    module = rt.load_vm_flatbuffer(out.module_path.read_bytes(), driver="local-task")
    got = np.asarray(module.main(*rng_inputs))
    ref_spec = importlib.util.spec_from_file_location("einsum_reference", spec.reference.file)
    ref = importlib.util.module_from_spec(ref_spec)
    ref_spec.loader.exec_module(ref)
    want = getattr(ref, spec.reference.function)(*rng_inputs)
    assert got.shape == want.shape == (8, 24, 24)
    np.testing.assert_allclose(got, want, rtol=spec.reference.rtol, atol=spec.reference.atol)


# -- bad input -------------------------------------------------------------------------------

def test_bad_mlir_is_one_line(tmp_path, built):
    _, _, spec = built(EINSUM, "fused_small")
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @main() {\n  %0 = arith.constant 1 : i32\n  return %0\n}\n")
    with pytest.raises(UsageError) as err:
        iree.build(dataclasses.replace(spec, source=bad), tmp_path / "out")
    msg = str(err.value)
    assert "\n" not in msg and "bad.mlir" in msg and "error:" in msg


@pytest.mark.parametrize("target", ["auto", "cuda", "metal:apple"])
def test_unsupported_target(target):
    with pytest.raises(UsageError, match="IREE frontend needs"):
        target_flags(target)


# -- arithmetic work (rootcause.frontends.iree.linalg) -------------------------------------------------------

def test_linalg_work_dynamic_and_bad_input(built):
    from parsers import ParseError
    from rootcause.frontends.iree import linalg

    out, out_dir, _ = built(PREFILL, "alone")
    (k,) = out.kernels
    text = (out_dir / "ir" / f"module_{k.schedule['executable']}.mlir").read_text()
    # torch input with a symbolic sequence length: the matmul's M is '?', so no flops, and why
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "= linalg.matmul" in row)
    assert "tensor<?x5120xf16>" in text.splitlines()[line - 1]
    assert k.flops is None
    assert any("flops not counted" in n and f"linalg.matmul (line {line}): dynamic (?)" in n for n in out.notes)
    with pytest.raises(ParseError) as err:
        linalg.work("%1 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = "
                    "[\"parallel\"]} ins(%a : tensor<4xf32>) outs(%b : tensor<4xf32>) {\n"
                    "^bb0(%x: f32, %y: f32):\n", "cut.mlir")
    assert str(err.value).startswith("cut.mlir: line 1:") and "not closed" in str(err.value)
    with pytest.raises(ParseError, match="loop d0 is 4 in one operand, 5 in another"):
        linalg.work("%1 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], "
                    "iterator_types = [\"parallel\"]} ins(%a : tensor<4xf32>) outs(%b : tensor<5xf32>) {\n"
                    "^bb0(%x: f32, %y: f32):\n  linalg.yield %x : f32\n} -> tensor<5xf32>\n", "bad.mlir")


def test_einsum_flops_at_gpu_size(built):
    """seeds/002 at N=702, C=128 for cuda:sm_80: the fused dispatch does c x i x j x k =
    128 x 702^3 points x its body's ops; split: 2 producers of 702 x 702 x 128 points (one
    deduplicated executable) and a 2-op reduction over the same 128 x 702^3 domain."""
    text = (EINSUM.parent / "einsum_fused_702.mlir").read_text()
    n = int(re.search(r"%0: tensor<(\d+)x\1xf32>", text).group(1))
    c = int(re.search(r"%2: tensor<(\d+)xf32>", text).group(1))
    body = text.split("^bb0")[1].split("linalg.yield")[0]
    ops = len(re.findall(r"= (?:arith|math)\.", body))
    assert (n, c, ops) == (702, 128, 18)
    (fused,) = built(EINSUM, "fused")[0].kernels
    assert fused.flops == c * n ** 3 * ops
    split = {("matmul" if "matmul_like" in k.name else "ew"): k for k in built(EINSUM, "split")[0].kernels}
    assert split["ew"].flops == n * n * c * 8 and len(split["ew"].source_ops) == 2
    assert split["matmul"].flops == c * n ** 3 * 2
    assert fused.flops / (2 * split["ew"].flops + split["matmul"].flops) > 8.8  # recomputation, ~8.9x
