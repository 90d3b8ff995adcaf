"""TVM Relax frontend: build a VariantSpec into module.so plus a kernel catalog.

The build runs in a subprocess (`python -m rootcause.frontends.tvm.build REQUEST OUT`): TVM decides
whether it can make cubins when it first loads its CUDA runtime, so on a GPU-less machine the
build-only libcuda stub must be on LD_LIBRARY_PATH before `import tvm` (docs/GPU_HOST.md).

Inside, the target's Relax pipeline runs pass by pass, as seeds/000 does: library dispatch +
legalize passes (honouring skip_passes, dataflow boundaries before FuseOps, schedule overrides
before ApplyDefaultSchedule), then dataflow-lower + finalize passes, then relax.build. The
catalog comes from the IR: provenance (input call_tir bindings -> FuseOps groups -> FuseTIR
PrimFuncs), the DLight rule that scheduled each PrimFunc (re-applied one rule at a time and
checked against the real pass's output), and launch extents and allocations read from the
lowered device functions, the ones codegen turns into the exported kernels.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from rootcause.errors import UsageError
from rootcause.fileio import write_atomic, write_json
from rootcause.model import BuildOutput
from rootcause.model import CatalogKernel
from rootcause.spec import VariantSpec

SAVED_STAGES = ("FuseOps", "FuseTIR", "ApplyDefaultSchedule")
_TVMSCRIPT_RE = re.compile(r"^@(I|tvm\.script\.ir|ir)\.ir_module", re.M)


# ---------------------------------------------------------------- parent side (no TVM import)

def build(spec: VariantSpec, out_dir: Path) -> BuildOutput:
    """Build one variant into out_dir (module.so, ir/, binaries/); raises UsageError on bad specs."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    request = write_json(out_dir / "build_request.json", spec.to_dict())
    result_path = out_dir / "build_result.json"
    result_path.unlink(missing_ok=True)
    proc = subprocess.run([sys.executable, "-m", "rootcause.frontends.tvm.build", str(request), str(out_dir)],
                          env=build_env(spec.target), capture_output=True, text=True)
    write_atomic(out_dir / "build.log", proc.stdout + proc.stderr)
    result = json.loads(result_path.read_text()) if result_path.is_file() else {}
    if "usage_error" in result:
        raise UsageError(result["usage_error"])
    if proc.returncode != 0 or "kernels" not in result:
        lines = [line for line in (proc.stderr or "").splitlines() if line.strip()]
        last = [line for line in lines if "Error" in line][-1:] or lines[-1:] or ["no output"]
        raise UsageError(f"{spec.spec_file.name}: TVM build of '{spec.name}' failed: {last[0].strip()} "
                         f"(full log: {out_dir / 'build.log'})")
    kernels = [CatalogKernel.from_dict(k) for k in result["kernels"]]
    module_path = out_dir / result["module_path"]
    binaries, notes = extract_binaries(module_path, out_dir) if spec.target.startswith("cuda") else ([], [])
    notes = list(result["notes"]) + notes
    notes += _fill_resources(kernels, [p for p in binaries if p.suffix == ".cubin"], spec.target)
    return BuildOutput(module_path=module_path, kernels=kernels,
                       ir_files=[out_dir / p for p in result["ir_files"]], binary_files=binaries,
                       versions=result["versions"], notes=notes)


def build_env(target: str) -> dict[str, str]:
    """Environment for the build subprocess: CUDA targets get nvcc and, without a driver, the stub."""
    from rootcause import toolchain

    env = dict(os.environ)
    if target.startswith("cuda"):
        nvcc = toolchain.require_tool("nvcc")
        env["PATH"] = f"{nvcc.parent}{os.pathsep}{env.get('PATH', '')}"
        env["CUDA_HOME"] = str(toolchain.cuda_home())
        env["TVM_CUDA_COMPILE_MODE"] = "nvcc"
        if not toolchain.real_driver_present():
            stub = toolchain.libcuda_stub_dir()
            env["LD_LIBRARY_PATH"] = f"{stub}{os.pathsep}{env.get('LD_LIBRARY_PATH', '')}".rstrip(os.pathsep)
    return env


