"""The call_tir bindings of Relax functions, shared by dataflow boundaries and provenance."""
from __future__ import annotations

from typing import Any


def call_tir_bindings(mod: Any) -> list[tuple[str, Any, str]]:
    """(relax function, binding, callee) for each call_tir of each non-primitive Relax function."""
    from tvm import relax

    rows = []
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function) or is_primitive(func):
            continue
        for block in func.body.blocks:
            for binding in block.bindings:
                callee = call_tir_callee(getattr(binding, "value", None))
                if callee is not None:
                    rows.append((gv.name_hint, binding, callee))
    return rows


def is_primitive(func: Any) -> bool:
    return bool(func.attrs and "Primitive" in func.attrs and int(func.attrs["Primitive"]))


def call_tir_callee(value: Any) -> str | None:
    from tvm import relax

    if isinstance(value, relax.Call) and isinstance(value.op, __import__("tvm").ir.Op) \
            and value.op.name == "relax.call_tir":
        return value.args[0].name_hint
    return None
