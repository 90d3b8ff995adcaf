"""A seeded sample of generated regressions (tools/gen_regressions.py), analyzed on the CPU,
checked against invariants that hold on every input, with the truth from each pair's
construction: no significant headline on A against A; no headline opposite to a direction the
construction decides; every unit's kernels were launched; the unit blamed holds the kernel the
perturbation made. The full scoreboard (top unit, cause) is the benchmark's."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import gen_regressions as gen  # noqa: E402

pytestmark = pytest.mark.slow  # the slow tier (README): minutes of builds and analyses

# name -> (family, seed); the workgroup family's seeds draw each of its two kinds
SAMPLE = {"null": ("null", 0), "recompute": ("recompute", 0), "unfuse": ("unfuse", 0), "topk": ("topk", 3),
          "schedule": ("schedule", 0), "split": ("split", 1), "horizontal": ("horizontal", 3),
          "workgroup-scalar": ("workgroup", 102), "workgroup-one": ("workgroup", 104), "version": ("version", 0)}


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory) -> dict[str, tuple[gen.Pair, dict]]:
    root = tmp_path_factory.mktemp("generated")
    out = {}
    for name, (family, seed) in SAMPLE.items():
        pair = gen.generate(seed, family, root / "pairs")
        att, err = gen.analyze(pair, root / "analyses" / pair.folder.name)
        assert att is not None, f"{pair.folder.name}: analyze failed: {err}"
        out[name] = (pair, att)
    return out


def test_generation_is_seeded(tmp_path):
    a, b = gen.generate(3, "recompute", tmp_path / "x"), gen.generate(3, "recompute", tmp_path / "y")
    assert (a.folder / "b.mlir").read_text() == (b.folder / "b.mlir").read_text() and a.truth == b.truth


@pytest.mark.parametrize("name", list(SAMPLE))
def test_invariants(analyzed, name):
    pair, att = analyzed[name]
    whole = att["whole_graph"]
    if pair.truth["class"] == "null":
        assert not whole["significant"], "A against A called significant"
        assert not any(u["significant"] for u in att["units"])
    if whole["significant"] and pair.truth["slower"] in ("A", "B"):
        assert (whole["delta_ns"]["median"] > 0) == (pair.truth["slower"] == "B"), "headline against the construction"
    # no finding the construction rules out (a stack frame's size on the CPU is no local memory)
    ruled_out = set(pair.truth["must_not_fire"])
    assert not [f["rule"] for f in att["findings"] if "*" in ruled_out or f["rule"] in ruled_out]
    # a CPU analysis says what it left unread in a CPU's terms, not by pointing at a GPU's tools
    asks = [c for c in att["cannot_conclude"] if re.search(r"--gpu|\bncu\b", c)]
    assert not asks, "a CPU verdict asks for a GPU's tools"
    gpu_words = re.compile(r"\bblock(s|\(s\))? x |\bSMs?\b|thread slots|threads per block")
    assert not [f for f in att["findings"] if gpu_words.search(f["sentence"])], "a CPU dispatch described as a GPU's"
    launched = {(k["variant"], k["kernel"]) for k in att["kernels"] if k["launches_per_call"] > 0}
    for u in att["units"]:
        for v in "ab":
            assert all((v, k) in launched for k in u[f"kernels_{v}"]), f"unit {u['unit']} lists a kernel never launched"


def test_the_blamed_unit_holds_the_fused_kernel(analyzed):
    """recompute: B has one kernel, the contraction that recomputes A's producer; the top unit holds it."""
    pair, att = analyzed["recompute"]
    top = max(att["units"], key=lambda u: abs(u["delta_ns"]["median"]))
    (fused,) = {k["kernel"] for k in att["kernels"] if k["variant"] == "b"}
    assert top["kernels_b"] == [fused]