def _fill_resources(kernels: list[CatalogKernel], cubins: list[Path], target: str) -> list[str]:
    """Per-kernel resources (registers, shared, local) of the built cubins, via rootcause.inspect."""
    if not cubins:
        return []
    from rootcause import inspect as rc_inspect

    found = rc_inspect.inspect_paths(cubins, arch=target.split(":", 1)[1])
    rows = {}
    for record in found.records:
        rows.setdefault(record.name, record.to_dict())
    for kernel in kernels:
        kernel.resources = rows.get(kernel.name, {})
    missing = [k.name for k in kernels if not k.resources]
    notes = list(found.errors)
    if missing:
        notes.append(f"no resources found in the cubins for: {', '.join(missing)}")
    return notes


# ---------------------------------------------------------------- worker side (imports TVM)

def _worker(request: Path, out_dir: Path) -> int:
    spec = VariantSpec.from_dict(json.loads(request.read_text()))
    try:
        result = _build_in_process(spec, out_dir)
    except UsageError as err:
        write_json(out_dir / "build_result.json", {"usage_error": str(err)})
        return 2
    write_json(out_dir / "build_result.json", result)
    return 0


def _build_in_process(spec: VariantSpec, out_dir: Path) -> dict[str, Any]:
    import tvm
    from tvm import relax

    if spec.target.startswith("cuda"):
        import tvm.support.nvcc  # noqa: F401  registers the nvcc compile callback TVM uses
    target = make_target(spec)
    stages = pipeline_module(spec, target)
    ir_dir = out_dir / "ir"
    ir_dir.mkdir(parents=True, exist_ok=True)
    mod = load_source(spec)
    ir_files = [_save_ir(ir_dir / "00_input.py", mod)]
    notes: list[str] = []
    with target, tvm.transform.PassContext(opt_level=spec.tvm.opt_level):
        first = stages.library_dispatch_passes(target) + stages.legalize_passes(target)
        second = stages.dataflow_lower_passes(target) + stages.finalize_passes(target)
        names = [pass_name(p) for p in first + second]
        _check_skips(spec, names)
        base = provenance_base = None
        work: dict[str, int | None] = {}
        rules: dict[str, dict[str, Any]] = {}
        overridden = False
        for index, transform in enumerate(first, start=1):
            name = pass_name(transform)
            if name == "FuseOps":
                mod = split_dataflow(mod, spec)
                provenance_base = mod
            if name == "ApplyDefaultSchedule":
                work = work_counts(mod)  # counted before any schedule (passes may update mod in place)
                mod = apply_overrides(mod, spec, target)
                overridden = True
                expected = rule_choices(mod, transform, target)
            if name in spec.tvm.skip_passes:
                continue
            mod = transform(mod)
            if name == "FuseOps":
                base = mod
            if name == "ApplyDefaultSchedule":
                rules = _verify_rules(mod, expected)
            if name in SAVED_STAGES:
                ir_files.append(_save_ir(ir_dir / f"{index:02d}_{name}.py", mod))
        if provenance_base is None:  # a pipeline without FuseOps: every op stays its own kernel
            mod = provenance_base = split_dataflow(mod, spec)
        if not overridden:
            work = work_counts(mod)
            mod = apply_overrides(mod, spec, target)
        after_fuse_tir = mod
        groups = provenance(provenance_base, base if base is not None else provenance_base, after_fuse_tir)
        for transform in second:
            if pass_name(transform) not in spec.tvm.skip_passes:
                mod = transform(mod)
        catalog = kernel_catalog(mod, target, groups, rules, spec, work)
        executable = relax.build(mod, target=target, relax_pipeline=None, tir_pipeline="default")
    module_path = out_dir / "module.so"
    executable.export_library(str(module_path))
    return {"module_path": "module.so", "kernels": catalog,
            "ir_files": [str(p.relative_to(out_dir)) for p in ir_files],
            "versions": _versions(spec), "notes": notes}


