"""Arithmetic work of the linalg ops in printed MLIR (IREE dispatch sources), from the text.

Not an MLIR parser: it reads what `mlir-opt`-style printing gives for linalg ops, one op per
line (the region of a linalg.generic / linalg.reduce on the lines after it):

- the iteration domain: for linalg.generic, each operand's indexing map (`affine_map<...>`
  inline or a `#alias` defined at the top of the file) ties its shape's dims to loop dims,
  `ins(...)` then `outs(...)` in map order; for named ops, their known loop structure
  (matmul: the output's dims x the contracted dim, elementwise: the output's dims);
- the ops per iteration point: the arith.* and math.* ops of the body region, except
  constants, type conversions and select (data movement, not arithmetic); named contractions
  count 2 (a multiply and an add), named elementwise ops 1, fill/copy/transpose/broadcast 0.

flops = domain size x ops per point. An op whose domain is dynamic ('?') or whose structure
is not known (convolutions, softmax, ...) gets flops None and a reason, never a guess.

evaluations: how often the op evaluates each transcendental math op (math.exp -> 'exp', math.powf
-> 'pow'): domain size x its count in the body (a fused reduction's body runs once per point of
the whole domain, reduction loops included), the output's size for a named elementwise op.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from parsers.base import ParseError

_OP = re.compile(r"^\s*(?:%[\w#:, ]+=\s*)?((?:iree_linalg_ext|linalg)\.\w+)\b")
_ALIAS = re.compile(r"^(#[\w.$-]+)\s*=\s*(affine_map<.*>)\s*$", re.M)
_AFFINE = re.compile(r"affine_map<\(([^)]*)\)(?:\[[^\]]*\])?\s*->\s*\(([^)]*)\)>")
_BODY_OP = re.compile(r"=\s*((?:arith|math)\.\w+)")
# math dialect ops counted as transcendental evaluations, by the names rootcause.model.EVALUATED uses
TRANSCENDENTAL = {"math.exp": "exp", "math.exp2": "exp", "math.expm1": "exp", "math.log": "log", "math.log1p": "log",
                  "math.log2": "log", "math.tanh": "tanh", "math.rsqrt": "rsqrt", "math.sqrt": "sqrt",
                  "math.erf": "erf", "math.powf": "pow", "math.fpowi": "pow", "math.sin": "sin", "math.cos": "cos"}
_NAMED_TRANSCENDENTAL = {"exp": "exp", "log": "log", "tanh": "tanh", "rsqrt": "rsqrt", "sqrt": "sqrt", "erf": "erf",
                         "powf": "pow"}
# Not arithmetic: constants, conversions, selects.
_NOT_COUNTED = re.compile(r"^arith\.(constant|ext\w*|trunc\w*|\w*tofp|fpto\w*|bitcast|index_cast\w*|select)$")
_ZERO_WORK = {"fill", "copy", "transpose", "broadcast", "pack", "unpack", "yield", "index"}
_CONTRACTIONS = {"matmul", "matmul_transpose_a", "matmul_transpose_b", "batch_matmul",
                 "batch_matmul_transpose_a", "batch_matmul_transpose_b", "matvec", "vecmat",
                 "batch_matvec", "batch_vecmat", "dot", "batch_reduce_matmul"}
_ELEMENTWISE = {"add", "sub", "mul", "div", "div_unsigned", "max", "min", "exp", "log", "abs",
                "ceil", "floor", "negf", "reciprocal", "round", "sqrt", "rsqrt", "square",
                "tanh", "erf", "powf", "elementwise"}


@dataclass
class LinalgOp:
    name: str  # 'linalg.generic', 'linalg.matmul', ...
    line: int  # 1-based, in the text given
    domain: list[int] | None  # loop extents (None: dynamic or unknown)
    ops_per_point: int | None
    flops: int | None
    why: str | None = None  # why flops is None
    evaluations: dict[str, int] = field(default_factory=dict)  # transcendental op -> evaluations


@dataclass
class Work:
    ops: list[LinalgOp] = field(default_factory=list)

    @property
    def flops(self) -> int | None:
        """Sum over the ops; None when any op's work is unknown."""
        if any(op.flops is None for op in self.ops):
            return None
        return sum(op.flops for op in self.ops)

    @property
    def evaluations(self) -> dict[str, int]:
        """Each transcendental op's evaluations, summed over the ops whose domain is known."""
        out: dict[str, int] = {}
        for op in self.ops:
            for name, n in op.evaluations.items():
                out[name] = out.get(name, 0) + n
        return out

    def unknown(self) -> list[str]:
        return [f"{op.name} (line {op.line}): {op.why}" for op in self.ops if op.flops is None]


