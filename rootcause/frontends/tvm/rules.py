"""The scheduling rule: which DLight rule ApplyDefaultSchedule applied to each PrimFunc."""
from __future__ import annotations

from typing import Any


def rule_choices(mod: Any, transform: Any, target: Any) -> dict[str, tuple[str, Any]]:
    """For each unscheduled PrimFunc, the first DLight rule of the pass whose apply() succeeds.

    ApplyDefaultSchedule records no rule name, so the rules are tried one at a time, as the
    pass does (dlight base/transform.py _apply_rules), and the result is kept to be compared
    with what the pass itself produced.
    """
    from tvm import s_tir, tirx

    inst = getattr(transform, "_inst", None)
    rules = list(getattr(inst, "rules", []))
    choices: dict[str, tuple[str, Any]] = {}
    for gv, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc) or (func.attrs and "tirx.is_scheduled" in func.attrs
                                                    and bool(func.attrs["tirx.is_scheduled"])):
            continue
        func_target = func.attrs["target"] if func.attrs and "target" in func.attrs else target
        for rule in rules:
            space = rule.apply(func, func_target, False)
            if space is None:
                continue
            sch = space if isinstance(space, s_tir.Schedule) else space[0]
            choices[gv.name_hint] = (type(rule).__name__, sch.mod["main"].with_attr("tirx.is_scheduled", True))
            break
    return choices


def verify_rules(mod: Any, expected: dict[str, tuple[str, Any]]) -> dict[str, dict[str, Any]]:
    import tvm_ffi

    out = {}
    for gv, func in mod.functions_items():
        if gv.name_hint in expected:
            rule, want = expected[gv.name_hint]
            out[gv.name_hint] = {"rule": rule, "rule_verified": bool(tvm_ffi.structural_equal(func, want))}
    return out