def make_target(spec: VariantSpec) -> Any:
    import tvm

    host = {"kind": "llvm", "mcpu": "generic"}
    if spec.target == "llvm":
        return tvm.target.Target(host)
    if spec.target.startswith("cuda:"):
        return tvm.target.Target({"kind": "cuda", "arch": spec.target.split(":", 1)[1]}, host=host)
    raise UsageError(f"{spec.where('', 'target')}: the tvm frontend builds 'cuda:sm_XX' and 'llvm', "
                     f"not \"{spec.target}\"")


def pipeline_module(spec: VariantSpec, target: Any) -> Any:
    """The backend pipeline module whose pass lists the build runs (cuda or cpu_generic)."""
    if target.kind.name == "cuda":
        from tvm.relax.backend.cuda import pipeline
    else:
        from tvm.relax.backend.cpu_generic import pipeline
    return pipeline


def pass_name(transform: Any) -> str:
    return str(transform.info.name).split(".")[-1]


def _check_skips(spec: VariantSpec, names: list[str]) -> None:
    for i, name in enumerate(spec.tvm.skip_passes):
        if name not in names:
            raise UsageError(f"{spec.where('tvm', 'skip_passes')}[{i}]: unknown pass \"{name}\" in the "
                             f"{spec.target} pipeline; valid: {', '.join(names)}")


def _save_ir(path: Path, mod: Any) -> Path:
    write_atomic(path, mod.script())
    return path


def _versions(spec: VariantSpec) -> dict[str, str]:
    import platform

    import tvm
    import rootcause
    from rootcause import toolchain

    versions = {"tvm": tvm.__version__, "python": platform.python_version(),
                "rootcause": rootcause.__version__}
    if spec.target.startswith("cuda"):
        versions["nvcc"] = toolchain.tool_version("nvcc") or "missing"
    return versions


# ---------------------------------------------------------------- source loading

def load_source(spec: VariantSpec) -> Any:
    """The IRModule of a TVMScript file, or of a Python file exposing Module / mod / a factory."""
    import tvm

    text = spec.source.read_text(encoding="utf-8")
    if _TVMSCRIPT_RE.search(text):
        mod = parse_tvmscript(text, spec.source)
    else:
        mod = _from_python(spec.source)
    if not isinstance(mod, tvm.IRModule):
        raise UsageError(f"{spec.source}: does not define an IRModule")
    if spec.entry not in [gv.name_hint for gv in mod.get_global_vars()]:
        raise UsageError(f"{spec.where('', 'entry')}: no function \"{spec.entry}\" in {spec.source.name}; "
                         f"functions: {', '.join(sorted(gv.name_hint for gv in mod.get_global_vars()))}")
    return mod


def parse_tvmscript(text: str, file: Path) -> Any:
    """Parse TVMScript text (leading import lines dropped) with I, R, T bound and s_tir on."""
    import tvm
    from tvm.script import ir as I, relax as R, tirx as T

    lines = text.splitlines()
    start = 0
    while start < len(lines) and (not lines[start].strip() or lines[start].startswith(("from ", "import ", "#"))):
        start += 1
    try:
        return tvm.script.from_source("\n".join(lines[start:]) + "\n", extra_vars=dict(I=I, R=R, T=T),
                                      s_tir=True)
    except Exception as err:  # TVM raises DiagnosticError and others; one line is what we owe
        first = str(err).strip().splitlines()
        raise UsageError(f"{file}: TVMScript does not parse: {first[-1] if first else type(err).__name__}") \
            from None


