"""TVM frontend on the pool_fusion seed case (seeds/000): real TVM 0.27, real nvcc/ptxas.

Every variant is built once per session (through rootcause.build, cache in the session's
temp dir) for llvm and cuda:sm_90. Catalog facts are checked against sources the catalog code
does not produce: the IR dumps' text, cuobjdump --dump-resource-usage on the extracted
fatbin, and the CUPTI capture recorded on the H200 (fixtures/captures/h200-2026-12-02).
"""
import json
import math
import os
import re
import subprocess
from pathlib import Path

import pytest

from rootcause import spec as spec_mod
from rootcause.build import build_bundle
from rootcause.errors import UsageError
from rootcause.cuda_tools import find_tool

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "fixtures" / "cases" / "pool_fusion"
CUPTI = ROOT / "fixtures" / "captures" / "h200-2026-12-02" / "tvm_pool_fusion.cupti.json"
VARIANTS = ("off", "partial", "on", "serial")


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    path = tmp_path_factory.getbasetemp() / "rootcause-cache"
    old = os.environ.get("ROOTCAUSE_CACHE")
    os.environ["ROOTCAUSE_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("ROOTCAUSE_CACHE", None)
    else:
        os.environ["ROOTCAUSE_CACHE"] = old


@pytest.fixture(scope="session")
def bundles(cache, tmp_path_factory):
    """(variant, target) -> (manifest, bundle dir), built lazily once per session."""
    built = {}

    def get(variant, target):
        if (variant, target) not in built:
            spec = spec_mod.with_target(spec_mod.load(f"{CASE / 'variants.toml'}#{variant}"), target)
            out = tmp_path_factory.getbasetemp() / "bundles" / f"{variant}-{target.replace(':', '_')}"
            build_bundle(spec, out)
            built[variant, target] = (json.loads((out / "manifest.json").read_text()), out)
        return built[variant, target]

    return get


def by_function(manifest):
    return {k["function"]: k for k in manifest["kernels"]}


def input_ops(bundle_dir):
    """call_tir bindings of the input module, read from the saved IR text."""
    text = (bundle_dir / "ir" / "00_input.py").read_text()
    return {f"main/{var}:{callee}" for var, callee in re.findall(r"(\w+) = R\.call_tir\(cls\.(\w+),", text)}


def cuobjdump_resources(path):
    tool = find_tool("cuobjdump")
    out = subprocess.run([str(tool), "--dump-resource-usage", str(path)], capture_output=True, text=True,
                         check=True).stdout
    return {m[0]: {"REG": int(m[1]), "SHARED": int(m[2]), "LOCAL": int(m[3])}
            for m in re.findall(r"Function (\S+):\s+REG:(\d+) STACK:\d+ SHARED:(\d+) LOCAL:(\d+)", out)}


def cupti_launches():
    rows = json.loads(CUPTI.read_text())
    return {r["name"]: r for r in rows}


@pytest.mark.parametrize("target", ["llvm", "cuda:sm_90"])
@pytest.mark.parametrize("variant", ["off", "partial", "on"])
def test_provenance_covers_every_input_op_once(bundles, variant, target):
    manifest, path = bundles(variant, target)
    ops = [op for k in manifest["kernels"] for op in k["source_ops"]]
    assert len(ops) == len(set(ops))
    assert set(ops) == input_ops(path) and len(ops) == 19


def test_on_sm90_fuses_pool_with_add_under_general_reduction(bundles):
    manifest, path = bundles("on", "cuda:sm_90")
    fused = [k for k in manifest["kernels"] if "main/lv16:pool2d" in k["source_ops"]]
    assert len(fused) == 1
    k = fused[0]
    assert any(op.endswith(":add2") for op in k["source_ops"])
    assert k["name"] == "fused_pool2d_add2_kernel" and k["function"] == "fused_pool2d_add2"
    assert k["launch"]["grid"] == [147456, 1, 1] and k["launch"]["block"] == [256, 1, 1]
    assert k["schedule"]["rule"] == "GeneralReduction" and k["schedule"]["rule_verified"] is True
    assert k["schedule"]["shared_allocs"]
    # The scheduled IR the real pass wrote says the same.
    sched = (path / "ir" / "08_ApplyDefaultSchedule.py").read_text()
    body = sched[sched.index("def fused_pool2d_add2("):]
    body = body[:body.index("\n    @", 1)]
    assert 'T.thread_binding(T.int64(147456), thread="blockIdx.x")' in body and 'scope="shared"' in body
    # And the cubin: shared memory used (cuobjdump counts sm_90's 1 KB reserved block too),
    # registers as cuobjdump reads them, static shared bytes as CUPTI saw them on the H200.
    cubin = cuobjdump_resources(path / "binaries" / "module.fatbin")[k["name"]]
    assert cubin["SHARED"] > 0 and k["resources"]["registers"] == cubin["REG"]
    assert k["resources"]["shared_bytes"] == cupti_launches()[k["name"]]["static_shared_memory"] == 132
    assert k["resources"]["file"] == "binaries/module.sm_90.cubin"


def test_off_keeps_pool_alone(bundles):
    manifest, path = bundles("off", "cuda:sm_90")
    funcs = by_function(manifest)
    assert "fused_pool2d_add2" not in funcs
    assert funcs["pool2d"]["source_ops"] == ["main/lv16:pool2d"]
    assert funcs["pool2d"]["launch"]["grid"] == [144, 1, 1] and funcs["pool2d"]["launch"]["block"] == [1024, 1, 1]
    assert sorted(funcs["add"]["source_ops"]) == sorted(f"main/lv{i}:add" for i in (0, 1, 2, 5, 6, 7, 10, 11, 12)
                                                       ) or len(funcs["add"]["source_ops"]) == 9
    for k in manifest["kernels"]:  # one callee per kernel: nothing fused
        assert len({op.split(":")[1] for op in k["source_ops"]}) == 1


def test_partial_splits_pool_from_add(bundles):
    manifest, _ = bundles("partial", "cuda:sm_90")
    funcs = by_function(manifest)
    assert funcs["pool2d"]["source_ops"] == ["main/lv16:pool2d"]
    assert sorted(funcs["add2"]["source_ops"]) == ["main/lv17:add2", "main/lv18:add2"]
    assert not any("pool2d" in f and "add2" in f for f in funcs)
    # the upstream adds and concats stay fused, as in the seed's PARTIAL
    assert any(len(k["source_ops"]) == 16 for k in manifest["kernels"])


def test_serial_replaces_only_the_fused_function(bundles):
    manifest, path = bundles("serial", "cuda:sm_90")
    on, _ = bundles("on", "cuda:sm_90")
    k = by_function(manifest)["fused_pool2d_add2"]
    assert k["schedule"]["rule"] == "override" and k["schedule"]["shared_allocs"] == []
    assert k["launch"]["grid"] == [576, 1, 1] and k["launch"]["block"] == [256, 1, 1]
    assert cuobjdump_resources(path / "binaries" / "module.fatbin")[k["name"]]["SHARED"] == 0
    assert k["source_ops"] == by_function(on)["fused_pool2d_add2"]["source_ops"]
    others = {f: (v["launch"], v["schedule"]) for f, v in by_function(manifest).items() if f != "fused_pool2d_add2"}
    assert others == {f: (v["launch"], v["schedule"]) for f, v in by_function(on).items() if f != "fused_pool2d_add2"}


@pytest.mark.parametrize("variant", ["off", "on"])
def test_launch_configs_match_the_h200_cupti_capture(bundles, variant):
    manifest, path = bundles(variant, "cuda:sm_90")
    seen = cupti_launches()
    checked = 0
    for k in manifest["kernels"]:
        if k["name"] in seen:
            r = seen[k["name"]]
            assert k["launch"]["grid"] == [r["grid_x"], r["grid_y"], r["grid_z"]], k["name"]
            assert k["launch"]["block"] == [r["block_x"], r["block_y"], r["block_z"]], k["name"]
            checked += 1
    assert checked == len(manifest["kernels"])  # every kernel of off and on ran on the H200
    if variant == "on":  # registers and static shared memory of the fused kernel, as CUPTI saw them
        fused = cupti_launches()["fused_pool2d_add2_kernel"]
        res = cuobjdump_resources(path / "binaries" / "module.fatbin")["fused_pool2d_add2_kernel"]
        assert res["REG"] == fused["registers_per_thread"]
        # cuobjdump's SHARED includes the 1 KB sm_90 reserves per block; CUPTI's static count does not
        assert res["SHARED"] - 1024 == fused["static_shared_memory"]


def test_rules_are_verified_against_the_real_pass(bundles):
    for variant in ("off", "partial", "on"):
        manifest, _ = bundles(variant, "cuda:sm_90")
        for k in manifest["kernels"]:
            assert k["schedule"]["rule"] in ("Fallback", "GeneralReduction", "Reduction") and \
                k["schedule"]["rule_verified"], k["name"]


def test_bytes_moved_is_the_sum_of_parameter_buffers(bundles):
    manifest, _ = bundles("on", "cuda:sm_90")
    # fused_pool2d_add2(lv15 [1,144,64,64] f32, param_0 [] f32, out [1,144,32,32] f32)
    assert by_function(manifest)["fused_pool2d_add2"]["bytes_moved"] == 4 * (144 * 64 * 64 + 1 + 144 * 32 * 32)


def _bad(tmp_path, tvm_table, target="llvm"):
    text = (CASE / "variants.toml").read_text()
    text = text.replace('source = "graph_tvmscript.py"', f'source = "{CASE / "graph_tvmscript.py"}"\n'
                        'allow_outside_paths = true')
    text = text.replace('python = "reference.py:reference"', f'python = "{CASE / "reference.py"}:reference"')
    text += f"\n[variants.bad.tvm]\n{tvm_table}\n"
    path = tmp_path / "bad.toml"
    path.write_text(text)
    s = spec_mod.with_target(spec_mod.load(f"{path}#bad"), target)
    from rootcause.frontends.tvm import build as frontend
    with pytest.raises(UsageError) as err:
        frontend.build(s, tmp_path / "out")
    return str(err.value)


def test_unknown_pass_lists_the_real_pipeline(tmp_path):
    msg = _bad(tmp_path, 'skip_passes = ["FuseOps", "FuseOp"]')
    assert msg.startswith('bad.toml: [variants.bad.tvm].skip_passes[1]: unknown pass "FuseOp"')
    assert "valid: DispatchSampling, DispatchSortScan, LegalizeOps" in msg and "FuseTIR" in msg


def test_override_of_a_missing_function_lists_functions(tmp_path):
    msg = _bad(tmp_path, f'schedule_overrides = {{ fused_pool2d = "{CASE / "serial_kernel.py"}" }}', "cuda:sm_90")
    assert 'no function "fused_pool2d" after fusion; functions: add2, fused_add_add_add' in msg
    assert "fused_pool2d_add2" in msg


def test_override_with_wrong_parameters_is_refused(tmp_path):
    msg = _bad(tmp_path, f'schedule_overrides = {{ add2 = "{CASE / "serial_kernel.py"}" }}', "cuda:sm_90")
    assert "[variants.bad.tvm].schedule_overrides.add2: parameters of serial_kernel.py" in msg
    assert "float32[1, 144, 64, 64]" in msg and "float32[1, 144, 32, 32]" in msg


def test_boundary_after_a_missing_op_lists_callees(tmp_path):
    msg = _bad(tmp_path, 'dataflow_boundaries_after = ["pool3d"]')
    assert msg == ('bad.toml: [variants.bad.tvm].dataflow_boundaries_after[0]: no call_tir of "pool3d" in main; '
                   'callees: add, add1, add2, concatenate, concatenate1, pool2d')


# -- arithmetic work (flops) ----------------------------------------------------------------

_OPS_IN_TEXT = re.compile(r" [-+*/] |\bT\.(?:max|min|exp|sigmoid|tanh|sqrt)\(")


def text_flops(ir_text):
    """PrimFunc -> flops counted on TVMScript text alone: per store line, the arithmetic tokens
    left once the [index] expressions and if_then_else conditions are cut out, x the product of
    its T.grid extents. Init stores (inside `with T.init():`) do no arithmetic."""
    out, fn, trip, after_init = {}, None, None, False
    for line in ir_text.splitlines():
        m = re.match(r"\s+def (\w+)\(", line)
        if m:
            fn, trip = m.group(1), None
            out[fn] = 0
            continue
        grid = re.search(r"in T\.grid\((.*)\):", line)
        if grid:
            trip = math.prod(int(x) for x in re.findall(r"T\.int64\((\d+)\)", grid.group(1)))
        store = re.match(r"\s+\w+\[[^\]]*\] = (.*)$", line)
        if fn and store and trip and not after_init:
            rhs = store.group(1)
            while re.search(r"\[[^\[\]]*\]", rhs):
                rhs = re.sub(r"\[[^\[\]]*\]", "", rhs)
            rhs = re.sub(r"T\.if_then_else\([^,]*,", "(", rhs)
            out[fn] += trip * len(_OPS_IN_TEXT.findall(rhs))
        after_init = "with T.init():" in line
    return out


@pytest.mark.parametrize("variant", ["off", "on"])
def test_flops_from_tir_loop_extents(bundles, variant):
    """Each kernel's flops = the work of the input PrimFuncs it covers (source_ops callees),
    counted on the input IR text: pool2d 144x32x32 outputs x 2x2 window x 1 max, add 1 op/element,
    concatenate none."""
    manifest, path = bundles(variant, "llvm")
    per_op = text_flops((path / "ir" / "00_input.py").read_text())
    assert per_op["pool2d"] == 144 * 32 * 32 * 2 * 2 and per_op["add"] == 16 * 64 * 64
    assert per_op["concatenate"] == 0 and per_op["add1"] == 48 * 64 * 64
    for k in manifest["kernels"]:
        callees = [op.split(":")[1] for op in k["source_ops"]]
        if variant == "off":  # one kernel per input PrimFunc, launched once per source op
            assert k["flops"] == per_op[k["function"]]
        else:  # a fused kernel does its ops' work once each (no recomputation in the pool_fusion case)
            assert k["flops"] == sum(per_op[c] for c in callees)


def test_flops_of_matmul_and_elementwise(tmp_path):
    """A Relax matmul + exp + add legalized and fused by TVM: 2*M*N*K + M*N + M*N."""
    from rootcause.frontends.tvm import build as frontend

    m, n, k = 32, 16, 64
    (tmp_path / "mm.py").write_text(f'''from tvm.script import ir as I, relax as R
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(({m}, {k}), "float32"), w: R.Tensor(({k}, {n}), "float32")) -> R.Tensor(({m}, {n}), "float32"):
        with R.dataflow():
            y = R.matmul(x, w)
            z = R.exp(y)
            o = R.add(z, R.const(1, "float32"))
            R.output(o)
        return o
''')
    (tmp_path / "mm.toml").write_text(f'''name = "mm"
frontend = "tvm"
source = "mm.py"
target = "llvm"
entry = "main"
[[inputs]]
shape = [{m}, {k}]
dtype = "float32"
[[inputs]]
shape = [{k}, {n}]
dtype = "float32"
''')
    out = frontend.build(spec_mod.load(str(tmp_path / "mm.toml")), tmp_path / "out")
    assert sum(kk.flops for kk in out.kernels) == 2 * m * n * k + 2 * m * n
    fused = [kk for kk in out.kernels if "matmul" in kk.function]
    assert len(fused) == 1 and fused[0].flops >= 2 * m * n * k


@pytest.mark.parametrize("n, m", [(64, 32), (3, 5)])
@pytest.mark.slow
def test_flops_count_the_recomputation_scheduling_creates(tmp_path, n, m):
    """apache/tvm#20342's graph, small: z = exp(x - 0.5 z) DEPTH times on x [N, 1], then b [N, M] + z.
    Built for CUDA, DLight inlines the fused chain into the broadcast add, so every one of the
    N*M outputs recomputes it: N*M*(3*DEPTH + 1) flops (mul, sub, exp per step, one add), where
    the same chain kept in its own kernel (a dataflow boundary after its last exp) does
    N*3*DEPTH and the add N*M. Counted here by hand from the graph, not from the catalog code.
    3 x 5 outputs pad the kernels' thread loops (T.where): padding is no work."""
    from rootcause.frontends.tvm import build as frontend

    depth = 4
    (tmp_path / "graph.py").write_text(f'''from tvm import relax
from tvm.script import relax as R


def make_module():
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor(({n}, 1), "float32"))
    b = relax.Var("b", R.Tensor(({n}, {m}), "float32"))
    half = relax.const(0.5, "float32")
    with bb.function("main", [x, b]):
        with bb.dataflow():
            z = x
            for i in range({depth}):
                z = bb.emit(relax.op.exp(relax.op.subtract(x, relax.op.multiply(half, z))),
                            name_hint="chain" if i == {depth} - 1 else "")
            y = bb.emit_output(relax.op.add(b, z))
        bb.emit_func_output(y)
    return relax.transform.LegalizeOps()(bb.get())
''')
    (tmp_path / "v.toml").write_text(f'''[base]
name = "chain"
frontend = "tvm"
source = "graph.py"
target = "cuda:sm_90"
entry = "main"
[[base.inputs]]
shape = [{n}, 1]
dtype = "float32"
[[base.inputs]]
shape = [{n}, {m}]
dtype = "float32"
[variants.on]
name = "chain-on"
[variants.partial]
name = "chain-partial"
[variants.partial.tvm]
dataflow_boundaries_after = ["chain"]
''')
    on = frontend.build(spec_mod.load(f"{tmp_path / 'v.toml'}#on"), tmp_path / "on")
    partial = frontend.build(spec_mod.load(f"{tmp_path / 'v.toml'}#partial"), tmp_path / "partial")
    (fused,) = on.kernels
    assert fused.flops == n * m * (3 * depth + 1)
    by_role = {("add" if k.function == "add" else "chain"): k.flops for k in partial.kernels}
    assert by_role == {"chain": n * 3 * depth, "add": n * m}


def test_boundaries_after_two_bindings_split_at_both(tmp_path):
    """The zoo's tvm_softmax_unfused: splitting `fused_matmul_multiply_add` back needs boundaries
    after two bindings in a row (its H200 capture's plan). The second was once lost, because the
    first split rebuilt the binding it named: the hybrid ran matmul + fused_multiply_add. Truth:
    the unfused side's own kernels for those ops, from its own build."""
    from rootcause.frontends.tvm import build as frontend
    from rootcause.model import Hybrid

    case = ROOT / "fixtures" / "zoo" / "tvm_softmax_unfused"
    plan = json.loads((case / "capture" / "analyze" / "plan.json").read_text())
    (h,) = [Hybrid.from_dict(d) for d in plan["hybrids"] if "matmul_multiply_add" in d["description"]]
    assert len(h.spec.options.dataflow_boundaries_after) == 2
    hybrid = frontend.build(spec_mod.with_target(h.spec, "llvm"), tmp_path / "h")
    off = frontend.build(spec_mod.with_target(spec_mod.load(f"{case / 'variants.toml'}#off"), "llvm"), tmp_path / "off")
    owner = {op: k.function for k in off.kernels for op in k.source_ops}
    mine = {op: k.function for k in hybrid.kernels for op in k.source_ops}
    assert {mine[op] for op in h.source_ops} == {owner[op] for op in h.source_ops} == {"matmul", "multiply", "add"}


def test_override_that_binds_no_thread_is_refused_for_a_gpu(tmp_path):
    # The seed's serial kernel with its two thread-bound loops made plain loops: TVM builds such a
    # PrimFunc for a CUDA target as host code that reads the device's buffers (on an H100 the first
    # call of such a module ended the process with a segmentation fault).
    unbound = (CASE / "serial_kernel.py").read_text()
    unbound = unbound.replace('T.thread_binding(T.int64(576), thread="blockIdx.x")', "T.serial(T.int64(576))")
    unbound = unbound.replace('T.thread_binding(T.int64(256), thread="threadIdx.x")', "T.serial(T.int64(256))")
    assert "thread_binding" not in unbound
    path = tmp_path / "unbound_kernel.py"
    path.write_text(unbound)
    msg = _bad(tmp_path, f'schedule_overrides = {{ fused_pool2d_add2 = "{path}" }}', "cuda:sm_90")
    assert "[variants.bad.tvm].schedule_overrides.fused_pool2d_add2: unbound_kernel.py binds no GPU thread" in msg
