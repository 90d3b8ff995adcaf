"""rootcause.frontends.iree.ir_text on dumps the installed iree-compile writes here (cuda:sm_80, no GPU needed).

Two sources from fixtures/: binaries/iree/mm.mlir (a static 64x128 @ 128x32 f32 matmul and a
256-element add+mul; PROVENANCE.md names its exports) and cases/prefill_dedup/prefill_2_8.mlir
(two functions whose matmuls DeduplicateExecutables folds into one executable, README.md).
Truth comes from elsewhere: the source files, the fixtures' documentation, line-by-line scans
of the dumps with str methods, and NumPy for the binding sizes.
"""
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mutation import COMMON, mutate
from parsers import ParseError
from rootcause.frontends.iree import ir_text

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MM = FIXTURES / "binaries" / "iree" / "mm.mlir"
PREFILL = FIXTURES / "cases" / "prefill_dedup" / "prefill_2_8.mlir"
DEDUP_PASS = "iree-flow-deduplicate-executables"
# the exports fixtures/binaries/iree/PROVENANCE.md names
MATMUL, ADDMUL = "matmul_dispatch_0_matmul_64x32x128_f32", "addmul_dispatch_0_elementwise_256_f32"


def iree_compile() -> str:
    binaries = pytest.importorskip("iree.compiler.tools.binaries")
    return binaries.find_tool("iree-compile")


def compile_dumps(source: Path, out: Path, *flags: str) -> dict[str, str]:
    ir = out / "ir"
    proc = subprocess.run([iree_compile(), str(source), "--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80",
                           f"--iree-hal-dump-executable-configurations-to={ir}",
                           f"--dump-compilation-phases-to={ir / 'phases'}", f"--mlir-print-ir-before={DEDUP_PASS}",
                           "--mlir-elide-elementsattrs-if-larger=16", *flags, "-o", str(out / "module.vmfb")],
                          capture_output=True, text=True, check=True)
    (flow,) = (ir / "phases").glob("*.flow.mlir")
    (hal,) = (ir / "phases").glob("*.hal.mlir")
    texts = {"flow": flow.read_text(), "hal": hal.read_text(), "stderr": proc.stderr}
    for p in ir.glob("configured_module_*.mlir"):
        texts[p.name] = p.read_text()
    return texts


@pytest.fixture(scope="module")
def mm(tmp_path_factory):
    return compile_dumps(MM, tmp_path_factory.mktemp("mm"))


@pytest.fixture(scope="module")
def prefill(tmp_path_factory):
    return compile_dumps(PREFILL, tmp_path_factory.mktemp("prefill"), "--iree-input-type=torch")


# -- independent readings ----------------------------------------------------------------------

def scan_functions(text: str) -> dict[str, list[str]]:
    """Top-level function name -> its body lines, by walking the lines."""
    out: dict[str, list[str]] = {}
    name = None
    for line in text.split("\n"):
        if line.startswith(("  util.func ", "  func.func ")):
            name = line.split("@", 1)[1].split("(", 1)[0].strip('"')
            out[name] = []
        elif line == "  }":
            name = None
        elif name is not None:
            out[name].append(line)
    return out


def scan_dispatches(text: str) -> dict[str, list[str]]:
    """Function -> the export of each flow.dispatch line in it, in order (functions with any)."""
    out = {}
    for name, lines in scan_functions(text).items():
        exports = [line.split("flow.dispatch @", 1)[1].split("::@", 1)[1].split("(")[0].split("[")[0]
                   for line in lines if "flow.dispatch @" in line]
        if exports:
            out[name] = exports
    return out


def source_functions(source: Path) -> list[str]:
    return [line.split("@", 1)[1].split("(", 1)[0] for line in source.read_text().split("\n")
            if line.lstrip().startswith("func.func @")]


def source_shapes(source: Path, function: str) -> list[tuple[list[int], str]]:
    """(shape, element type) of the argument and result tensors of a source function."""
    (line,) = [line for line in source.read_text().split("\n") if line.lstrip().startswith(f"func.func @{function}(")]
    return [([int(d) for d in dims.split("x")], elem) for dims, elem in re.findall(r"tensor<([\dx]+)x(f\d+)>", line)]


def grepped(text: str, pattern: str) -> list[int]:
    return [int(x) for x in re.search(pattern, text).group(1).split(",")]


# -- phase dumps -------------------------------------------------------------------------------

def test_entry_functions_are_the_source_functions(mm, prefill):
    assert ir_text.entry_functions(ir_text.blocks(mm["flow"])) == source_functions(MM) == ["matmul", "addmul"]
    assert ir_text.entry_functions(ir_text.blocks(prefill["flow"])) == source_functions(PREFILL)


def test_blocks_hold_the_function_text(mm):
    scanned = scan_functions(mm["hal"])
    named = {b.name: b for b in ir_text.blocks(mm["hal"]) if not b.name.startswith("<initializer")}
    assert set(named) == set(scanned)
    for name, lines in scanned.items():
        assert all(line in named[name].text for line in lines)
    # the public functions replay command buffers their memoize functions record
    assert {b.name for b in ir_text.reach(ir_text.blocks(mm["hal"]))["matmul"]} >= {"matmul", "__matmul_memoize_apply"}


