"""A reader of the MLIR text iree-compile prints, and of its log.

- phase dumps (--dump-compilation-phases-to): the top-level functions of a printed module
  (`blocks`), what each public function runs (`reach`), its flow.dispatch ops
  (`flow_dispatches`, `call_sites`) and its hal.command_buffer.dispatch ops with their static
  workgroup counts (`hal_dispatches`)
- configured executables (--iree-hal-dump-executable-configurations-to): translation_info and
  lowering_config of every export, and the bytes of its bindings (`configuration`,
  `binding_bytes`, `attr_spans`); hal.executable symbols (`executable_names`,
  `renamed_executable`)
- the log: the module printed by --mlir-print-ir-before (`ir_before`) and the substitution
  warnings and notes (`substitution_report`)

The readers rely on the printer's layout: top-level functions indented by two spaces and
closed by a line '  }'. Attribute values are read by rootcause.frontends.iree.mlir_attrs. Errors are
ParseError(file, place, what).
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from parsers.base import ParseError
from rootcause.frontends.iree.mlir_attrs import find_attrs

_SYM = r'@(?:"[^"]*"|[\w.$-]+)'
_BLOCK_START = re.compile(r"^  (?:util\.func|func\.func|util\.initializer)\b.*$", re.M)
_FUNC_NAME = re.compile(r"^  (?:util\.func|func\.func)\s+(?:(public|private|nested)\s+)?(" + _SYM + r")")
_FLOW_DISPATCH = re.compile(r"flow\.dispatch\s+(" + _SYM + r")::(" + _SYM + r")")
_CALL = re.compile(r"util\.call\s+(" + _SYM + r")")
_LOAD = re.compile(r"util\.global\.load\s+(?:immutable\s+)?(" + _SYM + r")")
_STORE = re.compile(r"util\.global\.store\s+%[\w.$-]+\s*,\s*(" + _SYM + r")")
_CONST = re.compile(r"(%[\w.$-]+)\s*=\s*arith\.constant\s+(-?\d+)\s*:\s*index")
_TRIPLE = "(" + _SYM + r")::(" + _SYM + r")::(" + _SYM + r")"
_LOOKUP = re.compile(r"(%[\w.$-]+)\s*=\s*hal\.executable\.lookup\.function\s+target\([^)]*\)\s*function\("
                     + _TRIPLE + r"\)")
_ORDINAL = re.compile(r"(%[\w.$-]+)\s*=\s*hal\.executable\.export\.ordinal\s+target\(" + _TRIPLE + r"\)")
_HAL_DISPATCH = re.compile(r"hal\.command_buffer\.dispatch<[^>]*>\s*target\([^)]*\)\[(%[\w.$-]+)\]\s*"
                           r"workgroups\(\[([^\]]*)\]\)")
_OP_AT_LINE_START = re.compile(r"^\s*(?:%[\w.$:#, -]+=\s*)?\"?([a-z_]\w*\.[\w.]+)")
_EXECUTABLE = re.compile(r"^\s*hal\.executable\s+(?:public\s+|private\s+)?(" + _SYM + ")", re.M)
_FIRST_EXECUTABLE = re.compile(r"hal\.executable\s+(?:public\s+|private\s+)?(" + _SYM + ")")
_EXPORT = re.compile(r"hal\.executable\.export\s+(?:public\s+)?(" + _SYM + ")")
_FUNC = re.compile(r"func\.func\s+(" + _SYM + ")")
_SUBSPAN = re.compile(r"hal\.interface\.binding\.subspan\b.*?\bbinding\((\d+)\).*?\boffset\(([^)]*)\).*?:\s*"
                      r"(?:memref<|!iree_tensor_ext\.dispatch\.tensor<\w+:tensor<)([^,>]*)")
_NOT_FOUND = re.compile(r"could not perform the requested substitution as the executable `([^`]*)` was not found")
_SUBSTITUTED = re.compile(r"NOTE: hal\.executable `([^`]*)` substituted with MLIR source")


def _sym(text: str) -> str:
    return text[1:].strip('"')


def _line(text: str, number: int) -> str:
    """Line `number` (from 1) as mlir_attrs counts lines: by '\\n' only."""
    return text.split("\n")[number - 1]


# -- phase dumps ----------------------------------------------------------------------------------

@dataclass
class Block:
    """One top-level util.func / func.func / util.initializer of a printed module."""

    name: str
    public: bool
    text: str
    calls: list[str] = field(default_factory=list)
    loads: set[str] = field(default_factory=set)
    stores: set[str] = field(default_factory=set)


def blocks(text: str) -> list[Block]:
    """Top-level function bodies, found by the printer's indentation (2 spaces, closing '  }')."""
    out = []
    for n, m in enumerate(_BLOCK_START.finditer(text)):
        end = text.find("\n  }\n", m.end())
        body = text[m.start(): len(text) if end < 0 else end + 4]
        head = _FUNC_NAME.match(m.group())
        name = _sym(head.group(2)) if head else f"<initializer {n}>"
        public = bool(head) and head.group(1) in (None, "public")
        out.append(Block(name, public, body, [_sym(c) for c in _CALL.findall(body)],
                         {_sym(g) for g in _LOAD.findall(body)}, {_sym(g) for g in _STORE.findall(body)}))
    return out


