"""The hot loop's strides (frontends/tvm/access.py), read from TIR that TVM lowers for llvm. The
truth is each PrimFunc's construction: which index its innermost loop moves and the buffers'
row-major shapes (bytes between consecutive iterations = the loop's step in the flat index x 4)."""
from __future__ import annotations

import pytest

tvm = pytest.importorskip("tvm")

from rootcause.frontends.tvm.access import hot_loop  # noqa: E402
from rootcause.frontends.tvm.catalog import lower  # noqa: E402
from rootcause.frontends.tvm.source import parse_tvmscript  # noqa: E402

R, C = 64, 256


def _scale(name: str, loops: str) -> str:
    """y = 2x over [R, C], the loops in the order `loops` names them ("i, j" walks rows)."""
    extents = {"i": R, "j": C}
    grid = ", ".join(str(extents[v.strip()]) for v in loops.split(","))
    return f"""
@T.prim_func(s_tir=True)
def {name}(x: T.Buffer(({R}, {C}), "float32"), y: T.Buffer(({R}, {C}), "float32")):
    for {loops} in T.grid({grid}):
        with T.sblock("b"):
            vi, vj = T.axis.remap("SS", [i, j])
            y[vi, vj] = x[vi, vj] * T.float32(2)
"""


FUNCS = {
    # row by row: both step one float
    "rows": _scale("rows", "i, j"),
    # column by column: both step a row, C floats
    "columns": _scale("columns", "j, i"),
    # y[i, j] = x[j, i]: y steps one float, x a row of x (R floats)
    "transpose": f"""
@T.prim_func(s_tir=True)
def transpose(x: T.Buffer(({C}, {R}), "float32"), y: T.Buffer(({R}, {C}), "float32")):
    for i, j in T.grid({R}, {C}):
        with T.sblock("b"):
            vi, vj = T.axis.remap("SS", [i, j])
            y[vi, vj] = x[vj, vi]
""",
    # s[j] = sum over i of x[i, j], the reduction innermost: x steps a row, s stays put
    "column_sums": f"""
@T.prim_func(s_tir=True)
def column_sums(x: T.Buffer(({R}, {C}), "float32"), s: T.Buffer(({C},), "float32")):
    for j, i in T.grid({C}, {R}):
        with T.sblock("b"):
            vj, vi = T.axis.remap("SR", [j, i])
            with T.init():
                s[vj] = T.float32(0)
            s[vj] = s[vj] + x[vi, vj]
""",
}
WANT = {"rows": {"x": 4, "y": 4}, "columns": {"x": C * 4, "y": C * 4},
        "transpose": {"x": R * 4, "y": 4}, "column_sums": {"x": C * 4, "s": 0}}


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_strides_of_the_hot_loop(name, tmp_path):
    path = tmp_path / f"{name}.py"
    path.write_text("from tvm.script import tirx as T\n" + FUNCS[name])
    func = parse_tvmscript(path.read_text(), path).with_attr("global_symbol", name)
    host, devices = lower(tvm.IRModule({name: func}), tvm.target.Target("llvm"))
    assert not devices
    hot = hot_loop(host[name])
    assert hot["strides_bytes"] == WANT[name]
    assert hot["iterations"] == R * C
