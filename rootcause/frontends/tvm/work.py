"""Arithmetic work: floating-point operations of each PrimFunc as it is built.

Counted on the module the build hands to codegen, that is after DLight (or an override) has
scheduled it: scheduling may inline a producer into its consumer (compute_inline), and then
the consumer recomputes the producer for each of its outputs (apache/tvm#20342). Counting the
unscheduled PrimFunc would see the producer's work once and miss that growth.
"""
from __future__ import annotations

import math
from typing import Any

from rootcause.frontends.tvm.tir import int_or_str

_ARITH = ("Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Max", "Min")
_NOT_ARITH_CALLS = {"if_then_else", "likely", "reinterpret", "cast", "assume"}


def work_counts(mod: Any) -> dict[str, int | None]:
    """PrimFunc name -> flops of every PrimFunc of `mod` (flops() of each)."""
    from tvm import tirx

    return {gv.name_hint: flops(f) for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}


def flops(func: Any) -> int | None:
    """Arithmetic work of a PrimFunc, scheduled or not: for every buffer store, the
    floating-point ops of its value (Add, Sub, Mul, Div, Max, Min, math calls such as exp;
    index arithmetic, loads, casts and if_then_else selects not counted) x the times it runs,
    the product of the enclosing loop extents (serial, unrolled or bound to threads alike).

    A block realized under a predicate (T.where: a split that pads its loop) runs on fewer
    points than its loops span; there the count is capped at the block's own iteration domain
    (the product of its iter_vars' extents), so padding never reads as extra work. Init stores
    run once per output, not per reduction step, and are left out (they assign the reduction's identity).
    None when a loop extent is not a constant."""
    total = 0

    def stmt(node: Any, trip: int) -> bool:
        nonlocal total
        kind = type(node).__name__
        if kind == "For":
            extent = int_or_str(node.extent)
            return isinstance(extent, int) and stmt(node.body, trip * extent)
        if kind == "BufferStore":
            total += trip * _value_ops(node.value)
            return True
        if kind == "SBlockRealize" and not _always(node.predicate):
            domain = _domain(node.block)
            return stmt(node.block, trip if domain is None else min(trip, domain))
        children = [getattr(node, k, None) for k in ("block", "body", "then_case", "else_case")]
        children += list(getattr(node, "seq", None) or [])
        return all(stmt(c, trip) for c in children if c is not None and type(c).__module__.startswith("tvm"))

    return total if stmt(func.body, 1) else None


def _always(predicate: Any) -> bool:
    value = int_or_str(predicate)
    return isinstance(value, int) and value != 0


def _domain(block: Any) -> int | None:
    """Points of a block's iteration domain (None when an extent is symbolic)."""
    extents = [int_or_str(iv.dom.extent) for iv in block.iter_vars]
    return math.prod(extents) if all(isinstance(e, int) for e in extents) else None


def _value_ops(e: Any) -> int:
    kind = type(e).__name__
    if kind in ("BufferLoad", "TensorLoad", "Var", "IntImm", "FloatImm", "StringImm"):
        return 0
    own = 1 if kind in _ARITH and "float" in str(getattr(e, "ty", "")) else 0
    if kind == "Call":
        op = str(getattr(e.op, "name", "")).split(".")[-1]
        args = list(e.args)
        if op == "if_then_else":
            return sum(_value_ops(a) for a in args[1:])  # the condition is index arithmetic
        own = 1 if op not in _NOT_ARITH_CALLS and "float" in str(getattr(e, "ty", "")) else 0
        return own + sum(_value_ops(a) for a in args)
    if kind == "Select":
        return _value_ops(e.true_value) + _value_ops(e.false_value)
    children = [getattr(e, k) for k in ("a", "b", "value", "body") if hasattr(e, k)]
    return own + sum(_value_ops(c) for c in children if type(c).__module__.startswith("tvm"))
