"""IREE executable hybrids (the zoo's iree_dedup_matmul): a whole executable of one side standing in
for the other side's, real iree-compile.

A = mm_bs4 alone, B = mm_bs4 in a module with mm_bs1 (one deduplicated executable, named after
mm_bs1, whose body is specialized for rows divisible by 32 where alone's assumes 128). A
configuration hybrid keeps base's body, so it cannot recover what the body holds; the executable
hybrid must compile to the other side's kernel exactly. Truth: the other build's own PTX and
configured dump, read with plain text operations.
"""
import re
from pathlib import Path

import pytest

from rootcause.frontends.iree import ir_text
from rootcause import pipeline, spec as specs
from rootcause.frontends.iree import build as iree

CASE = Path(__file__).resolve().parent.parent / "fixtures" / "zoo" / "iree_dedup_matmul"
SHARED, ALONE_EXE = "mm_bs1$async_dispatch_0", "mm_bs4$async_dispatch_0"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("dedup-exe")
    a, b = (specs.load(f"{CASE / 'variants.toml'}#{v}") for v in ("alone", "dedup"))
    dirs = {"a": root / "a", "b": root / "b"}
    out = {s: iree.build(spec, dirs[s]) for s, spec in (("a", a), ("b", b))}
    hybrids, notes = pipeline.plan_hybrids(a, b, out["a"].kernels, out["b"].kernels, bundle_dirs=dirs,
                                           work_dir=root / "hybrids")
    return {"dirs": dirs, "out": out, "hybrids": hybrids, "notes": notes, "root": root}


def ptx(folder: Path) -> str:
    (f,) = (folder / "binaries").glob("*.ptx")
    return f.read_text()


def test_plan_adds_executable_hybrids_after_the_configurations(built):
    kinds = [(h.base, h.kind) for h in built["hybrids"]]
    assert kinds == [("a", "configuration"), ("b", "configuration"), ("a", "executable"), ("b", "executable")]
    h = next(h for h in built["hybrids"] if (h.base, h.kind) == ("b", "executable"))
    (exe, path), = h.spec.options.substitute_configurations.items()
    assert exe == SHARED
    alone = (built["dirs"]["a"] / "ir" / f"configured_module_{ALONE_EXE}.mlir").read_text()
    # alone's whole dump, its executable renamed: the body keeps alone's 128-row specialization
    assert Path(path).read_text() == alone.replace("@mm_bs4$", "@mm_bs1$")
    assert "udiv = 128>" in Path(path).read_text() and "udiv = 32>" not in Path(path).read_text()


@pytest.mark.parametrize("base, other, names", [("b", "a", ("mm_bs4", "mm_bs1")), ("a", "b", ("mm_bs1", "mm_bs4"))])
def test_executable_hybrid_compiles_to_the_other_sides_kernel(built, base, other, names):
    h = next(h for h in built["hybrids"] if (h.base, h.kind) == (base, "executable"))
    out_dir = built["root"] / f"h-{base}"
    iree.build(h.spec, out_dir)
    # the hybrid's PTX is the other side's, but for the executable's name
    assert ptx(out_dir) == ptx(built["dirs"][other]).replace(*names)
    log = (out_dir / "iree-compile.log").read_text()
    (exe,) = h.spec.options.substitute_configurations
    assert re.search(rf"NOTE: hal\.executable `{re.escape(exe)}` substituted", log)
    # the configuration hybrid of the same base does not: its body stays base's
    c = next(h for h in built["hybrids"] if (h.base, h.kind) == (base, "configuration"))
    c_dir = built["root"] / f"c-{base}"
    iree.build(c.spec, c_dir)
    assert ptx(c_dir) != ptx(built["dirs"][other]).replace(*names)


def test_export_layouts_resolve_aliases():
    text = ('#pipeline_layout = #hal.pipeline.layout<constants = 1, bindings = [#hal.pipeline.binding<storage_buffer>]>\n'
            'hal.executable public @e {\n  hal.executable.variant public @v target(#t) {\n'
            '    hal.executable.export public @e_0 ordinal(0) layout(#pipeline_layout) count(%a: !hal.device) -> (index) {\n'
            '    hal.executable.export public @e_1 ordinal(1) layout(#hal.pipeline.layout<constants = 2, bindings = []>) {\n')
    assert ir_text.export_layouts(text) == [
        "#hal.pipeline.layout<constants = 1, bindings = [#hal.pipeline.binding<storage_buffer>]>",
        "#hal.pipeline.layout<constants = 2, bindings = []>"]


def test_no_executable_hybrid_between_a_fused_chain_and_its_regions(tmp_path):
    """The zoo's iree_dispatch_chain: fused is one dispatch, regions 24, and both builds have a
    main_dispatch_0. Sharing that name is not computing the same ops: no executable of one side
    may stand in for the other's. Truth: the dispatch count in each build's own configured IR."""
    chain = CASE.parent / "iree_dispatch_chain"
    a, b = (specs.load(f"{chain / 'variants.toml'}#{v}") for v in ("fused", "regions"))
    dirs = {"a": tmp_path / "a", "b": tmp_path / "b"}
    out = {s: iree.build(spec, dirs[s]) for s, spec in (("a", a), ("b", b))}
    exports = {s: len(re.findall(r"hal\.executable\.export public @",
                                 "".join(p.read_text() for p in (dirs[s] / "ir").glob("configured_module_*.mlir"))))
               for s in dirs}
    assert exports == {"a": 1, "b": 24}
    hybrids, notes = pipeline.plan_hybrids(a, b, out["a"].kernels, out["b"].kernels, bundle_dirs=dirs,
                                           work_dir=tmp_path / "hybrids")
    assert [h for h in hybrids if h.kind == "executable"] == []
    assert any("different sources" in n for n in notes)


def test_an_executable_that_binds_other_shapes_cannot_stand_in(tmp_path):
    """einsum_fusion's fused generic at the small size (N=24) against the seed's size: one
    dispatch each, one pipeline layout, but bindings of other shapes (read from each configured
    dump with a plain regular expression). The other build's executable, renamed, is refused at
    base's call sites; base's own executable stands in for itself."""
    spec_file = Path(__file__).resolve().parent.parent / "fixtures" / "cases" / "einsum_fusion" / "variants.toml"
    a, b = (specs.with_target(specs.load(f"{spec_file}#{v}"), "llvm") for v in ("fused_small", "fused"))
    dirs = {"a": tmp_path / "a", "b": tmp_path / "b"}
    for s, spec in (("a", a), ("b", b)):
        iree.build(spec, dirs[s])
    texts = {s: next((dirs[s] / "ir").glob("configured_*.mlir")).read_text() for s in "ab"}
    shapes = {s: sorted(set(re.findall(r"(?:memref<|dispatch\.tensor<\w+:tensor<)([0-9x]+xf32)[,>]", texts[s])))
              for s in "ab"}
    assert shapes["a"] != shapes["b"] and len(shapes["a"]) == len(shapes["b"])
    from rootcause.frontends.iree import hybrids

    whole = ir_text.renamed_executable(texts["b"], "main_dispatch_0", "b.mlir")
    assert "other shapes" in hybrids.swap_refusal(texts["a"], whole, ("a.mlir", "b.mlir"))
    assert hybrids.swap_refusal(texts["a"], texts["a"], ("a.mlir", "a.mlir")) is None
