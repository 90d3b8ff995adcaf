"""Provenance: the input call_tir ops each PrimFunc computes, through FuseOps and FuseTIR."""
from __future__ import annotations

import hashlib
from typing import Any

from rootcause.frontends.tvm.calls import call_tir_callee, is_primitive


def provenance(before: Any, after_fuse_ops: Any, after_fuse_tir: Any
               ) -> tuple[dict[str, list[str]], dict[str, str]]:
    """(PrimFunc name after FuseTIR -> ids '<fn>/<var>:<callee>' of the input ops it computes,
    each such id -> the op's content id), from one walk of the input module.

    FuseOps renames bindings (a group's output becomes 'gv'), so ops are matched by what they
    compute: a hash of callee and argument hashes, with fused functions expanded in place.
    Identical computations (nine add(x, 1)) match in binding order. FuseTIR then replaces
    each call of a fused Relax function by one call_tir, binding for binding.

    A content id 'relax:<hash>#<k>' is that hash (callee and, recursively, inputs: parameters by
    position, constants by value), the k-th op of it in binding order. Binding names are the
    source file's (FuseOps' 'gv', BlockBuilder's 'lv3', a user's 'q'), so two files that build the
    same computation name its ops apart; their content ids are the same (a dataflow block split by
    hand in a second file keeps its ops' ids).
    """
    rows = _signatures(before)
    ops = [(sig, f"{fn}/{var}:{callee}") for sig, fn, var, callee, _ in rows]
    located = [(sig, where) for sig, _, _, _, where in _signatures(after_fuse_ops)]
    groups: dict[str, list[str]] = {}
    for sig, op_id in ops:
        hit = next((i for i, (s, _) in enumerate(located) if s == sig), None)
        if hit is None:
            continue
        groups.setdefault(located.pop(hit)[1], []).append(op_id)
    rename = _fuse_tir_names(after_fuse_ops, after_fuse_tir)
    out: dict[str, list[str]] = {}
    for where, ids in groups.items():
        for op_id in ids:
            if op_id not in out.setdefault(rename.get(where, where), []):
                out[rename.get(where, where)].append(op_id)
    return out, _content_ids(ops)


def _content_ids(ops: list[tuple[str, str]]) -> dict[str, str]:
    """Provenance id -> 'relax:<hash16>#<k>', k counting the ops of one hash in binding order."""
    seen: dict[str, int] = {}
    content: dict[str, str] = {}
    for sig, op_id in ops:
        seen[sig] = seen.get(sig, -1) + 1
        content[op_id] = f"relax:{sig[:16]}#{seen[sig]}"
    return content


def _signatures(mod: Any) -> list[tuple[str, str, str, str, str]]:
    """(hash, relax fn, var, callee, location) per call_tir reached from non-primitive functions;
    location is the fused Relax function it sits in, or the callee when called directly."""
    from tvm import relax

    rows: list[tuple[str, str, str, str, str]] = []
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function) and not is_primitive(func):
            env = {p: _h("param", gv.name_hint, i) for i, p in enumerate(func.params)}
            _eval_body(mod, func.body, env, gv.name_hint, None, rows)
    return rows


def _eval_body(mod: Any, seq: Any, env: dict[Any, str], fn: str, inside: str | None,
               rows: list[tuple[str, str, str, str, str]]) -> str:
    for block in seq.blocks:
        for binding in block.bindings:
            value = binding.value
            sig = _eval_expr(mod, value, env, fn, inside, rows)
            env[binding.var] = sig
            callee = call_tir_callee(value)
            if callee is not None:
                rows.append((sig, fn, binding.var.name, callee, inside or callee))
    return _eval_expr(mod, seq.body, env, fn, inside, rows)


def _eval_expr(mod: Any, e: Any, env: dict[Any, str], fn: str, inside: str | None,
               rows: list[tuple[str, str, str, str, str]]) -> str:
    import tvm
    from tvm import relax

    if isinstance(e, relax.Var):
        return env.get(e) or _h("free", e.name)
    # Constant moved from relax.expr (apache-tvm 0.26) to tvm.ir.expr (0.27)
    if isinstance(e, tuple(c for c in (getattr(tvm.ir.expr, "Constant", None), getattr(relax, "Constant", None)) if c)):
        value = getattr(e, "value", None)
        data = value.numpy() if hasattr(value, "numpy") else value
        return _h("const", str(getattr(data, "dtype", "")), getattr(data, "shape", ()),
                  data.tobytes() if hasattr(data, "tobytes") else repr(data))
    if isinstance(e, relax.Tuple):
        return _h("tuple", *[_eval_expr(mod, f, env, fn, inside, rows) for f in e.fields])
    if isinstance(e, relax.TupleGetItem):
        return _h("get", _eval_expr(mod, e.tuple_value, env, fn, inside, rows), e.index)
    if isinstance(e, relax.Call):
        args = [_eval_expr(mod, a, env, fn, inside, rows) for a in e.args]
        if isinstance(e.op, tvm.ir.Op):
            if e.op.name == "relax.call_tir":
                return _h("call_tir", e.args[0].name_hint, args[1])
            return _h("op", e.op.name, *args)
        if isinstance(e.op, relax.GlobalVar) and isinstance(mod[e.op], relax.Function):
            inner = mod[e.op]  # a fused function: expand it with the call's arguments
            inner_env = dict(zip(inner.params, args))
            return _eval_body(mod, inner.body, inner_env, fn, e.op.name_hint, rows)
        return _h("call", str(e.op), *args)
    return _h(type(e).__name__, str(e))


def _h(*parts: Any) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()


def _fuse_tir_names(before: Any, after: Any) -> dict[str, str]:
    """Fused Relax function (or PrimFunc) name before FuseTIR -> PrimFunc name after it."""
    from tvm import relax

    rename: dict[str, str] = {}
    for gv, func in before.functions_items():
        if not isinstance(func, relax.Function) or is_primitive(func) or gv.name_hint not in \
                [g.name_hint for g in after.get_global_vars()]:
            continue
        old = [b for blk in func.body.blocks for b in blk.bindings]
        new = [b for blk in after[gv.name_hint].body.blocks for b in blk.bindings]
        if len(old) != len(new):
            continue
        for a, b in zip(old, new):
            src, dst = _callee_name(a.value), call_tir_callee(b.value)
            if src and dst:
                rename[src] = dst
    return rename


def _callee_name(value: Any) -> str | None:
    from tvm import relax

    callee = call_tir_callee(value)
    if callee is None and isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar):
        callee = value.op.name_hint
    return callee
