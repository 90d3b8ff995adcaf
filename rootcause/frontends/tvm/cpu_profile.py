"""Per-kernel durations of a TVM Relax bundle on the CPU, from the VM's instrument hook.

TVM 0.27's relax VirtualMachine has no `profile=True` (the old profiler executable is gone:
`vm_profiler_load_executable` does not exist in an exported module), but
`VirtualMachine.set_instrument(fn)` calls fn(func, symbol, before_run, ret, *args) around every
Call instruction. On the CPU a PrimFunc call is synchronous, so the host clock read before and
after it brackets the kernel. VM builtins (vm.builtin.alloc_tensor, ...) are not kernels and
are left out. The hook's own cost (a Python call, ~1-3 us) lands between kernels, not in them.

The capture is written as Chrome trace JSON ('X' events, cat 'kernel', ts/dur in us, args.call
= graph call), which parsers/chrome_trace.py reads back and any trace viewer opens.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rootcause.errors import UsageError
from rootcause.fileio import write_json
from rootcause.frontends.base import profile_name
from rootcause.artifacts.bundle import bundle_inputs, read_bundle

SOURCE = "tvm-vm-instrument"


def capture(bundle_dir: str | Path, out_dir: str | Path, calls: int = 10, warmup: int = 3) -> dict[str, Any]:
    """Profile `calls` graph calls of a CPU TVM bundle after `warmup` calls; write Chrome trace JSON
    into out_dir as <bundle>.tvm-vm.json."""
    import numpy as np
    import tvm
    import tvm.runtime.vm

    bundle = read_bundle(bundle_dir)
    out = Path(out_dir) / profile_name(bundle.name, ".tvm-vm.json")
    if bundle.frontend != "tvm":
        raise UsageError(f"{bundle.path}: the TVM VM profiler needs a TVM bundle, not {bundle.frontend}")
    dev = tvm.cpu(0)
    try:
        vm = tvm.runtime.vm.VirtualMachine(tvm.runtime.load_module(str(bundle.module_path)), dev)
    except Exception as err:  # TVM raises its own error types from C++
        raise UsageError(f"{bundle.module_path}: TVM cannot load it: {str(err).splitlines()[0]}") from None
    args = [tvm.runtime.tensor(np.ascontiguousarray(a), device=dev) for a in bundle_inputs(bundle)]
    kernels = {k["name"] for k in bundle.manifest.get("kernels", [])}
    events: list[dict[str, Any]] = []
    state = {"call": -1, "open": None, "skipped": 0}

    def instrument(func, symbol, before_run, ret_value, *call_args):
        now = time.perf_counter_ns()
        name = str(symbol)
        if state["call"] < 0 or not _is_kernel(name, kernels):
            state["skipped"] += state["call"] >= 0 and before_run
            return 0
        if before_run:
            state["open"] = (name, now)
        elif state["open"] and state["open"][0] == name:
            _, start = state["open"]
            events.append({"name": name, "ph": "X", "cat": "kernel", "pid": 0, "tid": 0,
                           "ts": start / 1e3, "dur": (now - start) / 1e3, "args": {"call": state["call"]}})
            state["open"] = None
        return 0

    vm.set_instrument(instrument)
    for _ in range(warmup):
        vm[bundle.entry](*args)
    for i in range(calls):
        state["call"] = i
        vm[bundle.entry](*args)
    if not events:
        raise UsageError(f"{bundle.path}: the VM instrument saw no kernel calls in {calls} call(s) of "
                         f"{bundle.entry}")
    write_json(out, {"traceEvents": events, "displayTimeUnit": "ns",
                     "otherData": {"source": SOURCE, "variant": bundle.name, "calls": calls,
                                   "warmup": warmup, "clock": "time.perf_counter_ns",
                                   "builtins_skipped": state["skipped"]}})
    return {"profiler": "tvm-vm", "ok": True, "file": Path(out).name, "calls": calls, "warmup": warmup,
            "records": len(events)}


def _is_kernel(name: str, catalog: set[str]) -> bool:
    if catalog:
        return name in catalog
    return not name.startswith("vm.")