def reach(all_blocks: list[Block]) -> dict[str, list[Block]]:
    """Per public function, the blocks it runs: itself, callees, initializers of globals it loads
    (memoized command buffers are recorded by an initializer and only replayed by the function)."""
    by_name = {b.name: b for b in all_blocks}
    writers: dict[str, list[Block]] = defaultdict(list)
    for b in all_blocks:
        for g in b.stores:
            writers[g].append(b)
    out = {}
    for entry in (b for b in all_blocks if b.public):
        seen: dict[int, Block] = {}
        todo = [entry]
        while todo:
            b = todo.pop()
            if id(b) in seen:
                continue
            seen[id(b)] = b
            todo += [by_name[c] for c in b.calls if c in by_name]
            for g in b.loads:
                todo += writers.get(g, [])
        out[entry.name] = sorted(seen.values(), key=all_blocks.index)
    return out


def entry_functions(all_blocks: list[Block]) -> list[str]:
    """Public functions a user calls: not the '$async' halves their wrappers call."""
    names = [b.name for b in all_blocks if b.public]
    return [n for n in names if not (n.endswith("$async") and n.removesuffix("$async") in names)]


def flow_dispatches(text: str) -> dict[str, list[str]]:
    """Per function, its flow.dispatch export symbols in op order."""
    return {b.name: [_sym(e) for _, e in _FLOW_DISPATCH.findall(b.text)] for b in blocks(text)}


def call_sites(flow_text: str, before_text: str = "") -> dict[str, list[tuple[str, str]]]:
    """export (after dedup) -> [(entry function, dispatch export it had before dedup), ...].

    The names before dedup are zipped in op order per function; a function whose dispatch count
    differs keeps the names after dedup."""
    all_blocks = blocks(flow_text)
    after = {b.name: [_sym(e) for _, e in _FLOW_DISPATCH.findall(b.text)] for b in all_blocks}
    before = flow_dispatches(before_text) if before_text else {}
    reached = reach(all_blocks)
    sites: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for entry in entry_functions(all_blocks):
        for b in reached.get(entry, []):
            pre = before.get(b.name, [])
            names = pre if len(pre) == len(after[b.name]) else after[b.name]
            for export, original in zip(after[b.name], names):
                if (entry, original) not in sites[export]:
                    sites[export].append((entry, original))
    return dict(sites)


@dataclass
class HalDispatch:
    entry: str
    executable: str  # after linking (module_linked for llvm-cpu)
    variant: str  # e.g. cuda_nvptx_fb
    export: str
    grid: list[int | None]  # None where the count is computed at run time


def hal_dispatches(hal_text: str) -> list[HalDispatch]:
    """Every hal.command_buffer.dispatch an entry function runs, with its workgroup count."""
    all_blocks = blocks(hal_text)
    reached = reach(all_blocks)
    out = []
    for entry in entry_functions(all_blocks):
        for b in reached.get(entry, []):
            consts = {name: int(v) for name, v in _CONST.findall(b.text)}
            lookups = {m.group(1): tuple(_sym(m.group(i)) for i in (2, 3, 4))
                       for rx in (_LOOKUP, _ORDINAL) for m in rx.finditer(b.text)}
            for fid, counts in _HAL_DISPATCH.findall(b.text):
                if fid not in lookups:
                    continue
                grid = [consts.get(c.strip()) for c in counts.split(",")]
                out.append(HalDispatch(entry, *lookups[fid], grid))
    return out


