"""A reader of XLA's optimized HLO text (`compiled.as_text()`): computations, their instructions,
and per entry instruction what it computes. Plain data out; nothing here imports jax.

The text is one computation after another:

    %fused_computation.7 (param_0: f32[32,64], ...) -> f32[32,256] {
      ROOT %dot.7 = f32[32,256]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, ...,
          metadata={op_name="jit(model)/blocks.0.mlp/dot_general" ...}
    }
    ENTRY %main.1 (...) -> (f32[32,64]) {
      %fusion.3 = f32[32,256]{1,0} fusion(%p.1, %a.2), kind=kLoop, calls=%fused_computation.7, ...
    }

The entry computation's instructions are what the runtime executes one after another (XLA's CPU
thunks, GPU kernels and library calls), but for those that only name or rearrange buffers.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

# Entry instructions that execute nothing of their own (buffer naming, constants folded in).
NOT_RUN = frozenset(("parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all",
                     "partition-id", "replica-id", "opt-barrier"))
# Opcodes whose evaluation is a transcendental function, by the names rootcause.model.EVALUATED
# uses (what recomputation counts across compilers).
TRANSCENDENTAL = {"exponential": "exp", "exponential-minus-one": "exp", "log": "log", "log-plus-one": "log",
                  "logistic": "logistic", "tanh": "tanh", "rsqrt": "rsqrt", "sqrt": "sqrt", "power": "pow",
                  "erf": "erf", "sine": "sin", "cosine": "cos"}
_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s+\(.*\)\s+->\s+.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s+=\s+(.*)$")
_DIMS = re.compile(r"^[a-z]+\d*\[([\d,]*)\]")


@dataclass
class Instruction:
    name: str
    opcode: str
    shape: str  # 'f32[32,64]{1,0}', or a tuple '(f32[2], s32[])'
    operands: list[str]
    attrs: str  # the text after the operand list
    op_name: str = ""  # metadata op_name: the name stack of the JAX op it came from
    calls: list[str] = field(default_factory=list)  # called computations (calls=, to_apply=, ...)

    @property
    def dims(self) -> list[int]:
        m = _DIMS.match(self.shape)
        return [int(d) for d in m.group(1).split(",") if d] if m else []

    @property
    def elements(self) -> int:
        return math.prod(self.dims)

    def attr(self, key: str) -> str | None:
        m = re.search(rf"\b{key}=([^,\s]+|\{{[^}}]*\}})", self.attrs)
        return m.group(1) if m else None


@dataclass
class Computation:
    name: str
    entry: bool
    instructions: list[Instruction] = field(default_factory=list)

    def by_name(self) -> dict[str, Instruction]:
        return {i.name: i for i in self.instructions}


def _balanced(text: str, start: int) -> int:
    """Index just past the bracket group opening at text[start]."""
    depth = 0
    pairs = {"(": ")", "{": "}", "[": "]"}
    closing = set(pairs.values())
    for i in range(start, len(text)):
        c = text[i]
        if c in pairs:
            depth += 1
        elif c in closing:
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == '"':
            end = text.find('"', i + 1)
            i = end if end > 0 else i
    return len(text)


def parse_instruction(line: str) -> Instruction | None:
    m = _INSTR.match(line)
    if m is None:
        return None
    name, rest = m.group(1), m.group(2)
    if rest.startswith("("):
        end = _balanced(rest, 0)
        shape, rest = rest[:end], rest[end:].lstrip()
        if rest.startswith("{"):  # a layout after a tuple
            rest = rest[_balanced(rest, 0):].lstrip()
    else:
        shape, _, rest = rest.partition(" ")
    paren = rest.find("(")
    if paren <= 0:
        return None
    opcode = rest[:paren].strip()
    end = _balanced(rest, paren)
    operands = re.findall(r"%([\w.\-]+)", rest[paren:end])
    attrs = rest[end:]
    op_name = re.search(r'op_name="([^"]*)"', attrs)
    calls = re.findall(r"\b(?:calls|to_apply|body|condition|branch_computations)=\{?%?([\w.\-]+)", attrs)
    calls += re.findall(r"(?<=, )%([\w.\-]+)", (re.search(r"branch_computations=\{([^}]*)\}", attrs) or [None, ""])[1])
    return Instruction(name, opcode, shape, operands, attrs, op_name.group(1) if op_name else "", calls)


def read(text: str) -> dict[str, Computation]:
    """The module's computations by name, in text order (the entry one has entry=True)."""
    comps: dict[str, Computation] = {}
    current: Computation | None = None
    for line in text.splitlines():
        if current is None:
            m = _HEADER.match(line)
            if m:
                current = Computation(m.group(2), bool(m.group(1)))
            continue
        if line.strip() == "}":
            comps[current.name] = current
            current = None
            continue
        instr = parse_instruction(line)
        if instr is not None:
            current.instructions.append(instr)
    return comps