@pytest.mark.parametrize("which", ["mm", "prefill"])
def test_flow_dispatches_match_a_line_scan(which, mm, prefill):
    text = {"mm": mm, "prefill": prefill}[which]["flow"]
    found = {k: v for k, v in ir_text.flow_dispatches(text).items() if v}
    assert found == scan_dispatches(text) != {}


def test_call_sites_of_separate_executables(mm):
    before, _ = ir_text.ir_before(mm["stderr"], DEDUP_PASS)
    assert ir_text.call_sites(mm["flow"], before) == {MATMUL: [("matmul", MATMUL)], ADDMUL: [("addmul", ADDMUL)]}


def test_call_sites_of_a_deduplicated_executable(prefill):
    """One executable after dedup serves both functions; each keeps the dispatch it had before."""
    before, _ = ir_text.ir_before(prefill["stderr"], DEDUP_PASS)
    after, pre = scan_dispatches(prefill["flow"]), scan_dispatches(before)
    (shared,) = {e for exports in after.values() for e in exports}
    assert pre["prefill_bs8$async"][0].startswith("prefill_bs8$async_dispatch_0")
    assert pre["prefill_bs8$async"][0] != shared
    assert ir_text.call_sites(prefill["flow"], before) == {
        shared: [("prefill_bs2", pre["prefill_bs2$async"][0]), ("prefill_bs8", pre["prefill_bs8$async"][0])]}
    # without the names before dedup, both call sites carry the name after it
    assert ir_text.call_sites(prefill["flow"]) == {shared: [("prefill_bs2", shared), ("prefill_bs8", shared)]}


