"""Small readers of TIR PrimFuncs shared by the overrides, the catalog and the work count."""
from __future__ import annotations

from typing import Any


def param_types(func: Any) -> list[tuple[tuple[Any, ...], str]]:
    """(shape, dtype) per PrimFunc parameter: TIRx keeps BufferType in Var.ty (the pool_fusion case)."""
    import tvm

    out = []
    for param in func.params:
        ty = getattr(param, "ty", None)
        if ty is not None and hasattr(ty, "shape") and hasattr(ty, "dtype"):
            out.append((tuple(int_or_str(x) for x in ty.shape), str(tvm.DataType(ty.dtype))))
        elif param in func.buffer_map:
            buf = func.buffer_map[param]
            out.append((tuple(int_or_str(x) for x in buf.shape), str(buf.dtype)))
        else:
            out.append(((), str(getattr(param, "dtype", "?"))))
    return out


def int_or_str(x: Any) -> int | str:
    try:
        return int(x)
    except (TypeError, ValueError):
        return str(x)


def walk(node: Any, visit: Any) -> None:
    """Pre-order walk over TIR statements (this TVM build exposes no Python stmt visitor)."""
    visit(node)
    for key in ("body", "then_case", "else_case", "block", "init"):
        child = getattr(node, key, None)
        if child is not None and hasattr(child, "__class__") and not isinstance(child, (int, str)):
            if type(child).__module__.startswith("tvm"):
                walk(child, visit)
    for child in getattr(node, "seq", None) or []:
        walk(child, visit)
