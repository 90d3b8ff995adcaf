"""The kernel catalog from lowered TIR: launches, allocations and bytes of every exported kernel."""
from __future__ import annotations

from typing import Any

from rootcause.frontends.tvm.access import hot_loop
from rootcause.frontends.tvm.tir import int_or_str, param_types, walk
from rootcause.model import CatalogKernel
from rootcause.spec import VariantSpec


def kernel_catalog(mod: Any, target: Any, groups: dict[str, list[str]], rules: dict[str, dict[str, Any]],
                   spec: VariantSpec, flops: dict[str, int | None] | None = None) -> list[dict[str, Any]]:
    """One CatalogKernel (as dict) per exported kernel, from the TIR that codegen receives.

    Replays tvm.tirx.build's lowering (BindTarget, default TIR pipeline, host/device split) on
    the PrimFuncs of the final module: device functions are the kernels; each host function
    launches its kernels by name (call_ffi_kernel), which links a kernel to its PrimFunc.
    """
    from tvm import tirx

    prims = {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}
    host, device_funcs = lower(mod, target)
    launched_by = _kernel_launches(host, set(device_funcs))
    host_names = {gv.name_hint for gv in host.get_global_vars()}
    kernels = []
    for fname, func in prims.items():
        common = {"function": fname, "source_ops": groups.get(fname, []), "call_sites": [spec.entry],
                  "bytes_moved": _bytes_moved(func), "flops": (flops or {}).get(fname)}
        schedule = dict(rules.get(fname, {"rule": None}))
        if fname in spec.options.schedule_overrides:
            schedule = {"rule": "override", "override_file": spec.options.schedule_overrides[fname].name}
        names = launched_by.get(fname) or [n for n in device_funcs if n.startswith(fname + "_kernel")]
        if not device_funcs:  # CPU: the PrimFunc itself is the exported function
            lowered = host[fname] if fname in host_names else None
            kernels.append(CatalogKernel(name=fname, schedule=schedule, access=hot_loop(lowered) if lowered else {},
                                         **common).to_dict())
            continue
        for name in names:
            launch, shared, local = _device_facts(device_funcs[name])
            kernels.append(CatalogKernel(name=name, launch=launch,
                                         schedule={**schedule, "shared_allocs": shared, "local_allocs": local},
                                         **common).to_dict())
    return kernels


def lower(mod: Any, target: Any) -> tuple[Any, dict[str, Any]]:
    """(host module, device function name -> PrimFunc) of the PrimFuncs of `mod` as tvm.tirx.build
    lowers them for `target` (its default TIR pipeline, then the host/device split). On a CPU target
    every PrimFunc stays in the host module under its own name and there are no device functions."""
    import tvm
    import tvm.s_tir.pipeline  # noqa: F401  registers the 's_tir' TIR pipeline
    from tvm import tirx
    from tvm.tirx.build import split_host_device_mods

    tir_mod = tvm.IRModule({gv: f for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)})
    # tirx.build binds the target with its host (a CPU target is its own host).
    host_target = target.host if target.host is not None else target
    tir_mod = tirx.transform.BindTarget(target.with_host(host_target))(tir_mod)
    lowering, _, _ = tvm.tirx.get_default_tir_pipeline(target)
    host, devices = split_host_device_mods(lowering(tir_mod))
    return host, {gv.name_hint: f for dm in devices.values() for gv, f in dm.functions_items()}


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

        walk(func.body, visit)
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
            extents[node.node.var.name] = int_or_str(node.value)
        elif isinstance(node, tirx.AllocBuffer):
            buf = node.buffer
            shape = [int_or_str(s) for s in buf.shape]
            elems = 1
            for s in shape:
                elems = elems * s if isinstance(s, int) and isinstance(elems, int) else None
            size = elems * buf.dtype.bits * buf.dtype.lanes // 8 if isinstance(elems, int) else None
            row = {"name": buf.name, "scope": buf.scope(), "dtype": str(buf.dtype), "shape": shape, "bytes": size}
            if buf.scope().startswith("shared"):
                shared.append(row)
            elif buf.scope().startswith("local"):
                local.append(row)

    walk(func.body, visit)
    grid = [extents.get(f"blockIdx.{a}", 1) for a in "xyz"]
    block = [extents.get(f"threadIdx.{a}", 1) for a in "xyz"]
    dyn = sum(r["bytes"] or 0 for r in shared if r["scope"] == "shared.dyn")
    return {"grid": grid, "block": block, "dynamic_shared_bytes": dyn}, shared, local


def _bytes_moved(func: Any) -> int | None:
    """Sum of parameter buffer sizes: what the kernel must read and write at least once."""
    import numpy as np

    total = 0
    for shape, dtype in param_types(func):
        if not all(isinstance(s, int) for s in shape):
            return None
        try:
            total += int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        except TypeError:
            return None
    return total