# -- configured executables ---------------------------------------------------------------------

def _plain(value: Any) -> Any:
    """Attribute data as schedule facts: #iree_gpu.mma_layout<X> -> 'X', #iree_gpu.pipeline<P> -> 'P'."""
    if isinstance(value, dict) and {"attr", "args", "params"} <= value.keys():
        args, params = value["args"], value["params"]
        if not params and len(args) == 1 and not isinstance(args[0], dict):
            return _plain(args[0])
        merged = {k: _plain(v) for k, v in params.items()}
        for a in args:
            if isinstance(a, dict):
                merged.update({k: _plain(v) for k, v in a.items()})
        return merged
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _root_config(text: str, file: str) -> tuple[dict, str | None, list[dict]]:
    """The lowering_config of the root op (the one with a reduction loop, else the last)."""
    configs = []
    for hit in find_attrs(text, "lowering_config", file):
        line = _line(text, hit.line)
        m = _OP_AT_LINE_START.match(line)
        op = m.group(1) if m else None
        reduction = '"reduction"' in line or "linalg.matmul" in line or "batch_matmul" in line
        configs.append({"op": op, "attr": hit.value.get("attr") if isinstance(hit.value, dict) else None,
                        "config": _plain(hit.value), "line": hit.line, "reduction": reduction})
    if not configs:
        return {}, None, []
    root = next((c for c in configs if c["reduction"]), configs[-1])
    return root["config"], root["attr"], configs