def test_unfuse_splits_the_chain_op_by_op_and_aligns_it_as_one_unit(analyzed):
    """unfuse: A launches one fused kernel a call, B one kernel per op of the generated chain; the
    unit that holds A's kernel holds every kernel of B."""
    pair, att = analyzed["unfuse"]
    launches = {v: sum(k["launches_per_call"] for k in att["kernels"] if k["variant"] == v) for v in "ab"}
    assert launches == {"a": 1, "b": len(pair.truth["chain"])}
    (fused,) = {k["kernel"] for k in att["kernels"] if k["variant"] == "a"}
    unit = next(u for u in att["units"] if fused in u["kernels_a"])
    assert set(unit["kernels_b"]) == {k["kernel"] for k in att["kernels"] if k["variant"] == "b"}


def test_the_h200_batch_measures_its_nulls_alike():
    """The committed H200 batch (fixtures/captures/h200-2026-12-05-gen): the 40 A-against-A pairs'
    interleaved medians agree within 5% (one build against itself), and every generated pair of
    the batch was run."""
    import tarfile

    folder = ROOT / "fixtures/captures/h200-2026-12-05-gen"
    runs = {}
    for part in ("results-call1.tar.gz", "results-call2.tar.gz"):
        with tarfile.open(folder / part) as tar:
            for member in tar.getmembers():
                if member.name.endswith("/measurement.json"):
                    runs[member.name.split("/")[1]] = json.load(tar.extractfile(member))
    assert sorted(runs) == sorted((folder / "cases.txt").read_text().split())
    nulls = [case for case in runs if case.startswith("null-")]
    assert len(nulls) == 40
    for case in nulls:
        med = [v["median_s"] for v in runs[case]["measurement"]["variants"].values()]
        assert max(med) / min(med) < 1.05, case


def test_the_h200_tvm_batch_against_its_construction(tmp_path):
    """The committed unfuse batch (fixtures/captures/h200-2026-12-05-gen-tvm): in the raw CUPTI
    records B launches one kernel per op of the generated chain and A one; attributed here from
    the run directories, every pair says B slower, blames A's fused kernel against B's op kernels,
    with no finding the construction rules out."""
    import tarfile

    folder = ROOT / "fixtures/captures/h200-2026-12-05-gen-tvm"
    for part, dest in (("results-call1.tar.gz", "runs"), ("analyze-call1.tar.gz", "analyses")):
        with tarfile.open(folder / part) as tar:
            tar.extractall(tmp_path / dest, filter="data")
    cases = sorted(p.name for p in (tmp_path / "runs" / "results").iterdir())
    assert len(cases) == 11
    for case in cases:
        seed = int(case.split("-")[1])
        pair = gen.generate(seed, "unfuse", tmp_path / "pairs", "cuda:sm_90")
        run = tmp_path / "runs" / "results" / case
        profiles = json.loads((run / "measurement.json").read_text())["profiles"]
        per_call = {}
        for v in "ab":
            p = profiles[f"gen_unfuse_{seed}-{v}"]
            per_call[v] = len(json.loads((run / p["file"]).read_text())) / p["calls"]
        assert per_call == {"a": 1, "b": len(pair.truth["chain"])}, case
        att, err = gen.analyze(pair, tmp_path / "analyses" / case, from_run=run)
        assert att is not None, f"{case}: {err}"
        row = gen.score(pair, att)
        assert row["slower"] and row["top"] and row["false"] == 0, (case, row)


def test_topk_aligns_the_split_stages_with_the_one_dispatch(analyzed):
    """topk: A launches one top-k dispatch a call; B, split, three (a top-k of the slices, an index
    broadcast, a top-k of the survivors): one unit holds all four."""
    pair, att = analyzed["topk"]
    kernels = {v: {k["kernel"] for k in att["kernels"] if k["variant"] == v} for v in "ab"}
    assert len(kernels["a"]) == 1 and len(kernels["b"]) == 3
    (unit,) = [u for u in att["units"] if u["kernels_a"] or u["kernels_b"]]
    assert (set(unit["kernels_a"]), set(unit["kernels_b"])) == (kernels["a"], kernels["b"])


