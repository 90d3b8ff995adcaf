"""rootcause/frontends/iree/mlir_attrs.py against literal MLIR text, round trips, and bad input."""
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsers import ParseError
from rootcause.frontends.iree.mlir_attrs import find_attrs, parse_aliases, parse_attr

# The seed thread's lowering_config (seeds/001), quoted verbatim.
SEED_CONFIG = ("#iree_gpu.lowering_config<{mma_kind = #iree_gpu.mma_layout<MFMA_F32_16x16x16_F16>, "
               "promote_operands = [0, 1], reduction = [0, 0, 0, 64], subgroup_m_count = 1 : i64, "
               "subgroup_n_count = 4 : i64, workgroup = [1, 16, 256, 0]}>")


def test_seed_lowering_config():
    v = parse_attr(SEED_CONFIG)
    assert v["attr"] == "iree_gpu.lowering_config"
    cfg = v["args"][0]
    assert cfg["workgroup"] == [1, 16, 256, 0]
    assert cfg["reduction"] == [0, 0, 0, 64]
    assert cfg["subgroup_m_count"] == 1 and cfg["subgroup_n_count"] == 4
    assert cfg["promote_operands"] == [0, 1]
    assert cfg["mma_kind"] == {"attr": "iree_gpu.mma_layout", "args": ["MFMA_F32_16x16x16_F16"], "params": {}}


def test_translation_info_with_pipeline_and_options():
    text = ("#iree_codegen.translation_info<pipeline = #iree_gpu.pipeline<TileAndFuse> workgroup_size = "
            "[128, 1, 1] subgroup_size = 32, {gpu_pipeline_options = #iree_gpu.pipeline_options<"
            "prefetch_num_stages = 2, no_reduce_shared_memory_bank_conflicts = false>}>")
    v = parse_attr(text)
    assert v["params"]["workgroup_size"] == [128, 1, 1]
    assert v["params"]["subgroup_size"] == 32
    assert v["params"]["pipeline"]["args"] == ["TileAndFuse"]
    opts = v["args"][0]["gpu_pipeline_options"]["params"]
    assert opts == {"prefetch_num_stages": 2, "no_reduce_shared_memory_bank_conflicts": False}


@pytest.mark.parametrize("text, want", [
    ("42", 42), ("-7 : i64", -7), ("0x1F", 31), ("1.500000e+00 : f32", 1.5), ("true", True),
    ("unit", True), ('"a\\"b\\0A"', 'a"b\n'), ("[]", []), ("{}", {}), ("{flag, n = 3 : index}", {"flag": True, "n": 3}),
    ("@exe::@variant::@fn", "@exe::@variant::@fn"), ('@"q d"', '@"q d"'),
    ("affine_map<(d0, d1) -> (d1, d0)>", "affine_map<(d0, d1) -> (d1, d0)>"),
    ("affine_set<(d0) : (d0 - 1 >= 0)>", "affine_set<(d0) : (d0 - 1 >= 0)>"),
    ("tensor<4x?xf32>", "tensor<4x?xf32>"), ("!hal.buffer_view", "!hal.buffer_view"),
    ("dense<[1, 2]> : tensor<2xi32>", "dense<[1, 2]>"), ("fp64|fp32", "fp64|fp32"),
    ("[16x8x16, a_b]", ["16x8x16", "a_b"]),
    ("#hal.pipeline.binding<storage_buffer, \"ReadOnly|Indirect\">",
     {"attr": "hal.pipeline.binding", "args": ["storage_buffer", "ReadOnly|Indirect"], "params": {}}),
    ("<umin = 64, umax = 262080, udiv = 64>",
     {"attr": None, "args": [], "params": {"umin": 64, "umax": 262080, "udiv": 64}}),
])
def test_literals(text, want):
    assert parse_attr(text) == want


def test_aliases_resolve():
    text = '#map = affine_map<(d0) -> (d0)>\n#t = #hal.device.target<"cuda", [#map]>\n'
    aliases = parse_aliases(text, "m.mlir")
    assert aliases["#map"] == "affine_map<(d0) -> (d0)>"
    assert aliases["#t"]["args"] == ["cuda", ["affine_map<(d0) -> (d0)>"]]
    assert parse_attr("[#map, #other]", aliases=aliases) == ["affine_map<(d0) -> (d0)>", "#other"]


def test_find_attrs_positions():
    text = "module {\n  %0 = linalg.fill {lowering_config = #c.lc<tile_sizes = [[4, 8], [0, 2]]>} : x\n}\n"
    (hit,) = find_attrs(text, "lowering_config", "f.mlir")
    assert (hit.line, hit.column) == (2, text.splitlines()[1].index("lowering_config") + 1)
    assert hit.value["params"]["tile_sizes"] == [[4, 8], [0, 2]]
    assert hit.text == "#c.lc<tile_sizes = [[4, 8], [0, 2]]>"


@pytest.mark.parametrize("text, where, what", [
    ("[1, 2", "line 3, column 10", "expected ',' or ']'"),
    ("{a = 1 b = 2}", "line 3, column 12", "expected ',' or '}'"),
    ('"abc', "line 3, column 5", "string not terminated"),
    ("#x.y<a = [1>", "line 3, column 16", "expected ',' or ']' in array, found '>'"),
    ("{a = 1, a = 2}", "line 3, column 13", "duplicate key 'a'"),
    ("[1] 2", "line 3, column 9", "unexpected text"),
    ("affine_map<(d0) -> (d0)", "line 3, column 15", "'<' not closed"),
    ("", "line 3, column 5", "end of text"),
])
def test_errors_name_file_line_column(text, where, what):
    with pytest.raises(ParseError) as err:
        parse_attr(text, "dump.mlir", line=3, column=5)
    msg = str(err.value)
    assert msg.startswith(f"dump.mlir: {where}: "), msg
    assert what in msg and "\n" not in msg


def test_error_on_later_line_counts_lines():
    with pytest.raises(ParseError, match=r"^f: line 2, column 3: "):
        parse_attr("[1,\n  ?]", "f")


# -- round trip: print random plain data as MLIR, parse it back --------------------------------
words = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(lambda w: w not in ("true", "false", "unit"))
leaves = st.one_of(st.integers(-2**40, 2**40), st.booleans(), words,
                   st.text(st.characters(codec="ascii", exclude_categories=("Cc",)), max_size=8),
                   st.floats(allow_nan=False, allow_infinity=False, width=32))
values = st.recursive(leaves, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(words, kids, max_size=4)), max_leaves=20)


def to_mlir(v, typed: bool) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"{v} : i64" if typed else str(v)
    if isinstance(v, float):
        return f"{v!r} : f32"
    if isinstance(v, list):
        return "[" + ", ".join(to_mlir(x, typed) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {to_mlir(x, typed)}" for k, x in v.items()) + "}"
    bare = re.fullmatch(r"[a-z][a-z0-9_]*", v) and v not in ("true", "false", "unit")
    return v if bare else _quote(v)


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


@settings(max_examples=150, deadline=None)
@given(values, st.booleans())
def test_round_trip(value, typed):
    text = to_mlir(value, typed)
    got = parse_attr(f"#d.a<{{v = {text}}}>")["args"][0]["v"]
    assert _same(got, value), (text, got)


def _same(a, b) -> bool:
    if isinstance(b, float) and not isinstance(b, bool):
        return isinstance(a, (int, float)) and math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-30)
    if isinstance(b, list):
        return isinstance(a, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(b, dict):
        return isinstance(a, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in b)
    return a == b and type(a) is type(b)