def work(text: str, file: str = "<text>", line: int = 1) -> Work:
    """Every linalg op of `text` with its iteration domain, ops per point and flops. `line` is
    the line number of the text's first line in `file` (when it was cut out of a larger file)."""
    aliases = {name: body for name, body in _ALIAS.findall(text)}
    lines = text.splitlines()
    out = Work()
    i = 0
    while i < len(lines):
        m = _OP.match(lines[i])
        if not m or m.group(1) == "linalg.yield" or m.group(1) == "linalg.index":
            i += 1
            continue
        start = i
        header, region, i = _op_text(lines, i, file, line - 1)
        out.ops.append(_op_work(m.group(1), header, region, start + line, aliases, file))
    return out


def _op_text(lines: list[str], start: int, file: str, shift: int) -> tuple[str, list[str], int]:
    """(header text, region lines, index after the op). The header ends once outs(...) is
    closed; a region follows when the braces opened on the header stay open."""
    header = lines[start]
    j = start
    while not _closed_call(header, "outs(") and j + 1 < len(lines) and j - start < 20:
        j += 1
        header += "\n" + lines[j]
    depth = _depth(header)
    region: list[str] = []
    j += 1
    while depth > 0:
        if j >= len(lines):
            raise ParseError(file, f"line {start + 1 + shift}", "linalg op region is not closed")
        region.append(lines[j])
        depth += _depth(lines[j])
        j += 1
    return header, region, j


def _closed_call(text: str, key: str) -> bool:
    at = text.find(key)
    return at >= 0 and _group(text, at + len(key) - 1) is not None


def _depth(text: str) -> int:
    return text.count("{") - text.count("}")


