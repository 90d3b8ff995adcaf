"""How a CPU kernel's hot loop walks memory: the bytes between the addresses that two consecutive
iterations of its innermost loop touch in each buffer.

Read from the lowered TIR that codegen receives (buffers flattened, common subexpressions bound
by `Bind` statements), so a schedule's loop order, splits and reorders are what is measured,
not the unscheduled op. A stride is the flat index at loop var = 1 less the index at 0, every
other loop var at 0 and bound variables substituted: exact for the affine indices TVM writes,
an estimate for floordiv/floormod ones (the first step's stride).

The statements are walked by hand: apache-tvm 0.27's `tvm.tirx` gives Python no statement
visitor (the `tir.stmt_functor.post_order_visit` of earlier releases is not registered).
"""
from __future__ import annotations

from typing import Any

from rootcause.frontends.tvm.tir import int_or_str

_BINARY = {
    "Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
    "FloorDiv": lambda a, b: a // b if b else None, "FloorMod": lambda a, b: a % b if b else None,
    "Div": lambda a, b: int(a / b) if b else None, "Mod": lambda a, b: a % b if b else None,
    "Min": min, "Max": max,
}


def hot_loop(func: Any) -> dict[str, Any]:
    """The innermost loop that runs the most iterations in all (its extent times its enclosing
    loops'), with the stride in bytes of every buffer it loads or stores:
    {"loop": "i", "extent": 128, "iterations": 262144, "strides_bytes": {"x": 8192, "y": 8192}};
    {} where the function has no loop with a constant extent or no access a stride could be read of."""
    loops: list[dict[str, Any]] = []
    _collect(func.body, [], {}, loops)
    if not loops:
        return {}
    best = max(loops, key=lambda r: r["iterations"])  # the first of equal ones: max keeps it
    return best if best["strides_bytes"] else {}


def _collect(node: Any, enclosing: list[tuple[Any, int]], binds: dict[str, Any], out: list[dict[str, Any]]) -> bool:
    """Walk statements; record each innermost constant-extent loop. Returns whether node holds a loop."""
    kind = type(node).__name__
    if kind == "SeqStmt":
        scope = dict(binds)  # a Bind names its value for the statements after it
        found = False
        for child in node.seq:
            if type(child).__name__ == "Bind":
                scope[child.var.name] = child.value
            found = _collect(child, enclosing, scope, out) or found
        return found
    if kind == "For":
        extent = int_or_str(node.extent)
        if not isinstance(extent, int):
            return True  # a loop, but not one whose trip count is known
        inner = enclosing + [(node.loop_var, extent)]
        if not _collect(node.body, inner, binds, out):
            iterations = 1
            for _, n in inner:
                iterations *= n
            out.append({"loop": node.loop_var.name, "extent": extent, "iterations": iterations,
                        "strides_bytes": _strides(node.body, node.loop_var.name, binds)})
        return True
    found = False
    for key in ("body", "then_case", "else_case", "block"):
        child = getattr(node, key, None)
        if child is not None and type(child).__module__.startswith("tvm"):
            found = _collect(child, enclosing, binds, out) or found
    return found


def _strides(body: Any, var: str, binds: dict[str, Any]) -> dict[str, int]:
    """Buffer name -> the largest stride in bytes of its accesses in `body` along loop var `var`."""
    strides: dict[str, int] = {}
    binds = dict(binds)  # gains the loop body's own Binds (a flat index is bound before its use)
    for buffer, indices in _accesses(body, binds):
        bits = _bits(buffer.dtype)
        offset0, offset1 = (_flat(indices, buffer, var, step, binds) for step in (0, 1))
        if bits is None or offset0 is None or offset1 is None:
            continue
        stride = abs(offset1 - offset0) * bits // 8
        strides[buffer.name] = max(strides.get(buffer.name, 0), stride)
    return strides


def _accesses(node: Any, binds: dict[str, Any]) -> list[tuple[Any, list[Any]]]:
    """(buffer, indices) of every BufferStore and BufferLoad under a statement; binds gains the
    Bind statements met on the way."""
    out: list[tuple[Any, list[Any]]] = []
    kind = type(node).__name__
    if kind == "Bind":
        binds[node.var.name] = node.value
        _loads(node.value, out)
    elif kind == "BufferStore":
        out.append((node.buffer, list(node.indices)))
        _loads(node.value, out)
    for key in ("body", "then_case", "else_case", "block"):
        child = getattr(node, key, None)
        if child is not None and type(child).__module__.startswith("tvm"):
            out += _accesses(child, binds)
    for child in getattr(node, "seq", None) or []:
        out += _accesses(child, binds)
    return out


def _loads(expr: Any, out: list[tuple[Any, list[Any]]]) -> None:
    if type(expr).__name__ in ("BufferLoad", "TensorLoad"):  # TVM 0.27 names a load TensorLoad(source, indices)
        out.append((getattr(expr, "buffer", None) or expr.source, list(expr.indices)))
    for key in ("a", "b", "value", "condition", "true_value", "false_value", "base"):
        child = getattr(expr, key, None)
        if child is not None and type(child).__module__.startswith("tvm"):
            _loads(child, out)
    for key in ("args", "indices"):
        for child in getattr(expr, key, None) or []:
            _loads(child, out)


def _flat(indices: list[Any], buffer: Any, var: str, step: int, binds: dict[str, Any]) -> int | None:
    """The row-major flat element offset of `indices` with `var` = step and other loop vars 0."""
    shape = [int_or_str(x) for x in buffer.shape]
    offset = 0
    for i, index in enumerate(indices):
        value = _eval(index, {var: step}, binds, 0)
        rest = shape[i + 1:]
        if value is None or not all(isinstance(x, int) for x in rest):
            return None
        for extent in rest:
            value *= extent
        offset += value
    return offset


def _eval(expr: Any, env: dict[str, int], binds: dict[str, Any], depth: int) -> int | None:
    """An integer index expression's value; loop vars not in env are 0."""
    if depth > 64:
        return None
    kind = type(expr).__name__
    if kind == "IntImm":
        return int(expr.value)
    if kind in ("Var", "SizeVar"):
        if expr.name in env:
            return env[expr.name]
        bound = binds.get(expr.name)
        return 0 if bound is None else _eval(bound, env, binds, depth + 1)
    if kind in _BINARY:
        a, b = _eval(expr.a, env, binds, depth + 1), _eval(expr.b, env, binds, depth + 1)
        return None if a is None or b is None else _BINARY[kind](a, b)
    if kind == "Cast":
        return _eval(expr.value, env, binds, depth + 1)
    if kind == "Ramp":  # a vector's first lane
        return _eval(expr.base, env, binds, depth + 1)
    if kind == "Broadcast":
        return _eval(expr.value, env, binds, depth + 1)
    return None


def _bits(dtype: Any) -> int | None:
    import tvm

    try:
        t = tvm.DataType(str(dtype))
    except Exception:  # a dtype this TVM does not parse: no stride in bytes
        return None
    return t.bits * max(1, t.lanes)