def test_kernels_of_two_source_files_say_which_ops_they_compute(analyzed):
    """A and B are two MLIR files (the chain in its own dispatch in a.mlir, fused into the
    contraction in b.mlir): their locations share no file, so each kernel's catalog reads the op
    at each of its locations. The truth is the generated chain: A's elementwise kernel holds a
    linalg.generic and the chain's math ops in order; B's one kernel holds those and the
    contraction's multiply and add."""
    pair, att = analyzed["recompute"]
    chain = [f"math.{op}" for op in pair.truth["chain"]]
    kinds = {(v, name): k["source_op_kinds"] for v in "ab" for name, k in att["catalogs"][v]["kernels"].items()}
    (elementwise,) = [k for (v, name), k in kinds.items() if v == "a" and "elementwise" in name]
    assert elementwise == ["linalg.generic", *chain]
    (fused,) = [k for (v, _), k in kinds.items() if v == "b"]
    assert sorted(fused) == sorted(["linalg.generic", *chain, "arith.mulf", "arith.addf"])


def test_recomputation_is_named_across_two_source_files(analyzed):
    """Where the construction makes B slower (each chain value recomputed for every output column)
    and the headline says so, the blamed unit's finding is the recomputation."""
    pair, att = analyzed["recompute"]
    whole = att["whole_graph"]
    if pair.truth["cause_rule"] != "recomputation" or not whole["significant"] or whole["delta_ns"]["median"] < 0:
        pytest.skip("this seed's construction or this machine's measurement decides no slower B")
    top = max(att["units"], key=lambda u: abs(u["delta_ns"]["median"]))
    assert "recomputation" in {f["rule"] for f in top["findings"]}


def test_a_block_split_by_hand_in_a_second_file_is_one_unit(analyzed):
    """split, seed 1: B's file binds the chain's second op outside the dataflow block (issue 25's
    class 1), so B launches the first op, the second, and the rest fused, where A launches one
    fused kernel; the two files name their bindings apart (FuseOps and BlockBuilder number them
    by file). The truth is the construction: every kernel of both sides computes part of the
    one chain, so one unit holds them all, and B's kernels' ops are all ops of A's kernel."""
    pair, att = analyzed["split"]
    assert pair.truth["split"] == {"after": 1, "by": "file"}
    cats = {v: att["catalogs"][v]["kernels"] for v in "ab"}
    (fused,) = cats["a"].values()
    assert len(cats["b"]) == 3
    ops_b = [op for k in cats["b"].values() for op in k["source_ops"]]
    assert set(ops_b) != set(fused["source_ops"]), "the two files named their bindings alike: not the class"
    assert all(set(k["source_locs"]) < set(fused["source_locs"]) for k in cats["b"].values())
    (unit,) = [u for u in att["units"] if u["kernels_a"] or u["kernels_b"]]
    assert (set(unit["kernels_a"]), set(unit["kernels_b"])) == (set(cats["a"]), set(cats["b"]))


def test_horizontal_fusion_is_one_unit_of_the_same_work(analyzed):
    """horizontal, seed 3: four projections of one x. A launches one matmul executable four times;
    B fuses them into one dispatch (IREE fused three, and launches the fourth as a matmul). The
    truth is the construction: each side does 2*M*N*K flops per projection, P of them, so the
    catalogs' work times launches is that on both sides, one unit holds every kernel, and no
    finding says B recomputes."""
    pair, att = analyzed["horizontal"]
    m, k, n, p = (pair.truth["shape"][x] for x in "mknp")
    cats = {v: att["catalogs"][v]["kernels"] for v in "ab"}
    for v in "ab":
        work = sum(cats[v][r["kernel"]]["flops"] * r["launches_per_call"] for r in att["kernels"] if r["variant"] == v)
        assert work == 2 * m * n * k * p, v
    (unit,) = [u for u in att["units"] if u["kernels_a"] or u["kernels_b"]]
    assert (set(unit["kernels_a"]), set(unit["kernels_b"])) == (set(cats["a"]), set(cats["b"]))
    assert "recomputation" not in {f["rule"] for f in att["findings"]}