def _group(text: str, open_at: int) -> str | None:
    """The text inside the bracket at open_at up to its match, or None if unclosed."""
    pairs = {"(": ")", "[": "]", "<": ">", "{": "}"}
    stack = []
    for k in range(open_at, len(text)):
        c = text[k]
        if c == ">" and text[k - 1] == "-":  # '->' inside an affine map
            continue
        if c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return text[open_at + 1:k]
    return None


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets ('tensor<4x?xf32, #enc>, f32' -> two types)."""
    parts, depth, cur = [], 0, ""
    for k, c in enumerate(text):
        if c in "(<[{":
            depth += 1
        elif c in ")>]}" and not (c == ">" and k and text[k - 1] == "-"):
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += c
    if cur.strip():
        parts.append(cur.strip())
    return parts


def _operand_types(header: str, key: str) -> list[str]:
    at = header.find(key)
    if at < 0:
        return []
    inside = _group(header, at + len(key) - 1) or ""
    _, sep, types = inside.partition(" : ")
    return _split_top(types) if sep else []


def shape(type_text: str) -> list[int | None]:
    """tensor<24x?x8xf32> -> [24, None, 8]; a scalar type (f32, index) -> []."""
    m = re.match(r"(?:tensor|memref|vector)<(.*)>$", type_text.strip(), re.S)
    if not m:
        return []
    dims = _split_top(m.group(1))[0].split("x")[:-1]  # the last piece is the element type
    return [None if d.strip() == "?" else int(d) for d in dims if d.strip()]


def _maps(header: str, aliases: dict[str, str], file: str, line: int) -> list[tuple[list[str], list[str]]]:
    at = header.find("indexing_maps")
    if at < 0:
        return []
    lb = header.find("[", at)
    inside = _group(header, lb) or ""
    maps = []
    for item in _split_top(inside):
        text = aliases.get(item, item)
        m = _AFFINE.search(text)
        if not m:
            raise ParseError(file, f"line {line}", f"indexing map {item!r} is not an affine_map")
        dims = [d.strip() for d in m.group(1).split(",") if d.strip()]
        results = [r.strip() for r in _split_top(m.group(2))]
        maps.append((dims, results))
    return maps


def _body_ops(region: list[str]) -> int:
    count = 0
    for row in region:
        for name in _BODY_OP.findall(row):
            if not _NOT_COUNTED.match(name):
                count += 1
    return count


def _body_transcendentals(region: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in region:
        for name in _BODY_OP.findall(row):
            if name in TRANSCENDENTAL:
                out[TRANSCENDENTAL[name]] = out.get(TRANSCENDENTAL[name], 0) + 1
    return out


def _short_form_ops(header: str) -> int:
    """linalg.reduce { arith.addf } ins(...): the ops named in the leading braces."""
    m = re.search(r"linalg\.reduce\s*\{([^}]*)\}", header)
    return len([n for n in re.findall(r"(?:arith|math)\.\w+", m.group(1)) if not _NOT_COUNTED.match(n)]) if m else 0


def _op_work(name: str, header: str, region: list[str], line: int, aliases: dict[str, str],
             file: str) -> LinalgOp:
    kind = name.split(".", 1)[1]
    if name.startswith("iree_linalg_ext."):
        return LinalgOp(name, line, None, None, None, "loop structure of this op is not known")
    ins, outs = _operand_types(header, "ins("), _operand_types(header, "outs(")
    shapes = [shape(t) for t in ins + outs]
    maps = _maps(header, aliases, file, line)
    if kind == "generic" or (maps and kind in _CONTRACTIONS):
        if len(maps) != len(shapes):
            raise ParseError(file, f"line {line}", f"{len(maps)} indexing maps for {len(shapes)} operands")
        domain = _domain(maps, shapes, file, line)
        per = _body_ops(region) if kind == "generic" else 2
        return _result(name, line, domain, per, "a loop extent is dynamic (?) or not a plain dim of any operand",
                       _body_transcendentals(region) if kind == "generic" else {})
    if not outs and kind not in ("reduce",):
        return LinalgOp(name, line, None, None, None, "no outs(...) operand read")
    out = shapes[len(ins)] if outs else []
    if kind in _ZERO_WORK:
        return _result(name, line, out, 0, "dynamic (?) output shape")
    if kind in _ELEMENTWISE:
        named = {_NAMED_TRANSCENDENTAL[kind]: 1} if kind in _NAMED_TRANSCENDENTAL else {}
        return _result(name, line, out, 1, "dynamic (?) output shape", named)
    if kind in _CONTRACTIONS and ins:
        a = shapes[0]
        k = (a[-2] if "transpose_a" in kind else a[-1]) if a else None
        return _result(name, line, out + [k], 2, "dynamic (?) output or contracted dim")
    if kind == "reduce" and ins:
        per = _body_ops(region) or _short_form_ops(header)
        return _result(name, line, shapes[0], per, "dynamic (?) input shape", _body_transcendentals(region))
    return LinalgOp(name, line, None, None, None, "loop structure of this op is not known")


def _domain(maps, shapes, file: str, line: int) -> list[int] | None:
    dims = maps[0][0]
    extents: dict[str, int | None] = {}
    for (map_dims, results), shp in zip(maps, shapes):
        if map_dims != dims:
            raise ParseError(file, f"line {line}", f"indexing maps disagree on their dims: {map_dims} vs {dims}")
        if len(results) != len(shp) and results != [""]:
            raise ParseError(file, f"line {line}", f"map with {len(results)} results for a rank-{len(shp)} operand")
        for expr, extent in zip(results, shp):
            if expr in dims and extent is not None:
                if extents.get(expr, extent) != extent:
                    raise ParseError(file, f"line {line}", f"loop {expr} is {extents[expr]} in one operand, "
                                                           f"{extent} in another")
                extents[expr] = extent
    if any(d not in extents for d in dims):
        return None
    return [extents[d] for d in dims]


def _result(name: str, line: int, domain: list[int | None] | None, per: int, why: str,
            per_point: dict[str, int] | None = None) -> LinalgOp:
    if domain is None or any(d is None for d in domain):
        return LinalgOp(name, line, None, per, None, why)
    size = math.prod(domain)
    return LinalgOp(name, line, list(domain), per, size * per, evaluations={k: size * n for k, n in (per_point or {}).items()})


def function_text(text: str, symbol: str) -> tuple[str, int] | None:
    """(text of `func.func @symbol` up to its closing brace, its first line number), or None."""
    m = re.search(r"func\.func\s+(?:\w+\s+)?@" + re.escape(symbol) + r"\b", text)
    if not m:
        return None
    start = text.rfind("\n", 0, m.start()) + 1
    brace = text.find("{", m.end())
    if brace < 0:
        return None
    depth = 0
    for k in range(brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[k], 0)
        if depth == 0:
            return text[start:k + 1], text.count("\n", 0, start) + 1
    return None