def binding_bytes(text: str, file: str = "<text>") -> int | None:
    """Bytes of every buffer binding a dispatch reads or writes, once each; None when a shape is
    dynamic (the size is known only at run time)."""
    total = 0
    seen = set()
    for m in _SUBSPAN.finditer(text):
        binding, offset, shaped = m.groups()
        if (binding, offset, shaped) in seen:
            continue
        seen.add((binding, offset, shaped))
        *dims, elem = shaped.split("x")
        bits = re.search(r"(\d+)", elem)
        if "?" in dims or bits is None:
            return None
        if not all(d.isascii() and d.isdigit() for d in dims):
            raise ParseError(file, f"line {text.count(chr(10), 0, m.start()) + 1}",
                             f"binding {binding} has the shape {shaped!r}, not NxMx..xTYPE")
        total += math.prod(int(d) for d in dims) * max(1, int(bits.group(1)) // 8)
    return total or None


def binding_shapes(text: str) -> list[tuple[str, str]]:
    """(binding, tensor type) of every buffer binding a dispatch reads or writes, sorted: what an
    executable that stands in for another must bind alike (the offsets may differ: its call sites
    pass them)."""
    return sorted({(binding, shaped) for binding, _, shaped in _SUBSPAN.findall(text)})


def configuration(text: str, file: str = "<text>") -> dict[str, dict[str, Any]]:
    """export -> schedule facts of one configured executable dump (configured_*.mlir)."""
    exe = _FIRST_EXECUTABLE.search(text)
    exports = [_sym(e) for e in _EXPORT.findall(text)]
    infos = {}
    for hit in find_attrs(text, "translation_info", file):
        fn = _FUNC.search(_line(text, hit.line))
        if fn:
            info = _plain(hit.value)
            if not isinstance(info, dict):
                raise ParseError(file, f"line {hit.line}, column {hit.column}",
                                 f"translation_info is {hit.text[:40]!r}, not an attribute with parameters")
            infos[_sym(fn.group(1))] = info
    config, attr, all_configs = _root_config(text, file)
    out = {}
    for export in exports:
        info = dict(infos.get(export, {}))
        out[export] = {
            "pipeline": info.pop("pipeline", None),
            "workgroup_size": info.pop("workgroup_size", None),
            "subgroup_size": info.pop("subgroup_size", None),
            "pipeline_options": info,
            "lowering_config": config,
            "lowering_config_attr": attr,
            "lowering_configs": [{k: c[k] for k in ("op", "line", "config")} for c in all_configs],
            "executable": _sym(exe.group(1)) if exe else None,
            "config_file": file,
            "bytes_moved": binding_bytes(text, file),
        }
    return out


def attr_spans(text: str, key: str, file: str = "<text>") -> list[tuple[int, int, str, str | None]]:
    """(start, end, value text, op at the line start) of every `key = <attr>` value in text."""
    out = []
    for m, hit in zip(re.finditer(rf"(?<![\w.$]){re.escape(key)}\s*=\s*", text), find_attrs(text, key, file)):
        op = _OP_AT_LINE_START.match(_line(text, hit.line))
        out.append((m.end(), m.end() + len(hit.text), hit.text, op.group(1) if op else None))
    return out


def executable_names(text: str) -> list[str]:
    """hal.executable symbols of a printed module or configured dump, in order."""
    return [_sym(m) for m in _EXECUTABLE.findall(text)]


def renamed_executable(text: str, name: str, file: str = "<text>") -> str:
    """`text`'s one hal.executable under the symbol `name`. IREE substitutes by executable name and
    the call sites keep their export names, which IREE spells '<executable>_<op>', so a configured
    dump taken from another build (alone's prefill_bs8$async_dispatch_0 standing in for dedup's
    prefill_bs2$async_dispatch_0) has its executable and export prefixes renamed."""
    names = executable_names(text)
    if name in names:
        return text
    if len(names) != 1:
        raise ParseError(file, "", f"holds no hal.executable @{name} to substitute, and "
                                   f"{'none' if not names else 'several'} to rename "
                                   f"({', '.join(names) or 'no hal.executable at all'})")
    return text.replace(f"@{names[0]}", f"@{name}")


_EXPORT_LAYOUT = re.compile(r"hal\.executable\.export\s+(?:public\s+)?" + _SYM + r"[^\n]*?\blayout\(")
_ALIAS_DEF = re.compile(r"^(#[\w.$-]+)\s*=\s*(.*?)\s*$", re.M)


def export_layouts(text: str, file: str = "<text>") -> list[str]:
    """The pipeline layout of each hal.executable.export, in order, aliases resolved: two
    executables whose exports bind the same layouts can stand in for each other at a call site."""
    aliases = dict(_ALIAS_DEF.findall(text))
    out = []
    for m in _EXPORT_LAYOUT.finditer(text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        if depth:
            raise ParseError(file, f"line {text.count(chr(10), 0, m.start()) + 1}", "unbalanced layout( of an export")
        layout = text[m.end():i - 1].strip()
        out.append(aliases.get(layout, layout))
    return out


# -- the log --------------------------------------------------------------------------------------

_ASSUME_ROWS = re.compile(r"(%[\w.$-]+)\[((?:\s*<[^<>\[\]]*>\s*,?)+)\]")
_ASSUME_FIELD = re.compile(r"(umin|umax|udiv)\s*=\s*(-?\d+)")


def joined_assumptions(text: str) -> str:
    """text with each util.assume.int operand's rows (one per call site of a deduplicated
    executable: `%2[<umin = 0, umax = 0>, <umin = 8192, umax = 8192, udiv = 8192>, ...]`) replaced
    by what they allow together: the least umin, the largest umax, the gcd of the divisors (a
    constant row divides by its value). Two executables whose call sites list other offsets in
    another order, but allow the same, then read the same."""
    def joined(m: re.Match) -> str:
        rows = [dict((k, int(v)) for k, v in _ASSUME_FIELD.findall(r)) for r in re.findall(r"<[^<>]*>", m.group(2))]
        if not rows or any("umin" not in r or "umax" not in r for r in rows):
            return m.group(0)
        divisor = 0
        for r in rows:
            divisor = math.gcd(divisor, r.get("udiv", r["umin"] if r["umin"] == r["umax"] else 1))
        return (f"{m.group(1)}[<umin = {min(r['umin'] for r in rows)}, umax = {max(r['umax'] for r in rows)}, "
                f"udiv = {divisor}>]")
    return _ASSUME_ROWS.sub(joined, text)


def ir_before(log: str, pass_name: str) -> tuple[str, str]:
    """Split iree-compile's stderr into (the module printed before pass_name, everything else);
    ('', log) when no such dump is in it."""
    lines = log.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("// -----// IR Dump Before") and pass_name in line:
            for j in range(i + 1, len(lines)):
                if lines[j].rstrip("\n") == "}":
                    return "".join(lines[i:j + 1]), "".join(lines[:i] + lines[j + 1:])
    return "", log


def substitution_report(log: str) -> tuple[set[str], set[str]]:
    """(executables IREE did not find to substitute, executables it reports substituted)."""
    return set(_NOT_FOUND.findall(log)), set(_SUBSTITUTED.findall(log))


# ---- source locations (--mlir-print-debuginfo) ---------------------------------------------

_LOC_ALIAS = re.compile(r"^(#loc\d*)\s*=\s*loc\((.*)\)\s*$", re.M)
_FILE_LOC = re.compile(r'"([^"]*)":(\d+):(\d+)')
# A quoted string and what follows it: a bare name location, loc("chain"), is one followed neither
# by ':line' (a file location) nor by '(' (a name with a child location, as importers write op
# kinds: "aten::mm"). Matched whole, so that the quote closing one name never opens another.
_QUOTED = re.compile(r'"([^"]*)"([:(]?)')
_SCOPE_LOC = re.compile(r'"([^"]+)"\(')  # a name with a child location
_ALIAS_REF = re.compile(r"#loc\d*")
_DISPATCH_FUNC = re.compile(r"^\s+func\.func\s+(" + _SYM + r")\(", re.M)
# The ops that carry an input op's work into a dispatch. Fills, yields and index ops are cloned
# or structural: they would join dispatches that share only a zero constant.
_ANCHOR_OP = re.compile(r"=\s*\"?((?:linalg|iree_linalg_ext)\.(\w+))")
_NOT_ANCHORS = {"fill", "yield", "index"}
_TRAILING_LOC = re.compile(r"\bloc\((.*)\)\s*$")
_PAYLOAD_OP = re.compile(r"=\s*(?:arith|math)\.\w+")


def _loc_aliases(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in _LOC_ALIAS.finditer(text)}


def _callees(body: str) -> str:
    """A location with every callsite(CALLEE at CALLER) replaced by its callee: the callers are the
    frames that called the op's line (an exporter's own, the model's wrappers), shared by every op
    of the module, so they identify none; also where the callsite sits inside a name,
    loc("jit(f)/blocks.0/dot_general"(callsite(... at ...)))."""
    out, i = [], 0
    while (start := body.find("callsite(", i)) >= 0:
        out.append(body[i:start])
        at = end = _scan(body, start + len("callsite("), " at ")
        if end < len(body) and body.startswith(" at ", end):
            end = _scan(body, end, ")")
        out.append(_callees(body[start + len("callsite("):at]))
        i = end + 1
    return "".join(out) + body[i:]


def _scan(text: str, i: int, stop: str) -> int:
    """The index of `stop` at bracket depth 0 from i, outside quoted strings (len(text) if none);
    a ')' that closes the enclosing bracket also stops."""
    depth, quoted = 0, False
    while i < len(text):
        c = text[i]
        if quoted:
            quoted = c != '"' or text[i - 1] == "\\"
        elif c == '"':
            quoted = True
        elif depth == 0 and text.startswith(stop, i):
            return i
        elif c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                return i
            depth -= 1
        i += 1
    return i


def _resolve_loc(body: str, aliases: dict[str, str], depth: int = 0, scopes: bool = False) -> list[str]:
    """'file:line:col' of the input ops a location names, and 'name:NAME' for each bare name location
    (names an input gives its ops, which identify an op across two source files): aliases followed,
    each callsite's callee taken (_callees), every member of a fused location kept.
    scopes: instead, the name stacks among its named locations ('jit(model)/blocks.0/mlp/dot_general',
    as jax.export names each op), whole."""
    if depth > 32:  # an alias chain this long is a cycle
        return []
    if scopes:  # a callsite's caller may hold the stack: callsite("gt" at "jit(f)/blocks.0/jit(_var)"(...))
        out = [n for n in _SCOPE_LOC.findall(body) if "/" in n]
    else:
        body = _callees(body)
        out = [f"{PurePosixPath(f).name}:{line}:{col}" for f, line, col in _FILE_LOC.findall(body)]
        out += [f"name:{n}" for n, follows in _QUOTED.findall(_FILE_LOC.sub("", body)) if n and not follows]
    for ref in _ALIAS_REF.findall(body):
        if ref in aliases:
            out += _resolve_loc(aliases[ref], aliases, depth + 1, scopes)
    return list(dict.fromkeys(out))


def ops_at(text: str, file: str, locs: list[str]) -> list[str]:
    """For each 'file:line:col' location into `text` (the source file named `file`, by base name):
    the op that starts there ('math.tanh', 'linalg.generic'); '' for another file's location, a
    name location, or a place where no op starts."""
    lines = text.split("\n")
    out = []
    for loc in locs:
        where, _, rest = loc.rpartition(":")
        name, _, line = where.rpartition(":")
        found = None
        if name == file and line.isdigit() and rest.isdigit() and 0 < int(line) <= len(lines):
            found = _OP_AT_LINE_START.match(lines[int(line) - 1][max(int(rest) - 1, 0):])
        out.append(found.group(1) if found else "")
    return out


_DISPATCH_CALL = re.compile(r"\bflow\.dispatch\s+(" + _SYM + r")::(" + _SYM + r")")


def call_site_locations(text: str, scopes: bool = False) -> dict[str, list[str]]:
    """Per dispatch function: the locations of the flow.dispatch ops that call it, in the order
    they call it. A deduplicated executable is called from every site whose executable it
    replaced, each op keeping its own site's location, where its body keeps the first one's.
    scopes: their name stacks instead (_resolve_loc)."""
    aliases = _loc_aliases(text)
    out: dict[str, list[str]] = {}
    for line in text.split("\n"):
        call, loc = _DISPATCH_CALL.search(line), _TRAILING_LOC.search(line)
        if call and loc:
            found = out.setdefault(_sym(call.group(2)), [])
            found += [x for x in _resolve_loc(loc.group(1), aliases, scopes=scopes) if x not in found]
    return out


def dispatch_locations(text: str, file: str = "<text>", scopes: bool = False) -> dict[str, list[str]]:
    """Per dispatch function of a flow-phase dump printed with --mlir-print-debuginfo: the input
    locations ('file:line:col', file by base name) of the linalg / linalg_ext ops in its body
    (scopes: their name stacks instead, _resolve_loc).

    A region op (linalg.generic) carries its location on the line that closes its region; the
    op's own line carries it otherwise. ParseError when the text holds no location at all (the
    dump was printed without debug info)."""
    if "loc(" not in text:
        raise ParseError(file, "line 1", "no MLIR locations (was it printed with --mlir-print-debuginfo?)")
    aliases = _loc_aliases(text)
    lines = text.split("\n")
    out: dict[str, list[str]] = {}
    current = None
    for i, line in enumerate(lines):
        head = _DISPATCH_FUNC.match(line)
        if head:
            current = _sym(head.group(1))
            out.setdefault(current, [])
            continue
        op = _ANCHOR_OP.search(line)
        if current is None or not op or op.group(2) in _NOT_ANCHORS:
            continue
        loc_lines = [line]
        if not _TRAILING_LOC.search(line):  # a region op: its location follows the region's '}'
            depth, opened, j = 0, False, i
            while j < len(lines):
                depth += lines[j].count("{") - lines[j].count("}")
                opened = opened or "{" in lines[j]
                if j > i and _PAYLOAD_OP.search(lines[j]):
                    loc_lines.append(lines[j])  # a fused producer's arithmetic keeps its own location
                if opened and depth <= 0:
                    break
                j += 1
            loc_lines[0] = lines[min(j, len(lines) - 1)]
        found = []
        for where in loc_lines:
            m = _TRAILING_LOC.search(where)
            if m is None:
                raise ParseError(file, f"line {i + 1}", f"{op.group(1)} without a location")
            found += _resolve_loc(m.group(1), aliases, scopes=scopes)
        out[current] = list(dict.fromkeys(out[current] + found))
    return out