def test_a_loop_order_is_read_from_the_lowered_tir_and_named(analyzed):
    """schedule: B's override walks one op column by column. The truth is the construction: B's
    overridden PrimFunc steps through its input and output cols*4 bytes at a time, A's (TVM's
    row-major legalized loop) 4 bytes; every other function is the same code on both sides. The
    unit blamed holds that function alone, and where the headline says B is slower (it is: the
    construction makes the op walk a line per element), its finding is the loop's stride."""
    pair, att = analyzed["schedule"]
    fn, cols = pair.truth["override"]["function"], pair.truth["shape"]["cols"]
    access = {v: {name: k["access"] for name, k in att["catalogs"][v]["kernels"].items()} for v in "ab"}
    assert set(access["b"][fn]["strides_bytes"].values()) == {cols * 4}
    assert set(access["a"][fn]["strides_bytes"].values()) == {4}
    assert all(set(access[v][name]["strides_bytes"].values()) == {4} for v in "ab" for name in access[v] if name != fn)
    top = max(att["units"], key=lambda u: abs(u["delta_ns"]["median"]))
    assert (top["kernels_a"], top["kernels_b"]) == ([fn], [fn])
    whole = att["whole_graph"]
    if not whole["significant"] or whole["delta_ns"]["median"] < 0:
        pytest.skip("this machine's measurement did not show B slower")
    found = [f for f in top["findings"] if f["rule"] == "loop-stride"]
    said = [line for line in att["cannot_conclude"] if line.startswith(f"unit {top['unit']}")]
    assert len(found) == 1, (f"unit {top['unit']}: significant {top['significant']}, method {top['method']}, "
                             f"times {top['time_a_ns']['median']:.0f} / {top['time_b_ns']['median']:.0f} ns, "
                             f"findings {[f['rule'] for f in top['findings']]}, said {said}, "
                             f"withdrawals {att.get('withdrawals')}")
    assert f"{cols * 4:,} bytes apart" in found[0]["sentence"]


def test_the_h100_topk_batch_names_serial_work_on_both_sides(tmp_path):
    """Issue 25's class 2 on new cases (fixtures/captures/h100-2026-12-05-gen-topk): generated IREE
    top-k pairs, B split by --iree-dispatch-creation-topk-split-reduction. The raw CUPTI records
    say A's dispatch runs 1 thread and B's kernels at most 64, in one block each, on a device of
    132 SMs; B is barely faster. The rules must say the unit is a serial chain on both sides, with
    the launch from the capture and each thread's work from the construction (N f16 in, K out),
    and must not name the thread count as the cause of a 1% delta."""
    import tarfile

    folder = ROOT / "fixtures/captures/h100-2026-12-05-gen-topk"
    for part, dest in (("results-call1.tar.gz", "runs"), ("analyze-call1.tar.gz", "analyses")):
        with tarfile.open(folder / part) as tar:
            tar.extractall(tmp_path / dest, filter="data")
    for case in ("topk-30", "topk-32"):
        seed = int(case.split("-")[1])
        pair = gen.generate(seed, "topk", tmp_path / "pairs", "cuda:sm_80")
        run = tmp_path / "runs" / "results" / case
        threads = {}
        for v in "ab":
            records = json.loads((run / f"gen_topk_{seed}-{v}.cupti.json").read_text())
            threads[v] = max(r["grid_x"] * r["grid_y"] * r["grid_z"] * r["block_x"] * r["block_y"] * r["block_z"]
                             for r in records)
        att, err = gen.analyze(pair, tmp_path / "analyses" / case, from_run=run)
        assert att is not None, f"{case}: {err}"
        row = gen.score(pair, att)
        assert row["top"] and row["false"] == 0, (case, row)
        top = max(att["units"], key=lambda u: abs(u["delta_ns"]["median"]))
        found = [f for f in top["findings"] if f["rule"] == "parallelism"]
        assert len(found) == 1 and found[0]["evidence"]["both_serial"], (case, top["findings"])
        evidence = found[0]["evidence"]
        shape = pair.truth["shape"]
        assert (evidence["threads"], evidence["other_threads_max"]) == (threads["a"], threads["b"]) == (1, 64)
        assert evidence["work_per_thread"] == 2 * shape["n"] + 2 * shape["k"]  # f16 in, f16 values out
        assert any("the thread count is not named as the cause" in c for c in att["cannot_conclude"])