def _from_python(path: Path) -> Any:
    import runpy

    import tvm

    try:
        namespace = runpy.run_path(str(path))
    except Exception as err:
        raise UsageError(f"{path}: running it failed: {type(err).__name__}: {err}") from None
    for key in ("Module", "mod"):
        if isinstance(namespace.get(key), tvm.IRModule):
            return namespace[key]
    for key in ("make_module", "get_module", "module", "build_module"):
        if callable(namespace.get(key)):
            return namespace[key]()
    raise UsageError(f"{path}: defines no IRModule 'Module' or 'mod' and no factory "
                     "make_module()/get_module()")


# ---------------------------------------------------------------- dataflow boundaries

def call_tir_bindings(mod: Any) -> list[tuple[str, Any, str]]:
    """(relax function, binding, callee) for each call_tir of each non-primitive Relax function."""
    from tvm import relax

    rows = []
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function) or _is_primitive(func):
            continue
        for block in func.body.blocks:
            for binding in block.bindings:
                callee = _call_tir_callee(getattr(binding, "value", None))
                if callee is not None:
                    rows.append((gv.name_hint, binding, callee))
    return rows


def _is_primitive(func: Any) -> bool:
    return bool(func.attrs and "Primitive" in func.attrs and int(func.attrs["Primitive"]))


def _call_tir_callee(value: Any) -> str | None:
    from tvm import relax

    if isinstance(value, relax.Call) and isinstance(value.op, __import__("tvm").ir.Op) \
            and value.op.name == "relax.call_tir":
        return value.args[0].name_hint
    return None


def split_dataflow(mod: Any, spec: VariantSpec) -> Any:
    """End the dataflow block right after each named call_tir (callee or binding var name)."""
    if not spec.tvm.dataflow_boundaries_after:
        return mod
    bindings = [(fn, b, callee) for fn, b, callee in call_tir_bindings(mod) if fn == spec.entry]
    for i, name in enumerate(spec.tvm.dataflow_boundaries_after):
        hits = [b for _, b, callee in bindings if name in (callee, b.var.name)]
        if not hits:
            callees = sorted({callee for _, _, callee in bindings})
            raise UsageError(f"{spec.where('tvm', 'dataflow_boundaries_after')}[{i}]: no call_tir of "
                             f"\"{name}\" in {spec.entry}; callees: {', '.join(callees)}")
        for hit in hits:
            mod = _split_after(mod, spec.entry, hit)
    return mod


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


# ---------------------------------------------------------------- schedule overrides

def _param_types(func: Any) -> list[tuple[tuple[Any, ...], str]]:
    """(shape, dtype) per PrimFunc parameter: TIRx keeps BufferType in Var.ty (the pool_fusion case)."""
    import tvm

    out = []
    for param in func.params:
        ty = getattr(param, "ty", None)
        if ty is not None and hasattr(ty, "shape") and hasattr(ty, "dtype"):
            out.append((tuple(_int_or_str(x) for x in ty.shape), str(tvm.DataType(ty.dtype))))
        elif param in func.buffer_map:
            buf = func.buffer_map[param]
            out.append((tuple(_int_or_str(x) for x in buf.shape), str(buf.dtype)))
        else:
            out.append(((), str(getattr(param, "dtype", "?"))))
    return out


def _int_or_str(x: Any) -> int | str:
    try:
        return int(x)
    except (TypeError, ValueError):
        return str(x)


