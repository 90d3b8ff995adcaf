"""IREE provenance through MLIR locations: the real iree-compile, run on fixtures/binaries/iree/
reduce_sum.mlir with and without split reduction, maps each dispatch to the input lines its ops
came from, and alignment joins the serial dispatch with both halves of the split one."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from parsers import ParseError
from rootcause.frontends.iree import ir_text
from rootcause import spec as specs
from rootcause.analysis.align import align

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "fixtures/binaries/iree/reduce_sum.mlir"
SPLIT = "--iree-dispatch-creation-enable-split-reduction"


def _lines(pattern: str) -> list[int]:
    """1-based lines of the source holding `pattern` (this test's own reading of the input)."""
    return [n for n, line in enumerate(SOURCE.read_text().splitlines(), 1) if pattern in line]


@pytest.fixture(scope="module")
def flows(tmp_path_factory):
    from rootcause.frontends.iree.compile import iree_compile_path

    out = {}
    for name, flags in (("serial", []), ("split", [SPLIT])):
        path = tmp_path_factory.mktemp("loc") / f"{name}.flow.mlir"
        subprocess.run([str(iree_compile_path()), str(SOURCE), "--iree-hal-target-device=cuda",
                        "--iree-cuda-target=sm_80", "--compile-to=flow", "--mlir-print-debuginfo", *flags,
                        "-o", str(path)], check=True, capture_output=True)
        out[name] = path.read_text()
    return out


def test_every_dispatch_maps_to_the_reduction_lines(flows):
    generic, addf = _lines("linalg.generic"), _lines("arith.addf")
    want = {f"reduce_sum.mlir:{generic[0]}:", f"reduce_sum.mlir:{addf[0]}:"}
    for name, expected in (("serial", 1), ("split", 2)):
        locs = ir_text.dispatch_locations(flows[name], name)
        funcs = [line.split("@")[1].split("(")[0] for line in flows[name].splitlines()
                 if line.strip().startswith("func.func @")]
        assert sorted(locs) == sorted(funcs) and len(funcs) == expected
        for found in locs.values():
            assert {loc.rsplit(":", 1)[0] + ":" for loc in found} == want


def test_serial_and_split_align_as_one_unit(tmp_path):
    """The IREE frontend's catalogs carry the locations; align joins 1 <-> 2 dispatches."""
    from rootcause.frontends.iree.build import build

    toml = tmp_path / "v.toml"
    toml.write_text(f'[base]\nallow_outside_paths = true\nname = "rsum"\nfrontend = "iree"\nsource = "{SOURCE}"\ntarget = "cuda:sm_80"\n'
                    f'entry = "rsum"\n[variants.serial.iree]\nflags = []\n[variants.split.iree]\n'
                    f'flags = ["{SPLIT}"]\n')
    cats = {v: build(specs.load(f"{toml}#{v}"), tmp_path / v).kernels for v in ("serial", "split")}
    assert [len(cats[v]) for v in ("serial", "split")] == [1, 2]
    assert all(k.source_locs for v in cats for k in cats[v])
    events = {v: pd.DataFrame([{"kernel": k.name, "start_ns": 1000 * i, "end_ns": 1000 * i + 500,
                                "duration_ns": 500, "call": 0, "source": "test"}
                               for i, k in enumerate(cats[v])]) for v in cats}
    al = align(events["serial"], events["split"], cats["serial"], cats["split"], "rsum", "rsum")
    (unit,) = al.units.itertuples()
    assert len(unit.kernels_a) == 1 and len(unit.kernels_b) == 2 and unit.method == "location"
    assert not unit.flagged


def test_a_dump_without_locations_is_one_parse_error():
    with pytest.raises(ParseError, match="no MLIR locations"):
        ir_text.dispatch_locations("func.func @f() {\n  return\n}\n", "plain.mlir")


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_mutated_located_dumps_raise_only_parse_errors(flows, data):
    text = flows["split"]
    i = data.draw(st.integers(0, len(text) - 1))
    cut = data.draw(st.integers(0, 64))
    junk = data.draw(st.text(alphabet="(){}#loc\":0123456789 =\n", max_size=16))
    try:
        ir_text.dispatch_locations(text[:i] + junk + text[i + cut:], "mutated.mlir")
    except ParseError:
        pass


def test_named_locations_tell_ops_of_two_source_files_apart(tmp_path):
    """The zoo's broadcast-recompute sources (fixtures/zoo/iree_broadcast_recompute): two files
    whose lines differ, every op named loc("chain") or loc("add") by gen_mlir.py. Compiled for
    real to the flow phase, IREE's own dispatch formation fuses the chain into the add in one and
    keeps it apart in the other; the names, not the lines, say which dispatch computes which op."""
    from rootcause.frontends.iree.compile import iree_compile_path

    case = ROOT / "fixtures/zoo/iree_broadcast_recompute"
    names = {}
    for source in ("chain_then_add.mlir", "split.mlir"):
        path = tmp_path / f"{source}.flow.mlir"
        subprocess.run([str(iree_compile_path()), str(case / source), "--iree-hal-target-device=cuda",
                        "--iree-cuda-target=sm_80", "--compile-to=flow", "--mlir-print-debuginfo",
                        "-o", str(path)], check=True, capture_output=True)
        locs = ir_text.dispatch_locations(path.read_text(), source)
        names[source] = sorted(sorted(x for x in found if x.startswith("name:")) for found in locs.values())
    assert names["chain_then_add.mlir"] == [["name:add", "name:chain"]]
    assert names["split.mlir"] == [["name:add"], ["name:chain"]]


def test_a_name_with_a_child_location_is_not_an_op_name(tmp_path):
    """Importers write op kinds as names over a file location (loc("aten::exp"("model.py":3:4))):
    many ops share such a name, so only a bare loc("NAME") is taken as one op's name. Two
    elementwise ops in one input, one of each kind, compiled for real."""
    from rootcause.frontends.iree.compile import iree_compile_path

    src = tmp_path / "two.mlir"
    maps = "indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = [\"parallel\"]"

    def generic(result: str, arg: str, op: str, loc: str) -> str:
        return (f"  {result} = linalg.generic {{{maps}}} ins({arg} : tensor<64xf32>) outs(%e : tensor<64xf32>) {{\n"
                f"  ^bb0(%i: f32, %o: f32):\n    %r = {op} %i : f32 {loc}\n    linalg.yield %r : f32\n"
                f"  }} -> tensor<64xf32> {loc}\n")

    src.write_text("func.func @f(%x: tensor<64xf32>) -> tensor<64xf32> {\n  %e = tensor.empty() : tensor<64xf32>\n"
                   + generic("%n", "%x", "math.exp", 'loc("aten::exp"("model.py":3:4))')
                   + generic("%a", "%n", "math.absf", 'loc("mine")')
                   + "  return %a : tensor<64xf32>\n}\n")
    out = tmp_path / "two.flow.mlir"
    subprocess.run([str(iree_compile_path()), str(src), "--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80",
                    "--compile-to=flow", "--mlir-print-debuginfo", "-o", str(out)], check=True, capture_output=True)
    found = sorted({x for locs in ir_text.dispatch_locations(out.read_text(), "two").values() for x in locs})
    assert found == ["model.py:3:4", "name:mine"]