def test_a_pinned_configuration_is_read_from_the_source(analyzed):
    """workgroup: B's source pins the contraction's lowering_config (a compilation_info), IREE's own
    (read by the generator from iree-compile) with one field changed; both catalogs carry what the
    generator wrote, and the chain's dispatch is configured alike on both sides."""
    for name in ("workgroup-scalar", "workgroup-one"):
        pair, att = analyzed[name]
        configs = {v: {k["name"]: k["schedule"]["lowering_config"] for k in att["catalogs"][v]["kernels"].values()}
                   for v in "ab"}
        (a_mm,) = [c for n, c in configs["a"].items() if "matmul_like" in n]
        (b_mm,) = [c for n, c in configs["b"].items() if "matmul_like" in n]
        assert a_mm == pair.truth["own_config"] and b_mm == pair.truth["pinned_config"]
        assert [c for n, c in configs["a"].items() if "matmul_like" not in n] == \
            [c for n, c in configs["b"].items() if "matmul_like" not in n]


def test_vector_tiles_of_one_are_named(analyzed):
    """workgroup, scalar: B's contraction steps one element at a time (the construction); it is the
    top unit, B is slower, and the vector-tiles finding names that dispatch with the generator's
    tiles (A's elements a step: the product of IREE's own vector tile sizes)."""
    pair, att = analyzed["workgroup-scalar"]
    top = max(att["units"], key=lambda u: abs(u["delta_ns"]["median"]))
    assert top["significant"] and top["delta_ns"]["median"] > 0 and "matmul_like" in top["kernels_b"][0]
    (found,) = [f for f in top["findings"] if f["rule"] == "vector-tiles"]
    own = pair.truth["own_config"]
    step = 1
    for i in range(3):
        step *= max([v[i] for k, v in own.items() if k.startswith("vector_") and v[i] > 0] or [1])
    assert found["evidence"]["elements_per_step"] == 1 and found["evidence"]["other_elements_per_step"] == step


def test_one_workgroup_is_weighed_against_the_cpus(analyzed):
    """workgroup, one-workgroup: B's contraction is one workgroup (the construction), A's as many as
    IREE's own distribution tiles make; a parallelism finding, where the unit is slow enough to
    name one, counts both and the CPUs this process may run on, and never speaks of blocks."""
    import math
    import os

    pair, att = analyzed["workgroup-one"]
    shape, own = pair.truth["shape"], pair.truth["own_config"]["distribution"]
    tiles = math.ceil(shape["m"] / own[0]) * math.ceil(shape["n"] / own[1])
    for f in att["findings"]:
        if f["rule"] == "parallelism":
            ev = f["evidence"]
            assert (ev["workgroups"], ev["other_workgroups"]) == (1, tiles), ev
            assert ev["cpus"] == len(os.sched_getaffinity(0)) and "block" not in f["sentence"]


def test_a_release_pair_is_built_by_each_sides_release(analyzed):
    """version: one source, A built by the release the generator names (its own environment and
    runtime), B by the installed one; each side's manifest says so, the run measured each with its
    own runtime, and every hybrid is built by the release of the side it modifies (or left out with
    the compiler's reason)."""
    from importlib import metadata

    pair, att = analyzed["version"]
    out = Path(att["run"]["directory"]).parent
    plan = json.loads((out / "plan.json").read_text())
    compilers = {v: json.loads((out / plan["bundles"][plan[v]] / "manifest.json").read_text())["toolchain"]
                 for v in "ab"}
    release = pair.truth["toolchains"]["a"].split("==")[1]
    assert compilers["a"]["compiler"] == {"iree-base-compiler": release}
    assert compilers["a"]["runtime"] == {"iree-base-runtime": release}
    assert compilers["b"]["compiler"] == {"iree-base-compiler": metadata.version("iree-base-compiler")}
    assert gen.hybrids_own_release(out) in (True, None)
    assert not [f for f in att["findings"] if f["rule"] in pair.truth["must_not_fire"]]