def apply_overrides(mod: Any, spec: VariantSpec, target: Any) -> Any:
    """Replace PrimFuncs by name with the TVMScript PrimFunc of an override file (seed's SERIAL)."""
    from tvm import tirx

    if not spec.tvm.schedule_overrides:
        return mod
    prims = {gv.name_hint: gv for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}
    for fn, path in spec.tvm.schedule_overrides.items():
        where = f"{spec.where('tvm', 'schedule_overrides')}.{fn}"
        if fn not in prims:
            raise UsageError(f"{where}: no function \"{fn}\" after fusion; functions: {', '.join(sorted(prims))}")
        replacement = _override_func(path, fn, where)
        if target.kind.name == "llvm" and "T.thread_binding" in replacement.script():
            raise UsageError(f"{where}: {path.name} binds GPU threads (blockIdx/threadIdx); it cannot "
                             f"build for {spec.target}")
        want, got = _param_types(mod[prims[fn]]), _param_types(replacement)
        if want != got:
            raise UsageError(f"{where}: parameters of {path.name} {_fmt_params(got)} differ from "
                             f"{fn}'s {_fmt_params(want)}")
        mod.update_func(prims[fn], replacement.with_attr("tirx.is_scheduled", True))
    return mod


def _fmt_params(params: list[tuple[tuple[Any, ...], str]]) -> str:
    return "[" + ", ".join(f"{dtype}{list(shape)}" for shape, dtype in params) + "]"


def _override_func(path: Path, fn: str, where: str) -> Any:
    import tvm
    from tvm import tirx

    parsed = parse_tvmscript(path.read_text(encoding="utf-8"), path)
    if isinstance(parsed, tirx.PrimFunc):
        return parsed
    prims = {gv.name_hint: f for gv, f in parsed.functions_items() if isinstance(f, tirx.PrimFunc)}
    if len(prims) == 1:
        return next(iter(prims.values()))
    if fn in prims:
        return prims[fn]
    raise UsageError(f"{where}: {path.name} must hold one PrimFunc (or one named {fn}); found "
                     f"{', '.join(prims) or 'none'}")


# ---------------------------------------------------------------- scheduling rule

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


def _verify_rules(mod: Any, expected: dict[str, tuple[str, Any]]) -> dict[str, dict[str, Any]]:
    import tvm_ffi

    out = {}
    for gv, func in mod.functions_items():
        if gv.name_hint in expected:
            rule, want = expected[gv.name_hint]
            out[gv.name_hint] = {"rule": rule, "rule_verified": bool(tvm_ffi.structural_equal(func, want))}
    return out


# ---------------------------------------------------------------- provenance

def provenance(before: Any, after_fuse_ops: Any, after_fuse_tir: Any) -> dict[str, list[str]]:
    """PrimFunc name (after FuseTIR) -> ids '<fn>/<var>:<callee>' of the input ops it computes.

    FuseOps renames bindings (a group's output becomes 'gv'), so ops are matched by what they
    compute: a hash of callee and argument hashes, with fused functions expanded in place.
    Identical computations (nine add(x, 1)) match in binding order. FuseTIR then replaces
    each call of a fused Relax function by one call_tir, binding for binding.
    """
    ops = [(sig, f"{fn}/{var}:{callee}") for sig, fn, var, callee, _ in _signatures(before)]
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
    return out


def _signatures(mod: Any) -> list[tuple[str, str, str, str, str]]:
    """(hash, relax fn, var, callee, location) per call_tir reached from non-primitive functions;
    location is the fused Relax function it sits in, or the callee when called directly."""
    from tvm import relax

    rows: list[tuple[str, str, str, str, str]] = []
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function) and not _is_primitive(func):
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
            callee = _call_tir_callee(value)
            if callee is not None:
                rows.append((sig, fn, binding.var.name, callee, inside or callee))
    return _eval_expr(mod, seq.body, env, fn, inside, rows)


def _eval_expr(mod: Any, e: Any, env: dict[Any, str], fn: str, inside: str | None,
               rows: list[tuple[str, str, str, str, str]]) -> str:
    import tvm
    from tvm import relax

    if isinstance(e, relax.Var):
        return env.get(e) or _h("free", e.name)
    if isinstance(e, tvm.ir.expr.Constant):
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
        if not isinstance(func, relax.Function) or _is_primitive(func) or gv.name_hint not in \
                [g.name_hint for g in after.get_global_vars()]:
            continue
        old = [b for blk in func.body.blocks for b in blk.bindings]
        new = [b for blk in after[gv.name_hint].body.blocks for b in blk.bindings]
        if len(old) != len(new):
            continue
        for a, b in zip(old, new):
            src, dst = _callee_name(a.value), _call_tir_callee(b.value)
            if src and dst:
                rename[src] = dst
    return rename


