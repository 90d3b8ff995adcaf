"""Arithmetic work: floating-point operations of each unscheduled PrimFunc."""
from __future__ import annotations

from typing import Any

from rootcause.frontends.tvm.tir import int_or_str

_ARITH = ("Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Max", "Min")
_NOT_ARITH_CALLS = {"if_then_else", "likely", "reinterpret", "cast", "assume"}


def work_counts(mod: Any) -> dict[str, int | None]:
    """PrimFunc name -> flops of an unscheduled module (flops() of each PrimFunc)."""
    from tvm import tirx

    return {gv.name_hint: flops(f) for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}


def flops(func: Any) -> int | None:
    """Arithmetic work of an unscheduled PrimFunc: for every buffer store, the floating-point
    ops of its value (Add, Sub, Mul, Div, Max, Min, math calls such as exp; index arithmetic,
    loads, casts and if_then_else selects not counted) x the product of the enclosing loop
    extents (each sblock's iteration domain). None when a loop extent is not a constant."""
    total = 0

    def stmt(node: Any, trip: int) -> bool:
        kind = type(node).__name__
        if kind == "For":
            extent = int_or_str(node.extent)
            return isinstance(extent, int) and stmt(node.body, trip * extent)
        if kind == "BufferStore":
            nonlocal total
            total += trip * _value_ops(node.value)
            return True
        children = [getattr(node, k, None) for k in ("block", "body", "init", "then_case", "else_case")]
        children += list(getattr(node, "seq", None) or [])
        return all(stmt(c, trip) for c in children if c is not None and type(c).__module__.startswith("tvm"))

    return total if stmt(func.body, 1) else None


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