def test_hal_dispatches_grid_covers_the_workgroup_tiles(mm):
    dispatches = {d.entry: d for d in ir_text.hal_dispatches(mm["hal"])}
    assert sorted(dispatches) == ["addmul", "matmul"]
    lookups = [line.split("function(@", 1)[1].split(")", 1)[0].split("::@")
               for line in mm["hal"].split("\n") if "hal.executable.lookup.function" in line]
    for entry, export, parallel in (("matmul", MATMUL, [64, 32]), ("addmul", ADDMUL, [256])):
        d = dispatches[entry]
        assert [d.executable, d.variant, d.export] in lookups and d.export == export
        tile = grepped(mm[f"configured_module_{entry}_dispatch_0.mlir"], r"\bworkgroup = \[([^\]]*)\]")
        assert math.prod(d.grid) == math.prod(-(-n // t) for n, t in zip(parallel, tile))


def test_hal_dispatches_of_a_dynamic_shape_have_no_static_count(prefill):
    found = ir_text.hal_dispatches(prefill["hal"])
    assert sorted({d.entry for d in found}) == source_functions(PREFILL)
    assert all(None in d.grid for d in found)  # the row count '?' of the source is known at run time


# -- configured executables ------------------------------------------------------------------

@pytest.mark.parametrize("entry, export", [("matmul", MATMUL), ("addmul", ADDMUL)])
def test_configuration_matches_the_dump_and_the_source(mm, entry, export):
    name = f"configured_module_{entry}_dispatch_0.mlir"
    text = mm[name]
    (facts,) = ir_text.configuration(text, name).values()
    assert list(ir_text.configuration(text, name)) == [export]
    assert facts["workgroup_size"] == grepped(text, r"workgroup_size = \[([^\]]*)\]")
    assert facts["subgroup_size"] == grepped(text, r"subgroup_size = (\d+)")[0]
    assert facts["pipeline"] == re.search(r"#iree_gpu\.pipeline<(\w+)>", text).group(1)
    (cfg,) = re.findall(r"lowering_config<\{(.*?)\}>", text)
    assert facts["lowering_config"] == {k: [int(x) for x in v.split(",")]
                                        for k, v in re.findall(r"(\w+) = \[([^\]]*)\]", cfg)}
    assert facts["executable"] == name.removeprefix("configured_module_").removesuffix(".mlir")
    assert facts["config_file"] == name
    expected = sum(int(np.prod(shape)) * np.dtype(elem.replace("f", "float")).itemsize
                   for shape, elem in source_shapes(MM, entry))
    assert facts["bytes_moved"] == ir_text.binding_bytes(text) == expected


def test_dynamic_shapes_have_no_binding_bytes(prefill):
    (name,) = [n for n in prefill if n.startswith("configured_")]
    (facts,) = ir_text.configuration(prefill[name], name).values()
    assert facts["bytes_moved"] is None
    # fixtures/cases/prefill_dedup/README.md: the dedup executable's sm_80 configuration
    assert facts["lowering_config"]["workgroup"] == [1, 64, 32, 0]
    assert facts["lowering_config"]["subgroup"] == [0, 2, 2, 0]


def test_attr_spans_point_at_the_values(mm):
    text = mm["configured_module_matmul_dispatch_0.mlir"]
    (start, end, value, op), = ir_text.attr_spans(text, "lowering_config")
    key_at = text.index("lowering_config = ")
    assert start == key_at + len("lowering_config = ") and text[start:end] == value
    assert value.startswith("#iree_gpu.lowering_config<") and text[end:].startswith("}")
    assert op == text[:key_at].rsplit("\n", 1)[1].split("=", 1)[1].split()[0] == "linalg.generic"


def test_executable_names_and_renaming(mm):
    text = mm["configured_module_matmul_dispatch_0.mlir"]
    assert ir_text.executable_names(text) == ["matmul_dispatch_0"]
    renamed = ir_text.renamed_executable(text, "other", "m.mlir")
    assert ir_text.executable_names(renamed) == ["other"]
    assert renamed.count("@other") == text.count("@matmul_dispatch_0") and "@matmul_dispatch_0" not in renamed
    assert ir_text.renamed_executable(text, "matmul_dispatch_0", "m.mlir") is text
    both = text + mm["configured_module_addmul_dispatch_0.mlir"]
    with pytest.raises(ParseError) as err:
        ir_text.renamed_executable(both, "other", "both.mlir")
    assert str(err.value).startswith("both.mlir: ") and "several" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ParseError, match="flow.mlir: .*no hal.executable at all"):
        ir_text.renamed_executable(mm["flow"], "other", "flow.mlir")


def test_malformed_configuration_names_file_and_line(mm):
    """Real dumps with one value made malformed: ParseError at that line, not a ValueError."""
    text = mm["configured_module_matmul_dispatch_0.mlir"]
    bad = text.replace("memref<64x128xf32", "memref<64x1z8xf32", 1)
    line = bad[:bad.index("64x1z8")].count("\n") + 1
    with pytest.raises(ParseError, match=rf"^m\.mlir: line {line}: binding 0 has the shape '64x1z8xf32'"):
        ir_text.binding_bytes(bad, "m.mlir")
    bad = text.replace("{translation_info = #iree_codegen", "{translation_info = 3, x = #iree_codegen", 1)
    line = bad[:bad.index("translation_info = 3")].count("\n") + 1
    with pytest.raises(ParseError, match=rf"^m\.mlir: line {line}, column \d+: translation_info is '3'"):
        ir_text.configuration(bad, "m.mlir")


# -- the log -----------------------------------------------------------------------------------

def test_ir_before_splits_the_log(mm, prefill):
    for texts in (mm, prefill):
        log = texts["stderr"]
        dump, rest = ir_text.ir_before(log, DEDUP_PASS)
        assert dump.startswith("// -----// IR Dump Before DeduplicateExecutablesPass") and dump.endswith("\n}\n")
        assert dump in log and len(dump) + len(rest) == len(log) and "IR Dump Before" not in rest
        assert set(scan_dispatches(dump)) == set(scan_dispatches(texts["flow"]))
    assert ir_text.ir_before(mm["stderr"], "no-such-pass") == ("", mm["stderr"])


def test_substitution_report_reads_a_real_log(mm, tmp_path):
    sub = tmp_path / "sub.mlir"
    sub.write_text(mm["configured_module_matmul_dispatch_0.mlir"])
    proc = subprocess.run([iree_compile(), str(MM), "--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80",
                           f"--iree-hal-substitute-executable-configuration=matmul_dispatch_0={sub}",
                           f"--iree-hal-substitute-executable-configuration=nope={sub}",
                           "-o", str(tmp_path / "m.vmfb")], capture_output=True, text=True, check=True)
    assert ir_text.substitution_report(proc.stderr) == ({"nope"}, {"matmul_dispatch_0"})
    assert ir_text.substitution_report(mm["stderr"]) == (set(), set())


# -- mutated dumps -----------------------------------------------------------------------------

def read_everything(text: str) -> None:
    all_blocks = ir_text.blocks(text)
    ir_text.reach(all_blocks)
    ir_text.entry_functions(all_blocks)
    ir_text.flow_dispatches(text)
    ir_text.call_sites(text, text)
    ir_text.hal_dispatches(text)
    ir_text.configuration(text, "mutated.mlir")
    ir_text.binding_bytes(text, "mutated.mlir")
    ir_text.attr_spans(text, "lowering_config", "mutated.mlir")
    ir_text.executable_names(text)
    try:
        ir_text.renamed_executable(text, "other", "mutated.mlir")
    except ParseError:
        pass
    ir_text.ir_before(text, DEDUP_PASS)
    ir_text.substitution_report(text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from(["flow", "hal", "stderr", "configured_module_matmul_dispatch_0.mlir",
                                   "configured_module_addmul_dispatch_0.mlir"]), st.sampled_from(COMMON))
def test_mutated_dumps_raise_only_parse_error(mm, data, which, how):
    blob = mutate(data, bytearray(mm[which].encode()), how)
    try:
        read_everything(blob.decode("utf-8", errors="replace"))
    except ParseError as err:
        assert "mutated.mlir" in str(err) and "\n" not in str(err)