def _callee_name(value: Any) -> str | None:
    from tvm import relax

    callee = _call_tir_callee(value)
    if callee is None and isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar):
        callee = value.op.name_hint
    return callee


# ---------------------------------------------------------------- catalog from lowered TIR

def kernel_catalog(mod: Any, target: Any, groups: dict[str, list[str]], rules: dict[str, dict[str, Any]],
                   spec: VariantSpec, flops: dict[str, int | None] | None = None) -> list[dict[str, Any]]:
    """One CatalogKernel (as dict) per exported kernel, from the TIR that codegen receives.

    Replays tvm.tirx.build's lowering (BindTarget, default TIR pipeline, host/device split) on
    the PrimFuncs of the final module: device functions are the kernels; each host function
    launches its kernels by name (call_ffi_kernel), which links a kernel to its PrimFunc.
    """
    import tvm
    import tvm.s_tir.pipeline  # noqa: F401  registers the 's_tir' TIR pipeline
    from tvm import tirx
    from tvm.tirx.build import split_host_device_mods

    prims = {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}
    tir_mod = tvm.IRModule({gv: f for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)})
    # tirx.build binds the target with its host (a CPU target is its own host).
    host_target = target.host if target.host is not None else target
    tir_mod = tirx.transform.BindTarget(target.with_host(host_target))(tir_mod)
    lowering, _, _ = tvm.tirx.get_default_tir_pipeline(target)
    host, devices = split_host_device_mods(lowering(tir_mod))
    device_funcs = {gv.name_hint: f for dm in devices.values() for gv, f in dm.functions_items()}
    launched_by = _kernel_launches(host, set(device_funcs))
    kernels = []
    for fname, func in prims.items():
        common = {"function": fname, "source_ops": groups.get(fname, []), "call_sites": [spec.entry],
                  "bytes_moved": _bytes_moved(func), "flops": (flops or {}).get(fname)}
        schedule = dict(rules.get(fname, {"rule": None}))
        if fname in spec.tvm.schedule_overrides:
            schedule = {"rule": "override", "override_file": spec.tvm.schedule_overrides[fname].name}
        names = launched_by.get(fname) or [n for n in device_funcs if n.startswith(fname + "_kernel")]
        if not device_funcs:  # CPU: the PrimFunc itself is the exported function
            kernels.append(CatalogKernel(name=fname, schedule=schedule, **common).to_dict())
            continue
        for name in names:
            launch, shared, local = _device_facts(device_funcs[name])
            kernels.append(CatalogKernel(name=name, launch=launch,
                                         schedule={**schedule, "shared_allocs": shared, "local_allocs": local},
                                         **common).to_dict())
    return kernels


def _walk(node: Any, visit: Any) -> None:
    """Pre-order walk over TIR statements (this TVM build exposes no Python stmt visitor)."""
    visit(node)
    for key in ("body", "then_case", "else_case", "block", "init"):
        child = getattr(node, key, None)
        if child is not None and hasattr(child, "__class__") and not isinstance(child, (int, str)):
            if type(child).__module__.startswith("tvm"):
                _walk(child, visit)
    for child in getattr(node, "seq", None) or []:
        _walk(child, visit)


