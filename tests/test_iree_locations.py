"""IREE provenance through MLIR locations: the real iree-compile, run on fixtures/binaries/iree/
reduce_sum.mlir with and without split reduction, maps each dispatch to the input lines its ops
came from, and alignment joins the serial dispatch with both halves of the split one."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from parsers import ParseError, iree_ir
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
        locs = iree_ir.dispatch_locations(flows[name], name)
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
        iree_ir.dispatch_locations("func.func @f() {\n  return\n}\n", "plain.mlir")


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_mutated_located_dumps_raise_only_parse_errors(flows, data):
    text = flows["split"]
    i = data.draw(st.integers(0, len(text) - 1))
    cut = data.draw(st.integers(0, 64))
    junk = data.draw(st.text(alphabet="(){}#loc\":0123456789 =\n", max_size=16))
    try:
        iree_ir.dispatch_locations(text[:i] + junk + text[i + cut:], "mutated.mlir")
    except ParseError:
        pass
