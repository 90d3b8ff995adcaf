"""Schedule overrides: PrimFuncs replaced by name with the PrimFunc of a TVMScript file."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rootcause.errors import UsageError
from rootcause.frontends.tvm.source import parse_tvmscript
from rootcause.frontends.tvm.tir import param_types
from rootcause.spec import VariantSpec


def apply_overrides(mod: Any, spec: VariantSpec, target: Any) -> Any:
    """Replace PrimFuncs by name with the TVMScript PrimFunc of an override file (seed's SERIAL)."""
    from tvm import tirx

    if not spec.options.schedule_overrides:
        return mod
    prims = {gv.name_hint: gv for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}
    for fn, path in spec.options.schedule_overrides.items():
        where = f"{spec.where('tvm', 'schedule_overrides')}.{fn}"
        if fn not in prims:
            raise UsageError(f"{where}: no function \"{fn}\" after fusion; functions: {', '.join(sorted(prims))}")
        replacement = _override_func(path, fn, where)
        binds = _binds_threads(replacement.script())
        if target.kind.name == "llvm" and binds:
            raise UsageError(f"{where}: {path.name} binds GPU threads (blockIdx/threadIdx); it cannot "
                             f"build for {spec.target}")
        if target.kind.name != "llvm" and not binds:
            raise UsageError(f"{where}: {path.name} binds no GPU thread (blockIdx/threadIdx); for "
                             f"{spec.target} TVM would build it as host code reading the device's "
                             f"buffers: bind its loops (T.thread_binding)")
        want, got = param_types(mod[prims[fn]]), param_types(replacement)
        if want != got:
            raise UsageError(f"{where}: parameters of {path.name} {_fmt_params(got)} differ from "
                             f"{fn}'s {_fmt_params(want)}")
        mod.update_func(prims[fn], replacement.with_attr("tirx.is_scheduled", True))
    return mod


def _binds_threads(script: str) -> bool:
    """Whether a PrimFunc's TVMScript binds GPU threads, by a loop or a launch."""
    return any(f"T.{how}" in script for how in ("thread_binding", "launch_thread", "env_thread"))


def _fmt_params(params: list[tuple[tuple[Any, ...], str]]) -> str:
    return "[" + ", ".join(f"{dtype}{list(shape)}" for shape, dtype in params) + "]"


def _override_func(path: Path, fn: str, where: str) -> Any:
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