def _kernel_launches(host: Any, device_names: set[str]) -> dict[str, list[str]]:
    from tvm import tirx

    out: dict[str, list[str]] = {}
    for gv, func in host.functions_items():
        found: list[str] = []

        def visit(node: Any) -> None:
            value = getattr(node, "value", None)
            args = getattr(value, "args", None) if isinstance(node, (tirx.Evaluate, tirx.Bind, tirx.LetStmt)) else None
            name = getattr(args[0], "value", None) if args else None  # a call's first arg: the kernel name
            if isinstance(name, str) and name in device_names and name not in found:
                found.append(name)

        _walk(func.body, visit)
        if found:
            out[gv.name_hint] = found
    return out


def _device_facts(func: Any) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """Launch extents (grid/block from thread_extent attrs) and shared/local allocations."""
    from tvm import tirx

    extents: dict[str, Any] = {}
    shared: list[dict[str, Any]] = []
    local: list[dict[str, Any]] = []

    def visit(node: Any) -> None:
        if isinstance(node, tirx.AttrStmt) and node.attr_key == "thread_extent":
            extents[node.node.var.name] = _int_or_str(node.value)
        elif isinstance(node, tirx.AllocBuffer):
            buf = node.buffer
            shape = [_int_or_str(s) for s in buf.shape]
            elems = 1
            for s in shape:
                elems = elems * s if isinstance(s, int) and isinstance(elems, int) else None
            size = elems * buf.dtype.bits * buf.dtype.lanes // 8 if isinstance(elems, int) else None
            row = {"name": buf.name, "scope": buf.scope(), "dtype": str(buf.dtype), "shape": shape, "bytes": size}
            if buf.scope().startswith("shared"):
                shared.append(row)
            elif buf.scope().startswith("local"):
                local.append(row)

    _walk(func.body, visit)
    grid = [extents.get(f"blockIdx.{a}", 1) for a in "xyz"]
    block = [extents.get(f"threadIdx.{a}", 1) for a in "xyz"]
    dyn = sum(r["bytes"] or 0 for r in shared if r["scope"] == "shared.dyn")
    return {"grid": grid, "block": block, "dynamic_shared_bytes": dyn}, shared, local


# ---------------------------------------------------------------- arithmetic work

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
            extent = _int_or_str(node.extent)
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


def _bytes_moved(func: Any) -> int | None:
    """Sum of parameter buffer sizes: what the kernel must read and write at least once."""
    import numpy as np

    total = 0
    for shape, dtype in _param_types(func):
        if not all(isinstance(s, int) for s in shape):
            return None
        try:
            total += int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        except TypeError:
            return None
    return total


# ---------------------------------------------------------------- device binaries

def extract_binaries(module_path: Path, out_dir: Path) -> tuple[list[Path], list[str]]:
    """binaries/: each CUDA module's fatbin from module.so, and the cubins inside it.

    Read with parsers.tvm_library and parsers.fatbin, so the files are what the exported
    library really holds (a source-only fallback module has no fatbin and says so).
    """
    from parsers import ParseError, fatbin, tvm_library

    data = module_path.read_bytes()
    try:
        library = tvm_library.read_library(data, str(module_path))
    except ParseError as err:
        return [], [f"device binaries not extracted: {err}"]
    bin_dir = out_dir / "binaries"
    paths: list[Path] = []
    notes: list[str] = []
    cuda = [m for m in library.modules if m.kind == "cuda"]
    for i, module in enumerate(cuda):
        stem = "module" if i == 0 else f"module{i}"
        if module.blob_format != "fatbin":
            notes.append(f"{module_path.name}: CUDA module {i} holds {module.blob_format or 'no binary'}, "
                         "not a fatbin (was libcuda loadable at build time?)")
            continue
        paths.append(write_atomic(bin_dir / f"{stem}.fatbin", module.blob))
        for entry in fatbin.entries(module.blob, f"{stem}.fatbin"):
            if entry.kind == "cubin":
                paths.append(write_atomic(bin_dir / f"{stem}.{entry.arch}.cubin", entry.data))
    return paths, notes


if __name__ == "__main__":
    sys.exit(_worker(Path(sys.argv[1]), Path(sys.argv[2])))
