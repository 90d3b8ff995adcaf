"""Dataflow boundaries: end a dataflow block after named call_tir bindings, before FuseOps."""
from __future__ import annotations

from typing import Any

from rootcause.errors import UsageError
from rootcause.frontends.tvm.calls import call_tir_bindings
from rootcause.spec import VariantSpec


def split_dataflow(mod: Any, spec: VariantSpec) -> Any:
    """End the dataflow block right after each named call_tir (callee or binding var name)."""
    if not spec.options.dataflow_boundaries_after:
        return mod
    for i, name in enumerate(spec.options.dataflow_boundaries_after):
        bindings = _entry_bindings(mod, spec.entry)
        hits = [b.var.name for b, callee in bindings if name in (callee, b.var.name)]
        if not hits:
            callees = sorted({callee for _, callee in bindings})
            raise UsageError(f"{spec.where('tvm', 'dataflow_boundaries_after')}[{i}]: no call_tir of "
                             f"\"{name}\" in {spec.entry}; callees: {', '.join(callees)}")
        for var in hits:
            # looked up again: a split rebuilds the bindings that use a promoted var, so the
            # binding objects found before it no longer sit in the function
            hit = next(b for b, _ in _entry_bindings(mod, spec.entry) if b.var.name == var)
            mod = _split_after(mod, spec.entry, hit)
    return mod


def _entry_bindings(mod: Any, entry: str) -> list[tuple[Any, str]]:
    return [(b, callee) for fn, b, callee in call_tir_bindings(mod) if fn == entry]


def _split_after(mod: Any, fn_name: str, target_binding: Any) -> Any:
    from tvm import relax

    func = mod[fn_name]
    blocks = []
    for block in func.body.blocks:
        index = next((i for i, b in enumerate(block.bindings) if b.same_as(target_binding)), None)
        if not isinstance(block, relax.DataflowBlock) or index is None or index == len(block.bindings) - 1:
            blocks.append(block)
            continue
        blocks += [relax.DataflowBlock(block.bindings[: index + 1]),
                   relax.DataflowBlock(block.bindings[index + 1:])]
    crossing = _vars_used_across(blocks)
    new_func = _Promote(crossing).visit_expr(relax.Function(func.params, relax.SeqExpr(blocks, func.body.body),
                                                              func.ret_ty, func.is_pure, func.attrs))
    mod = mod.clone() if hasattr(mod, "clone") else mod
    mod[fn_name] = new_func
    return mod


def _vars_used_across(blocks: list[Any]) -> set[Any]:
    """Dataflow vars defined in one block and used in a later one: they must become outputs."""
    from tvm import relax

    crossing = set()
    for i, block in enumerate(blocks):
        defined = {b.var for b in block.bindings if isinstance(b.var, relax.DataflowVar)}
        for later in blocks[i + 1:]:
            for b in later.bindings:
                crossing |= defined & set(relax.analysis.free_vars(b.value))
    return crossing


def _promote_class() -> Any:
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class Promote(PyExprMutator):
        """Turn the given DataflowVars into Vars (block outputs), same names and struct info."""

        def __init__(self, targets: set[Any]):
            super().__init__()
            self.targets = {id(v): v for v in targets}
            self.names = {v.name for v in targets}
            self.new: dict[str, Any] = {}

        def _swap(self, var: Any) -> Any:
            if var.name in self.names and any(var.same_as(t) for t in self.targets.values()):
                if var.name not in self.new:
                    self.new[var.name] = relax.Var(var.name, var.ty)
                return self.new[var.name]
            return None

        def visit_dataflow_var_def_(self, var: Any) -> Any:
            new = self._swap(var)
            return new if new is not None else super().visit_dataflow_var_def_(var)

        def visit_dataflow_var_(self, var: Any) -> Any:
            new = self._swap(var)
            return new if new is not None else super().visit_dataflow_var_(var)

    return Promote


def _Promote(targets: set[Any]) -> Any:
    return _promote_class()(targets)