def entry(comps: dict[str, Computation]) -> Computation:
    found = [c for c in comps.values() if c.entry]
    if len(found) != 1:
        raise ValueError(f"{len(found)} ENTRY computations in the HLO text")
    return found[0]


def thunks(comps: dict[str, Computation]) -> list[Instruction]:
    """The entry instructions that run, in program order."""
    return [i for i in entry(comps).instructions if i.opcode not in NOT_RUN]


def body(comps: dict[str, Computation], instr: Instruction) -> list[Instruction]:
    """instr and every instruction of the computations it calls, transitively."""
    out, todo, seen = [instr], list(instr.calls), set()
    while todo:
        name = todo.pop()
        if name in seen or name not in comps:
            continue
        seen.add(name)
        for i in comps[name].instructions:
            out.append(i)
            todo.extend(i.calls)
    return out


@dataclass
class Work:
    """What one entry instruction computes, read from its body."""

    op_names: list[str]  # distinct metadata op_names, in body order
    flops: int  # dots and convolutions at 2 per multiply-add, elementwise ops at 1 per element
    evaluations: dict[str, int]  # transcendental function (TRANSCENDENTAL's names) -> evaluations a run
    library: str | None  # the library that runs it (a custom-call target or a custom fusion kind), if any


def work(comps: dict[str, Computation], instr: Instruction) -> Work:
    names: dict[str, None] = {}
    flops, evaluations = 0, {}
    called = {c for i in body(comps, instr) for c in i.calls}
    for i in body(comps, instr):
        if i.op_name:
            names.setdefault(i.op_name)
        if i.opcode in NOT_RUN or i.opcode in ("fusion", "call", "custom-call", "broadcast", "reshape",
                                               "transpose", "copy", "slice", "concatenate", "pad",
                                               "iota", "dynamic-slice", "dynamic-update-slice"):
            continue
        n = _evaluations(comps, i, called)
        if i.opcode in ("dot", "convolution"):
            flops += 2 * n
        else:
            flops += n
        if i.opcode in TRANSCENDENTAL:
            name = TRANSCENDENTAL[i.opcode]
            evaluations[name] = evaluations.get(name, 0) + n
    library = None
    if instr.opcode == "custom-call":
        library = (instr.attr("custom_call_target") or "").strip('"') or "custom-call"
        flops += _library_matmul_flops(comps, instr, library)
    elif instr.opcode == "fusion" and instr.attr("kind") == "kCustom":
        kind = re.search(r'"kind":"([^"]+)"', instr.attrs)
        name = kind.group(1).strip("_") if kind else "custom fusion"
        library = None if name.startswith("triton") else name  # Triton fusions are code XLA generates
    return Work(list(names), flops, evaluations, library)


def _library_matmul_flops(comps: dict[str, Computation], instr: Instruction, target: str) -> int:
    """A library GEMM's flops (cuBLAS, cuBLASLt, hipBLASLt custom calls): 2 x its output's elements
    x the contracted extent, from its backend_config's dot dimension numbers; 0 for other calls."""
    if not re.search(r"matmul|gemm", target, re.I):
        return 0
    out = re.match(r"^\(?[a-z]+\d*\[([\d,]*)\]", instr.shape)
    dims = re.search(r'"lhs_contracting_dimensions":\[([^\]]*)\]', instr.attrs)
    lhs = _shape_of(comps, instr.operands[0]) if instr.operands else []
    if out is None or dims is None or not lhs:
        return 0
    elements = math.prod(int(d) for d in out.group(1).split(",") if d)
    k = math.prod(lhs[int(d)] for d in re.findall(r"\d+", dims.group(1)) if int(d) < len(lhs))
    return 2 * elements * k


def _evaluations(comps: dict[str, Computation], i: Instruction, called: set[str]) -> int:
    """How often instruction i's op is evaluated in one run of its entry instruction: its output's
    elements, times the contraction for a dot, times the reduced elements for a reducer's body."""
    if i.opcode == "dot":
        lhs = _shape_of(comps, i.operands[0]) if i.operands else []
        dims = re.findall(r"\d+", i.attr("lhs_contracting_dims") or "")
        k = math.prod(lhs[int(d)] for d in dims if int(d) < len(lhs)) if lhs else 1
        return i.elements * k
    if i.opcode in ("reduce", "reduce-window"):
        src = _shape_of(comps, i.operands[0]) if i.operands else []
        return math.prod(src) if src else i.elements
    return i.elements


def _shape_of(comps: dict[str, Computation], name: str) -> list[int]:
    for c in comps.values():
        for i in c.instructions:
            if i.name == name:
                return i.dims
    return []
